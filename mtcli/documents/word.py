"""Word documents (.docx, read and written by python-docx): the text of every paragraph (body,
tables, headers and footers) translated with each run's formatting kept. A paragraph's runs
travel as <span> elements through the text layer's markup mode, so that a bold word's
translation is the bold one; images, fields and everything but the runs' text are kept. The
zip is checked before it is opened: a damaged one, or one that unpacks to more than a document
holds (a zip bomb), is refused."""

from __future__ import annotations

import copy
import html
import io
import re
import zipfile

from mtcli.documents.segments import DocumentError, Outcome, Translate, translate_strings

MAX_UNPACKED = 256 << 20  # bytes: far above a real document's XML, far below a bomb's
MAX_MEMBERS = 10_000
SPAN = re.compile(r'<span data-k="(\d+)">|</span>|<[^>]*>|([^<]+)')


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    document = _opened(data)
    paragraphs = [
        p for p in _paragraphs(document) if "".join(r.text for r in _text_runs(p)).strip()
    ]
    plans = [_Plan(p) for p in paragraphs]
    done = translate_strings([plan.fragment for plan in plans], translate, outcome)
    for plan, translation in zip(plans, done, strict=True):
        if translation != plan.fragment:
            plan.write(translation)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


class _Plan:
    """A paragraph's text runs as one HTML fragment: the runs formatted as most of its text is
    are plain text, each other run a <span> (a bold word, a link), so that the translation
    can put them in its own order; written back as runs copied from the ones they came from."""

    def __init__(self, paragraph) -> None:
        self.paragraph = paragraph
        self.runs = _text_runs(paragraph)
        self.keys = [_formatting(r) for r in self.runs]
        weight: dict[str, int] = {}
        for run, key in zip(self.runs, self.keys, strict=True):
            weight[key] = weight.get(key, 0) + len(run.text)
        self.base = max(weight, key=weight.get)
        self.fragment = "".join(
            html.escape(r.text, quote=False)
            if key == self.base
            else f'<span data-k="{i}">{html.escape(r.text, quote=False)}</span>'
            for i, (r, key) in enumerate(zip(self.runs, self.keys, strict=True))
        )

    def write(self, translation: str) -> None:
        base = self.keys.index(self.base)
        carriers = list(dict.fromkeys(_carrier(r) for r in self.runs))
        anchor = carriers[0]
        for number, text in _segments(translation):
            if text:
                anchor.addprevious(_copy(self.runs[base if number is None else number], text))
        for element in carriers:
            element.getparent().remove(element)


def _formatting(run) -> str:
    """What a run looks like: its properties' XML, and the link it is part of."""
    from lxml import etree

    rpr = run._r.rPr
    parent = run._r.getparent()
    link = (parent.get(qn("r:id")) or "") if parent.tag == qn("w:hyperlink") else ""
    return (etree.tostring(rpr).decode() if rpr is not None else "") + link


def _carrier(run):
    """The element a run is written as: itself, or the hyperlink around it."""
    parent = run._r.getparent()
    return parent if parent.tag == qn("w:hyperlink") else run._r


def _copy(run, text: str):
    """A copy of `run` (in its hyperlink, if it is in one) holding `text` alone."""
    from docx.text.run import Run

    carrier = copy.deepcopy(_carrier(run))
    runs = carrier.findall(qn("w:r")) if carrier.tag == qn("w:hyperlink") else [carrier]
    for extra in runs[1:]:
        carrier.remove(extra)
    Run(runs[0], run._parent).text = text
    return carrier


def _segments(translation: str) -> list[tuple[int | None, str]]:
    """A translated fragment as (run number, or None for the base formatting; its text)."""
    out: list[tuple[int | None, str]] = []
    current = None
    for match in SPAN.finditer(translation):
        number, text = match.groups()
        if number is not None:
            current = int(number)
        elif match.group(0) == "</span>":
            current = None
        elif text is not None:
            out.append((current, html.unescape(text)))
    return out


def check_archive(data: bytes) -> None:
    """A zip that opens, and unpacks to no more than a document could hold."""
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, EOFError, ValueError):
        raise DocumentError("not a Word document: not a whole zip archive (truncated?)") from None
    unpacked = sum(m.file_size for m in members)
    if unpacked > MAX_UNPACKED or len(members) > MAX_MEMBERS:
        raise DocumentError(
            f"unpacks to {unpacked / 1e6:,.0f} MB in {len(members):,} files: "
            f"refused (at most {MAX_UNPACKED >> 20} MB)"
        )


def _opened(data: bytes):
    import docx

    check_archive(data)
    try:
        return docx.Document(io.BytesIO(data))
    except Exception as e:  # python-docx raises what its XML and zip readers raise
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise DocumentError(f"not a Word document: {reason}") from None


def _paragraphs(document):
    """Every paragraph with text a reader sees: the body's, its tables' (merged cells once),
    and each section's headers and footers."""
    yield from _inner(document)
    for section in document.sections:
        for part in (
            section.header,
            section.footer,
            section.first_page_header,
            section.first_page_footer,
            section.even_page_header,
            section.even_page_footer,
        ):
            if not part.is_linked_to_previous:
                yield from _inner(part)


def _inner(container, seen=None):
    from docx.table import Table

    seen = set() if seen is None else seen
    for item in container.iter_inner_content():
        if isinstance(item, Table):
            for row in item.rows:
                for cell in row.cells:
                    if id(cell._tc) not in seen:
                        seen.add(id(cell._tc))
                        yield from _inner(cell, seen)
        else:
            yield item


def _text_runs(paragraph) -> list:
    """The paragraph's runs that hold text (those inside hyperlinks too, in reading order),
    and no picture: a picture's run is kept where it is."""
    from docx.text.hyperlink import Hyperlink

    runs = []
    for item in paragraph.iter_inner_content():
        runs.extend(item.runs if isinstance(item, Hyperlink) else [item])
    return [r for r in runs if r.text and not r._r.findall(".//" + qn("w:drawing"))]


def qn(name: str) -> str:
    """A WordprocessingML name in Clark notation (w:r -> {http://...main}r)."""
    from docx.oxml.ns import qn as clark

    return clark(name)
