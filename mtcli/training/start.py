"""Where a training run starts: the model, tokenizer and trainer state of a run that is new,
fine-tuned from a model (--init), or continued from one of its checkpoints (refused when its
model or data settings changed). The inputs were checked before (checks.py).

Knows nothing of the loop itself; train.py calls `begin_run` and `load_training_set`.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

from mtcli.config import (
    RESUMABLE_CHANGES,
    ModelConfig,
    TrainConfig,
    differences,
    from_dict,
    to_dict,
)
from mtcli.data.batches import Corpus, load_corpus, resplit
from mtcli.data.parallel_text import read_corpus
from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import load_model, load_trainer_state
from mtcli.training.checks import architecture_differences
from mtcli.training.distributed import ProcessGroup
from mtcli.training.reports import Message
from mtcli.training.run_dir import RunDir, recorded_settings, resume_point


def prepare_tokenizer(cfg: TrainConfig, group: ProcessGroup) -> Path:
    """The tokenizer directory to use: the given one (checked with the run's inputs, by
    checks.check_inputs), or one trained now into OUT/tokenizer."""
    if cfg.tokenizer:
        return Path(cfg.tokenizer)
    if not cfg.tgt:
        raise UserError("a TSV corpus needs --tokenizer (train one with `mtcli tokenizer train`)")
    tok_dir = Path(cfg.out) / "tokenizer"
    if group.is_main and not (tok_dir / "tokenizer.json").is_file():
        train_tokenizer(
            cfg.src, cfg.tgt, tok_dir, TokenizerOptions(vocab_size=cfg.vocab_size, seed=cfg.seed)
        )
    group.barrier()
    return tok_dir


def load_pairs(src: str, tgt: str, tokenizer: Tokenizer, cfg: TrainConfig) -> Corpus:
    """Two aligned files, or one TSV file when `tgt` is empty."""
    return load_corpus(
        read_corpus(src, tgt or None),
        tokenizer.encode_src,
        tokenizer.encode_tgt,
        max_len=cfg.max_len,
        max_ratio=cfg.max_ratio,
    )


def epoch_corpus(corpus: Corpus, tokenizer: Tokenizer, cfg: TrainConfig, epoch: int) -> Corpus:
    """The training pairs as this epoch sees them: re-split by BPE-dropout when it is on.

    Seeded by (seed, epoch), so a resumed run sees the same splits as an uninterrupted one.
    """
    if cfg.bpe_dropout <= 0:
        return corpus
    rng = random.Random(cfg.seed * 1_000_003 + epoch)
    return resplit(
        corpus,
        lambda texts: tokenizer.sample_src(texts, cfg.bpe_dropout, rng),
        lambda texts: tokenizer.sample_tgt(texts, cfg.bpe_dropout, rng),
        max_len=cfg.max_len,
    )


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
    if refused := [d for d in diffs if d[0] not in RESUMABLE_CHANGES]:
        changes = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in refused)
        raise UserError(
            f"{checkpoint} was trained with other settings ({changes}); use the same settings "
            "to continue, --restart to start over, or another --out"
        )
    return diffs


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
    """--init: a new run from a model's weights, shape and tokenizer (fresh optimizer)."""
    loaded = load_model(cfg.init)
    # the same weights in a model with this run's dropout rates
    model = Seq2Seq(dataclasses.replace(loaded.model.cfg, **_dropouts(cfg.model)))
    model.load_state_dict(loaded.model.state_dict())
    return Start(model, loaded.tokenizer, loaded.path)


def _dropouts(cfg: ModelConfig) -> dict:
    return {k: getattr(cfg, k) for k in ("dropout", "attention_dropout", "activation_dropout")}


def start_new(cfg: TrainConfig, group: ProcessGroup) -> Start:
    tok_dir = prepare_tokenizer(cfg, group)
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
    keep = ("tokenizer",) if cfg.tokenizer else ()
    if restart and group.is_main and (removed := run.clear(keep)):
        say(Message(f"--restart: removed {', '.join(removed)} from {run.path}"))
    group.barrier()
    if checkpoint is not None:
        return continue_run(checkpoint, cfg, say), checkpoint
    if cfg.init:
        return start_from_model(cfg), None
    return start_new(cfg, group), None


def load_training_set(cfg: TrainConfig, tokenizer: Tokenizer, say) -> Corpus:
    train_set = load_pairs(cfg.src, cfg.tgt, tokenizer, cfg)
    say(Message(f"train {cfg.src}: {train_set.stats.summary()}"))
    if len(train_set) == 0:
        raise UserError(f"{cfg.src}: no usable training pairs")
    return train_set
