"""Every input a training run reads, checked before anything is written, and without torch:
--out, the corpora, the tokenizer, an --init model's files, optional packages.

The CLI runs these before it imports torch, so a mistake is one line at once; train() runs
them again for callers of the library (reading the corpora once more, a small cost beside a
run). What needs torch, the --init model's tensor shapes, train() checks itself.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

from mtcli.config import DistillConfig, ModelConfig, TrainConfig, to_dict
from mtcli.data.parallel_text import check_parallel
from mtcli.data.textio import read_lines
from mtcli.data.token_store import read_manifest
from mtcli.data.tokenizer import Tokenizer
from mtcli.errors import UserError
from mtcli.files import check_replaceable
from mtcli.store.model_dir import check_model_files
from mtcli.text.corpus_languages import SideLanguage, corpus_languages, describe, settle_languages
from mtcli.training.run_dir import check_run_out

# model fields that follow from the tokenizer, not from the user's settings
DERIVED_MODEL_FIELDS = ("src_vocab_size", "tgt_vocab_size", "share_embeddings")


def check_inputs(cfg: TrainConfig, force: bool) -> None:
    """Every input a run reads, checked before it writes anything: the model's size against
    the memory, --out, the corpora, the tokenizer or --init model, the TensorBoard package."""
    check_model_fits(cfg.model)
    check_run_out(Path(cfg.out), force)
    if cfg.data:
        check_store(cfg)
    elif not cfg.src:
        raise UserError(
            "--src or --data is required (or set one in --config); without --tgt, --src is a TSV file"
        )
    # a corpus mistake (missing file, misaligned lines, bad UTF-8) should stop the run before
    # minutes go into training a tokenizer on it
    for src, tgt in ((cfg.src, cfg.tgt), (cfg.valid_src, cfg.valid_tgt)):
        if src:
            check_parallel(src, tgt or None)
    if cfg.tokenizer:
        Tokenizer.load(cfg.tokenizer)
    if cfg.init:
        check_init(cfg)
    check_placeholder_pipeline(cfg)
    if cfg.tensorboard:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise UserError(
                "--tensorboard needs the tensorboard package: pip install 'mtcli[tensorboard]'"
            ) from None


def with_languages(
    cfg: TrainConfig, asked: dict[str, tuple[str, str]], fallback: dict[str, str] | None = None
) -> tuple[TrainConfig, str]:
    """`cfg` with the run's languages, and a line saying where they came from: those `asked`
    for (side -> (code, how), from a flag or a TOML key) when the corpus does not contradict
    them, else the corpus's (its manifest, or its text), else `fallback`'s (what the run being
    continued or the --init model recorded). Without a corpus `cfg` is returned as it is, and
    check_inputs says what is missing."""
    if not (cfg.src or cfg.data):
        return cfg, ""
    known = training_corpus_languages(cfg)
    for side, code in (fallback or {}).items():
        if code and (side not in known or not known[side].language):
            known[side] = SideLanguage(code, "the checkpoint it starts from", False)
    settled = settle_languages(known, asked)
    note = describe(settled, known, asked)
    return dataclasses.replace(cfg, src_lang=settled["src"], tgt_lang=settled["tgt"]), note


def training_corpus_languages(cfg: TrainConfig) -> dict[str, SideLanguage]:
    """The languages of the corpus a run trains on: --src/--tgt's, or the files a --data store
    was binarized from while they are there ({} when nothing can be read)."""
    if cfg.src:
        return corpus_languages(cfg.src, cfg.tgt or None)
    if cfg.data and (manifest := read_manifest(cfg.data)):
        paths = [entry["path"] for entry in manifest.get("corpus", [])]
        if paths and all(Path(p).is_file() for p in paths):
            return corpus_languages(paths[0], paths[1] if len(paths) > 1 else None)
    return {}


def warmup_outlasts_budget(cfg: TrainConfig, step: int = 0, elapsed: float = 0.0) -> str | None:
    """A line when the run's budget ends inside its warm-up, so its learning rate never
    reaches the peak the schedule is built around: known at once for --max-steps, estimated
    from the step rate (after 20 steps) for --max-time. None otherwise."""
    hint = "or pick a size with --preset (`mtcli train --list-presets`)"
    if cfg.max_steps and cfg.max_steps < cfg.warmup:
        return (
            f"--max-steps {cfg.max_steps:,} ends inside the warm-up (--warmup {cfg.warmup:,}): "
            f"the learning rate never reaches its peak; give --warmup {_tenth(cfg.max_steps)}, {hint}"
        )
    if not cfg.max_time or step < 20 or elapsed <= 0:
        return None
    rate = step / elapsed
    ends = int(rate * cfg.max_time * 60)
    if ends >= cfg.warmup or (cfg.max_steps and cfg.max_steps <= ends):
        return None
    return (
        f"at {rate:.1f} steps/s, --max-time {cfg.max_time:g} ends near step {ends:,}, inside the "
        f"warm-up (--warmup {cfg.warmup:,}): the learning rate never reaches its peak; give "
        f"--warmup {_tenth(ends)}, {hint}"
    )


def warmup_for_budget(cfg: TrainConfig, step: int, elapsed: float) -> tuple[int, str] | None:
    """Where cfg.warmup_share sizes the warm-up by time: (the warm-up, the line saying so),
    from the step rate of the `step` steps done in `elapsed` seconds; None otherwise."""
    if not (cfg.warmup_share and cfg.max_time) or step <= 0 or elapsed <= 0:
        return None
    rate = step / elapsed
    steps = int(rate * cfg.max_time * 60)
    if cfg.max_steps:
        steps = min(steps, cfg.max_steps)
    warmup = max(step + 1, round(cfg.warmup_share * steps))
    return warmup, (
        f"warm-up: {warmup:,} steps, {cfg.warmup_share:.0%} of the ~{steps:,} that --max-time "
        f"{cfg.max_time:g} allows at {rate:.1f} steps/s (--warmup N fixes it)"
    )


def _tenth(steps: int) -> int:
    """A warm-up of a tenth of a short run, as the shipped presets have (1,000 of 13,000)."""
    return max(1, steps // 10)


def check_store(cfg: TrainConfig) -> None:
    """--data: a whole token store, made with this run's filters, holding text if BPE-dropout
    is on; its own tokenizer unless --tokenizer or --init brings one (train() compares hashes)."""
    manifest = read_manifest(cfg.data)
    if manifest is None:
        raise UserError(
            f"--data {cfg.data}: not a token store (make one with `mtcli data binarize`)"
        )
    if cfg.src:
        raise UserError(
            f"--data {cfg.data} and --src {cfg.src} exclude each other: a run trains on one corpus"
        )
    filters = manifest["key"]["filters"]
    for name, flag in (("max_len", "--max-len"), ("max_ratio", "--max-ratio")):
        if filters[name] != getattr(cfg, name):
            raise UserError(
                f"--data {cfg.data} was binarized with {flag} {filters[name]}, this run asks for "
                f"{getattr(cfg, name)}: use the same value, or binarize again"
            )
    if cfg.bpe_dropout > 0 and not manifest["key"]["keep_text"]:
        raise UserError(
            f"--bpe-dropout {cfg.bpe_dropout}: --data {cfg.data} holds only token ids, and "
            "BPE-dropout re-splits the text; binarize with --keep-text"
        )
    if (rate := _first_rate(cfg)) and not manifest["key"]["keep_text"]:
        raise UserError(
            f"{rate}: --data {cfg.data} holds only token ids, and the placeholder pipeline "
            "rewrites the text; binarize with --keep-text"
        )
    Tokenizer.load(Path(cfg.data) / "tokenizer")


PIPELINE_FLAGS = {"placeholders": "--placeholders", "tags": "--tags", "casing": "--casing",
                  "end_punct": "--end-punct"}  # fmt: skip


def _first_rate(cfg: TrainConfig) -> str:
    """The first placeholder-pipeline flag the run turns on ("--tags 0.1"), or ""."""
    on = [f"{flag} {getattr(cfg, k)}" for k, flag in PIPELINE_FLAGS.items() if getattr(cfg, k) > 0]
    return on[0] if on else ""


def check_placeholder_pipeline(cfg: TrainConfig) -> None:
    """--placeholders and --tags write pieces the tokenizer must hold, and align words with
    eflomal: both checked before any work."""
    if not (cfg.placeholders > 0 or cfg.tags > 0):
        return
    flag = _first_rate(cfg)
    directory = cfg.tokenizer or (cfg.data and str(Path(cfg.data) / "tokenizer")) or cfg.init
    if directory and not Tokenizer.load(directory).placeholders:
        raise UserError(
            f"{flag}: the tokenizer {directory} has no placeholder pieces; make one with "
            "`mtcli tokenizer add-placeholders` (or train one with --placeholders)"
        )
    if importlib.util.find_spec("eflomal") is None:
        raise UserError(f"{flag} aligns words with eflomal: pip install 'mtcli[align]'")


def check_model_fits(model: ModelConfig) -> None:
    """Refuse a model whose training cannot fit in this machine's memory, counted from its
    shape before anything is built: its layers' parameters at 16 bytes each (weight, gradient
    and Adam's two moments, fp32) and the position table. A lower bound (no embeddings, no
    activations), so a refusal is always right. Unchecked, --d-model 1000000 was an allocation
    failure deep in torch, and --n-enc-layers 100000 built layers for minutes first."""
    n = model.layer_parameters()
    need = 16 * n + 4 * model.max_positions * model.d_model
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): torch will say
        return
    if need > have:
        shape = (
            f"--d-model {model.d_model} --d-ff {model.d_ff} --n-enc-layers {model.n_enc_layers} "
            f"--n-dec-layers {model.n_dec_layers}"
        )
        raise UserError(
            f"{shape}: {n:,} parameters in the layers alone; training needs at least "
            f"{need / 2**30:,.0f} GiB of memory, and this machine has {have / 2**30:,.0f} GiB"
        )


def check_init(cfg: TrainConfig) -> None:
    """--init MODEL brings its shape and tokenizer: a flag that asks for others is refused."""
    checked = check_model_files(cfg.init)
    same = cfg.tokenizer and Path(cfg.tokenizer).resolve() == checked.path.resolve()
    if cfg.tokenizer and not same and not _grows(Tokenizer.load(cfg.tokenizer), checked.path):
        raise UserError(
            f"--tokenizer {cfg.tokenizer} conflicts with --init {cfg.init}: the model brings its "
            "own tokenizer (or one that extends it, as `mtcli tokenizer add-placeholders` makes)"
        )
    if diffs := architecture_differences(cfg.model, checked.model_cfg):
        k, actual, wanted = diffs[0]
        raise UserError(f"--init {cfg.init} has {k} {actual!r}; it cannot be trained as {wanted!r}")


def _grows(tokenizer: Tokenizer, model_dir: Path) -> bool:
    """Whether `tokenizer` is the model's own with pieces appended (not merely a copy)."""
    own = Tokenizer.load(model_dir)
    return tokenizer.src_vocab_size > own.src_vocab_size and tokenizer.extends(own)


