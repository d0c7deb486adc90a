"""HTML in, HTML out: the text between tags is translated and the tags are put back around the
target words aligned to the words they enclosed.

Parsed with the standard library's html.parser (entities decoded as it reads). Block elements
(p, div, li, br, headings, table cells, ...) end a run of text, so each run is translated on its
own; inline elements (b, i, a, span, ...) inside a run are projected through the translation's
word alignments. Start tags are written back byte for byte (attributes included); end tags as
`</name>`; the contents of code, pre, script, style and of any element marked translate="no"
are kept as they were; text is re-escaped. The tags come out the same and in the same order:
where the alignment would cross them, an element is moved (or emptied) rather than broken.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np

from mtcli.data.tokenizer import piece_words
from mtcli.text.spans import stand_in

BLOCK = {
    "address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
    "head", "header", "hr", "html", "li", "main", "nav", "ol", "option", "p", "section", "table",
    "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul",
}  # fmt: skip
OPAQUE = {"code", "pre", "script", "style", "textarea"}  # kept as they are
INLINE_OPAQUE = {"code", "kbd", "samp", "var"}  # kept inside the sentence around them
VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}
WORD = re.compile(r"\S+")
# A target word is linked to the source word it attends to most only when that weight is at
# least this share of the most that source word gives any target word: the weak argmax links
# of function words ("的", "the") would otherwise stretch a tag over them. On
# bench/faithful/tags-*.tsv, 0 placed 13/22 en->zh and 17/21 zh->en tags, 0.5 13 and 18,
# 0.7 17 and 19, 0.8 16 and 20 (one empty), 0.9 17 and 20 (one empty).
LINK_SHARE = 0.7


@dataclass
class Element:
    """An inline element of a run: its tags as written, the characters of the run's text it
    encloses, and, once translated, the target words it encloses [start, end)."""

    open: str
    close: str
    begin: int  # character offsets in the run's text
    end: int
    children: list[Element] = field(default_factory=list)
    start_word: int = 0
    end_word: int = 0
    ends_in_punct: bool = False  # what it encloses in the source ends in punctuation


@dataclass
class Run:
    """Text to translate as one unit, with the inline elements inside it."""

    text: str = ""
    elements: list[Element] = field(default_factory=list)  # the top-level ones
    kept: dict[str, str] = field(default_factory=dict)  # stand-in number -> HTML kept as is


class _Reader(HTMLParser):
    """The document as a list of verbatim strings and Runs."""

    def __init__(self, keep_word: Callable[[int, str], str] = stand_in) -> None:
        super().__init__(convert_charrefs=True)
        self.keep_word = keep_word  # the word an inline code element travels as
        self.parts: list[str | Run] = []
        self.run = Run()
        self.open: list[Element] = []  # inline elements not closed yet
        self.opaque: list[str] = []  # names of the opaque elements we are inside
        self.inline: list[str] | None = None  # the HTML of an inline one (code, translate=no)

    def _raw(self, text: str) -> None:
        """Inside an opaque element: its HTML as it is, into the run's kept one or the parts."""
        (self.parts if self.inline is None else self.inline).append(text)

    def _verbatim(self, text: str) -> None:
        self._end_run()
        self.parts.append(text)

    def _end_run(self) -> None:
        for element in reversed(self.open):  # left open by the author: closed by nobody
            element.end = len(self.run.text)
        self.open = []
        if self.run.text or self.run.elements:
            self.parts.append(self.run)
        self.run = Run()

    def handle_starttag(self, tag, attrs) -> None:
        raw = self.get_starttag_text()
        if self.opaque:
            self._raw(raw)
            if tag == self.opaque[-1] or tag in OPAQUE:
                self.opaque.append(tag)
        elif tag in INLINE_OPAQUE or (dict(attrs).get("translate") == "no" and tag not in BLOCK):
            # kept inside its sentence: it travels as a stand-in number the model keeps
            self.inline = [raw]
            if tag in VOID:
                self._keep_inline()
            else:
                self.opaque.append(tag)
        elif tag in OPAQUE or dict(attrs).get("translate") == "no":
            self._verbatim(raw)
            if tag not in VOID:
                self.opaque.append(tag)
        elif tag in BLOCK:
            self._verbatim(raw)
        elif tag in VOID:
            self._add(Element(raw, "", len(self.run.text), len(self.run.text)))
        else:
            element = Element(raw, f"</{tag}>", len(self.run.text), len(self.run.text))
            self._add(element)
            self.open.append(element)

    def handle_startendtag(self, tag, attrs) -> None:
        raw = self.get_starttag_text()
        if self.opaque:
            self._raw(raw)
        elif tag in BLOCK:
            self._verbatim(raw)
        else:
            self._add(Element(raw, "", len(self.run.text), len(self.run.text)))

    def handle_endtag(self, tag) -> None:
        if self.opaque:
            self._raw(f"</{tag}>")
            if tag == self.opaque[-1]:
                self.opaque.pop()
                if not self.opaque and self.inline is not None:
                    self._keep_inline()
            return
        if tag in BLOCK or not any(e.close == f"</{tag}>" for e in self.open):
            # a block's end, or a stray end tag: kept where it is
            if tag in BLOCK:
                self._verbatim(f"</{tag}>")
            else:
                self._add(Element("", f"</{tag}>", len(self.run.text), len(self.run.text)))
            return
        while self.open:
            element = self.open.pop()
            element.end = len(self.run.text)
            if element.close == f"</{tag}>":
                break

    def _keep_inline(self) -> None:
        word = self.keep_word(len(self.run.kept), self.run.text)
        self.run.kept[word] = "".join(self.inline)
        self.run.text += word
        self.inline = None

    def _add(self, element: Element) -> None:
        (self.open[-1].children if self.open else self.run.elements).append(element)

    def handle_data(self, data) -> None:
        if self.opaque:  # script and style hold raw text (html.parser's cdata_elem); others, text
            self._raw(data if self.cdata_elem else html.escape(data, quote=False))
        else:
            self.run.text += data

    def handle_comment(self, data) -> None:
        self._verbatim(f"<!--{data}-->")

    def handle_decl(self, decl) -> None:
        self._verbatim(f"<!{decl}>")

    def handle_pi(self, data) -> None:
        self._verbatim(f"<?{data}>")

    def close(self) -> None:
        # what the parser still holds at the end is kept as it was: the text of a <script>
        # never closed, or an unfinished "<!-- ..." (html.parser drops the first and would
        # hand the second over as text to translate)
        rest = self.rawdata[self.rawdata.find("<") :] if "<" in self.rawdata else ""
        if self.cdata_elem is not None or rest:
            leftover = self.rawdata if self.cdata_elem is not None else rest
            self.rawdata = self.rawdata[: len(self.rawdata) - len(leftover)]
            if self.opaque:
                self._raw(leftover)
            else:
                self._verbatim(leftover)
        super().close()
        if self.inline is not None:  # an inline <code> never closed: kept in its sentence
            self._keep_inline()
        self._end_run()


