"""A span a translation lost, put back where the model's own attention says it belongs.

The search kept, for each output token, the source token its last decoder layer attended to
most (decoding/stepper.py's Reading). A span the text layer needs in the output (a number, a
placeholder piece, a stand-in) sits at known source tokens: output tokens that attended there
and are written like a span (digits, a placeholder piece) are the model's rendering of it and
are replaced by it (2013 where the source has 2023); where the model wrote none, the span goes
after the output token that attended closest before it. One decode instead of two: the text
layer decodes a sentence again under constraints only where this cannot place a span.
Knows nothing of spans beyond the strings it is given; imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable

from mtcli.data.placeholders import PIECE_ANY_CASE

CHINESE_NUMERALS = frozenset("零〇一二两三四五六七八九十百千万亿")
NUMBER_WORDS = frozenset(
    {
        *("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
        *("eleven", "twelve", "twenty", "thirty", "forty", "fifty", "hundred", "thousand"),
        *("million", "billion", "dozen"),
    }
)


class SpanRestorer:
    """(source sentence, strings it lost, its Translation) -> the translation with them put
    back, or None where the result has no reading of that text or a string has no place."""

    def __init__(self, tokenizer, to_phrases: Callable[[list[str]], list[list[int]]]):
        self.tokenizer, self.to_phrases = tokenizer, to_phrases

    def __call__(self, source: str, lost: list[str], result) -> str | None:
        read = result.reading
        if read is None or read.text != result.text or not lost:
            return None
        tokens = list(read.tokens)
        attended = read.reading.attended[: len(tokens)]  # the EOS step is not a place
        pieces = self.tokenizer.tgt_id_to_piece(tokens)
        offsets = self._source_offsets(source)
        kept = self._copied(tokens, pieces, source)
        places, seen = [], []
        for text in sorted(lost, key=source.find):  # in the source's order
            span = _tokens_of(source, text, offsets, seen.count(text))  # a 6 lost twice: both
            seen.append(text)
            phrases = self.to_phrases([text])
            if not span or not phrases:
                return None
            places.append((*_place(span, attended, pieces, kept), phrases[0]))
        return self.tokenizer.decode_tgt(self._edited(tokens, pieces, places))

    def _source_offsets(self, source: str) -> list[tuple[int, int]]:
        """Each source position's UTF-8 byte range in `source`, as the translator fed it: a
        multilingual model's target token first (no range), then the pieces."""
        proto = self.tokenizer.src.encode(source, return_type="proto")
        prefix = [(-1, -1)] * len(self.tokenizer.encode_src(""))
        return prefix + [(p.begin, p.end) for p in proto.pieces]

    def _copied(self, tokens: list[int], pieces: list[str], source: str) -> set[int]:
        """The output positions of numbers and placeholders the source has as they are
        written: another span, kept already, which no lost one may take the place of."""
        kept: set[int] = set()
        for start, end in _runs(pieces):
            if self.tokenizer.decode_tgt(tokens[start:end]).strip() in source:
                kept.update(range(start, end))
        return kept

    def _edited(self, tokens: list[int], pieces: list[str], places: list) -> list[int]:
        """`tokens` with each place's output tokens (start, end) replaced by its phrase; the
        phrases of places that overlap go in together, in the source's order, a space apart,
        as does a phrase beside another number (2023 and 1,482 must not read 20231,482)."""
        merged: list[list] = []
        for start, end, ids in sorted(places, key=lambda p: (p[0], p[1])):
            if merged and start < max(merged[-1][1], merged[-1][0] + 1):
                merged[-1][1] = max(merged[-1][1], end)
                merged[-1][2] = merged[-1][2] + self._apart(merged[-1][2], ids) + ids
            else:
                merged.append([start, end, ids])
        out = list(tokens)
        for start, end, ids in reversed(merged):
            before = self._apart(tokens[:start], ids) if start > 0 else []
            after = self._apart(ids, tokens[end:]) if end < len(tokens) else []
            out[start:end] = before + ids + after
        return out

    def _apart(self, left: list[int], right: list[int]) -> list[int]:
        """A space piece to put between `left` and `right` where a digit would touch a digit
        (3 and 7 must not read 37) and nothing marks a word start between them; else nothing
        (a date's piece beside a time's gives 5月5日10:30, no space; and none where the
        vocabulary has no space piece: the text layer then finds the span lost)."""
        first, last = self.tokenizer.tgt_id_to_piece([right[0], left[-1]])
        if first.startswith("▁") or not (last[-1:].isdigit() and first[:1].isdigit()):
            return []
        space = self.tokenizer.tgt.piece_to_id("▁")
        return [] if space == self.tokenizer.tgt.unk_id() else [space]


def _runs(pieces: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each run of output pieces written like a span."""
    runs, start = [], None
    for j, piece in enumerate([*pieces, ""]):
        if piece and _like_a_span(piece):
            start = j if start is None else start
        elif start is not None:
            runs.append((start, j))
            start = None
    return runs


def _place(
    span: set[int], attended: list[int], pieces: list[str], kept: set[int]
) -> tuple[int, int]:
    """The output tokens (start, end) a span's phrase takes: the number or placeholder the
    model wrote for it (every piece written like one, around the first that attended into
    `span`, unless it is a span the source has: `kept`); else the place after the last token
    that attended into it, or after the token that attended closest before it."""
    covered = [j for j, a in enumerate(attended) if a in span]
    written = [j for j in covered if _like_a_span(pieces[j]) and j not in kept]
    if written:
        start = end = written[0]
        while start > 0 and _like_a_span(pieces[start - 1]):
            start -= 1
        while end + 1 < len(pieces) and _like_a_span(pieces[end + 1]):
            end += 1
        return start, end + 1
    if covered:
        at = covered[-1] + 1
    else:
        before = [j for j, a in enumerate(attended) if a < min(span)]
        at = max(before, key=lambda j: (attended[j], j)) + 1 if before else 0
    while 0 < at < len(pieces) and _like_a_span(pieces[at - 1]) and _like_a_span(pieces[at]):
        at += 1  # not inside another number: after it
    for beside in (at - 1, at):  # the model's own words for it, just there: they give way
        if 0 <= beside < len(pieces) and beside not in kept and _in_words(pieces[beside]):
            return beside, beside + 1
    return at, at


def _tokens_of(source: str, text: str, offsets: list[tuple[int, int]], nth: int = 0) -> set[int]:
    """The source positions whose bytes overlap the `nth` place (from 0) `text` is written in
    `source` (empty where it is not)."""
    at = -1
    for _ in range(nth + 1):
        at = source.find(text, at + 1)
        if at < 0:
            return set()
    begin = len(source[:at].encode())
    end = begin + len(text.encode())
    return {i for i, (b, e) in enumerate(offsets) if b < end and e > begin and b >= 0}


def _like_a_span(piece: str) -> bool:
    """Whether an output piece is written like a span's: a digit in it, a placeholder piece,
    or a number in words (三 or three where the source has 3)."""
    text = piece.removeprefix("▁")
    if any(c.isdigit() for c in text) or PIECE_ANY_CASE.fullmatch(text):
        return True
    return _in_words(piece)


def _in_words(piece: str) -> bool:
    """Whether a piece is a number written in words: Chinese numerals, an English number."""
    text = piece.removeprefix("▁")
    if text.lower() in NUMBER_WORDS and piece.startswith("▁"):
        return True
    return bool(text) and all(c in CHINESE_NUMERALS for c in text)
