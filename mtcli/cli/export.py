"""`mtcli export`: checkpoints of one run, averaged, into a compact model directory."""

from __future__ import annotations

from pathlib import Path

import click

from mtcli.cli.common import console


@click.command("export")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))  # fmt: skip
@click.option("--out", required=True, help="Model directory to write.")
@click.option("--fp16/--fp32", default=True, show_default=True, help="Store weights in half precision.")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an --out that is not an mtcli model directory.")  # fmt: skip
def export_command(checkpoints, out, fp16, force) -> None:
    """Average one or more checkpoints into a compact model directory without trainer state."""
    import torch

    from mtcli.checkpoint import export_model

    dtype = torch.float16 if fp16 else torch.float32
    export_model([Path(c) for c in checkpoints], Path(out), dtype, force=force)
    precision = "fp16" if fp16 else "fp32"
    console.print(
        f"wrote {out} ({precision}, mean of {len(checkpoints)} checkpoint(s))", markup=False
    )
