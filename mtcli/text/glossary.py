"""A terminology glossary: source term TAB required target term, one pair a line.

Finds the terms of a source line and turns their target terms into token-id phrases for
constrained decoding (constraints.py). Latin-script terms match whole words, ignoring case;
terms in Han script match anywhere in the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mtcli.data.textio import read_lines
from mtcli.errors import UserError
from mtcli.text.language import HAN
from mtcli.text.writing import UNSPACED


@dataclass
class Glossary:
    terms: list[tuple[str, str, re.Pattern]]  # (source term, target term, how to find it)

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        terms = []
        for line_no, line in enumerate(read_lines(path), 1):
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
                raise UserError(f"{path}:{line_no}: expected source term TAB target term")
            source, target = cols[0].strip(), cols[1].strip()
            terms.append((source, target, _pattern(source)))
        if not terms:
            raise UserError(f"{path}: no terms (lines of source term TAB target term)")
        return cls(terms)

    def targets_for(self, line: str) -> list[str]:
        """The target terms a translation of `line` must contain, longest source term first
        (a term inside a longer matched one does not count twice)."""
        found, taken = [], []
        for _, target, pattern in sorted(self.terms, key=lambda t: -len(t[0])):
            for m in pattern.finditer(line):
                if all(m.end() <= a or m.start() >= b for a, b in taken):
                    taken.append(m.span())
                    if target not in found:
                        found.append(target)
                    break
        return found


def _pattern(term: str) -> re.Pattern:
    if HAN.search(term):
        return re.compile(re.escape(term))
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", re.IGNORECASE)


def target_phrases(tokenizer, tgt_lang: str, strings) -> list[list[int]]:
    """The target token ids of each string (a glossary term, a span to keep) as it appears
    inside a sentence of `tgt_lang`; strings with no ids left out."""
    spaced = tgt_lang not in UNSPACED  # a term starts a word only where words are spaced
    return [ids for s in strings if (ids := phrase_ids(tokenizer, s, spaced))]


def phrase_ids(tokenizer, term: str, spaced: bool) -> list[int]:
    """Target token ids of a term as it appears inside a sentence.

    sentencepiece marks a word start with '▁'; in a language written with spaces the term
    starts a word, so the mark stays. In Chinese the term sits between other characters, so
    the mark is dropped and the rest is split into pieces of the vocabulary.
    """
    sp = tokenizer.tgt
    pieces = sp.encode(term, out_type=str)
    if not spaced and pieces:
        head = pieces[0].removeprefix("▁")
        pieces = _vocabulary_pieces(sp, head) + pieces[1:] if head else pieces[1:]
    return [sp.piece_to_id(p) for p in pieces]


def _vocabulary_pieces(sp, text: str) -> list[str]:
    """`text` as the longest vocabulary pieces, left to right (characters at worst)."""
    out, i = [], 0
    while i < len(text):
        for j in range(len(text), i, -1):
            if j == i + 1 or sp.piece_to_id(text[i:j]) != sp.unk_id():
                out.append(text[i:j])
                i = j
                break
    return out
