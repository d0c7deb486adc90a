"""How lines stream through any translator: in chunks, in order, each line to the translator
for its language (`route`, shared by the command line's Router and the server). Imports no
torch, so an engine that needs none (CTranslate2, engines/ct2.py) starts fast.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol

from mtcli.engines.result import Translation


class ChunkTranslator(Protocol):
    """Anything that translates a list of lines (mtcli's Translator, CTranslate2's, a text
    layer, a Router): line i's translation starts with `prefixes[i]` where given."""

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


def route(
    lines: list[str], choose: Callable[[str], Hashable | None]
) -> tuple[list[Translation | None], dict[Hashable, list[int]]]:
    """Which lines go where: `choose(line)` names the translator for a line (None: no model
    translates it). Returns the results known without translating (an empty line stays empty;
    a line no model translates passes through as it was) with None where a translation is
    due, and the row numbers of those lines grouped by what `choose` named, in input order."""
    results: list[Translation | None] = []
    groups: dict[Hashable, list[int]] = {}
    for i, line in enumerate(lines):
        target = choose(line) if line.strip() else None
        if not line.strip():
            results.append(Translation(line, "", 0.0))
        elif target is None:
            results.append(Translation(line, line, 0.0, passthrough=True))
        else:
            results.append(None)
            groups.setdefault(target, []).append(i)
    return results, groups


class Router:
    """Each line to the translator for its source language, in one pass that keeps order.

    `language_of(line)` names the language (None: no letters, the line passes through);
    `translator_for(language)` gives a translator, or None when no model translates it (the
    line passes through, and `warn` says so once). Translators are asked for only when a line
    needs them, so a pipeline of English never loads the Chinese model. `passes(language)` is
    the warning said when a language's lines pass through.
    """

    def __init__(
        self,
        language_of: Callable[[str], str | None],
        translator_for: Callable[[str], ChunkTranslator | None],
        chunk_lines: int,
        warn: Callable[[str], None] = lambda message: None,
        passes: Callable[[str], str] = lambda language: (
            f"no installed model translates from {language}: such lines pass through"
        ),
    ):
        self.language_of, self.translator_for = language_of, translator_for
        self.chunk_lines, self.warn, self.passes = chunk_lines, warn, passes
        self._translators: dict[str, ChunkTranslator | None] = {}

    def translate_chunk(
        self, lines: list[str], prefixes: list[str | None] | None = None
    ) -> list[Translation]:
        results, groups = route(lines, self._translator_of_line)
        for translator, rows in groups.items():
            wanted = [prefixes[i] for i in rows] if prefixes else None
            translated = translator.translate_chunk([lines[i] for i in rows], wanted)
            for i, result in zip(rows, translated, strict=True):
                results[i] = result
        return results

    def _translator_of_line(self, line: str) -> ChunkTranslator | None:
        language = self.language_of(line)
        return None if language is None else self._translator(language)

    def _translator(self, language: str) -> ChunkTranslator | None:
        if language not in self._translators:
            self._translators[language] = self.translator_for(language)
            if self._translators[language] is None:
                self.warn(self.passes(language))
        return self._translators[language]

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        return stream(self.translate_chunk, lines, self.chunk_lines)


class Truncator:
    """Cuts a line's source tokens to what the model's positions hold, and says so once (every
    engine cuts the same way: the source and the output share the position table)."""

    def __init__(self, limit: int, warn: Callable[[str], None]):
        self.limit, self.warn, self.warned = limit, warn, False

    def __call__(self, tokens: list) -> tuple[list, bool]:
        """The tokens, cut to the limit, and whether they were cut."""
        if len(tokens) <= self.limit:
            return tokens, False
        if not self.warned:
            self.warn(
                f"an input line has more than {self.limit} tokens; "
                "long lines are truncated to the model's max positions"
            )
            self.warned = True
        return tokens[: self.limit], True
