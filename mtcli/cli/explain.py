"""`mtcli explain`: one sentence through the model's own arithmetic, step by step."""

from __future__ import annotations

import json
import sys

import click

from mtcli.cli.console import warn
from mtcli.cli.options import UTF8_TEXT
from mtcli.cli.streams import check_output_file


@click.command("explain")
@click.argument("sentence", type=UTF8_TEXT)
@click.option("--model", "-m", help="Model name or directory.  [default: by the sentence's script]")
@click.option(
    "--layer", default=0, show_default=True, help="Encoder layer to work through (-1 = last)."
)
@click.option("--head", default=0, show_default=True, help="Head of that layer to work through.")
@click.option(
    "--beam",
    "-b",
    default=1,
    show_default=True,
    type=click.IntRange(1, 16),
    help="Beam size of the search shown (1: greedy).",
)
@click.option(
    "--dims",
    default=6,
    show_default=True,
    type=click.IntRange(min=1),
    help="Dimensions of each vector shown.",
)
@click.option("--full", is_flag=True, help="Show every dimension of each vector.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: every number, at full precision.",
)
@click.option("--html", help="Also write the walk-through as one self-contained HTML page.")
@click.option("--force", is_flag=True, help="Overwrite an existing --html file.")
def explain_command(sentence, model, layer, head, beam, dims, full, fmt, html, force) -> None:
    """Show how the model translates SENTENCE: pieces, embeddings, one attention head worked
    through, the decoder step by step, and what it learned, with the model's own numbers."""
    from mtcli.engines.build import model_for_text
    from mtcli.explain.loading import explainable_model
    from mtcli.explain.walk import explain

    check_output_file(html, "--html", force)
    loaded = explainable_model(model_for_text(model, [sentence], warn))
    e = explain(loaded, sentence, layer=layer, head=head, beam=beam)
    if html:
        from mtcli.explain.page import write_page

        write_page(e, html)
    if fmt == "json":
        json.dump(e.as_json(), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    from rich.console import Console

    from mtcli.cli.explain_view import render

    Console(highlight=False).print(render(e, e.shape["d_model"] if full else dims))
