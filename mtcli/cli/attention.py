"""`mtcli attention`: translate one sentence and show its attention as a heatmap."""

from __future__ import annotations

import click

from mtcli.cli.console import console, warn
from mtcli.cli.options import UTF8_TEXT, build_decode_config, decode_options
from mtcli.cli.streams import check_output_file
from mtcli.engines.build import EngineOptions, build_translator, model_for_text
from mtcli.errors import UserError


@click.command("attention")
@click.argument("sentence", type=UTF8_TEXT)
@click.option("--model", "-m", help="Model name or directory.  [default: by the sentence's script]")
@click.option(
    "--kind",
    type=click.Choice(["cross", "encoder", "decoder"]),
    default="cross",
    show_default=True,
    help="Encoder-decoder, encoder self- or decoder self-attention.",
)
@click.option("--layer", default=-1, show_default=True, help="Layer index (-1 = last).")
@click.option("--head", type=int, default=None, help="One head (default: the mean over heads).")
@click.option("--png", help="Also write the heatmap as a PNG.")
@click.option("--force", is_flag=True, help="Overwrite an existing --png file.")
@click.option(
    "--width",
    default=80,
    show_default=True,
    type=click.IntRange(min=20),
    help="Columns the terminal heatmap may use.",
)
@decode_options
def attention_command(
    sentence, model, kind, layer, head, png, force, width, device, threads, **decode
) -> None:
    """Translate SENTENCE and draw its attention (rows attend to columns)."""
    cfg = build_decode_config(**decode)
    check_output_file(png, "--png", force)
    model_dir = model_for_text(model, [sentence], warn)
    options = EngineOptions(device=device, threads=threads, align=True, text_layer=False)
    result = build_translator([model_dir], cfg, options).translate_chunk([sentence])[0]
    if result.attention is None:
        raise UserError("SENTENCE is empty: there is nothing to attend to")
    from mtcli.cli.heatmap import heatmap_of, render, save_png

    heatmap = heatmap_of(result.attention, kind=kind, layer=layer, head=head)
    click.echo(result.text)
    console.print(render(heatmap, width=width))
    if png:
        save_png(heatmap, png)
        console.print(f"wrote {png}", markup=False)
