"""i18n JSON: every string value translated in place (ICU plurals and selects branch by
branch); keys, structure, numbers, spacing and the order of everything kept byte for byte.
A file nested deeper than the standard library reads is refused."""

from __future__ import annotations

import json
import re

from mtcli.documents import icu
from mtcli.documents.segments import (
    DocumentError,
    Outcome,
    Translate,
    decoded,
    kept_marks,
    translate_strings,
)

STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # outside strings, JSON has no quotes
KEY = re.compile(r"\s*:")


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    text = decoded(data)
    try:
        json.loads(text)
    except RecursionError:
        raise DocumentError("nested too deep to be an i18n file") from None
    except json.JSONDecodeError as e:
        raise DocumentError(f"not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    values = [m for m in STRING.finditer(text) if not KEY.match(text, m.end())]
    messages = [icu.parse(json.loads(m.group(0))) for m in values]
    pieces = [piece for parts in messages for piece in icu.strings(parts)]
    marks = [_counted if counted else kept_marks for _, counted in pieces]
    done = iter(translate_strings([t for t, _ in pieces], translate, outcome, marks=marks))
    out, at = [], 0
    for match, parts in zip(values, messages, strict=True):
        source, new = json.loads(match.group(0)), icu.rebuilt(parts, done)
        out += [text[at : match.start()], match.group(0) if new == source else _quoted(new)]
        at = match.end()
    return ("".join(out) + text[at:]).encode("utf-8")


def _counted(text: str) -> list[str]:
    return icu.marks(text, kept_marks)


def _quoted(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)
