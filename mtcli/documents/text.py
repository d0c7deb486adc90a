"""Plain text: each sentence wrapped over lines translated whole and re-wrapped to its line
count, each line that ends a sentence on its own; blank lines, indentation and line ends
kept."""

from __future__ import annotations

import re

from mtcli.documents.segments import (
    Outcome,
    Translate,
    decoded,
    joined,
    newline,
    rewrap,
    translate_strings,
)

SENTENCE_END = re.compile(r"[.?!。？！…:;：；][\"'”’)）」』]*\s*$")


def paragraphs(lines: list[str]) -> list[list[int]]:
    """The line numbers of each run of lines translated together: non-blank lines, the run
    ending after a line that ends a sentence (a list, a poem, a line per sentence keeps its
    lines; only a sentence wrapped over lines is joined)."""
    runs, current = [], []
    for i, line in enumerate(lines):
        if line.strip():
            current.append(i)
        if current and (not line.strip() or SENTENCE_END.search(line)):
            runs.append(current)
            current = []
    return runs + [current] if current else runs


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    text = decoded(data)
    nl = newline(text)
    lines = text.split(nl)
    runs = paragraphs(lines)
    done = translate_strings([joined([lines[i] for i in p]) for p in runs], translate, outcome)
    dropped = set()  # rows of a paragraph whose translation needs fewer lines
    for para, translation in zip(runs, done, strict=True):
        first = lines[para[0]]
        indent = first[: len(first) - len(first.lstrip())]
        wrapped = rewrap(translation, len(para))
        for i, line in zip(para, wrapped, strict=False):
            lines[i] = indent + line
        dropped.update(para[len(wrapped) :])
    return nl.join(line for i, line in enumerate(lines) if i not in dropped).encode("utf-8")
