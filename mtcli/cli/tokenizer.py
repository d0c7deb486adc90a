"""`mtcli tokenizer train|encode|decode`."""

from __future__ import annotations

import sys

import click

from mtcli.cli.common import console
from mtcli.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer


@click.group()
def tokenizer() -> None:
    """Train and apply the sentencepiece BPE tokenizer."""


@tokenizer.command("train")
@click.option("--src", required=True, help="Source-side training text.")
@click.option("--tgt", required=True, help="Target-side training text.")
@click.option("--out", required=True, help="Tokenizer directory to write.")
@click.option("--vocab-size", default=8000, show_default=True, type=click.IntRange(min=8))
@click.option(
    "--joint/--separate",
    default=True,
    show_default=True,
    help="One model for both sides, or one each.",
)
@click.option(
    "--character-coverage", default=0.9995, show_default=True, type=click.FloatRange(0.9, 1.0)
)
@click.option(
    "--input-sentence-size",
    default=0,
    show_default=True,
    help="Sample this many sentences (0 = all).",
)
@click.option("--seed", default=1, show_default=True)
def train(src, tgt, out, vocab_size, joint, character_coverage, input_sentence_size, seed) -> None:
    """Train sentencepiece BPE on a parallel corpus."""
    opts = TokenizerOptions(vocab_size, joint, character_coverage, input_sentence_size, seed)
    with console.status("training sentencepiece BPE"):
        tok = train_tokenizer(src, tgt, out, opts)
    sizes = (
        f"{tok.src_vocab_size}"
        if tok.joint
        else f"{tok.src_vocab_size} (src) / {tok.tgt_vocab_size} (tgt)"
    )
    console.print(
        f"wrote {out}: {'joint' if tok.joint else 'separate'} vocabulary of {sizes} pieces"
    )
    with open(src, encoding="utf-8", errors="replace") as f:
        example = next((line.strip() for line in f if line.strip()), "")
    console.print(f"example: {example}")
    console.print(f"pieces:  {' '.join(tok.src_pieces(example))}", soft_wrap=True)


def _filter(directory: str, side: str, to_text: bool, ids: bool) -> None:
    tok = Tokenizer.load(directory)
    sp = tok.src if side == "src" else tok.tgt
    for line in sys.stdin:
        line = line.rstrip("\n")
        if to_text:
            items = line.split()
            out = sp.decode([int(i) for i in items] if ids else items)
        else:
            out = " ".join(map(str, sp.encode(line, out_type=int if ids else str)))
        sys.stdout.write(out + "\n")


@tokenizer.command("encode")
@click.option("--tokenizer", "-t", "directory", required=True, help="Tokenizer or model directory.")
@click.option("--side", type=click.Choice(["src", "tgt"]), default="src", show_default=True)
@click.option("--ids", is_flag=True, help="Write ids instead of pieces.")
def encode(directory, side, ids) -> None:
    """Split stdin lines into pieces (or ids), one line out per line in."""
    _filter(directory, side, to_text=False, ids=ids)


@tokenizer.command("decode")
@click.option("--tokenizer", "-t", "directory", required=True, help="Tokenizer or model directory.")
@click.option("--side", type=click.Choice(["src", "tgt"]), default="tgt", show_default=True)
@click.option("--ids", is_flag=True, help="Read ids instead of pieces.")
def decode(directory, side, ids) -> None:
    """Join pieces (or ids) from stdin back into text, one line out per line in."""
    try:
        _filter(directory, side, to_text=True, ids=ids)
    except ValueError:
        raise click.BadParameter(
            "expected whitespace-separated integer ids on stdin", param_hint="--ids"
        ) from None
