"""ICU MessageFormat, as i18n JSON files write plurals and selects:
"{count, plural, one {# cat} other {# cats}}". The argument, its kind, the branch keys and
`#` are the message's structure and stay exact; only the text inside each branch (and around
the choice) is translated. A message without a choice is one string ({name} placeholders in it
are kept by the check every string gets)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

CHOICE = re.compile(r"\{\s*\w+\s*,\s*(?:plural|select|selectordinal)\s*,")
KEY = re.compile(r"\s*(?:offset:\d+\s+)?(=\d+|[\w-]+)\s*\{")


@dataclass
class Choice:
    head: str  # "{count, plural,"
    branches: list[tuple[str, list]]  # (" one {", the branch's message), each closed by "}"
    tail: str  # what closes it: "}" with the space before


def parse(text: str) -> list[str | Choice]:
    """A message as literal text and choices; a choice that does not parse is literal text."""
    parts: list[str | Choice] = []
    at = 0
    for match in CHOICE.finditer(text):
        if match.start() < at:
            continue
        choice, end = _choice(text, match)
        if choice is None:
            continue
        parts += [text[at : match.start()], choice]
        at = end
    parts.append(text[at:])
    return [p for p in parts if p != ""]


def _choice(text: str, head: re.Match) -> tuple[Choice | None, int]:
    branches, at = [], head.end()
    while key := KEY.match(text, at):
        close = _matching(text, key.end() - 1)
        if close < 0:
            return None, 0
        branches.append((key.group(0), parse(text[key.end() : close])))
        at = close + 1
    tail = re.compile(r"\s*\}").match(text, at)
    if not branches or not tail:
        return None, 0
    return Choice(head.group(0), branches, tail.group(0)), tail.end()


def _matching(text: str, opening: int) -> int:
    """Where the brace opened at `opening` closes, -1 where it never does."""
    depth = 0
    for i in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def strings(parts: list[str | Choice], counted: bool = False) -> Iterator[tuple[str, bool]]:
    """What to translate in a parsed message, in order, each with whether it lies in a plural
    branch (where `#` is the count, and must stay; elsewhere it is text: "Room #5")."""
    if not any(isinstance(p, Choice) for p in parts):
        yield "".join(parts), counted
        return
    for part in parts:
        if isinstance(part, Choice):
            plural = counted or bool(re.search(r",\s*(?:plural|selectordinal)\s*,", part.head))
            for _, message in part.branches:
                yield from strings(message, plural)
        else:
            yield part, counted


def rebuilt(parts: list[str | Choice], done: Iterator[str]) -> str:
    """The message with each of its `strings` replaced, in order, by the next of `done`."""
    if not any(isinstance(p, Choice) for p in parts):
        return next(done)
    out = []
    for part in parts:
        if isinstance(part, Choice):
            branches = "".join(key + rebuilt(message, done) + "}" for key, message in part.branches)
            out.append(part.head + branches + part.tail)
        else:
            out.append(next(done))
    return "".join(out)


def marks(text: str, kept: Callable[[str], list[str]]) -> list[str]:
    """What a plural branch's translation must keep: the placeholders, and each `#` (the count)."""
    return kept(text) + ["#"] * text.count("#")
