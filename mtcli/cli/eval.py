"""`mtcli eval` (filled in by the evaluation work)."""

from __future__ import annotations

import click


@click.command("eval")
def eval_command() -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu)."""
    raise click.ClickException("not yet")
