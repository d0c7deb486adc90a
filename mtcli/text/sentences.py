"""Sentences of a line: split with sentencex, rejoined with the target language's spacing, and
a sentence too long for the model cut at clause boundaries (then between words) instead of
being truncated.

sentencex (Wikimedia's segmenter, maintained, ~300 languages with English and Chinese rules,
no model to load: ~2 µs a line here) is imported only when a line has a sentence end inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mtcli.text.writing import UNSPACED

SENTENCE_END = re.compile(r"[.!?。！？…]\s*\S")  # an end mark with text after it
CLAUSE_END = re.compile(r"(?<=[,;:，；：、])\s*")


def split_sentences(line: str, language: str) -> list[str]:
    """The sentences of `line` (stripped), in order; the line itself when it holds one."""
    text = line.strip()
    if not SENTENCE_END.search(text):
        return [text]
    from sentencex import segment

    sentences = [s.strip() for s in segment(language or "en", text)]
    return _whole_spans(text, [s for s in sentences if s], language) or [text]


def _whole_spans(text: str, sentences: list[str], language: str) -> list[str]:
    """The sentences, two joined again where the cut between them fell inside a span (a URL,
    a date, a version number: a sentence is never split inside one)."""
    from mtcli.text.spans import find_spans

    spans = find_spans(text, language)
    out: list[str] = []
    at, glue_start = 0, 0
    for sentence in sentences:
        start = text.find(sentence, at)
        if start < 0:  # the segmenter changed the text: keep its cut
            return sentences
        inside = any(span.start < start < span.end for span in spans)
        if out and inside:
            out[-1] = text[glue_start : start + len(sentence)]
        else:
            out.append(sentence)
            glue_start = start
        at = start + len(sentence)
    return out


def join_sentences(sentences: list[str], language: str) -> str:
    """Translated sentences as one line: no space between them in Chinese, one elsewhere."""
    return ("" if language in UNSPACED else " ").join(s for s in sentences if s)


def fit(sentence: str, count_tokens: Callable[[str], int], limit: int) -> list[str]:
    """`sentence` in parts of at most `limit` tokens: whole clauses where they fit, else runs
    of words (of characters, for text without spaces)."""
    if count_tokens(sentence) <= limit:
        return [sentence]
    clauses = [c for c in CLAUSE_END.split(sentence) if c]
    if len(clauses) == 1:
        units = sentence.split(" ") if " " in sentence else list(sentence)
        return _pack(units, " " if " " in sentence else "", count_tokens, limit)
    parts = []
    for clause in _pack(clauses, " " if " " in sentence else "", count_tokens, limit):
        parts += fit(clause, count_tokens, limit) if count_tokens(clause) > limit else [clause]
    return parts


def _pack(units: list[str], glue: str, count_tokens: Callable[[str], int], limit: int) -> list[str]:
    """Consecutive units joined while the join stays within `limit` tokens."""
    parts: list[str] = []
    for unit in units:
        if parts and count_tokens(parts[-1] + glue + unit) <= limit:
            parts[-1] = parts[-1] + glue + unit
        else:
            parts.append(unit)
    return [p.strip() for p in parts if p.strip()]
