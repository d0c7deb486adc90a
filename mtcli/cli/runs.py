"""`mtcli runs show OUT`: what a training run chose, its curve, its best step, its pace and the
model it ended with, read from OUT alone (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mtcli.errors import UserError


@click.group("runs")
def runs_group() -> None:
    """Look at training runs."""


@runs_group.command("show")
@click.argument("out", type=click.Path())
def show_command(out: str) -> None:
    """What the run in OUT chose and why, its learning curve, best step and time per step."""
    from mtcli.training.curve import read_curve
    from mtcli.training.run_dir import METRICS

    path = Path(out)
    if not (path / METRICS).is_file():
        raise UserError(
            f"{out}: not a training run (no {METRICS}); `mtcli train --out {out}` makes one"
        )
    for line in run_summary(path, read_curve(path / METRICS)):
        click.echo(line)


def run_summary(path: Path, curve) -> list[str]:
    """The lines `runs show` prints."""
    from mtcli.training.curve import terminal_lines
    from mtcli.training.run_dir import CHOICES, CURVE

    lines = [f"run {path}"]
    if (path / CHOICES).is_file():
        lines.append("chosen for the corpus and budget:")
        for choice in json.loads((path / CHOICES).read_text(encoding="utf-8"))["choices"]:
            lines.append(f"  {choice['what']}: {choice['why']}")
    lines.append("validation (BLEU of greedy translations):")
    lines += ["  " + line for line in terminal_lines(curve)]
    lines += _pace(curve)
    model = path / "model"
    if (model / "config.json").is_file():
        lines.append(f"model to use: {model} (mtcli translate -m {path} ...)")
    if (path / CURVE).is_file():
        lines.append(f"picture: {path / CURVE}")
    return lines


def _pace(curve) -> list[str]:
    lines = []
    if (best := curve.best) is not None:
        bleu = f", BLEU {best[3]:.2f}" if best[3] is not None else ""
        lines.append(f"best: step {best[0]:,} at {best[1]:.1f} min (loss {best[2]:.3f}{bleu})")
    if per_step := curve.seconds_per_step():
        steps, minutes = curve.train[-1][0], curve.train[-1][1]
        lines.append(f"pace: {per_step:.3f} s a step; {steps:,} steps in {minutes:.1f} min")
    return lines
