"""`mtcli attention`: translate one sentence and show its attention as a heatmap."""

from __future__ import annotations

import click

from mtcli.cli.common import (
    build_decode_config,
    check_output_file,
    console,
    decode_options,
    model_for_text,
    runtime_device,
)


@click.command("attention")
@click.argument("sentence")
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
    import torch

    from mtcli.attention import Heatmap, render, save_png, select
    from mtcli.checkpoint import load_model
    from mtcli.data import pad, padding_mask
    from mtcli.decode import beam_search
    from mtcli.tokenizer import EOS_ID

    device = runtime_device(device, threads)
    loaded = load_model(model_dir, device)
    tok = loaded.tokenizer
    src_ids = tok.encode_src(sentence)[: loaded.model.cfg.max_positions - 1] + [EOS_ID]
    src = pad([src_ids]).to(device)
    hyp = beam_search(
        loaded.model,
        src,
        padding_mask(src),
        beam_size=cfg.beam_size,
        alpha=cfg.length_penalty,
        max_len_a=cfg.max_len_a,
        max_len_b=cfg.max_len_b,
        with_attention=True,
    )[0][0]
    src_pieces = [tok.src.id_to_piece(i) for i in src_ids[:-1]] + ["</s>"]
    tgt_pieces = tok.tgt_id_to_piece(hyp.tokens) + ["</s>"]
    rows, cols = {
        "cross": (tgt_pieces, src_pieces),
        "encoder": (src_pieces, src_pieces),
        "decoder": (tgt_pieces, tgt_pieces),
    }[kind]
    weights = select(hyp.attention, kind=kind, layer=layer, head=head)
    which = "mean of heads" if head is None else f"head {head}"
    heatmap = Heatmap(
        weights.to(torch.float32), rows, cols, f"{kind} attention, layer {layer}, {which}"
    )
    click.echo(tok.decode_tgt(hyp.tokens))
    console.print(render(heatmap, width=width))
    if png:
        save_png(heatmap, png)
        console.print(f"wrote {png}")
