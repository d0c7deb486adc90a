"""`mtcli models`: the installed models, with what their cards say."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from mtcli.cli.console import console
from mtcli.errors import UserError
from mtcli.store.registry import ModelInfo, installed, search_path


@click.group("models", invoke_without_command=True)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per model instead of a table."
)
@click.pass_context
def models_command(ctx: click.Context, as_json: bool) -> None:
    """List installed models: name, direction, size, parameters, test scores, path.

    \b
    Models are found in $MTCLI_MODEL_PATH (colon-separated folders), then among the pulled
    ones (mtcli models pull), then among the shipped ones; `-m NAME` picks one by name in
    every command.
    """
    if ctx.invoked_subcommand is None:
        _list(as_json)


@models_command.command("pull")
@click.argument("repo_id", metavar="ORG/NAME")
@click.option("--revision", help="A branch, tag or commit of the repository (default: main).")
@click.option("--name", help="The model's name here (default: NAME).")
@click.option("--from", "src_lang", help="Its source language, where its files do not say.")
@click.option("--to", "tgt_lang", help="Its target language, where its files do not say.")
@click.option("--force", is_flag=True, help="Pull again over a model of that name.")
def pull_command(repo_id, revision, name, src_lang, tgt_lang, force) -> None:
    """Bring a model from the Hugging Face hub (MarianMT, e.g. Helsinki-NLP/opus-mt-en-zh, or
    an mtcli model directory) and install it under its name.

    \b
    Downloads through huggingface_hub and its cache: HF_HOME, HF_HUB_OFFLINE=1 (the cache
    only) and tokens (HF_TOKEN, hf auth login) work as for every tool that uses it.
    """
    from mtcli.store.hub import PullRequest, check_pull, pull

    req = PullRequest(repo_id, revision, name, src_lang, tgt_lang, force)
    out = check_pull(req)
    console.print(f"pulling {repo_id} from the Hugging Face hub ...", markup=False)
    path, commit = pull(req, out, progress=console.is_terminal)
    console.print(
        f"installed {path.name} ({path}, commit {commit[:12]}); translate with -m {path.name}",
        markup=False,
    )


def _list(as_json: bool) -> None:
    found = installed()
    parameters = {m.name: _parameters(m) for m in found}
    if as_json:
        for m in found:
            record = {
                "name": m.name,
                "direction": m.direction,
                "size_mb": round(m.size_mb, 1),
                "parameters": parameters[m.name],
                "card": m.card,
                "path": str(m.path),
            }
            click.echo(json.dumps(record, ensure_ascii=False))
        return
    out = Console(highlight=False)
    if not out.is_terminal:  # a pipe or a file: whole cells, not a table squeezed to 80 columns
        out = Console(highlight=False, width=240)
    out.print(_table(found, parameters))
    if not found:
        folders = ", ".join(str(p) for p in search_path())
        click.echo(f"(searched: {folders})", err=True)


def _table(found: list[ModelInfo], parameters: dict) -> Table:
    table = Table(title=f"{len(found)} model(s)", title_justify="left")
    for column in ("name", "direction", "size", "parameters", "test BLEU", "test chrF", "path"):
        right = column in ("size", "parameters") or column.startswith("test")
        table.add_column(column, justify="right" if right else "left")
    for m in found:
        count = parameters[m.name]
        table.add_row(
            m.name,
            m.direction,
            f"{m.size_mb:.1f} MB",
            "damaged" if count is None else f"{count / 1e6:.2f}M",
            m.card.get("test_bleu", "-"),
            m.card.get("test_chrf", "-"),
            str(m.path),
        )
    return table


def _parameters(model: ModelInfo) -> int | None:
    """Its parameter count, or None when its weights file is damaged: a warning names the file
    and the other models are still listed."""
    try:
        return model.parameters
    except UserError as e:
        click.echo(f"Warning: {e}", err=True)
        return None
