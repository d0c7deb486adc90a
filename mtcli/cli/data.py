"""`mtcli data prepare`: fetch (or take a local copy of) a corpus and write clean splits."""

from __future__ import annotations

import json

import click
from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

from mtcli.cli.console import console
from mtcli.data.prepare import CORPORA, PrepareOptions, prepare


@click.group()
def data() -> None:
    """Download and prepare parallel corpora."""


@data.command("prepare")
@click.argument("name", type=click.Choice(sorted(CORPORA)))
@click.option("--out", required=True, help="Folder for train/valid/test files and manifest.json.")
@click.option(
    "--from", "from_dir", help="Folder with the raw files (offline), instead of downloading."
)
@click.option(
    "--zh-script",
    type=click.Choice(["simplified", "keep"]),
    default="simplified",
    show_default=True,
)
@click.option(
    "--unicode-form", type=click.Choice(["NFC", "NFKC"]), default="NFC", show_default=True
)
@click.option(
    "--test-size",
    default=2000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Pairs in test (corpora without official splits).",
)
@click.option("--valid-size", default=1000, show_default=True, type=click.IntRange(min=0))
@click.option("--seed", default=1234, show_default=True, help="Seed of the train/valid/test split.")
@click.option(
    "--no-verify", is_flag=True, help="Skip the checksum check (a newer release of the archive)."
)
@click.option("--force", is_flag=True, help="Replace an --out that is not a prepared corpus.")
def prepare_command(
    name, out, from_dir, zh_script, unicode_form, test_size, valid_size, seed, no_verify, force
) -> None:
    """Prepare a corpus: normalise, convert script, dedupe, split, write a manifest."""
    opts = PrepareOptions(
        from_dir, zh_script, unicode_form, test_size, valid_size, seed, not no_verify, force
    )
    with Progress(
        *Progress.get_default_columns(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("download", total=None)
        manifest = prepare(
            name,
            out,
            opts,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    console.print(
        json.dumps({k: manifest[k] for k in ("counts", "dropped")}), soft_wrap=True, markup=False
    )
    console.print(f"wrote {out}/{{train,valid,test}}.{{src,tgt}} and manifest.json", markup=False)