def read(document: str, keep_word: Callable[[int, str], str] = stand_in) -> list[str | Run]:
    reader = _Reader(keep_word)
    reader.feed(document)
    reader.close()
    return reader.parts


def run_texts(parts: list[str | Run]) -> list[str]:
    """The texts to translate of a read document: its runs that hold more than whitespace."""
    return [p.text.strip() for p in parts if isinstance(p, Run) and p.text.strip()]


def written(parts: list[str | Run], results: list, tgt_spaced: bool) -> str:
    """A read document written back with `results`, one per run of `run_texts(parts)`."""
    runs = [p for p in parts if isinstance(p, Run) and p.text.strip()]
    by_run = dict(zip(map(id, runs), results, strict=True))
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif id(part) in by_run:
            out.append(_project(part, by_run[id(part)], tgt_spaced))
        else:  # whitespace only, or tags around nothing: as it was read
            out.append(_emit(part.elements, part.text, 0, len(part.text)))
    return "".join(out)


def _project(run: Run, result, tgt_spaced: bool) -> str:
    """The run's translation with its elements around the aligned target words."""
    lead = run.text[: len(run.text) - len(run.text.lstrip())]
    trail = run.text[len(run.text.rstrip()) :]
    tgt_words = _target_words(result, tgt_spaced)
    src_words, weights = _source_words(run.text, result, tgt_spaced, len(tgt_words))
    links = _links(weights, result.alignment, len(tgt_words))
    _mark_punct(run.elements, run.text)
    _place(run.elements, src_words, links, 0, len(tgt_words), weights)
    _at_target(run.elements, tgt_words, result.text)
    body = _emit(run.elements, result.text, 0, len(result.text))
    for word, kept in run.kept.items():  # digits: the same escaped or not
        body = body.replace(word, kept, 1)
    return html.escape(lead, quote=False) + body + html.escape(trail, quote=False)


