"""What a translation is, and how lines stream through any translator: in chunks, in order,
each line to the translator for its language. Imports no torch, so an engine that needs none
(CTranslate2, ct2_engine.py) starts fast; translate.py holds mtcli's own Translator.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mtcli.decoding.search import AttentionTrace


@dataclass
class AttentionMaps:
    """Every attention that produced the best hypothesis, and the pieces it is over.

    source: source pieces + </s> (S); target: output pieces + </s> (T); trace: encoder
    (L, H, S, S), encoder-decoder (L, H, T, S) and decoder (L, H, T, T) attention.
    """

    source: list[str]
    target: list[str]
    trace: AttentionTrace

    def cross_mean(self) -> Any:
        """(T, S): the last decoder layer's encoder-decoder attention, averaged over heads."""
        return self.trace.cross[-1].mean(dim=0)


@dataclass
class Translation:
    """One input line's result; `nbest` holds (text, score) pairs, best first."""

    source: str
    text: str
    score: float
    nbest: list[tuple[str, float]] = field(default_factory=list)
    truncated: bool = False
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), with --align
    passthrough: bool = False  # no model translates this line (no letters): it is left as is
    attention: AttentionMaps | None = None  # with align=True
    trace: list[dict] | None = None  # with trace=True: every step of the search (JSON-ready)


class ChunkTranslator(Protocol):
    """Anything that translates a list of lines (mtcli's Translator, CTranslate2's, a Router)."""

    def translate_chunk(
        self, lines: list[str], prefixes: list[str | None] | None = None
    ) -> list[Translation]: ...


def chunks(lines: Iterable[str] | Iterable[list[str]], chunk_lines: int) -> Iterator[list[str]]:
    """Plain lines `chunk_lines` at a time (memory stays bounded on any input); chunks a
    reader made (textio.read_chunks: what a pipe had ready) as each one arrives, never held
    for the next."""
    it = iter(lines)
    first = next(it, None)
    if first is None:
        return
    if isinstance(first, list):
        yield from itertools.chain([first], it)
        return
    it = itertools.chain([first], it)
    while chunk := list(itertools.islice(it, chunk_lines)):
        yield [line.rstrip("\r\n") for line in chunk]


def stream(
    translate_chunk: Callable[[list[str]], list[Translation]],
    lines: Iterable[str] | Iterable[list[str]],
    chunk_lines: int,
) -> Iterator[Translation]:
    """Results in input order, chunk by chunk (see `chunks`)."""
    for chunk in chunks(lines, chunk_lines):
        yield from translate_chunk(chunk)


class Router:
    """Each line to the translator for its source language, in one pass that keeps order.

    `language_of(line)` names the language (None: no letters, the line passes through);
    `translator_for(language)` gives a translator, or None when no model translates it (the
    line passes through, and `warn` says so once). Translators are asked for only when a line
    needs them, so a pipeline of English never loads the Chinese model.
    """

    def __init__(
        self,
        language_of: Callable[[str], str | None],
        translator_for: Callable[[str], ChunkTranslator | None],
        chunk_lines: int,
        warn: Callable[[str], None] = lambda message: None,
    ):
        self.language_of, self.translator_for = language_of, translator_for
        self.chunk_lines, self.warn = chunk_lines, warn
        self._translators: dict[str, ChunkTranslator | None] = {}

    def translate_chunk(
        self, lines: list[str], prefixes: list[str | None] | None = None
    ) -> list[Translation]:
        results = [Translation(line, line, 0.0, passthrough=True) for line in lines]
        groups: dict[str, list[int]] = {}
        for i, line in enumerate(lines):
            if not line.strip():
                results[i] = Translation(line, "", 0.0)
            elif (language := self.language_of(line)) is not None:
                groups.setdefault(language, []).append(i)
        for language, rows in groups.items():
            translator = self._translator(language)
            if translator is not None:
                wanted = [prefixes[i] for i in rows] if prefixes else None
                translated = translator.translate_chunk([lines[i] for i in rows], wanted)
                for i, result in zip(rows, translated, strict=True):
                    results[i] = result
        return results

    def _translator(self, language: str) -> ChunkTranslator | None:
        if language not in self._translators:
            self._translators[language] = self.translator_for(language)
            if self._translators[language] is None:
                self.warn(f"no installed model translates from {language}: such lines pass through")
        return self._translators[language]

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        return stream(self.translate_chunk, lines, self.chunk_lines)
