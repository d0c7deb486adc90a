"""`mtcli import huggingface DIR --out MODEL`: a MarianMT directory as an mtcli model directory."""

from __future__ import annotations

import click

from mtcli.cli.console import console
from mtcli.device import import_torch


@click.group("import")
def import_group() -> None:
    """Bring a model from another toolkit into mtcli."""


@import_group.command("huggingface")
@click.argument("directory", type=click.Path())
@click.option("--out", required=True, help="mtcli model directory to write.")
@click.option(
    "--force", is_flag=True, help="Replace an --out that is not an mtcli model directory."
)
def huggingface(directory, out, force) -> None:
    """A MarianMT directory (config.json, model.safetensors, source/target.spm, vocab.json)."""
    import_torch()
    from mtcli.store.hf_import import import_huggingface

    import_huggingface(directory, out, force=force)
    console.print(f"wrote {out} (mtcli model; translate with -m {out})", markup=False)
