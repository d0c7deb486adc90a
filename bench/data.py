"""Corpora of any size: binarize time, peak RSS and time to the first step at 25k / 1M / 10M pairs.

    python bench/data.py [--sizes 25000,1000000,10000000] [--work DIR] [--baseline-ref e4eece0]

A synthetic corpus with WMT-like lengths (about 25 words a side) is built here, deterministically
(numpy, seed 0), and never committed: the first N lines of one 10M-pair file make each size. A
sentencepiece BPE tokenizer (8,000 pieces) is trained on its first 100k pairs. For each size:
`mtcli data binarize` (wall time, pairs/s, peak RSS), then `mtcli train --data STORE` for 3 steps
of a d_model 64 model (peak RSS, seconds from the process start to step 1), then the same run
resumed to step 6 (seconds to step 4), and the same under torchrun with 2 ranks (each rank's
peak RSS, and how much of it is the mapped files, shared between them).

The baseline is mtcli before the token store (--baseline-ref, extracted with `git archive`):
its `train --src/--tgt` at the sizes that fit in memory, and the tokens/s of the first 100 steps
on the real 25k Tatoeba pairs against the store (and against BPE-dropout on the store),
interleaved in rounds. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, write_result  # noqa: E402

MODEL = ["--d-model", "64", "--n-heads", "4", "--d-ff", "256", "--max-tokens", "4096"]
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}


# ---------------------------------------------------------------- the synthetic corpus
def _vocabulary(rng: np.random.Generator, syllables: list[str], n: int) -> list[bytes]:
    """n distinct made-up words of 1 to 4 syllables."""
    words: dict[bytes, None] = {}
    while len(words) < n:
        k = int(rng.integers(1, 5))
        words["".join(rng.choice(syllables, k)).encode()] = None
    return list(words)


class Language:
    """Zipf-distributed words of a made-up vocabulary, rendered to lines with numpy."""

    def __init__(self, rng: np.random.Generator, syllables: list[str], n_words: int = 30_000):
        words = _vocabulary(rng, syllables, n_words)
        self.table = np.frombuffer(b"".join(words), dtype=np.uint8)
        self.length = np.array([len(w) for w in words], dtype=np.int64)
        self.offset = np.cumsum(self.length) - self.length
        p = 1.0 / np.arange(1, n_words + 1) ** 1.1
        self.cdf = np.cumsum(p / p.sum())

    def render(self, rng: np.random.Generator, sentence_lengths: np.ndarray) -> bytes:
        """Lines of the given numbers of words, each word followed by a space, each line by \\n."""
        ids = np.minimum(
            np.searchsorted(self.cdf, rng.random(int(sentence_lengths.sum()))), len(self.cdf) - 1
        )
        width = self.length[ids] + 1  # the word and its separator
        starts = np.cumsum(width) - width
        owner = np.repeat(np.arange(len(ids)), width)
        source = self.offset[ids][owner] + (np.arange(int(width.sum())) - starts[owner])
        out = self.table[np.minimum(source, len(self.table) - 1)]
        separators = starts + width - 1
        out[separators] = ord(" ")
        out[separators[np.cumsum(sentence_lengths) - 1]] = ord("\n")
        return out.tobytes()


def make_corpus(folder: Path, n: int, chunk: int = 100_000) -> tuple[Path, Path]:
    """n pairs: source lengths lognormal around 22 words (WMT news), targets 0.7-1.4 times as long."""
    src, tgt = folder / f"synthetic-{n}.src", folder / f"synthetic-{n}.tgt"
    if src.is_file() and tgt.is_file():
        return src, tgt
    rng = np.random.default_rng(0)
    # 24 syllables a language, 1-4 a word: 346,200 possible words, 30,000 drawn
    en_syllables = "ka to ri men sa lo pe in ur dro vy el tha bi nu cor fe li ost ga ve quo mi an"
    de_syllables = (
        "ge ba mu schi rof na lu ek zan wo ti ach bre hu dol kei sto fra um pi ze ro ta ung"
    )
    en, de = Language(rng, en_syllables.split(" ")), Language(rng, de_syllables.split(" "))
    with open(src, "wb") as fs, open(tgt, "wb") as ft:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            s_len = np.clip(rng.lognormal(np.log(20), 0.5, m).astype(np.int64), 1, 90)
            t_len = np.clip((s_len * rng.uniform(0.7, 1.4, m)).astype(np.int64), 1, 90)
            fs.write(en.render(rng, s_len))
            ft.write(de.render(rng, t_len))
    return src, tgt


def head(src: Path, tgt: Path, n: int) -> tuple[Path, Path]:
    """The first n pairs as their own files (the sizes below the full corpus)."""
    out = []
    for path in (src, tgt):
        dst = path.with_name(path.name.replace(path.stem.split("-")[-1], str(n)))
        if not dst.is_file():
            with open(path, "rb") as f, open(dst, "wb") as g:
                for _, line in zip(range(n), f, strict=False):
                    g.write(line)
        out.append(dst)
    return out[0], out[1]


# ---------------------------------------------------------------- measuring a command
def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _status(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS), RssAnon and RssFile of a process, in KiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def measure(cmd: list[str], marks: tuple[str, ...] = (), cwd: Path = REPO) -> dict:
    """Run `cmd`: seconds to the first stderr line holding each mark, wall time, and the peak RSS
    (MiB) of the process and of each python process below it (torchrun's ranks)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seen: dict[str, float] = {}
    tail: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            tail[:] = [*tail[-20:], line]
            for mark in marks:
                if mark in line and mark not in seen:
                    seen[mark] = round(time.monotonic() - started, 2)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    peaks: dict[int, dict] = {}
    while proc.poll() is None:
        for pid in [
            proc.pid,
            *_children(proc.pid),
            *(g for c in _children(proc.pid) for g in _children(c)),
        ]:
            if (st := _status(pid)).get("VmHWM", 0) >= peaks.get(pid, {}).get("VmHWM", 0):
                peaks[pid] = st
        time.sleep(0.05)
    reader.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{''.join(tail)}")
    ranks = [peaks[p] for p in peaks if p != proc.pid]
    top = peaks.get(proc.pid, {})
    return {
        "wall_s": round(time.monotonic() - started, 2),
        "marks_s": seen,
        "peak_rss_mb": round(top.get("VmHWM", 0) / 1024),
        "ranks_peak_rss_mb": [round(r.get("VmHWM", 0) / 1024) for r in ranks],
        "ranks_file_rss_mb": [round(r.get("RssFile", 0) / 1024) for r in ranks],
    }


def mtcli(*args: str, python_path: Path = REPO) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(python_path)!r}); "
            "from mtcli.cli import main; main()", *args]  # fmt: skip


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29611",
            "-m", "mtcli", *args]  # fmt: skip


