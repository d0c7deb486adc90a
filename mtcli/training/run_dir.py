"""The output directory of a training run (OUT): one writer at a time, leftovers of a killed
writer cleaned, resumable checkpoints written once and placed as step-N, best and last, and
the metrics log (metrics.jsonl, optionally TensorBoard).

Knows nothing of the training loop: a checkpoint is written by a function it is handed.
Stdlib only, so the CLI can find where a run would resume before torch is imported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from mtcli.errors import UserError
from mtcli.files import (
    clean_leftovers,
    fsync_path,
    is_own_dir,
    json_has,
    link_or_copy_dir,
    remove_dir,
    replace_dir,
    resolve_dir,
    temp_dir_beside,
    write_file_atomic,
)
from mtcli.store.model_dir import CONFIG_FILE, STATE_FILE
from mtcli.training.reports import StepReport, ValidReport, as_record

STEP_DIR = re.compile(r"^step-(\d+)$")
METRICS, LOCK = "metrics.jsonl", ".lock"
CHOICES, CURVE = "choices.json", "curve.png"  # what train chose for the corpus; its curve
# with step-N: what mtcli writes into OUT (model: the one the run ends with; heldout: the
# split it validates on when it was given no validation set)
OWN = ("last", "best", "tokenizer", "data", METRICS, "model", "heldout", CHOICES, CURVE)

try:
    import fcntl
except ImportError:  # not POSIX: no lock, the rest still works
    fcntl = None  # type: ignore[assignment]


# ---------------------------------------------------------------- where a run continues
def is_resumable(path: Path) -> bool:
    return (resolve_dir(path, CONFIG_FILE) / STATE_FILE).is_file()


def step_dirs(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of OUT/step-N directories, oldest first."""
    if not out.is_dir():
        return []
    found = [(int(m[1]), p) for p in out.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def resume_point(out: str | Path, resume: str | None, restart: bool) -> Path | None:
    """The checkpoint a run continues from: --resume PATH; else OUT/last (the newest
    checkpoint: it is refreshed at every one); else the newest resumable OUT/step-N; else
    None, a fresh start. `restart` always starts fresh."""
    out = Path(out)
    if restart:
        return None
    if resume:
        path = resolve_dir(resume, CONFIG_FILE)
        if not (path / CONFIG_FILE).is_file():
            raise UserError(f"--resume {resume}: not a checkpoint directory")
        if not is_resumable(path):
            raise UserError(
                f"--resume {resume}: no {STATE_FILE} to resume from (an exported model? "
                "start a new run from its weights with --init)"
            )
        return path
    if is_resumable(out / "last"):
        return resolve_dir(out / "last", CONFIG_FILE)
    resumable = [p for _, p in step_dirs(out) if is_resumable(p)]
    if resumable:
        return resumable[-1]
    if (out / "last").exists() or step_dirs(out):
        raise UserError(
            f"--out {out}: holds checkpoints that cannot be resumed (no {STATE_FILE}); "
            "--restart to start over there, or choose another --out"
        )
    return None


def recorded_settings(checkpoint: Path) -> tuple[dict, dict]:
    """The training settings and the model config recorded in a checkpoint's config.json."""
    path = checkpoint / CONFIG_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: unreadable ({e})") from None
    train, model = (config.get(k) if isinstance(config, dict) else None for k in ("train", "model"))
    if not isinstance(train, dict) or not isinstance(model, dict):
        raise UserError(f"{path}: no training settings recorded (not a training checkpoint)")
    return train, model


# ---------------------------------------------------------------- the directory
def check_run_out(out: Path, force: bool) -> None:
    """OUT may be new, empty, or a run directory; a folder of the user's needs --force.

    mtcli only ever writes and removes its own names in OUT (last, best, step-N, tokenizer,
    metrics.jsonl), and only where they hold what mtcli writes (check_own_names), so with
    --force the user's files there stay untouched.
    """
    for folder in [out, *out.parents]:
        if folder.exists():
            if not folder.is_dir():
                raise UserError(
                    f"--out {out}: {folder} is a file; a training run needs a directory"
                )
            break
    if not out.exists():
        return
    check_own_names(out)
    if force:
        return
    names = {p.name for p in out.iterdir()}
    if not names or names & {*OWN, LOCK} or step_dirs(out):
        return
    raise UserError(
        f"--out {out}: a directory that is not an mtcli training run; mtcli will not write "
        "into it (--force to use it anyway; nothing of yours there is removed)"
    )


def is_own_name(name: str) -> bool:
    """Whether mtcli writes `name` into OUT (last, best, step-N, tokenizer, metrics.jsonl)."""
    return name in OWN or bool(STEP_DIR.match(name))


def check_own_names(out: Path) -> None:
    """Whatever --force says, each of mtcli's names in OUT must hold what mtcli writes there:
    a run replaces checkpoints and --restart removes them, so a folder of the user's called
    best or last (or step-3, or tokenizer) would go with them. --restart --force deleted one."""
    for path in sorted(out.iterdir()):
        ours = _is_own(path)
        if ours is False:
            kind = "directory" if path.is_dir() else "file"
            raise UserError(
                f"--out {out}: {path.name} is not an mtcli {kind}, "
                "and a run would replace or remove it; move it, or choose another --out"
            )


DIR_KINDS = {
    "last": "model",
    "best": "model",
    "model": "model",
    "tokenizer": "tokenizer",
    "data": "tokens",
    "heldout": "corpus",
}


def _is_own(path: Path) -> bool | None:
    """Whether `path`, under one of mtcli's names in OUT, holds what mtcli writes there (None:
    not one of its names)."""
    if STEP_DIR.match(path.name):
        return is_own_dir(path, "model")
    if path.name in DIR_KINDS:
        return is_own_dir(path, DIR_KINDS[path.name])
    if path.name == METRICS:
        return _is_metrics_log(path)
    if path.name == CHOICES:
        return json_has(path, "choices")
    if path.name == CURVE:
        return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return None


def _is_metrics_log(path: Path) -> bool:
    """An empty file, or one whose first line is a step's record."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        first = f.readline(1 << 16)
    if not first.strip():
        return True
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and "step" in record


class RunDir:
    """OUT, held by one writer: checkpoints, pruning and the metrics log."""

    def __init__(self, path: Path, writer: bool):
        self.path, self.writer = path, writer
        self._lock_fd: int | None = None
        self._tensorboard = None

    @classmethod
    def open(cls, out: str | Path, *, writer: bool, force: bool = False) -> RunDir:
        """Take OUT for this run: refuse a second writer, clean what a killed one left."""
        run = cls(Path(out), writer)
        if writer:
            check_run_out(run.path, force)
            run.path.mkdir(parents=True, exist_ok=True)
            run._lock()
            # the lock proves no one else writes here: every temporary name is a leftover
            clean_leftovers(run.path, CONFIG_FILE, is_own_name, every_pid=True)
        return run

    def _lock(self) -> None:
        if fcntl is None:
            return
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the kernel at exit
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"--out {self.path}: another mtcli train is writing there; wait for it to end "
                "or choose another --out"
            ) from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def clear(self, keep: tuple[str, ...] = ()) -> list[str]:
        """--restart: remove what an earlier run wrote here (only mtcli's own names, and not
        those in `keep`: a tokenizer the new run is told to use)."""
        removed = []
        for name in [*OWN, *(p.name for _, p in step_dirs(self.path))]:
            if name in keep:
                continue
            path = self.path / name
            if path.is_dir():
                remove_dir(path)
            elif path.exists():
                path.unlink()
            else:
                continue
            removed.append(name)
        return removed

    def write_choices(self, choices) -> None:
        """OUT/choices.json: the settings chosen for the corpus and budget, with their reasons."""
        records = [{"what": c.what, "why": c.why, "values": c.values} for c in choices]
        text = json.dumps({"choices": records}, indent=2, ensure_ascii=False) + "\n"
        write_file_atomic(self.path / CHOICES, text.encode("utf-8"))

    # ------------------------------------------------------------ checkpoints
    def checkpoint(self, fill: Callable[[Path], None], names: list[str], *, keep: int, step: int):
        """Write one checkpoint with `fill` and place it under each of `names` in turn.

        It is written once, under names[0]; the others are hard links to the same files.
        `last` comes last, so while the others are placed, `last` is still the previous
        whole checkpoint. Then step dirs beyond `keep` are pruned.
        """
        first = self.path / names[0]
        tmp = temp_dir_beside(first)
        try:
            fill(tmp)
            replace_dir(tmp, first, CONFIG_FILE)
            for name in names[1:]:
                tmp = temp_dir_beside(self.path / name)
                link_or_copy_dir(first, tmp)
                replace_dir(tmp, self.path / name, CONFIG_FILE)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.prune(keep, step)

    def prune(self, keep: int, step: int) -> None:
        """Delete all but the newest `keep` step dirs up to `step`.

        Step dirs beyond `step` are left: they come from a run that went further before it
        was resumed from an earlier point, and they would outrank every new checkpoint.
        They are replaced or pruned once this run passes them.
        """
        done = [p for n, p in step_dirs(self.path) if n <= step]
        for path in done[: max(len(done) - keep, 0)]:
            remove_dir(path)

    # ------------------------------------------------------------ metrics
    def start_metrics(self, tensorboard: str, resumed_at: int | None) -> None:
        """metrics.jsonl (always) and TensorBoard (when asked), rewound to a resumed step:
        lines a killed run wrote after its last checkpoint are dropped, since the resumed run
        logs those steps again."""
        metrics = self.path / METRICS
        if resumed_at is not None and metrics.is_file():
            kept = [
                line
                for line in metrics.read_text(encoding="utf-8").splitlines(keepends=True)
                if line.strip() and _step_of(line) <= resumed_at
            ]
            write_file_atomic(metrics, "".join(kept).encode())
        elif resumed_at is None and metrics.is_file():
            metrics.unlink()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # optional extra, checked up front

            purge = None if resumed_at is None else resumed_at + 1
            self._tensorboard = SummaryWriter(tensorboard, purge_step=purge)

    def record(self, report: StepReport | ValidReport) -> None:
        """Append one report to metrics.jsonl (and TensorBoard)."""
        if not self.writer:
            return
        with open(self.path / METRICS, "a", encoding="utf-8") as f:
            f.write(json.dumps(as_record(report)) + "\n")
        if self._tensorboard is not None:
            _to_tensorboard(self._tensorboard, report)

    def sync_metrics(self) -> None:
        if self.writer and (self.path / METRICS).is_file():
            fsync_path(self.path / METRICS)


def _step_of(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")  # an unreadable line (a kill mid-write) is dropped


def _to_tensorboard(writer, report: StepReport | ValidReport) -> None:
    if isinstance(report, StepReport):
        values = {"train/loss": report.loss, "train/lr": report.lr}
        values["train/tokens_per_s"] = report.tokens_per_s
    else:
        values = {"valid/loss": report.loss}
        if report.bleu is not None:
            values["valid/bleu"] = report.bleu
    for tag, value in values.items():
        writer.add_scalar(tag, value, report.step)
    writer.flush()
