"""The shipped models on whole documents (make e2e): plain strings (subtitles), markup ones
(Word runs, an HTML page) and a text file of real lines, read back by their libraries."""

from __future__ import annotations

import re

import pytest

from tests.test_documents import HTML, SRT, _docx, _read_docx, invoke

pytestmark = pytest.mark.e2e


def test_the_shipped_models_translate_documents_keeping_their_structure(tmp_path):
    """Plain strings (subtitles) and markup ones (Word runs) with the real models: English to
    Chinese, the bold word's translation bold, timings as they were."""
    import srt

    (tmp_path / "a.srt").write_text(SRT, encoding="utf-8")
    (tmp_path / "a.docx").write_bytes(_docx())
    (tmp_path / "a.html").write_text(HTML, encoding="utf-8")
    for name in ("a.srt", "a.docx", "a.html"):
        result = invoke(str(tmp_path / name), "-o", str(tmp_path / f"zh-{name}"))
        assert result.exit_code == 0, result.output
    cues = list(srt.parse((tmp_path / "zh-a.srt").read_text(encoding="utf-8")))
    assert [c.start for c in cues] == [c.start for c in srt.parse(SRT)]
    assert cues[0].content.startswith("<i>") and "车站" in cues[0].content
    body, cells, header = _read_docx((tmp_path / "zh-a.docx").read_bytes())
    assert ("车站", True) in body[0][1]
    assert all(re.search("[\u4e00-\u9fff]", text) for text in [*cells, header])
    page = (tmp_path / "zh-a.html").read_text(encoding="utf-8")
    for kept in ("<style>p { color: red; }</style>", '<script>var s = "Where is the station?";</script>',
                 "<pre>keep   this</pre>", '<p translate="no">Do not translate</p>', "<code>x = 1</code>",
                 "<!DOCTYPE html>", 'src="cat.png"'):  # fmt: skip
        assert kept in page, kept
    assert re.findall(r"</?\w+", page) == re.findall(r"</?\w+", HTML)
    assert "<b>车站</b>" in page and re.search('alt="[^"]*猫', page), page


def test_flagged_lines_of_a_document_are_named_on_stderr(tmp_path):
    """A line whose translation loses a clause is not trusted in silence: unasked (the
    confidence is on by default), its source is quoted in one warning, and the file keeps a line
    per sentence."""
    src = tmp_path / "real.txt"
    src.write_text(
        "The ticket costs $25.50 and the tour takes 3 hours.\nGood morning.\n", encoding="utf-8"
    )
    result = invoke(str(src), "-o", str(tmp_path / "zh.txt"))
    assert result.exit_code == 0, result.output
    assert "flagged as unreliable" in result.output and "The ticket costs" in result.output
    lines = (tmp_path / "zh.txt").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 3 and "$25.50" in lines[0], lines
