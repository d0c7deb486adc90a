"""gettext catalogues (.po, .pot; read and written by polib): each untranslated msgstr filled
from its msgid (plural forms from msgid_plural, as many as the header's nplurals), marked
`fuzzy` so that a translator reviews it; comments, contexts, flags, references and what was
translated before kept. A translation that lost a printf or brace placeholder is left empty
(untranslated) rather than written wrong."""

from __future__ import annotations

import bisect
import re

from mtcli.documents.segments import (
    DocumentError,
    Outcome,
    Translate,
    decoded,
    newline,
    translate_strings,
)

NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    catalogue = _parsed(decoded(data))
    n_plurals = _plural_count(catalogue)
    todo = [e for e in catalogue if e.msgid and not e.obsolete and _untranslated(e)]
    sources = [s for entry in todo for s in _sources(entry, n_plurals)]
    done = iter(translate_strings(sources, translate, outcome, fallback=""))
    for entry in todo:
        strings = [next(done) for _ in _sources(entry, n_plurals)]
        if not all(strings):
            continue  # a placeholder lost: left for a person, never written wrong
        if entry.msgid_plural:
            entry.msgstr_plural = dict(enumerate(strings))
        else:
            entry.msgstr = strings[0]
        if "fuzzy" not in entry.flags:
            entry.flags.append("fuzzy")
    filled = [entry for entry in todo if not _untranslated(entry)]
    return _spliced(decoded(data), catalogue, filled).encode("utf-8")


def _spliced(text: str, catalogue, filled: list) -> str:
    """`text` with only the entries in `filled` written anew (by polib): the header, every
    other entry, comments and wrapping stay byte for byte (polib reorders a header's fields
    and rewraps every entry)."""
    nl = newline(text)
    lines = text.split(nl)
    starts = sorted(e.linenum - 1 for e in [*catalogue, *catalogue.obsolete_entries()])
    for entry in sorted(filled, key=lambda e: e.linenum, reverse=True):
        start = entry.linenum - 1
        following = bisect.bisect_right(starts, start)  # the next entry's first line
        end = starts[following] if following < len(starts) else len(lines)
        end = next((i for i in range(start, end) if not lines[i].strip()), end)
        lines[start:end] = str(entry).rstrip("\n").split("\n")
    return nl.join(lines)


def _parsed(text: str):
    import polib

    try:
        # polib reads a string naming an existing file as that file: a line end makes it text
        return polib.pofile(text if "\n" in text else text + "\n", wrapwidth=78)
    except (OSError, ValueError) as e:  # polib: OSError("Syntax error in po file (line 3)")
        raise DocumentError(f"not a gettext catalogue: {str(e).splitlines()[0][:160]}") from None


def _untranslated(entry) -> bool:
    """Nothing written for it yet (a fuzzy entry's msgstr is a person's draft: kept)."""
    return not entry.msgstr and not any(entry.msgstr_plural.values())


def _plural_count(catalogue) -> int:
    match = NPLURALS.search(catalogue.metadata.get("Plural-Forms", ""))
    return max(int(match.group(1)), 1) if match else 2


def _sources(entry, n_plurals: int) -> list[str]:
    """What each msgstr is translated from: msgid, or for plural forms msgid for the first
    (when the language has more than one form) and msgid_plural for the others."""
    if not entry.msgid_plural:
        return [entry.msgid]
    if n_plurals == 1:
        return [entry.msgid_plural]
    return [entry.msgid] + [entry.msgid_plural] * (n_plurals - 1)