def _links(weights, alignment, n_target: int) -> dict[int, list[int]]:
    """Source word -> its target words: from the attention weights where there are some
    (each target word to the source word it attends to most, unless that link is a weak
    one), else from the word alignment."""
    links: dict[int, list[int]] = {}
    if weights is not None and weights.size:
        best = weights.max(axis=1)
        for t, s in enumerate(weights.argmax(axis=0).tolist()):
            if weights[s, t] >= LINK_SHARE * best[s]:
                links.setdefault(s, []).append(t)
        return links
    for s, t in alignment or []:
        if t < n_target:
            links.setdefault(s, []).append(t)
    return links


def _source_words(text: str, result, tgt_spaced: bool, n_target: int):
    """The source's words as character spans, and (source word, target word) attention
    weights where the alignment of words by spaces would not do: a source without spaces
    (Chinese) is one word to it, so its pieces are the words there, from the cross-attention
    (or, without one, its characters mapped onto the target in proportion)."""
    words = [(m.start(), m.end()) for m in WORD.finditer(text)]
    if len(words) != 1 or len(text.strip()) <= 1:
        return words, _word_weights(result, len(words), tgt_spaced, n_target)
    attention = getattr(result, "attention", None)
    if attention is not None:
        spans = _piece_spans(text, attention.source[:-1])
        weights = _piece_weights(attention, tgt_spaced, n_target)
        keep = [i for i, (a, b) in enumerate(spans) if b > a]
        if keep and weights is not None and weights.shape[0] == len(spans):
            return [spans[i] for i in keep], weights[keep]
    chars = [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    weights = np.zeros((len(chars), max(n_target, 1)))
    for i in range(len(chars)):
        weights[i, min(max(n_target, 1) - 1, i * max(n_target, 1) // len(chars))] = 1.0
    return chars, weights


def _word_weights(result, n_words: int, tgt_spaced: bool, n_target: int):
    """(source word, target word) weights of a spaced source: the most any piece of the
    source word gives any piece of the target word; None without attention (or when its
    pieces and the words disagree)."""
    attention = getattr(result, "attention", None)
    if attention is None:
        return None
    weights = _piece_weights(attention, tgt_spaced, n_target)
    word_of = piece_words(attention.source[:-1], by_space=True)
    if weights is None or not word_of or word_of[-1] + 1 != n_words:
        return None
    out = np.zeros((n_words, weights.shape[1]))
    for piece, word in enumerate(word_of):
        out[word] = np.maximum(out[word], weights[piece])
    return out


def _piece_weights(attention, tgt_spaced: bool, n_target: int):
    """(source piece, target word) cross-attention: each target word the most of its pieces."""
    cross = attention.cross_mean().float().numpy()
    sources, targets = len(attention.source) - 1, len(attention.target) - 1
    word_of = piece_words(attention.target[:-1], by_space=tgt_spaced)
    if not targets or word_of[-1] + 1 != n_target:
        return None
    out = np.zeros((sources, n_target))
    for t, word in enumerate(word_of):
        out[:, word] = np.maximum(out[:, word], cross[t, :sources])
    return out


def _piece_spans(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Character span of each piece in `text`, found in order ((at, at) where a piece is not
    there as written: a placeholder the text layer put in its place)."""
    spans, at = [], 0
    for piece in pieces:
        bare = piece.replace("▁", "").strip()
        where = text.find(bare, at) if bare else -1
        if where < 0:
            spans.append((at, at))
            continue
        spans.append((where, where + len(bare)))
        at = where + len(bare)
    return spans


def _target_words(result, spaced: bool) -> list[tuple[int, int]]:
    """Character spans of the translation's words as the alignment counts them: runs of
    non-space for a spaced target, the output's pieces otherwise."""
    if spaced or not result.pieces:
        return [(m.start(), m.end()) for m in WORD.finditer(result.text)]
    return _piece_spans(result.text, result.pieces)


def _place(elements: list[Element], src_words, links, lo: int, hi: int, weights=None) -> None:
    """Each element's target words: from the first to the last word aligned to the source
    words it encloses, moved inside its parent and after its previous sibling (so the tags
    stay nested and in order). An element with words but none aligned to them encloses the
    target word they attend to most (never left empty); one with no words sits where its
    source position says."""
    cursor = lo
    for e in elements:
        covered = [i for i, (a, b) in enumerate(src_words) if a < e.end and e.begin < b]
        targets = sorted(t for i in covered for t in links.get(i, []))
        if not targets and covered and weights is not None and hi > max(lo, cursor):
            first = max(lo, cursor)
            best = first + int(weights[covered, first:hi].max(axis=0).argmax())
            targets = [best]
        if targets:
            start, end = targets[0], targets[-1] + 1
        else:  # empty, or nothing aligned: as far in as its source position is
            before = sum(1 for a, _ in src_words if a < e.begin)
            start = end = lo + round(before * (hi - lo) / max(len(src_words), 1))
        e.start_word = min(max(start, cursor), hi)
        e.end_word = min(max(end, e.start_word), hi)
        _place(e.children, src_words, links, e.start_word, e.end_word, weights)
        cursor = e.end_word


def _mark_punct(elements: list[Element], text: str) -> None:
    for e in elements:
        e.ends_in_punct = e.end > e.begin and _is_punct(text[e.end - 1])
        _mark_punct(e.children, text)


def _is_punct(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _at_target(elements: list[Element], words: list[tuple[int, int]], text: str) -> None:
    """Each element's character offsets in the translation, from its target words; the
    punctuation a last word ends in stays outside unless the source's element ended in some
    (`<b>key</b>.`, not `<b>key.</b>`)."""
    for e in elements:
        e.begin = words[e.start_word][0] if e.start_word < len(words) else len(text)
        e.end = words[e.end_word - 1][1] if e.end_word > e.start_word else e.begin
        while not e.ends_in_punct and e.end > e.begin + 1 and _is_punct(text[e.end - 1]):
            e.end -= 1
        _at_target(e.children, words, text)


def _emit(elements: list[Element], text: str, lo: int, hi: int) -> str:
    """text[lo:hi], escaped, with the elements' tags at their offsets (kept nested: a child
    never starts before its parent or an earlier sibling's end)."""
    out, at = [], lo
    for e in elements:
        begin = min(max(e.begin, at), hi)
        end = min(max(e.end, begin), hi)
        out += [
            html.escape(text[at:begin], quote=False),
            e.open,
            _emit(e.children, text, begin, end),
            e.close,
        ]
        at = end
    out.append(html.escape(text[at:hi], quote=False))
    return "".join(out)
