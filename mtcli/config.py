"""Configuration dataclasses for the model, training and decoding. Imports only the stdlib.

Every field has a default that reproduces the behaviour of older checkpoints, so a config
saved by an earlier mtcli still loads. Flags on the command line map one-to-one to fields;
a TOML file may set the same fields; flags win.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


@dataclass
class ModelConfig:
    """Shape of the encoder-decoder Transformer. Defaults are sized for a 2-core CPU."""

    src_vocab_size: int = 8000  # set from the tokenizer; must match it exactly
    tgt_vocab_size: int = 8000  # equal to src_vocab_size when the tokenizer is joint
    d_model: int = 256  # small enough to train in an hour on CPU, big enough for Tatoeba
    n_heads: int = 4  # head dim 64, the paper's value
    n_enc_layers: int = 3
    n_dec_layers: int = 3
    d_ff: int = 1024  # 4 x d_model, as in the paper
    dropout: float = 0.1  # applied to embeddings+positions, attention output, FFN output
    attention_dropout: float = 0.0  # dropout on attention probabilities
    activation_dropout: float = 0.0  # inside the FFN, after the activation; the paper has none,
    # and on CPU its random mask over the 4x-wide hidden layer costs ~5% of a training step
    max_positions: int = 256  # longest sequence the sinusoid table covers (tokens)
    activation: str = "relu"  # "relu" (paper) or "gelu"
    pre_norm: bool = False  # post-norm as in the paper; pre-norm trains more stably when deep
    share_embeddings: bool = True  # one matrix for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection reuses the target embedding (paper, sec. 3.4)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be relu or gelu, not {self.activation!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs equal source and target vocabulary sizes")


@dataclass
class TrainConfig:
    """What `mtcli train` does: data, optimisation, checkpoint policy."""

    src: str = ""  # training source text, one sentence per line
    tgt: str = ""  # training target text, aligned with src
    valid_src: str = ""  # validation source; empty = no validation
    valid_tgt: str = ""
    tokenizer: str = ""  # tokenizer directory; empty = train one into OUT/tokenizer
    vocab_size: int = 8000  # used only when a tokenizer is trained on the fly
    src_lang: str = "en"  # recorded in the model so eval picks the BLEU tokenizer
    tgt_lang: str = "zh"
    out: str = "runs/model"  # checkpoints go to OUT/last, OUT/best, OUT/step-N
    max_tokens: int = 4096  # padded source+target tokens per batch
    accum: int = 1  # batches per optimizer step (gradient accumulation)
    max_steps: int = 0  # 0 = no limit
    max_epochs: int = 0  # 0 = no limit
    max_time: float = 0.0  # wall-clock budget in minutes; 0 = no limit
    max_len: int = 128  # pairs with more tokens on either side are dropped
    max_ratio: float = 9.0  # pairs whose length ratio exceeds this are dropped (misalignments)
    lr_factor: float = 2.0  # scales the warm-up schedule of the paper
    warmup: int = 4000  # steps of linear warm-up before inverse-sqrt decay
    label_smoothing: float = 0.1  # paper value
    bpe_dropout: float = 0.0  # BPE-dropout on training text, re-drawn every epoch; 0 = off.
    # 0.1 is the value Provilkov et al. (2020) found best; it helps most on small corpora
    clip_norm: float = 1.0  # gradient clipping by global norm; 0 = off
    weight_decay: float = 0.0
    valid_every: int = 500  # optimizer steps between validations
    valid_bleu_lines: int = 500  # validation lines translated greedily for BLEU; 0 = loss only
    log_every: int = 50  # steps between plain-text progress lines (non-TTY)
    keep: int = 3  # step checkpoints kept besides best/ and last/
    patience: int = 0  # stop after N validations without improvement; 0 = never
    seed: int = 1
    device: str = "auto"  # auto, cpu or cuda
    precision: str = "fp32"  # fp32 or bf16 (autocast)
    threads: int = 0  # torch intra-op threads; 0 = all available cores
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, not {self.precision!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, not {self.device!r}")


@dataclass
class DecodeConfig:
    """How translations are searched for."""

    beam_size: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # GNMT alpha: scores are divided by ((5 + len) / 6) ** alpha
    max_len_a: float = 1.5  # output may have at most a * source_len + b tokens
    max_len_b: int = 10
    nbest: int = 1  # hypotheses returned per sentence (<= beam_size)
    # padded source tokens x beam per batch; on 2 cores beam 5 over 500 short lines took
    # 1.19-1.35 s at 8000, 1.45 at 4000, 1.43 at 6000, 1.27 at 10000, 1.50 at 16000
    batch_tokens: int = 8000
    chunk_lines: int = 1000  # lines read before a batch is sorted and translated
    use_cache: bool = True  # False re-feeds the whole prefix each step (reference / benchmark)

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError("beam_size must be at least 1")
        if not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"nbest must be between 1 and beam_size ({self.beam_size})")


def to_dict(cfg: Any) -> dict:
    """A JSON-ready dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[C], data: dict) -> C:
    """Build `cls` from a dict, ignoring unknown keys and nesting ModelConfig."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            continue
        if key == "model" and isinstance(value, dict):
            value = from_dict(ModelConfig, value)
        kwargs[key] = value
    return cls(**kwargs)


def unknown_keys(cls: type, data: dict, prefix: str = "") -> list[str]:
    """Keys in `data` that `cls` has no field for (typos in a TOML file)."""
    known = {f.name for f in dataclasses.fields(cls)}
    bad = [prefix + k for k in data if k not in known]
    if isinstance(data.get("model"), dict):
        bad += unknown_keys(ModelConfig, data["model"], prefix="model.")
    return bad


def read_toml(path: str | Path) -> dict:
    """Parse a TOML file into a dict (errors propagate to the caller to report)."""
    with open(path, "rb") as f:
        return tomllib.load(f)
