"""Where a training run starts: the model, tokenizer and trainer state of a run that is new,
fine-tuned from a model (--init), or continued from one of its checkpoints (refused when its
model or data settings changed). The inputs were checked before (checks.py).

Training reads a token store (data/token_store.py): the one --data names (`mtcli data
binarize`), or OUT/data, which a run on --src/--tgt builds itself and reuses while the corpus,
the tokenizer and the filters are the same (their sha256 and values are its key).

Knows nothing of the loop itself; loop.py calls `begin_run` and `load_training_set`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from mtcli.config import (
    RESUMABLE_CHANGES,
    WARMUP_MEASURED_STEPS,
    ModelConfig,
    TrainConfig,
    differences,
    from_dict,
    to_dict,
)
from mtcli.data.parallel_text import read_corpus
from mtcli.data.token_store import (
    BinarizeRequest,
    Filters,
    TokenStore,
    encode_pairs,
    ensure_store,
    open_store,
    read_manifest,
    tokenizer_digest,
)
from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.device import available_cpus
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import load_model, load_trainer_state
from mtcli.training.checks import architecture_differences
from mtcli.training.distributed import ProcessGroup
from mtcli.training.pipeline import rates_of
from mtcli.training.reports import Message
from mtcli.training.run_dir import RunDir, recorded_settings, resume_point


def prepare_tokenizer(cfg: TrainConfig, group: ProcessGroup, say) -> Path:
    """The tokenizer directory to use: the given one (checked with the run's inputs, by
    checks.check_inputs), or one trained now into OUT/tokenizer."""
    if cfg.tokenizer:
        return Path(cfg.tokenizer)
    if cfg.data:
        return Path(cfg.data) / "tokenizer"
    if not cfg.tgt:
        raise UserError("a TSV corpus needs --tokenizer (train one with `mtcli tokenizer train`)")
    tok_dir = Path(cfg.out) / "tokenizer"
    if group.is_main and not (tok_dir / "tokenizer.json").is_file():
        # the placeholder pipeline writes pieces the vocabulary must hold
        with_pieces = cfg.placeholders > 0 or cfg.tags > 0
        options = TokenizerOptions(
            vocab_size=cfg.vocab_size, seed=cfg.seed, placeholders=with_pieces
        )
        train_tokenizer(cfg.src, cfg.tgt, tok_dir, options, say=lambda m: say(Message(m)))
    group.barrier()
    return tok_dir


def load_pairs(src: str, tgt: str, tokenizer: Tokenizer, cfg: TrainConfig) -> TokenStore:
    """Two aligned files, or one TSV file when `tgt` is empty, encoded into memory (a
    validation set: small, read once)."""
    lines = read_corpus(src, tgt or None)
    return encode_pairs(lines, tokenizer, filters_of(cfg), keep_text=False)


def filters_of(cfg: TrainConfig) -> Filters:
    return Filters(max_len=cfg.max_len, max_ratio=cfg.max_ratio)


def build_model_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ModelConfig:
    """The configured shape with vocabulary sizes from the tokenizer; shared embeddings only if joint."""
    return dataclasses.replace(
        cfg.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        share_embeddings=cfg.model.share_embeddings and tokenizer.joint,
    )


def check_same_run(checkpoint: Path, cfg: TrainConfig) -> list[tuple]:
    """Refuse to resume a checkpoint with other model, data or optimisation settings.

    Budgets and cadences (RESUMABLE_CHANGES) may change; those changes are returned.
    """
    train_rec, model_rec = recorded_settings(checkpoint)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    recorded = to_dict(  # fields an older mtcli did not record take their defaults
        from_dict(
            TrainConfig, {**{k: v for k, v in train_rec.items() if k in known}, "model": model_rec}
        )
    )
    requested = to_dict(cfg)
    diffs = differences(
        {k: v for k, v in recorded.items() if k != "model"},
        {k: v for k, v in requested.items() if k != "model"},
    )
    diffs += [
        ("model." + k, a, w)
        for k, a, w in architecture_differences(cfg.model, from_dict(ModelConfig, model_rec))
    ]
    if measured_warmup(cfg, train_rec) is not None:  # the warm-up the run measured stays
        diffs = [d for d in diffs if d[0] != "warmup"]
    if refused := [d for d in diffs if d[0] not in RESUMABLE_CHANGES]:
        changes = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in refused)
        raise UserError(
            f"{checkpoint} was trained with other settings ({changes}); use the same settings "
            "to continue, --restart to start over, or another --out"
        )
    return diffs


def measured_warmup(cfg: TrainConfig, recorded: dict) -> int | None:
    """The warm-up a run sized by its step rate (warmup_share) recorded, where `cfg` sizes it
    the same way: a resumed run keeps it rather than the preset's first guess."""
    share = cfg.warmup_share
    if not share or recorded.get("warmup_share") != share or "warmup" not in recorded:
        return None
    return int(recorded["warmup"])


def resumed_config(cfg: TrainConfig, checkpoint: Path | None, step: int) -> TrainConfig:
    """`cfg` for a run resumed from `checkpoint` at `step`: with the warm-up it measured, where
    it measured one (by WARMUP_MEASURED_STEPS)."""
    if checkpoint is None or step < WARMUP_MEASURED_STEPS:
        return cfg
    warmup = measured_warmup(cfg, recorded_settings(checkpoint)[0])
    return cfg if warmup is None else dataclasses.replace(cfg, warmup=warmup)


@dataclass
class Start:
    """Where a run begins: its model, its tokenizer, and the trainer state when resumed."""

    model: Seq2Seq
    tokenizer: Tokenizer
    tokenizer_dir: Path
    state: dict | None = None


