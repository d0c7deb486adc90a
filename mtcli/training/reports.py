"""What a training run tells its caller: progress, validation results, messages, the outcome.

Plain dataclasses, stdlib only, so the CLI can draw them without importing torch, and
metrics.jsonl / TensorBoard can record them without knowing who else listens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class StepReport:
    step: int
    epoch: int
    loss: float  # label-smoothed cross-entropy per target token
    lr: float
    tokens_per_s: float  # target tokens (all ranks) per second since the last report
    elapsed: float  # seconds of training so far, over all resumes of the run
    fraction: float | None  # estimated share of the run done (None when unbounded)

    @property
    def ppl(self) -> float:
        return math.exp(min(self.loss, 50.0))


@dataclass
class ValidReport:
    step: int
    loss: float  # plain cross-entropy (no smoothing) per target token
    bleu: float | None
    is_best: bool

    @property
    def ppl(self) -> float:
        return math.exp(min(self.loss, 50.0))


@dataclass
class Message:
    text: str


Report = StepReport | ValidReport | Message


def as_record(report: StepReport | ValidReport) -> dict:
    """One line of metrics.jsonl: the report's fields and what kind of report it is."""
    kind = "train" if isinstance(report, StepReport) else "valid"
    return {"kind": kind, **asdict(report)}


@dataclass
class FinalModel:
    """OUT/model, the model a run ends with (training/final_model.py)."""

    path: Path
    made_of: str  # "the mean of step-800 ... step-1600" or "best (step 1400)"
    valid_bleu: float | None
    other: str  # the candidate not chosen and its BLEU ("" when there was one candidate)
    test: dict | None = None  # {"BLEU": 31.2, "chrF2": 55.0, "lines": 250, "from": ".../test"}


@dataclass
class TrainResult:
    step: int
    best: list[float] | None  # best validation [BLEU, -loss] (BLEU 0 when it is off)
    losses: list[float] = field(default_factory=list)  # one per optimizer step of this run
    out: Path = Path()
    final: FinalModel | None = None
