"""HTML documents: the whole file through the text layer's markup mode (script, style, code,
pre and translate="no" kept as they were, inline tags placed by word alignment), and before it
the attributes a reader sees (alt, title, placeholder, aria-label) translated in their tags."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from mtcli.documents.segments import Outcome, Translate, decoded, translate_strings
from mtcli.text.markup import OPAQUE, read

SHOWN = re.compile(r"""(\s(?:alt|title|placeholder|aria-label)\s*=\s*)("[^"]*"|'[^']*')""", re.I)


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    text = translated_attributes(decoded(data), translate, outcome)
    runs = sum(1 for part in read(text) if not isinstance(part, str) and part.text.strip())
    if runs:
        body = text.strip()
        lead, trail = text[: text.find(body)], text[text.find(body) + len(body) :]
        text = lead + translate([body])[0] + trail
        outcome.translated += runs
    return text.encode("utf-8")


class _StartTags(HTMLParser):
    """Where each start tag outside opaque elements begins, and its text as written."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[tuple[int, int], str]] = []
        self.opaque: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if not self.opaque:
            self.tags.append((self.getpos(), self.get_starttag_text()))
        if self.opaque or tag in OPAQUE or dict(attrs).get("translate") == "no":
            self.opaque.append(tag)

    def handle_startendtag(self, tag, attrs) -> None:
        if not self.opaque:
            self.tags.append((self.getpos(), self.get_starttag_text()))

    def handle_endtag(self, tag) -> None:
        if self.opaque and self.opaque[-1] == tag:
            self.opaque.pop()


def translated_attributes(text: str, translate: Translate, outcome: Outcome) -> str:
    """`text` with the values of its shown attributes translated (quotes escaped for the
    quote around them), everything else as it was."""
    parser = _StartTags()
    parser.feed(text)
    parser.close()
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    found = []  # (offset of the value in text, its quote, the value)
    for (line, column), raw in parser.tags:
        at = starts[line - 1] + column
        for match in SHOWN.finditer(raw):
            value = match.group(2)
            found.append((at + match.start(2), value[0], value[1:-1]))
    done = translate_strings([v for _, _, v in found], translate, outcome)
    for (at, quote, value), new in reversed(list(zip(found, done, strict=True))):
        escaped = new.replace(quote, "&quot;" if quote == '"' else "&#39;")
        text = text[: at + 1] + escaped + text[at + 1 + len(value) :]
    return text
