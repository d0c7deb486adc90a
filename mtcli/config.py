"""Configuration dataclasses for the model, training and decoding, and the one place their
values are checked. Imports only the stdlib (and mtcli.device's CPU count, torch-free).

Every field has a default that reproduces the behaviour of older checkpoints, so a config
saved by an earlier mtcli still loads. Flags on the command line map one-to-one to fields;
a TOML file may set the same fields; flags win. Whatever the origin of a value (a flag, a TOML
file, a checkpoint's config.json), `check_values` judges it by the rules in LIMITS before any
dataclass is built, and the caller names the origin in its one-line message.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mtcli.device import available_cpus

C = TypeVar("C")

# The special token ids: the tokenizer is trained to assign them (data/tokenizer.py), the
# model's embeddings keep PAD's row at zero, and every search starts at BOS and stops at EOS.
# One table that all three import, so they cannot drift apart.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
# a language label: ISO 639's two or three letters, then a script or region (zh-Hant, pt_BR)
LANGUAGE_CODE = r"([A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*)?"


class ConfigError(ValueError):
    """A value a config field cannot take; `key` is the field ("model.d_model" when nested)."""

    def __init__(self, key: str, value: Any, why: str):
        super().__init__(f"{key} = {value!r}: {why}")
        self.key, self.value, self.why = key, value, why


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
    activation: str = "relu"  # "relu" (paper), "gelu", or "swish" (x * sigmoid(x), MarianMT's)
    pre_norm: bool = False  # post-norm as in the paper; pre-norm trains more stably when deep
    share_embeddings: bool = True  # one matrix for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection reuses the target embedding (paper, sec. 3.4)
    # a bias on the output logits; the paper has none, MarianMT models (final_logits_bias) do
    output_bias: bool = False
    attention: str = "dot"  # encoder-decoder scores: "dot" (scaled dot product, the paper) or
    # "additive" (Bahdanau et al. 2015, vᵀ tanh(W_q q + W_k k)), to compare what the paper chose

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(
                "model.d_model", self.d_model, f"must be divisible by n_heads ({self.n_heads})"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "model.share_embeddings", True, "needs equal source and target vocabulary sizes"
            )

    def layer_parameters(self) -> int:
        """Parameters of the encoder and decoder layers (and final norms), without embeddings
        or the output projection: what Seq2Seq(cfg) builds there, counted without building it."""
        D, F = self.d_model, self.d_ff
        attention = 4 * D * D + 4 * D  # Q, K, V and output projections, with biases
        feed_forward = 2 * D * F + F + D
        norm = 2 * D  # LayerNorm's gain and bias
        scoring = D if self.attention == "additive" else 0  # vᵀ per head: H x (D / H)
        encoder = attention + feed_forward + 2 * norm
        decoder = 2 * attention + scoring + feed_forward + 3 * norm
        final = 2 * norm if self.pre_norm else 0
        return self.n_enc_layers * encoder + self.n_dec_layers * decoder + final


# settings of a run that may change when it is resumed: budgets and cadences, not the model,
# the data or the optimisation (a change there would make the resumed run a different run)
WARMUP_MEASURED_STEPS = 20  # steps timed before a warm-up is sized by the step rate

RESUMABLE_CHANGES = (
    "max_steps", "max_epochs", "max_time", "patience", "valid_every", "valid_bleu_lines",
    "log_every", "keep", "save_every", "save_every_minutes", "threads", "device", "precision",
    "out", "tensorboard",
    # the warm-up: a changed one never lifts a later step's rate above the inverse-sqrt decay
    # the run was on (lr_factor could, and stays refused), so a warm-up the budget outlasts
    # is put right on the resumed run
    "warmup", "warmup_share",
    # labels, not training: a run labelled by an older mtcli's default may be relabelled
    "src_lang", "tgt_lang",
)  # fmt: skip


@dataclass
class TrainConfig:
    """What `mtcli train` does: data, optimisation, checkpoint policy."""

    src: str = ""  # training source text, one sentence per line
    tgt: str = ""  # training target text, aligned with src
    # a token store of `mtcli data binarize` instead of src/tgt; empty = OUT/data, which the
    # run builds from src/tgt itself
    data: str = ""
    valid_src: str = ""  # validation source; empty = no validation
    valid_tgt: str = ""
    # without valid_src: pairs of src/tgt held out to validate on (OUT/heldout, split by
    # source sentence; training/held_out.py); 0 = none. `mtcli train` sizes it to the corpus
    valid_size: int = 0
    tokenizer: str = ""  # tokenizer directory; empty = train one into OUT/tokenizer
    init: str = ""  # model directory whose weights, shape and tokenizer start this run
    vocab_size: int = 8000  # used only when a tokenizer is trained on the fly
    # recorded in the model: eval's BLEU tokenizer, the routing of plain input and the exports
    # believe them; empty = the corpus's (its prepared manifest, else its text: data/languages.py)
    src_lang: str = ""
    tgt_lang: str = ""
    out: str = "runs/model"  # checkpoints go to OUT/last, OUT/best, OUT/step-N
    max_tokens: int = 4096  # padded source+target tokens per batch
    accum: int = 1  # batches per optimizer step (gradient accumulation)
    max_steps: int = 0  # 0 = no limit
    max_epochs: int = 0  # 0 = no limit
    max_time: float = 0.0  # wall-clock budget in minutes, summed over resumes; 0 = no limit
    max_len: int = 128  # pairs with more tokens on either side are dropped
    max_ratio: float = 9.0  # pairs whose length ratio exceeds this are dropped (misalignments)
    lr_factor: float = 2.0  # scales the warm-up schedule of the paper
    warmup: int = 4000  # steps of linear warm-up before inverse-sqrt decay
    # with max_time: the warm-up is this share of the steps the budget allows, from the step
    # rate of the first WARMUP_MEASURED_STEPS (a preset sized by time: a slower machine gets a
    # shorter warm-up, not one it never finishes); 0 = warmup as given
    warmup_share: float = 0.0
    label_smoothing: float = 0.1  # paper value
    bpe_dropout: float = 0.0  # BPE-dropout on training text, re-drawn every epoch; 0 = off.
    # 0.1 is the value Provilkov et al. (2020) found best; it helps most on small corpora
    # the placeholder pipeline (training/augment.py), each a share of the pairs of an epoch,
    # re-drawn every epoch; 0 = off. It needs a tokenizer with the placeholder pieces.
    placeholders: float = 0.0  # spans the pair holds, and words aligned both sides, as pieces
    tags: float = 0.0  # an aligned phrase wrapped in inline-tag pieces on both sides
    casing: float = 0.0  # both sides in UPPER CASE (half of them) or Title Case
    end_punct: float = 0.0  # the final punctuation dropped from both sides
    clip_norm: float = 1.0  # gradient clipping by global norm; 0 = off
    weight_decay: float = 0.0
    valid_every: int = 500  # optimizer steps between validations
    valid_bleu_lines: int = 500  # validation lines translated greedily for BLEU; 0 = loss only
    save_every: int = 0  # steps between resumable checkpoints; 0 = at every validation
    save_every_minutes: float = 10.0  # also refresh OUT/last this often; bounds a crash's loss
    log_every: int = 50  # steps between progress reports (and metrics.jsonl lines)
    keep: int = 3  # step checkpoints kept besides best/ and last/
    patience: int = 0  # stop after N validations without improvement; 0 = never
    seed: int = 1
    device: str = "auto"  # auto, cpu or cuda
    precision: str = "fp32"  # fp32, bf16 (autocast; fp16 + loss scaling on GPUs without bf16)
    threads: int = 0  # torch intra-op threads; 0 = all available cores
    tensorboard: str = ""  # also write TensorBoard events to this directory; empty = off
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        if self.max_len + 1 > self.model.max_positions:
            # +1: the source ends with EOS and the decoder input starts with BOS
            raise ConfigError(
                "max_len",
                self.max_len,
                f"must be below model.max_positions ({self.model.max_positions})",
            )

    @property
    def checkpoint_every(self) -> int:
        """Steps between step-N checkpoints (save_every, else the validation cadence)."""
        return self.save_every or self.valid_every


@dataclass
class DecodeConfig:
    """How translations are searched for."""

    beam_size: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # GNMT alpha: scores are divided by ((5 + len) / 6) ** alpha
    max_len_a: float = 1.5  # output may have at most a * source_len + b tokens
    max_len_b: int = 10
    nbest: int = 1  # hypotheses returned per sentence (<= beam_size)
    # padded source tokens x beam per batch; on 2 cores the 2,000 Tatoeba test lines took
    # 3.8 s at 8000 with beam 5 (4.2 at 4000, 4.0 at 16000), greedy 1.4 s (1.3, 1.9)
    batch_tokens: int = 8000
    chunk_lines: int = 1000  # lines read before a batch is sorted and translated
    use_cache: bool = True  # False re-feeds the whole prefix each step (reference / benchmark)
    # the search's first few candidates chosen again by their own score, the reverse model's
    # and their length (engines/rerank.py), where the model has fitted weights (rerank.json)
    rerank: bool = True
    no_repeat_ngram: int = 0  # no n-gram twice in an output (fairseq's); 0 = off
    sample: bool = False  # draw each token instead of searching (nbest = draws per line)
    temperature: float = 1.0  # sampling: softmax(logits / T); small T approaches greedy
    top_k: int = 0  # sampling: only the k most probable tokens; 0 = all
    top_p: float = 1.0  # sampling: only the smallest set holding this much probability
    seed: int = 0  # sampling: the same seed draws the same outputs
    # the fields a model's own generation defaults may set (GENERATION_FIELDS no flag or request
    # named; build_decode_config fills it): a DecodeConfig built in code means what it says
    from_model: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.sample and self.nbest > self.beam_size:
            raise ConfigError("nbest", self.nbest, f"must not exceed beam_size ({self.beam_size})")

    def with_generation(self, generation: dict) -> DecodeConfig:
        """These settings with a model's recommended ones (config.json "generation") where
        `from_model` lets them in; a beam narrower than the asked --nbest widens to it."""
        taken = {k: v for k, v in generation.items() if k in self.from_model}
        if not taken:
            return self
        beam = max(taken.get("beam_size", self.beam_size), 1 if self.sample else self.nbest)
        return dataclasses.replace(self, **{**taken, "beam_size": beam}, from_model=())

    @property
    def rows_per_line(self) -> int:
        """Decoder rows one line takes: its beam, or its draws when sampling."""
        return self.nbest if self.sample else self.beam_size

    @property
    def source_tokens_per_batch(self) -> int:
        """batch_tokens in padded source tokens alone (what CTranslate2's token batches count)."""
        return max(1, self.batch_tokens // self.rows_per_line)


@dataclass
class DistillConfig:
    """Sequence-level knowledge distillation (Kim & Rush 2016; the flags of `mtcli distill`).
    The student's shape and training settings are a TrainConfig of their own (--config)."""

    teacher: str = ""  # the model whose translations the student learns from
    src: str = ""  # the corpus's sources; the teacher writes the targets (no references needed)
    out: str = "runs/distill"  # OUT/teacher, OUT/init, OUT/student, OUT/model
    # the teacher's search: Kim & Rush train on its beam output (greedy outputs are noisier)
    beam_size: int = 5
    teacher_engine: str = "mtcli"  # or "ctranslate2": the teacher exported into OUT and run there
    part_lines: int = 2000  # sources translated and written as one part: what a kill may cost
    # share of pairs left out, those with the teacher's lowest scores (its length-normalised
    # log-probability): its least confident translations (0 = keep all, as Kim & Rush)
    drop_worst: float = 0.0
    average: int = 3  # the student's last checkpoints averaged into OUT/model
    student_beam: int = 1  # the beam written as the student's default: students decode greedily
    quantize: str = "none"  # int8: the student recommends int8 Linear layers (generation.quantize)
    fp16: bool = True  # the exported student's weights in half precision


# What a model directory may recommend for its own decoding, in its config.json "generation"
# (as Hugging Face's generation_config.json): a distilled student is decoded greedily
GENERATION_FIELDS = ("beam_size", "length_penalty")
# ... and what its Linear layers run in ("quantize"), an engine setting rather than a search
# one: a student distilled to be fast may ask for int8 (`mtcli distill --quantize int8`)
QUANTIZE_CHOICES = ("none", "int8")


@dataclass
class ServeConfig:
    """Limits and batching of the server (the flags of `mtcli serve`; their defaults are these)."""

    batch_wait_ms: float = 5.0  # how long the worker waits for more requests to join a batch
    batch_tokens: int = 4000  # source tokens gathered into one batch at most
    max_chars: int = 1000  # characters in one line
    max_lines: int = 64  # lines in one request (each q item may hold several)
    max_body: int = 256 * 1024  # bytes in one request body
    queue_size: int = 64  # requests waiting for the worker; beyond, 503 with Retry-After
    api_key: str = ""  # when set, every translate request must carry it
    max_beam: int = (
        0  # the widest beam, n-best list or alternatives a request may ask (0: decode's beam)
    )
    request_tokens: int = 4000  # source tokens of all of a request's lines together
    request_timeout: float = 10.0  # seconds a request's headers and body may take to arrive
    keep_alive: float = 5.0  # seconds an idle kept-alive connection stays open
    max_connections: int = 1000  # held at once; beyond, the stalest unfinished one is dropped
    max_file_bytes: int = 10 << 20  # bytes of one document uploaded to POST /translate_file
    file_timeout: float = 300.0  # seconds a document may take to translate; beyond, 413
    keep_files: float = 600.0  # seconds a translated document waits for its one download
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # defaults a request may override


# ---------------------------------------------------------------- the rules
@dataclass(frozen=True)
class Limit:
    """The range (or the choices) a field accepts; its type comes from the dataclass."""

    low: float | None = None  # smallest allowed value
    below: float | None = None  # values must be smaller than this
    high: float | None = None  # largest allowed value
    choices: tuple[str, ...] = ()
    why_high: str = ""  # what the largest value is, when the number alone does not say
    pattern: str = ""  # a regular expression a string must match whole
    shaped_like: str = ""  # what the pattern asks for, in words

    def why_not(self, value: Any) -> str | None:
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if self.pattern:
            return None if re.fullmatch(self.pattern, value) else f"must be {self.shaped_like}"
        if self.low is not None and value < self.low:
            return f"must be at least {_number(self.low)}"
        if self.below is not None and value >= self.below:
            return f"must be below {_number(self.below)}"
        if self.high is not None and value > self.high:
            because = f" ({self.why_high})" if self.why_high else ""
            return f"must be at most {_number(self.high)}{because}"
        return None


def _number(x: float) -> str:
    """A bound as a person writes it: 4294967295 (not 4.29497e+09), 0.0001, 1."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


AT_LEAST_0, AT_LEAST_1 = Limit(low=0), Limit(low=1)
# more threads than CPUs only makes torch's threads wait for each other, and from some tens of
# thousands up OpenMP crashes the process (--threads 100000 ended in a segfault)
THREADS = Limit(low=0, high=available_cpus(), why_high="the CPUs this process may use")
# the rows of a step grow with the beam (or the draws): -b 4000 took 1.2 GB for one short
# line here and -b 100000 would need ~30 GB, while wider beams than a few dozen only lower
# BLEU (Koehn & Knowles 2017); 1024 leaves room to study that and none to exhaust memory
ROWS_PER_LINE = Limit(low=1, high=1024)
# torch's generators take 64-bit seeds (a larger one was an internal error); 32 bits, as
# numpy's, leave room for the per-rank and per-epoch offsets added to it
SEED = Limit(low=0, high=2**32 - 1)
PROBABILITY = Limit(low=0, below=1)  # a dropout rate or a smoothing mass
# ISO 639 with an optional script or region (zh-Hant, pt_BR); empty = the corpus's
LANGUAGE = Limit(pattern=LANGUAGE_CODE, shaped_like="a language code such as en, de or zh-Hant")

LIMITS: dict[type, dict[str, Limit]] = {
    ModelConfig: {
        "src_vocab_size": Limit(low=5),  # the four special ids and one piece
        "tgt_vocab_size": Limit(low=5),
        "d_model": AT_LEAST_1,
        "n_heads": AT_LEAST_1,
        "n_enc_layers": AT_LEAST_1,
        "n_dec_layers": AT_LEAST_1,
        "d_ff": AT_LEAST_1,
        "dropout": PROBABILITY,
        "attention_dropout": PROBABILITY,
        "activation_dropout": PROBABILITY,
        "max_positions": Limit(low=2),
        "activation": Limit(choices=("relu", "gelu", "swish")),
        "attention": Limit(choices=("dot", "additive")),
    },
    TrainConfig: {
        "vocab_size": Limit(low=8),
        "valid_size": AT_LEAST_0,
        "max_tokens": AT_LEAST_1,
        "accum": AT_LEAST_1,
        "max_steps": AT_LEAST_0,
        "max_epochs": AT_LEAST_0,
        "max_time": AT_LEAST_0,
        "max_len": AT_LEAST_1,
        "max_ratio": AT_LEAST_1,
        "lr_factor": Limit(low=0),
        "warmup": AT_LEAST_1,
        "warmup_share": PROBABILITY,
        "label_smoothing": PROBABILITY,
        "bpe_dropout": PROBABILITY,
        "placeholders": PROBABILITY,
        "tags": PROBABILITY,
        "casing": PROBABILITY,
        "end_punct": PROBABILITY,
        "clip_norm": AT_LEAST_0,
        "weight_decay": AT_LEAST_0,
        "valid_every": AT_LEAST_1,
        "valid_bleu_lines": AT_LEAST_0,
        "save_every": AT_LEAST_0,
        "save_every_minutes": AT_LEAST_0,
        "log_every": AT_LEAST_1,
        "keep": AT_LEAST_0,
        "patience": AT_LEAST_0,
        "seed": SEED,
        "device": Limit(choices=("auto", "cpu", "cuda")),
        "precision": Limit(choices=("fp32", "bf16")),
        "threads": THREADS,
        "src_lang": LANGUAGE,
        "tgt_lang": LANGUAGE,
    },
    DistillConfig: {
        "beam_size": ROWS_PER_LINE,
        "teacher_engine": Limit(choices=("mtcli", "ctranslate2")),
        "part_lines": AT_LEAST_1,
        "drop_worst": PROBABILITY,
        "average": AT_LEAST_1,
        "student_beam": ROWS_PER_LINE,
        "quantize": Limit(choices=QUANTIZE_CHOICES),
    },
    DecodeConfig: {
        "beam_size": ROWS_PER_LINE,
        "length_penalty": AT_LEAST_0,
        "max_len_a": AT_LEAST_0,
        "max_len_b": AT_LEAST_0,
        "nbest": ROWS_PER_LINE,
        "batch_tokens": AT_LEAST_1,
        "chunk_lines": AT_LEAST_1,
        "no_repeat_ngram": AT_LEAST_0,
        "temperature": Limit(low=1e-4),
        "top_k": AT_LEAST_0,
        "top_p": Limit(low=1e-4, high=1),
        "seed": SEED,
    },
}


def why_not(cls: type, name: str, value: Any) -> str | None:
    """Why `value` cannot be field `name` of `cls`; None when it can."""
    expected = typing.get_type_hints(cls)[name]
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return "must be a finite number"
    elif expected is str:
        ok = isinstance(value, str)
    else:  # the nested ModelConfig
        ok = isinstance(value, dict | ModelConfig)
    if not ok:
        return f"must be {_TYPE_NAMES.get(expected, 'a table')}"
    limit = LIMITS.get(cls, {}).get(name)
    return limit.why_not(value) if limit else None


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_values(cls: type, data: dict, prefix: str = "") -> None:
    """Raise ConfigError for the first value in `data` that a field of `cls` cannot take.

    Unknown keys are an error too (a typo in a TOML file should not be silently ignored).
    A nested "model" table is checked against ModelConfig.
    """
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip(".") or "config", data, "must be a table of settings")
    known = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(prefix + key, value, "unknown setting")
        why = why_not(cls, key, value)
        if why:
            raise ConfigError(prefix + key, value, why)
        if key == "model" and isinstance(value, dict):
            check_values(ModelConfig, value, prefix + "model.")


def to_dict(cfg: Any) -> dict:
    """A JSON-ready dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[C], data: dict) -> C:
    """Build `cls` from a dict, ignoring unknown keys and nesting ModelConfig.

    Values are not checked here: call `check_values` on anything a user could have written.
    """
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            continue
        if key == "model" and isinstance(value, dict):
            value = from_dict(ModelConfig, value)
        kwargs[key] = value
    return cls(**kwargs)


def build(cls: type[C], data: dict, name: Callable[[str], str] = lambda key: key) -> C:
    """Check `data` and build `cls` from it; ConfigError keys are renamed by `name`."""
    try:
        check_values(cls, data)
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(name(e.key), e.value, e.why) from None


def differences(old: dict, new: dict, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(key, old, new) for each field whose value differs, nested tables flattened."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += differences(a, b, prefix + key + ".")
        elif a != b:
            diffs.append((prefix + key, a, b))
    return diffs


def read_toml(path: str | Path) -> dict:
    """Parse a TOML file into a dict (errors propagate to the caller to report)."""
    with open(path, "rb") as f:
        return tomllib.load(f)
