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
@click.option("--from", "src_lang", help="Its source language, where its files do not say.")
@click.option("--to", "tgt_lang", help="Its target language, where its files do not say.")
def huggingface(directory, out, force, src_lang, tgt_lang) -> None:
    """A MarianMT directory (config.json, model.safetensors, source/target.spm, vocab.json)."""
    import_torch()
    from mtcli.store.hf_import import import_huggingface

    langs = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    import_huggingface(directory, out, force=force, langs=langs)
    console.print(f"wrote {out} (mtcli model; translate with -m {out})", markup=False)
