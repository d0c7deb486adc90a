"""What every format shares: its errors, its bytes decoded, the strings to translate with the
placeholders each must keep, and lines re-wrapped to a count."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from mtcli.text.spans import SOFTWARE_PLACEHOLDER

# a translation must hold exactly the source's placeholders, else the source is kept (never a
# lost {name}); what a placeholder is, is the text layer's decision
PLACEHOLDER = SOFTWARE_PLACEHOLDER
BREAK_AFTER = set("。？！，；：、.?!,;:")  # a line ends well after these
NO_LINE_START = set("。？！，；：、）」』”’.?!,;:)]}")  # a line never starts with these
TAG = re.compile(r"</?[A-Za-z][^<>]*>|\{\\[^{}]*\}")  # HTML-style tags, ASS overrides ({\an8})
# what an unspaced line may break between: a tag, a placeholder, a run of non-CJK characters
# without spaces, or one other character
UNIT = re.compile(rf"{TAG.pattern}|{PLACEHOLDER.pattern}|(?:(?![<{{])[!-~\u00a0-\u02ff])+|\S")


# a Markdown code span kept aside travels in its string's fragment as this stand-in
# (markdown.py), which the model sees as inline code and a quoted string shows as `…`
CODE_STAND_IN = '<code data-k="{}">x</code>'
STAND_INS = re.compile(r'<code data-k="\d+">x</code>')
FRAGMENT_TAG = re.compile(r"<[^<>]*>")


def as_written(fragment: str) -> str:
    """A markup format's string (an HTML fragment of md, html or docx) as a reader sees it in
    the document, to quote: its tags left out, a code span kept aside shown as `…`."""
    return html.unescape(FRAGMENT_TAG.sub("", STAND_INS.sub("`…`", fragment)))


class DocumentError(ValueError):
    """A file that is not what its format says: one line naming what is wrong."""


def decoded(data: bytes) -> str:
    """A text document's characters (a UTF-8 byte-order mark dropped); anything else refused."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"not UTF-8 (byte {e.start})") from None


def newline(text: str) -> str:
    """The line end a document uses, so that the translation uses it too."""
    return "\r\n" if "\r\n" in text else "\n"


def joined(lines: list[str]) -> str:
    """Wrapped lines as one string: with spaces, or none between lines of unspaced text."""
    parts = [line.strip() for line in lines]
    spaced = any(" " in p for p in parts) or all(p.isascii() for p in parts)
    return (" " if spaced else "").join(parts)


def kept_marks(text: str) -> list[str]:
    """The placeholders and tags of `text`, sorted: what its translation must hold as well."""
    return sorted(PLACEHOLDER.findall(text) + TAG.findall(text))


@dataclass
class Outcome:
    """How a document's strings fared: translated, or kept as their source because the
    translation lost or changed a placeholder or tag."""

    translated: int = 0
    kept: int = 0


Translate = Callable[[list[str]], list[str]]  # lines in, one translation per line out


def translate_strings(
    texts: list[str],
    translate: Translate,
    outcome: Outcome,
    fallback: str | None = None,
    marks: Callable[[str], list[str]] | list[Callable[[str], list[str]]] = kept_marks,
) -> list[str]:
    """Each non-blank string translated (leading and trailing space kept as it was); a
    translation whose `marks` (placeholders, tags: one way to find them for every string, or
    one for each) differ from its source's is `fallback` (None: the source itself)."""
    each = marks if isinstance(marks, list) else [marks] * len(texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    out = list(texts)
    done = translate([texts[i].strip() for i in todo]) if todo else []
    for i, translation in zip(todo, done, strict=True):
        source = texts[i]
        if each[i](translation) != each[i](source):
            out[i] = source if fallback is None else fallback
            outcome.kept += 1
            continue
        lead = source[: len(source) - len(source.lstrip())]
        trail = source[len(source.rstrip()) :]
        out[i] = lead + translation + trail
        outcome.translated += 1
    return out


def rewrap(text: str, n_lines: int) -> list[str]:
    """`text` as at most `n_lines` lines of about equal length: at spaces where it has them,
    else between characters (Chinese); after punctuation where that is near, never before a
    closing mark (no line starts with "？"), never inside a tag or placeholder."""
    spaced = " " in text.strip()
    units = _units(text, spaced)
    n = min(n_lines, len(units))
    if n <= 1:
        return [text]
    cum = [0]
    for unit in units:
        cum.append(cum[-1] + len(unit))
    cuts, lo = [], 1
    for k in range(1, n):
        ideal, bonus = cum[-1] * k / n, cum[-1] / n / 3
        costs = [
            (abs(cum[j] - ideal) - (bonus if units[j - 1][-1:] in BREAK_AFTER else 0), j)
            for j in range(lo, len(units) - (n - 1 - k))
            if units[j][:1] not in NO_LINE_START
        ]
        if not costs:
            break
        cuts.append(min(costs)[1])
        lo = cuts[-1] + 1
    joiner = " " if spaced else ""
    bounds = [0, *cuts, len(units)]
    return [joiner.join(units[a:b]).strip() for a, b in zip(bounds, bounds[1:], strict=False)]


def _units(text: str, spaced: bool) -> list[str]:
    """Words (spaced text) or characters; a tag, a placeholder and a run of characters
    without spaces or CJK ($25.50, 2025-06-30, an e-mail address, a Latin word) kept as one
    unit, so that no line break falls inside a number, a date or a name."""
    if spaced:
        return text.split()
    return [u for u in UNIT.findall(text) if u.strip()]
