"""The small model that turns a translation's signals into a confidence, and its fit.

A logistic regression over standardised signals: confidence = sigmoid(bias + coef · (x - mean)
/ scale), the estimated probability that the sentence is a good translation (sentence chrF of
50 or more against a reference, on held-out data). Fitted by Newton's method on the L2-penalised
log-likelihood (a few hundred rows and ten signals: exact in a dozen steps, no library needed).
The weights, the flag threshold and what they were fitted on are one JSON file in the model
directory (`confidence.json`), written by bench/confidence.py. numpy only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

CONFIDENCE_FILE = "confidence.json"


@dataclass
class Calibration:
    """Fitted weights over named signals, and the confidence under which a line is flagged."""

    signals: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    bias: float
    threshold: float = 0.5
    # signal constants fitted with the weights (the typical log length ratio, say)
    constants: dict[str, float] = field(default_factory=dict)
    fitted_on: dict = field(default_factory=dict)  # what the fit saw, and its figures

    def confidence(self, x: np.ndarray) -> np.ndarray:
        """x (N, F) in `signals` order -> (N,) probabilities in [0, 1]."""
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return _sigmoid(self.bias + z @ np.asarray(self.coef))

    def save(self, directory: Path) -> Path:
        path = Path(directory) / CONFIDENCE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, directory: Path) -> Calibration | None:
        """The model directory's weights; None where it has none (an imported model) or they
        do not read as weights (then the model translates without a confidence)."""
        path = Path(directory) / CONFIDENCE_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            calibration = cls(**raw)
        except (OSError, ValueError, TypeError):
            return None
        c = calibration
        sizes = {len(c.signals), len(c.mean), len(c.scale), len(c.coef)}
        numbers = [*c.mean, *c.scale, *c.coef, c.bias, c.threshold]
        finite = all(isinstance(v, int | float) and math.isfinite(v) for v in numbers)
        return c if len(sizes) == 1 and finite and all(s > 0 for s in c.scale) else None


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def fit_logistic(
    x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50
) -> tuple[np.ndarray, float]:
    """Weights (F,) and bias minimising -sum log-likelihood + l2/2 |w|² (bias unpenalised) for
    x (N, F) and labels y (N,) in [0, 1] (soft labels allowed), by Newton's method."""
    n, f = x.shape
    design = np.hstack([np.ones((n, 1)), x])  # (N, F + 1)
    theta = np.zeros(f + 1)
    penalty = np.full(f + 1, l2)
    penalty[0] = 0.0
    for _ in range(steps):
        p = _sigmoid(design @ theta)
        gradient = design.T @ (p - y) + penalty * theta
        hessian = (
            (design * (p * (1 - p))[:, None]).T @ design + np.diag(penalty) + 1e-9 * np.eye(f + 1)
        )
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return theta[1:], float(theta[0])


def fitted(signals: list[str], x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> Calibration:
    """A Calibration fitted on raw signals x (N, F): standardised first, so that the penalty
    treats every signal alike."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    coef, bias = fit_logistic((x - mean) / scale, y, l2)
    return Calibration(signals, mean.tolist(), scale.tolist(), coef.tolist(), bias)


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative (ties: half),
    by ranks (Mann-Whitney U)."""
    scores, positive = np.asarray(scores, float), np.asarray(positive, bool)
    ranks = _ranks(scores)
    n_pos, n_neg = positive.sum(), (~positive).sum()
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        tied = values == v
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks
