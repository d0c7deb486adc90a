"""Markdown (CommonMark and its tables, read as markdown-it-py's tokens): the text of each
paragraph, heading and table cell translated; code blocks, fences, HTML blocks, front matter,
inline code, image targets, autolinks, inline HTML and link targets kept byte for byte (an
image's alt text is translated); emphasis, strong and links kept around the words they
enclosed (a reference link stays one: `[译文][label]`).

Each block's inline tokens travel as an HTML fragment through the text layer's markup mode
(emphasis as <em>, links as <a>, what is kept as a <code> element it does not translate), so the
markers are placed by word alignment as HTML tags are; the fragment comes back as Markdown and
replaces the block's text in its line, the rest of the line (list markers, quote marks,
indentation, table pipes) as it was."""

from __future__ import annotations

import html
import re

from mtcli.documents.segments import (
    CODE_STAND_IN,
    Outcome,
    Translate,
    decoded,
    newline,
    translate_strings,
)

TAG = {"em_open": "em", "strong_open": "strong", "s_open": "s", "link_open": "a"}
CLOSE = {"em_close", "strong_close", "s_close", "link_close"}
FRAGMENT = re.compile(
    r'<code data-k="(\d+)">[^<]*</code>|<([a-z]+) data-k="(\d+)">|</([a-z]+)>|<br>|([^<]+)'
)


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    from markdown_it import MarkdownIt

    text = decoded(data)
    nl = newline(text)
    lines = text.split(nl)
    first = front_matter_end(lines)
    references: dict = {}
    tokens = MarkdownIt("commonmark").enable("table").parse("\n".join(lines[first:]), references)
    blocks = [t for t in tokens if t.type == "inline" and t.map and t.content.strip()]
    opens = zip(tokens, tokens[1:], strict=False)
    cells = {id(t) for before, t in opens if before.type in ("td_open", "th_open")}
    known = references.get("references", {})
    fragments = [to_fragment(b.children, link_ends(b.content, known)) for b in blocks]
    done = translate_strings([f for f, _ in fragments], translate, outcome)
    changed = _translate_alts([kept for _, kept in fragments], translate, outcome)
    dropped: set[int] = set()
    cursor: dict[int, int] = {}  # row -> where its next block's text is looked for
    for i, (block, (fragment, kept), translation) in enumerate(
        zip(blocks, fragments, done, strict=True)
    ):
        if translation != fragment or i in changed:
            rows = range(first + block.map[0], first + block.map[1])
            written = to_markdown(translation, kept, cell=id(block) in cells)
            _splice(lines, rows, block.content, written, cursor, dropped)
    return nl.join(line for i, line in enumerate(lines) if i not in dropped).encode("utf-8")


class Image(str):
    """A kept image (`![alt](src "title")`), whose alt text (as written: markdown-it's
    content keeps its escapes) is translated apart."""

    def __new__(cls, alt: str, target: str):
        image = super().__new__(cls, f"![{alt}]({target})")
        image.alt, image.target = alt, target
        return image


def _translate_alts(kepts: list[list], translate: Translate, outcome: Outcome) -> set[int]:
    """Each image's alt text translated in place (what a screen reader says, as HTML's alt
    attribute is); the blocks whose images changed."""
    where = [
        (b, i) for b, kept in enumerate(kepts) for i, k in enumerate(kept) if isinstance(k, Image)
    ]
    alts = [html.escape(kepts[b][i].alt, quote=False) for b, i in where]
    changed = set()
    for (b, i), alt in zip(where, translate_strings(alts, translate, outcome), strict=True):
        image, alt = kepts[b][i], html.unescape(alt)
        if alt != image.alt:
            written = re.sub(r"(?<!\\)([\[\]])", r"\\\1", alt)  # a bare bracket would end it
            kepts[b][i] = Image(written, image.target)
            changed.add(b)
    return changed


def front_matter_end(lines: list[str]) -> int:
    """The first line after a YAML front matter block (---, ..., --- or ...), else 0."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return i + 1
    return 0


# a bracketed link text, maybe an image's, and what follows it: (target) or [label]
LINK = re.compile(
    r"(!?)\[((?:[^\[\]\\]|\\.)*)\](\((?:[^()\\]|\\.|\([^()]*\))*\)|\[((?:[^\[\]\\]|\\.)*)\])?"
)


def link_ends(content: str, references: dict) -> list[str] | None:
    """How each link of a block's source closes, in order: None for an inline link (its
    target is written from the token), `][label]` for a reference link, so that it stays one
    (a shortcut `[text]` or collapsed `[text][]` link names its label after the translated
    text). None where the links found here are not the parser's (then all are written inline)."""
    from markdown_it.common.utils import normalizeReference

    ends = []
    for match in LINK.finditer(content):
        bang, text, after, label = match.groups()
        if bang:
            continue
        if after and after.startswith("("):
            ends.append(None)
        elif normalizeReference(label or text) in references:
            ends.append(f"][{label or text}]")
    return ends


def to_fragment(children, ends: list | None = None) -> tuple[str, list]:
    """Inline tokens as HTML, with what each numbered element stands for in Markdown: a pair
    (opening, closing) for a marker, the source itself for what is kept; `ends`: how each
    link closes (link_ends), where they are known."""
    out, kept = [], []
    links = [
        t for t in children if t.type == "link_open" and t.markup not in ("autolink", "linkify")
    ]
    ends = ends if ends is not None and len(ends) == len(links) else [None] * len(links)
    link_end = iter(ends)

    def keep(raw: str) -> None:
        out.append(CODE_STAND_IN.format(len(kept)))
        kept.append(raw)

    tokens = iter(children)
    for token in tokens:
        kind = token.type
        if kind == "link_open" and token.markup in ("autolink", "linkify"):
            label = "".join(t.content for t in _until_close(tokens))
            keep(f"<{label}>" if token.markup == "autolink" else label)
        elif kind in TAG:
            out.append(f'<{TAG[kind]} data-k="{len(kept)}">')
            end = next(link_end) if kind == "link_open" else None
            kept.append(("[", end) if end else _markers(token))
        elif kind in CLOSE:
            out.append(f"</{TAG[kind.replace('close', 'open')]}>")
        elif kind == "code_inline":
            tick = token.markup
            pad = " " if token.content[:1] in " `" or token.content[-1:] in " `" else ""
            keep(f"{tick}{pad}{token.content}{pad}{tick}")
        elif kind == "image":
            keep(Image(token.content, _target(token)))
        elif kind == "html_inline":
            keep(token.content)
        elif kind == "softbreak":
            out.append(" ")
        elif kind == "hardbreak":
            out.append("<br>")
        else:  # text, and text_special: an escaped or entity character, as it reads
            out.append(html.escape(token.content, quote=False))
    return "".join(out), kept


def _until_close(tokens):
    for token in tokens:
        if token.type == "link_close":
            return
        yield token


def _target(token) -> str:
    attr = "src" if token.type == "image" else "href"
    title = token.attrGet("title")
    return token.attrGet(attr) + (f' "{title}"' if title else "")


def _markers(token) -> tuple[str, str]:
    if token.type == "link_open":
        return "[", f"]({_target(token)})"
    return token.markup, token.markup


def to_markdown(fragment: str, kept: list, cell: bool = False) -> str:
    """A translated fragment back as Markdown; spaces moved outside the markers that
    enclose them (`* word*` is no emphasis); in a table `cell`, a translated `|` escaped (it
    would end the cell)."""
    out: list[str] = []
    opened: list[int] = []
    for match in FRAGMENT.finditer(fragment):
        code, _, number, closing, text = match.groups()
        if code is not None:
            out.append(kept[int(code)])
        elif number is not None:
            opened.append(int(number))
            out.append(kept[int(number)][0])
        elif closing is not None and opened:
            trail = out[-1][len(out[-1].rstrip()) :] if out else ""
            if trail:
                out[-1] = out[-1].rstrip()
            out.extend([kept[opened.pop()][1], trail])
        elif text is not None:
            text = html.unescape(text)
            text = text.replace("|", "\\|") if cell else text
            if out and opened and out[-1] == kept[opened[-1]][0] and text[:1].isspace():
                out.insert(len(out) - 1, text[: len(text) - len(text.lstrip())])
                text = text.lstrip()
            out.append(text)
        elif match.group(0) == "<br>":
            out.append("<br>")
    return "".join(out).strip()


def _splice(lines, rows, content: str, translation: str, cursor, dropped) -> None:
    """The block's text replaced in its rows: its first line by the translation, the rows of
    its other lines dropped; the block kept as it was where its text is not found there."""
    parts = content.split("\n")
    found = []
    for row, part in zip(rows, parts, strict=False):  # a setext heading's rule: a row more
        at = lines[row].find(part.strip(), cursor.get(row, 0))
        if at < 0:
            return
        found.append((row, at, len(part.strip())))
    row, at, size = found[0]
    lines[row] = lines[row][:at] + translation + lines[row][at + size :]
    cursor[row] = at + len(translation)
    dropped.update(r for r, _, _ in found[1:])
