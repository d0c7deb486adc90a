"""Spans of a line that a translation must keep byte for byte: text in backticks, URLs, e-mail
addresses, the placeholders of software strings, and numbers as written.

Found by patterns, most specific first, never overlapping. Also here: stand-ins for the spans a
model's vocabulary cannot write (a `%s` where the tokenizer has no `%`), so the translator can
be made to keep the stand-in and the span goes back in its place afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# most specific first: a URL's digits are the URL's, a placeholder's braces are not a number's
PATTERNS = [
    ("code", re.compile(r"`[^`\n]+`")),
    ("url", re.compile(r"\b(?:https?://|www\.)[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]}]")),
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    (
        "placeholder",
        re.compile(
            r"\{\{\s*[\w.]+\s*\}\}"  # {{name}}
            r"|\$\{[\w.]+\}"  # ${name}
            r"|\{[\w.]*\}"  # {name}, {0}, {}
            r"|%(?:\d+\$)?[-+ 0#]*\d*(?:\.\d+)?[sdifuxXoeEgGc%]"  # printf: %s, %d, %1$s, %.2f
            r"|%\(\w+\)[sdif]"  # python: %(name)s
            r"|</?\d+/?>"  # <0>, </0>, <1/>
        ),
    ),  # fmt: skip
    # digits not inside a Latin word (mp3, 3D); beside Chinese characters they count
    ("number", re.compile(r"(?<![A-Za-z0-9_.,:])\d+(?:[.,:]\d+)*(?![A-Za-z0-9_])")),
]


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str  # code, url, email, placeholder, number
    text: str


def find_spans(line: str) -> list[Span]:
    """The spans of `line` to keep, in order, none overlapping another."""
    taken: list[Span] = []
    for kind, pattern in PATTERNS:
        for m in pattern.finditer(line):
            if not any(m.start() < s.end and s.start < m.end() for s in taken):
                taken.append(Span(m.start(), m.end(), kind, m.group()))
    return sorted(taken, key=lambda s: s.start)


def stand_in(index: int, line: str) -> str:
    """A number for span `index` that the line does not hold: models copy digits (both sides
    write them alike) and every vocabulary has them, so a `%s` the tokenizer cannot write
    travels as 7301 and goes back in its place."""
    number = 7301 + index
    while str(number) in line:
        number += 100
    return str(number)


NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def renumbered(translation: str, source_numbers: list[str]) -> str:
    """The translation with each number it wrote wrongly replaced by the source's number it
    stands for. A wrong number that starts with a lost one is that one (a forced 165 the model
    went on to write as 1650); the rest pair up in order, only one to one (a small model
    writes 1987 as 198, or 42.50 as 1200, in the right place)."""
    lost = lost_spans(translation, source_numbers)
    wrong = [m for m in NUMBER.finditer(translation) if m.group() not in source_numbers]
    fixes: dict[int, str] = {}
    for m in wrong:
        if heads := [n for n in lost if m.group().startswith(n) and n not in fixes.values()]:
            fixes[m.start()] = max(heads, key=len)
    rest = [m for m in wrong if m.start() not in fixes]
    unmatched = [n for n in lost if n not in fixes.values()]
    if rest and len(rest) == len(unmatched):
        fixes.update({m.start(): n for m, n in zip(rest, unmatched, strict=True)})
    out, at = [], 0
    for m in wrong:
        if m.start() in fixes:
            out += [translation[at : m.start()], fixes[m.start()]]
            at = m.end()
    return "".join(out) + translation[at:]


# number words a translation may write as digits (three hours -> 3小时, 八十 -> 80, a thousand
# -> 1000): their values count as the source's, so those digits are not taken for invented
_EN_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
EN_NUMBERS = {w: i for i, w in enumerate(_EN_UNITS)} | {
    w: 20 + 10 * i for i, w in enumerate(_EN_TENS)
}
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "dozen": 12}
ZH_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2, "俩": 2}
ZH_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10_000}
_ZH_RUN = re.compile(f"[{''.join(ZH_DIGITS)}{''.join(ZH_SCALES)}]+")


def _word_values(text: str) -> set[int]:
    """The values number words in `text` stand for: each word, and a word with its scale."""
    values: set[int] = set()
    previous = None
    for word in re.findall(r"[A-Za-z]+", text.lower()):
        value = EN_NUMBERS.get(word)
        if word in EN_SCALES:
            value = EN_SCALES[word] * (previous if previous is not None else 1)
        if value is not None:
            values.add(value)
        previous = value if word in EN_NUMBERS else None
    for run in _ZH_RUN.findall(text):
        values.add(_chinese_value(run))
        values.update(ZH_DIGITS[c] for c in run if c in ZH_DIGITS)
    return values


def _chinese_value(run: str) -> int:
    """A run of Chinese numerals as a number: 八十 80, 三百五十 350, 十二 12, 两千 2000."""
    total, current = 0, 0
    for c in run:
        if c in ZH_DIGITS:
            current = current * 10 + ZH_DIGITS[c] if current and not total else ZH_DIGITS[c]
        else:
            total += (current or 1) * ZH_SCALES[c]
            current = 0
    return total + current


def invented_numbers(source: str, translation: str) -> list[str]:
    """The numbers a translation writes that its source holds nowhere, as digits or as number
    words ("12 euros" came out as 12：30岁, "five patients" as 50): a sign it made up a fact.
    Compared by value, so 06 is 6; a time's :00 is not a number of its own (9点 is 9:00)."""
    have = {int(n) for n in re.findall(r"\d+", source)} | _word_values(source)
    made_up = [
        m.group()
        for m in re.finditer(r"\d+", translation)
        if int(m.group()) not in have and not _minutes_of_the_hour(translation, m)
    ]
    return list(dict.fromkeys(made_up))


def _minutes_of_the_hour(text: str, match: re.Match) -> bool:
    return int(match.group()) == 0 and text[match.start() - 1 : match.start()] == ":"


def lost_spans(translation: str, spans: list[str]) -> list[str]:
    """The spans the translation lost: a span that occurs twice must occur twice, and a number
    counts only where no digit touches it (165 is not in 1650)."""
    return [
        text for text in dict.fromkeys(spans)
        if len(re.findall(_alone(text), translation)) < spans.count(text)
    ]  # fmt: skip


def _alone(text: str) -> str:
    before = r"(?<!\d)" if text[:1].isdigit() else ""
    after = r"(?!\d)" if text[-1:].isdigit() else ""
    return before + re.escape(text) + after
