"""The language of a line of text, by its script, and the language most lines of a text are in.

Han characters mean Chinese, other letters English; a line without letters (emoji, symbols,
numbers) has no language and is left as it is. Stdlib only: models are chosen before torch
is imported.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")


def source_language(line: str) -> str | None:
    """'zh' when Han characters outnumber Latin words, 'en' when there are other letters,
    None when the line has no letters at all (nothing a model could translate)."""
    han = len(HAN.findall(line))
    if han and han > len(LATIN_WORD.findall(line)):
        return "zh"
    if han or any(unicodedata.category(c).startswith("L") for c in line):
        return "en"
    return None


def majority_language(languages: Iterable[str | None]) -> tuple[str | None, float]:
    """The language most of `languages` name (None ignored), and the share of them it holds;
    (None, 0.0) when none names one. A tie goes to the language named first."""
    named = [language for language in languages if language]
    if not named:
        return None, 0.0
    top = max(dict.fromkeys(named), key=named.count)
    return top, named.count(top) / len(named)