def continue_run(checkpoint: Path, cfg: TrainConfig, say) -> Start:
    """Model, tokenizer and trainer state of a checkpoint of this same run."""
    changes = check_same_run(checkpoint, cfg)
    state = load_trainer_state(checkpoint)
    loaded = load_model(checkpoint)
    for key, old, new in changes:
        say(Message(f"resuming with {key} {old!r} -> {new!r}"))
    say(Message(f"resuming from {checkpoint} at step {state['step']} (--restart to start over)"))
    return Start(loaded.model, loaded.tokenizer, loaded.path, state)


def start_from_model(cfg: TrainConfig) -> Start:
    """--init: a new run from a model's weights, shape and tokenizer (fresh optimizer), or
    from its weights and a --tokenizer that extends its own (the new pieces' embeddings are
    new rows, initialised as the model initialises its embeddings)."""
    loaded = load_model(cfg.init)
    tokenizer, tokenizer_dir = loaded.tokenizer, loaded.path
    if cfg.tokenizer:
        tokenizer, tokenizer_dir = Tokenizer.load(cfg.tokenizer), Path(cfg.tokenizer)
    # the same weights in a model with this run's dropout rates (and vocabulary)
    shape = dataclasses.replace(
        loaded.model.cfg,
        **_dropouts(cfg.model),
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
    )
    model = Seq2Seq(shape)
    model.load_state_dict(_grown(loaded.model.state_dict(), model.state_dict()))
    return Start(model, tokenizer, tokenizer_dir)


def _grown(old: dict, new: dict) -> dict:
    """`old`'s tensors, each with `new`'s extra rows where the vocabulary grew."""
    out = {}
    for name, tensor in old.items():
        if tensor.shape != new[name].shape:
            grown = new[name].clone()
            grown[: tensor.shape[0]] = tensor
            tensor = grown
        out[name] = tensor
    return out


def _dropouts(cfg: ModelConfig) -> dict:
    return {k: getattr(cfg, k) for k in ("dropout", "attention_dropout", "activation_dropout")}


def start_new(cfg: TrainConfig, group: ProcessGroup, say) -> Start:
    tok_dir = prepare_tokenizer(cfg, group, say)
    tokenizer = Tokenizer.load(tok_dir)
    return Start(Seq2Seq(build_model_config(cfg, tokenizer)), tokenizer, tok_dir)


def begin_run(
    cfg: TrainConfig,
    group: ProcessGroup,
    run: RunDir,
    resume: str | None,
    restart: bool,
    say,
) -> tuple[Start, Path | None]:
    """The run's start and the checkpoint it continues from (None: it starts at step 0)."""
    group.barrier()  # rank 0 has cleaned what a killed run left in OUT
    checkpoint = resume_point(run.path, resume, restart)
    # OUT/tokenizer is the run's own, retrained when it is gone, unless --tokenizer names it
    # OUT/data is kept too: its key says whether it still fits this run's corpus and tokenizer
    # OUT/heldout too: keyed like OUT/data, it was made (or checked) for this very run
    keep = ("tokenizer", "data", "heldout") if cfg.tokenizer else ("data", "heldout")
    if restart and group.is_main and (removed := run.clear(keep)):
        say(Message(f"--restart: removed {', '.join(removed)} from {run.path}"))
    group.barrier()
    if checkpoint is not None:
        return continue_run(checkpoint, cfg, say), checkpoint
    if cfg.init:
        return start_from_model(cfg), None
    return start_new(cfg, group, say), None


def load_training_set(cfg: TrainConfig, start: Start, group: ProcessGroup, say) -> TokenStore:
    """The training pairs, memory-mapped: --data's store, or OUT/data (built by rank 0 when it
    is missing or stale; every rank maps the same files)."""
    if cfg.data:
        store = open_store(cfg.data)
        check_store_tokenizer(store, start.tokenizer_dir)
    else:
        if group.is_main:
            ensure_run_store(cfg, start.tokenizer_dir, say)
        group.barrier()
        store = open_store(Path(cfg.out) / "data")
    say(Message(f"train {cfg.data or cfg.src}: {store.stats.summary()}"))
    if len(store) == 0:
        raise UserError(f"{cfg.data or cfg.src}: no usable training pairs")
    return store


def check_store_tokenizer(store: TokenStore, tokenizer_dir: Path) -> None:
    """A store's ids mean something only with the tokenizer that made them."""
    want = read_manifest(store.path)["key"]["tokenizer_sha256"]
    if tokenizer_digest(tokenizer_dir) != want:
        raise UserError(
            f"--data {store.path} was binarized with another tokenizer than {tokenizer_dir}'s; "
            "binarize it again with this tokenizer, or train with the store's own"
        )


def ensure_run_store(cfg: TrainConfig, tokenizer_dir: Path, say) -> None:
    """OUT/data as the corpus, tokenizer and filters of this run make it (reused while they
    are the same)."""
    out = Path(cfg.out) / "data"
    threads = max(1, cfg.threads or available_cpus())
    # BPE-dropout re-splits the text, and the placeholder pipeline rewrites it
    keep_text = cfg.bpe_dropout > 0 or rates_of(cfg).on
    request = BinarizeRequest(
        cfg.src, cfg.tgt, tokenizer_dir, out, filters_of(cfg), keep_text, threads
    )
    started = time.monotonic()
    made, what = ensure_store(request)
    if what == "current":
        return
    if what == "changed":
        say(
            Message(
                f"{out}: the corpus, tokenizer or filters changed since it was built; binarizing again"
            )
        )
    seconds = time.monotonic() - started
    read = made["stats"]["read"]
    rate = read / max(seconds, 1e-9)
    say(Message(f"binarized {read:,} pairs into {out} in {seconds:.1f} s ({rate:,.0f} pairs/s)"))
