"""`mtcli attention`: translate one sentence and show its attention as a heatmap."""

from __future__ import annotations

import click

from mtcli.cli.common import (
    UTF8_TEXT,
    build_decode_config,
    check_models_early,
    check_output_file,
    console,
    decode_options,
    model_for_text,
    runtime_device,
)
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
    model_dir = model_for_text(model, [sentence])
    check_models_early([model_dir])
    device = runtime_device(device, threads)
    import torch

    from mtcli.decoding.alignment import Heatmap, render, save_png, select
    from mtcli.engines.translator import Translator
    from mtcli.store.checkpoint import load_model

    loaded = load_model(model_dir, device)
    translator = Translator(loaded.model, loaded.tokenizer, cfg, device=device, align=True)
    result = translator.translate_chunk([sentence])[0]
    if result.attention is None:
        raise UserError("SENTENCE is empty: there is nothing to attend to")
    maps = result.attention
    rows, cols = {
        "cross": (maps.target, maps.source),
        "encoder": (maps.source, maps.source),
        "decoder": (maps.target, maps.target),
    }[kind]
    weights = select(maps.trace, kind=kind, layer=layer, head=head)
    which = "mean of heads" if head is None else f"head {head}"
    heatmap = Heatmap(weights.to(torch.float32), rows, cols, f"{kind} attention, layer {layer}, {which}")  # fmt: skip
    click.echo(result.text)
    console.print(render(heatmap, width=width))
    if png:
        save_png(heatmap, png)
        console.print(f"wrote {png}", markup=False)
