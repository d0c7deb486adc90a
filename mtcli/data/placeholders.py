"""Placeholder pieces: tokens a model is trained to carry from source to target unchanged, so
the text layer can send a URL, a date or an inline tag as one token the model knows, not as
pieces it would translate (or a stand-in number it would write an age or a clock time around).

One piece per kind of span and number (the 2nd URL of a sentence is ｟url2｠: Chinese and English
order spans differently, and the number says which is which), and a pair per inline tag
(｟t1｠ … ｟/t1｠ around what the tag enclosed). Written between ｟ ｠ (U+2985/6, white parens that
no training corpus here holds), they are sentencepiece user-defined pieces: always one token,
never merged or split, by the trained tokenizer and by BPE-dropout alike.

A tokenizer directory's tokenizer.json lists the pieces its vocabulary holds ("placeholders");
a model trained with them says so in its own copy. A tokenizer trained without them can be
extended (the pieces appended after its last id, so every older id keeps its meaning and a
model's embeddings only grow).
"""

from __future__ import annotations

import re
import struct

# the span kinds (text/spans.py finds them) a placeholder stands for (piece_kind: which)
SPAN_KINDS = (
    "url", "email", "code", "ph", "date", "time", "phone", "price", "pct", "ver", "term", "num",
)  # fmt: skip
PER_SENTENCE = 3  # pieces of one kind a sentence can hold; a 4th span travels as a stand-in
TAGS = 3  # inline tag pairs a sentence can hold


def piece_kind(span_kind: str, training: bool = False) -> str | None:
    """The placeholder kind a span of text/spans.py's `span_kind` travels as (None: as itself).

    A plain number has none in translation: the model reads it and writes it the target's way
    (3 hours, 8:15). In training, a plain number written alike on both sides does become a
    `num` piece, on purpose: it teaches the piece as "copy the source's value", which is what
    a number with a magnitude word (`num`, rendered by value: 40 million -> 4000万) needs."""
    if span_kind == "number":
        return "num" if training else None
    return span_kind if span_kind in SPAN_KINDS else "ph"


def span_piece(kind: str, n: int) -> str:
    """The placeholder of the n-th (1-based) span of `kind` in a sentence."""
    return f"｟{kind}{n}｠"


def tag_pieces(n: int) -> tuple[str, str]:
    """The opening and closing placeholders of the n-th (1-based) inline tag of a sentence."""
    return f"｟t{n}｠", f"｟/t{n}｠"


def all_pieces() -> list[str]:
    """Every placeholder piece, in the order a tokenizer holds them."""
    spans = [span_piece(k, n) for k in SPAN_KINDS for n in range(1, PER_SENTENCE + 1)]
    return spans + [p for n in range(1, TAGS + 1) for p in tag_pieces(n)]


PIECE = re.compile(r"｟/?[a-z]+\d｠")  # any placeholder as written in a line
# as a model may write one in a line it cased (an upper-case target: ｟URL1｠)
PIECE_ANY_CASE = re.compile(PIECE.pattern.replace("a-z", "A-Za-z"))
TAG_PIECE = re.compile(r"｟/?t\d｠")


def is_tag_piece(piece: str) -> bool:
    return TAG_PIECE.fullmatch(piece) is not None


def extended_model(model_bytes: bytes, pieces: list[str]) -> bytes:
    """A serialized sentencepiece model with `pieces` appended as user-defined pieces.

    The ModelProto's pieces are its repeated field 1; protobuf appends a repeated field's
    elements in the order they are read, so messages added at the end of the bytes are the
    last ids. Each is a SentencePiece message: piece (1, string), score (2, float), type (3,
    enum, USER_DEFINED = 4). Written here rather than through protobuf's generated module:
    that would make protobuf a dependency for four fields.
    """
    out = bytearray(model_bytes)
    for piece in pieces:
        text = piece.encode("utf-8")
        body = _key(1, 2) + _varint(len(text)) + text
        body += _key(2, 5) + struct.pack("<f", 0.0) + _key(3, 0) + _varint(4)
        out += _key(1, 2) + _varint(len(body)) + body
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
