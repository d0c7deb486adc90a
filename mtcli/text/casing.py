"""Casing of English text: a line in ALL CAPS or Title Case is translated as its sentence-case
form (small models saw almost no capitals mid-sentence in training), and where the target is
written in cases, the output takes the source's pattern back.
"""

from __future__ import annotations

import re

WORD = re.compile(r"[^\W\d_]+")
CASED_TARGETS = ("en", "de", "fr", "es", "it", "pt", "nl")  # written with capitals
MIN_TITLE_WORDS = 3  # "Tom Jackson." is a name, not Title Case


def casing_of(text: str) -> str:
    """'upper' (at least two words or four letters, none lower case), 'title' (three words or
    more, each capitalised), else 'plain'."""
    words = [w for w in WORD.findall(text) if w.isascii() or w.lower() != w.upper()]
    if not words:
        return "plain"
    letters = "".join(words)
    if letters.isupper() and (len(words) >= 2 or len(letters) >= 4):
        return "upper"
    if len(words) >= MIN_TITLE_WORDS and all(w[0].isupper() for w in words):
        return "title"
    return "plain"


def sentence_case(text: str) -> str:
    """'WHERE IS THE STATION?' -> 'Where is the station?': lower case, the first letter and
    the pronoun I capitalised."""
    lowered = re.sub(r"\bi\b", "I", text.lower())
    m = WORD.search(lowered)
    return (
        lowered
        if m is None
        else lowered[: m.start()] + lowered[m.start()].upper() + lowered[m.start() + 1 :]
    )


def restyle(text: str, casing: str, language: str) -> str:
    """The translation in the source's casing, for a target written in cases."""
    if language not in CASED_TARGETS or casing == "plain":
        return text
    if casing == "upper":
        return text.upper()
    return WORD.sub(lambda m: m.group()[0].upper() + m.group()[1:], text)
