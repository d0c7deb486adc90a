"""Spans and inline tags sent to a model as the placeholder pieces it was trained to carry
(data/placeholders.py), and what each piece is given back as.

`Click <b>Save</b> to visit https://example.com.` reaches such a model as
`Click ｟t1｠Save｟/t1｠ to visit ｟url1｠.`; its translation's pieces are replaced by the tags and
the URL. A span the model's pieces do not cover (a fourth URL, a kind it lacks) is left for the
older way: a stand-in number, and constrained search when it is lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mtcli.data.placeholders import PIECE, PIECE_ANY_CASE, TAGS, piece_kind, span_piece, tag_pieces
from mtcli.text.render import render
from mtcli.text.spans import Span

OPENING = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^<>]*)?>")
VOID = re.compile(r"<(?:br|img|hr|input|wbr)\b[^<>]*/?>|<[A-Za-z][\w-]*(?:\s[^<>]*)?/>")


@dataclass
class Sent:
    """A sentence as the model gets it, and what its pieces stand for."""

    text: str
    given_back: dict[str, str] = field(default_factory=dict)  # piece -> what it is given back as
    rest: list[Span] = field(default_factory=list)  # spans the pieces do not carry


def inline_tags(text: str) -> list[tuple[int, int, int, int]]:
    """(open start, open end, close start, close end) of each closed inline tag pair."""
    pairs, stack = [], []
    for m in re.finditer(r"</([A-Za-z][\w-]*)\s*>|" + OPENING.pattern, text):
        if m.group(1):  # a closing tag: the innermost open tag of that name
            at = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == m.group(1)), None)
            if at is not None:
                name, start, end = stack.pop(at)
                pairs.append((start, end, m.start(), m.end()))
        elif not VOID.fullmatch(m.group()):
            stack.append((m.group(2), m.start(), m.end()))
    return sorted(pairs)


def to_placeholders(text: str, spans: list[Span], known: set[str], tgt_lang: str) -> Sent:
    """`text` with each span and tag pair the model knows a piece for replaced by that piece."""
    tags = inline_tags(text) if any(p.startswith("｟t") and p[2].isdigit() for p in known) else []
    in_tags = [(a, b) for o0, o1, c0, c1 in tags for a, b in ((o0, o1), (c0, c1))]
    edits: list[tuple[int, int, str]] = []
    sent = Sent(text)
    # pieces already in the text (an HTML run's code element) go back as themselves
    sent.given_back = {m.group(): m.group() for m in PIECE.finditer(text)}
    counts: dict[str, int] = {}
    for span in spans:
        if any(span.start < b and a < span.end for a, b in in_tags):
            continue  # a URL inside an href goes back with its tag
        kind = piece_kind(span.kind)
        counts[kind or ""] = n = counts.get(kind or "", 0) + 1
        piece = span_piece(kind, n) if kind else ""
        if piece not in known:
            sent.rest.append(span)
            continue
        edits.append((span.start, span.end, piece))
        sent.given_back[piece] = render(span, tgt_lang)
    for n, (o0, o1, c0, c1) in enumerate(tags[:TAGS], 1):
        opening, closing = tag_pieces(n)
        if opening in known and closing in known:
            edits += [(o0, o1, opening), (c0, c1, closing)]
            sent.given_back |= {opening: text[o0:o1], closing: text[c0:c1]}
    out, at = [], 0
    for start, end, piece in sorted(edits):
        out += [text[at:start], piece]
        at = end
    sent.text = "".join(out) + text[at:]
    return sent


def from_placeholders(text: str, given_back: dict[str, str]) -> str:
    """A translation with its pieces given back once each: a piece its source did not send, or
    one written a second time, is dropped (a model may repeat one: a fact written twice)."""
    seen: set[str] = set()
    out: list[str] = []
    end, last = 0, ""  # last: the character written so far, given-back values included
    for m in PIECE_ANY_CASE.finditer(text):
        gap = text[end : m.start()]
        out.append(gap)
        last = gap[-1:] or last
        piece = m.group().lower()
        value = given_back.get(piece, "") if piece not in seen else ""
        seen.add(piece)
        # a span the model wrote against a number or word is set apart: a URL ending in 85
        # followed by 55855 must not read as one number, nor two times written side by side
        # (｟time1｠｟time2｠) as 8:0020:00
        if value and _glued(last, value[0]):
            value = " " + value
        if value and _glued(value[-1], text[m.end() : m.end() + 1]):
            value += " "
        out.append(value)
        last = value[-1:] or last
        end = m.end()
    out.append(text[end:])
    return "".join(out)


def _glued(left: str, right: str) -> bool:
    """Whether two characters side by side would join two ASCII words or numbers into one."""
    return bool(left and right) and (left + right).isascii() and (left + right).isalnum()


def empty_tags(text: str) -> list[str]:
    """The tag pieces of a translation that enclose nothing (｟t1｠｟/t1｠)."""
    return [f"｟t{n}｠" for n in range(1, TAGS + 1) if f"｟t{n}｠｟/t{n}｠" in text.lower()]
