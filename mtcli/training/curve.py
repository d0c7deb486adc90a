"""A run's learning curve, read from its metrics.jsonl: the numbers `mtcli runs show` draws in
the terminal, and OUT/curve.png (training loss, validation loss and BLEU against steps, with
minutes on a second axis) where matplotlib is installed (`pip install 'mtcli[plot]'`).

Stdlib only until the picture is drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mtcli.files import write_file_atomic

BAR = 40  # characters of the longest bar in the terminal


@dataclass
class Curve:
    """The points of a run: (step, minutes, loss) of training, (step, minutes, loss, BLEU) of
    validation (a validation's minutes are those of the training report before it)."""

    train: list[tuple[int, float, float]] = field(default_factory=list)
    valid: list[tuple[int, float, float, float | None]] = field(default_factory=list)

    @property
    def best(self) -> tuple[int, float, float, float | None] | None:
        """The best validation: highest BLEU, then lowest loss (as training chooses)."""
        if not self.valid:
            return None
        return max(self.valid, key=lambda v: (v[3] or 0.0, -v[2]))

    def seconds_per_step(self) -> float | None:
        if len(self.train) < 2:
            return None
        (s0, m0, _), (s1, m1, _) = self.train[0], self.train[-1]
        return (m1 - m0) * 60 / (s1 - s0) if s1 > s0 else None


def read_curve(metrics: Path) -> Curve:
    """The curve in a metrics.jsonl (a line cut short by a kill is skipped)."""
    curve, minutes = Curve(), 0.0
    if not metrics.is_file():
        return curve
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "train":
            minutes = record["elapsed"] / 60
            curve.train.append((record["step"], minutes, record["loss"]))
        elif record.get("kind") == "valid":
            curve.valid.append((record["step"], minutes, record["loss"], record.get("bleu")))
    return curve


def terminal_lines(curve: Curve) -> list[str]:
    """The validations as bars of BLEU (of loss where there is none), one line each."""
    if not curve.valid:
        return ["no validation yet"]
    with_bleu = any(v[3] is not None for v in curve.valid)
    top = max((v[3] or 0.0) if with_bleu else v[2] for v in curve.valid) or 1.0
    best = curve.best
    lines = []
    for step, minutes, loss, bleu in curve.valid:
        value = (bleu or 0.0) if with_bleu else loss
        bar = "█" * max(1, round(BAR * value / top))
        shown = f"BLEU {bleu:5.2f}" if with_bleu else ""
        mark = "  best" if (step, minutes, loss, bleu) == best else ""
        lines.append(f"step {step:>7,} {minutes:6.1f} min  loss {loss:6.3f}  {shown}  {bar}{mark}")
    return lines


def write_curve_png(curve: Curve, path: Path) -> bool:
    """OUT/curve.png; False where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (losses, bleus) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    losses.plot([p[0] for p in curve.train], [p[2] for p in curve.train], label="training loss")
    steps = [v[0] for v in curve.valid]
    losses.plot(steps, [v[2] for v in curve.valid], "o-", label="validation loss")
    losses.set_ylabel("loss per target token")
    losses.legend()
    bleus.plot(steps, [v[3] or 0.0 for v in curve.valid], "o-", color="tab:green")
    bleus.set_ylabel("validation BLEU")
    bleus.set_xlabel("optimizer steps")
    _minutes_axis(losses, curve)
    figure.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    figure.savefig(tmp, dpi=100)
    plt.close(figure)
    write_file_atomic(path, tmp.read_bytes())
    tmp.unlink()
    return True


def _minutes_axis(axes, curve: Curve) -> None:
    """Minutes on the top axis, from the steps through the run's own step rate."""
    per_step = curve.seconds_per_step()
    if not per_step:
        return
    top = axes.secondary_xaxis(
        "top", functions=(lambda s: s * per_step / 60, lambda m: m * 60 / per_step)
    )
    top.set_xlabel("minutes (at the run's mean step rate)")