# ---------------------------------------------------------------- the runs
def scale_rows(work: Path, sizes: list[int], baseline: Path | None) -> list[dict]:
    src, tgt = make_corpus(work, max(sizes))
    tok = work / "tok"
    if not tok.is_dir():
        s, t = head(src, tgt, 100_000)
        subprocess.run(mtcli("tokenizer", "train", "--src", str(s), "--tgt", str(t), "--out", str(tok),
                             "--vocab-size", "8000"), check=True, env=ENV)  # fmt: skip
    rows = []
    for n in sizes:
        s, t = (src, tgt) if n == max(sizes) else head(src, tgt, n)
        store, run = work / f"store-{n}", work / f"run-{n}"
        shutil.rmtree(store, ignore_errors=True)
        row = {"pairs": n, "binarize": measure(mtcli("data", "binarize", "--src", str(s), "--tgt", str(t),
                                                      "--tokenizer", str(tok), "--out", str(store)))}  # fmt: skip
        row["store_mb"] = round(
            sum(f.stat().st_size for f in store.iterdir() if f.is_file()) / 2**20
        )
        row["binarize"]["pairs_per_s"] = round(
            n / json.loads((store / "manifest.json").read_text())["seconds"]
        )
        shutil.rmtree(run, ignore_errors=True)
        common = ["train", "--data", str(store), "--log-every", "1", *MODEL]
        row["train"] = measure(mtcli(*common, "--out", str(run), "--max-steps", "3"), ("step 1 ",))
        row["resume"] = measure(mtcli(*common, "--out", str(run), "--max-steps", "6"), ("step 4 ",))
        shutil.rmtree(run, ignore_errors=True)
        ddp = [*common, "--out", str(run), "--max-steps", "3", "--threads", "1"]
        row["torchrun_2"] = measure(torchrun(*ddp), ("step 1 ",))
        shutil.rmtree(run, ignore_errors=True)
        if baseline is not None and n <= 1_000_000:  # the text path held ~35 GB at 10M pairs
            old = [
                "train",
                "--src",
                str(s),
                "--tgt",
                str(t),
                "--tokenizer",
                str(tok),
                "--log-every",
                "1",
                *MODEL,
            ]
            row["before"] = measure(mtcli(*old, "--out", str(run), "--max-steps", "3", python_path=baseline),
                                    ("step 1 ",))  # fmt: skip
            shutil.rmtree(run, ignore_errors=True)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def tokens_per_s(run: Path) -> float:
    """Target tokens/s over steps 2-100 (the report at step 100 covers the window since step 1)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r["tokens_per_s"] for r in records if r.get("kind") == "train" and r["step"] == 100)


def speed_rows(work: Path, baseline: Path | None, rounds: int = 3) -> dict:
    """First 100 steps on the real 25k Tatoeba pairs, interleaved: store, BPE-dropout, old text path."""
    data = SHARED / "tatoeba-en-zh"
    text = [
        "--src",
        str(data / "train.en"),
        "--tgt",
        str(data / "train.zh"),
        "--tokenizer",
        str(SHIPPED),
    ]
    settings = {
        "store": (text, REPO),
        "store_bpe_dropout_0.1": ([*text, "--bpe-dropout", "0.1"], REPO),
    }
    if baseline is not None:
        settings["before_in_memory"] = (text, baseline)
    rates: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(rounds):
        for name, (args, path) in settings.items():
            run = work / f"speed-{name}"
            shutil.rmtree(run, ignore_errors=True)
            cmd = mtcli("train", *args, "--out", str(run), "--max-steps", "100", "--log-every", "100", *MODEL,
                        python_path=path)  # fmt: skip
            measure(cmd)
            rates[name].append(tokens_per_s(run))
    out = {
        name: {"tgt_tokens_per_s": round(statistics.median(r)), "rounds": r}
        for name, r in rates.items()
    }
    base = out["store"]["tgt_tokens_per_s"]
    for name in out:
        out[name]["vs_store"] = round(out[name]["tgt_tokens_per_s"] / base, 3)
    return out


def extract_baseline(ref: str, work: Path) -> Path | None:
    """mtcli as it was at `ref` (the code only), from this repository's history."""
    if not ref:
        return None
    dst = work / f"baseline-{ref}"
    if not dst.is_dir():
        dst.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", ref, "mtcli"], cwd=REPO, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive.stdout, check=True)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25000,1000000,10000000")
    ap.add_argument(
        "--work", default="", help="folder for the corpus and stores (default: a temporary one)"
    )
    ap.add_argument(
        "--baseline-ref", default="e4eece0", help="mtcli before the token store ('' = no baseline)"
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep the work folder (the 10M corpus is ~3 GB)"
    )
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mtcli-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        baseline = extract_baseline(args.baseline_ref, work)
        record = {
            "threads": os.cpu_count(),
            "model": " ".join(MODEL),
            "scale": scale_rows(work, [int(x) for x in args.sizes.split(",")], baseline),
            "speed_first_100_steps_tatoeba": speed_rows(work, baseline),
            "baseline_ref": args.baseline_ref,
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(write_result("data", record))


if __name__ == "__main__":
    main()