def architecture_differences(wanted: ModelConfig, actual: ModelConfig) -> list[tuple]:
    """(field, actual, wanted) for each model field the user chose that differs."""
    a, w = to_dict(actual), to_dict(wanted)
    return [(k, a[k], w[k]) for k in a if k not in DERIVED_MODEL_FIELDS and a[k] != w[k]]


def check_distill(cfg: DistillConfig, student: TrainConfig, force: bool) -> None:
    """What `mtcli distill` reads, checked before it translates a line: the teacher, the
    sources (every line UTF-8), --out, the student's shape and validation set, CTranslate2."""
    teacher = check_model_files(cfg.teacher)
    sum(1 for _ in read_lines(cfg.src))  # a missing file or a line that is not UTF-8: one line
    check_replaceable(cfg.out, "distill", "--out", force, reads=[cfg.src, cfg.teacher])
    check_model_fits(student.model)
    if student.valid_src:
        check_parallel(student.valid_src, student.valid_tgt or None)
    pair = (teacher.config.get("src_lang"), teacher.config.get("tgt_lang"))
    if pair != (student.src_lang, student.tgt_lang):
        raise UserError(
            f"--teacher {cfg.teacher} translates {'->'.join(map(str, pair))}, "
            f"but --config trains {student.src_lang}->{student.tgt_lang}"
        )
    if cfg.teacher_engine == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        raise UserError("--teacher-engine ctranslate2 needs ctranslate2: pip install 'mtcli[ct2]'")
