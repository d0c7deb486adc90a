"""`mtcli tokenizer train|encode|decode`."""

from __future__ import annotations

import sys

import click

from mtcli.cli.console import console
from mtcli.cli.options import FiniteRange
from mtcli.cli.streams import NamedOutput
from mtcli.data.textio import read_lines
from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.errors import UserError

EXAMPLE_CHARS = 80  # of the corpus's first line, shown split into pieces after training


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
# sentencepiece's BPE trainer asserts 0.98 or more (0.95 was its internal assertion)
@click.option(
    "--character-coverage", default=0.9995, show_default=True, type=FiniteRange(0.98, 1.0)
)
@click.option(
    "--input-sentence-size",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Train on a random sample of this many sentences (0 = all, or 3,000,000 past that many).",
)
@click.option("--seed", default=1, show_default=True)
@click.option(
    "--placeholders",
    is_flag=True,
    help="Reserve the placeholder pieces (mtcli train --placeholders).",
)
@click.option("--force", is_flag=True, help="Replace an --out that is not a tokenizer directory.")
def train(
    src,
    tgt,
    out,
    vocab_size,
    joint,
    character_coverage,
    input_sentence_size,
    seed,
    placeholders,
    force,
) -> None:
    """Train sentencepiece BPE on a parallel corpus."""
    opts = TokenizerOptions(
        vocab_size, joint, character_coverage, input_sentence_size, seed, placeholders
    )
    with console.status("training sentencepiece BPE"):
        tok = train_tokenizer(
            src, tgt, out, opts, force=force, say=lambda m: console.print(m, markup=False)
        )
    sizes = (
        f"{tok.src_vocab_size}"
        if tok.joint
        else f"{tok.src_vocab_size} (src) / {tok.tgt_vocab_size} (tgt)"
    )
    console.print(
        f"wrote {out}: {'joint' if tok.joint else 'separate'} vocabulary of {sizes} pieces",
        markup=False,
    )
    example = next((line.strip() for line in read_lines(src) if line.strip()), "")
    example = example[:EXAMPLE_CHARS]  # a corpus of whole paragraphs printed screens of it
    console.print(f"example: {example}", markup=False)
    console.print(f"pieces:  {' '.join(tok.src_pieces(example))}", soft_wrap=True, markup=False)


@tokenizer.command("add-placeholders")
@click.argument("directory")
@click.option("--out", required=True, help="Tokenizer directory to write.")
@click.option("--force", is_flag=True, help="Replace an --out that is not a tokenizer directory.")
def add_placeholders_command(directory, out, force) -> None:
    """Copy a tokenizer with the placeholder pieces appended to its vocabulary.

    Every older id keeps its piece, so a model of DIRECTORY can be trained on with it
    (train --init MODEL --tokenizer OUT --placeholders 0.25 --tags 0.1).
    """
    from mtcli.data.tokenizer import add_placeholders

    tok = add_placeholders(directory, out, force=force)
    console.print(
        f"wrote {out}: {tok.src_vocab_size} pieces, {len(tok.placeholders)} of them placeholders",
        markup=False,
    )


def _ids(line: str, line_no: int, size: int) -> list[int]:
    """Whitespace-separated ids, each a piece of the vocabulary."""
    try:
        ids = [int(i) for i in line.split()]
    except ValueError:
        raise UserError(f"stdin:{line_no}: expected whitespace-separated integer ids") from None
    if bad := [i for i in ids if not 0 <= i < size]:
        raise UserError(f"stdin:{line_no}: id {bad[0]} is outside the vocabulary (0..{size - 1})")
    return ids


def _filter(directory: str, side: str, to_text: bool, ids: bool) -> None:
    tok = Tokenizer.load(directory)
    sp = tok.src if side == "src" else tok.tgt
    out = NamedOutput(sys.stdout, "stdout")
    for line_no, line in enumerate(read_lines("-"), 1):
        if to_text:
            items = _ids(line, line_no, sp.get_piece_size()) if ids else line.split()
            text = sp.decode(items)
        else:
            text = " ".join(map(str, sp.encode(line, out_type=int if ids else str)))
        out.write(text + "\n")


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
    _filter(directory, side, to_text=True, ids=ids)
