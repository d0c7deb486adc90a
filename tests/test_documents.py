"""`mtcli translate FILE -o OUT`: each format read back by the library that knows it, with
everything but the translated strings compared to the input; placeholders and code exact;
damaged files refused in one line with nothing written.

Most tests translate with a stand-in that swaps the case of the text and keeps tags,
placeholders and entities (what a faithful model does), so that what changed is known exactly;
the shipped models run once per kind of translator (plain and markup)."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.documents.formats import convert
from mtcli.documents.segments import PLACEHOLDER, TAG, Outcome, as_written, rewrap

KEEP = re.compile(rf"(<code[^>]*>[^<]*</code>|{TAG.pattern}|{PLACEHOLDER.pattern}|&#?\w+;)")


def swapcase(lines: list[str]) -> list[str]:
    """A 'translation' that keeps every tag, placeholder, entity and code element."""
    return [
        "".join(p if i % 2 else p.swapcase() for i, p in enumerate(KEEP.split(s))) for s in lines
    ]


def translated(ext: str, data: bytes | str, translate=swapcase) -> tuple[bytes, Outcome]:
    outcome = Outcome()
    raw = data.encode() if isinstance(data, str) else data
    return convert(ext, raw, translate, outcome), outcome


def invoke(*args: str):
    return CliRunner().invoke(main, ["translate", *args], catch_exceptions=False)


# ---------------------------------------------------------------- plain text
def test_txt_keeps_paragraphs_blank_lines_indentation_and_line_ends():
    src = "Where is the\r\nstation?\r\n\r\n\r\n    Why do we work?\r\n"
    out, outcome = translated(".txt", src)
    assert out.decode() == "wHERE IS THE\r\nSTATION?\r\n\r\n\r\n    wHY DO WE WORK?\r\n"
    assert (outcome.translated, outcome.kept) == (2, 0)


def test_rewrap_breaks_after_punctuation_and_never_before_a_closing_mark():
    assert rewrap("车站在哪里？为什么我们工作？", 2) == ["车站在哪里？", "为什么我们工作？"]
    assert rewrap("为什么我们工作？我有三只猫。", 2) == ["为什么我们工作？", "我有三只猫。"]
    lines = rewrap("一二三四五六七八九十。", 2)
    assert "".join(lines) == "一二三四五六七八九十。" and not lines[1].startswith("。")
    assert rewrap("你好{name}呀", 2) in (["你好", "{name}呀"], ["你好{name}", "呀"])


def test_rewrap_never_breaks_inside_a_number_a_date_or_an_address():
    text = "这张票$25.50和3小时。在2025-06-30写anna@example.org。"
    for n in range(2, 6):
        lines = rewrap(text, n)
        assert "".join(lines) == text
        for kept in ("$25.50", "2025-06-30", "anna@example.org"):
            assert any(kept in line for line in lines), (n, lines)


def test_txt_keeps_a_line_per_sentence_and_joins_only_a_wrapped_sentence():
    def upper_joined(lines):  # shows which lines went together
        return [f"[{line.upper()}]" for line in lines]

    src = "We are late.\nThe ticket costs\n$25.50 today.\n"
    out = translated(".txt", src, upper_joined)[0].decode()
    assert out == "[WE ARE LATE.]\n[THE TICKET COSTS\n$25.50 TODAY.]\n"


# ---------------------------------------------------------------- subtitles
SRT = """1
00:00:01,000 --> 00:00:02,500
<i>Where is the station?</i>

2
00:00:03,000 --> 00:00:05,000
Why do we work?
I have three cats.

3
00:01:00,250 --> 00:01:02,000
{\\an8}Good morning.

"""


def test_srt_keeps_numbers_timings_tags_and_each_cues_line_count():
    import srt

    out, outcome = translated(".srt", SRT)
    before, after = list(srt.parse(SRT)), list(srt.parse(out.decode()))
    assert [(c.index, c.start, c.end) for c in after] == [(c.index, c.start, c.end) for c in before]
    assert [c.content.count("\n") for c in after] == [c.content.count("\n") for c in before]
    assert after[0].content == "<i>wHERE IS THE STATION?</i>"
    assert after[1].content.split("\n") == ["wHY DO WE WORK?", "i HAVE THREE CATS."]
    assert after[2].content == "{\\an8}gOOD MORNING."
    assert outcome.translated == 3


def test_vtt_keeps_header_notes_identifiers_and_settings():
    src = (
        "WEBVTT - a film\n\nNOTE made by hand\n\nintro\n00:01.000 --> 00:02.000 align:start\n"
        "Where is the station?\n\n00:03.000 --> 00:04.000\nGood morning.\n"
    )
    out = translated(".vtt", src)[0].decode().split("\n")
    kept = [i for i, line in enumerate(src.split("\n")) if i not in (6, 9)]
    assert [out[i] for i in kept] == [src.split("\n")[i] for i in kept]
    assert (out[6], out[9]) == ("wHERE IS THE STATION?", "gOOD MORNING.")


def test_a_damaged_subtitle_file_is_one_line():
    with pytest.raises(ValueError, match="not SubRip"):
        translated(".srt", "1\n00:00:01,000 --> oops\nHello\n\n2\nnonsense -->\n")
    with pytest.raises(ValueError, match="not WebVTT"):
        translated(".vtt", "1\n00:01.000 --> 00:02.000\nHello\n")


# ---------------------------------------------------------------- i18n JSON
I18N = """{
  "greeting": "Good morning.",
  "menu": {"items": ["Why do we work?", "Hello, {name}!"], "count": 3, "on": true},
  "plural": "{count, plural, one {# cat} other {# cats}}",
  "empty": ""
}
"""


def test_json_translates_values_in_place_and_keeps_keys_structure_and_bytes():
    out, _ = translated(".json", I18N)
    text = out.decode()

    def blanked(text):  # every value "", keys and all else as they are
        strings = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:)?')
        return strings.sub(lambda m: m.group(0) if m.group(1) else '""', text)

    assert blanked(text) == blanked(I18N)
    value = json.loads(text)
    assert value["menu"]["items"] == ["wHY DO WE WORK?", "hELLO, {name}!"]
    assert value["menu"]["count"] == 3 and value["menu"]["on"] is True and value["empty"] == ""
    assert list(value) == list(json.loads(I18N))
    assert value["plural"] == "{count, plural, one {# CAT} other {# CATS}}"


def test_json_keeps_a_string_whose_translation_loses_a_placeholder():
    def drops(lines):
        return [line.replace("{name}", "").upper() for line in lines]

    value = json.loads(translated(".json", I18N, drops)[0])
    assert value["menu"]["items"] == ["WHY DO WE WORK?", "Hello, {name}!"]


def test_json_a_plural_keeps_its_count_sign_and_other_text_need_not():
    """`#` is the count only in a plural branch: a translation that drops it there keeps the
    source; in "Room #5" (or a select's branch) it is text, and the translation stands."""
    src = (
        '{"p": "{n, plural, one {# cat} other {# cats}}", "room": "Room #5", '
        '"s": "{g, select, f {#1 fan} other {fan}}"}'
    )

    def drops(lines):
        return [line.replace("#", "").upper() for line in lines]

    value = json.loads(translated(".json", src, drops)[0])
    assert value["p"] == "{n, plural, one {# cat} other {# cats}}"
    assert value["room"] == "ROOM 5" and value["s"] == "{g, select, f {1 FAN} other {FAN}}"


def test_json_nested_ten_thousand_deep_is_refused():
    with pytest.raises(ValueError, match="nested too deep"):
        translated(".json", "[" * 10_000 + "]" * 10_000)
    with pytest.raises(ValueError, match=r"not JSON: .* \(line 1, column 2\)"):
        translated(".json", "{oops}")


# ---------------------------------------------------------------- gettext
PO = r"""# A catalogue.
msgid ""
msgstr ""
"Language: zh\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#. shown on the start page
#: app.py:10
#, python-format
msgctxt "menu"
msgid "Hello %s, where is the station?"
msgstr ""

#: app.py:12
msgid "I have %d cat."
msgid_plural "I have %d cats."
msgstr[0] ""
msgstr[1] ""

msgid "Done"
msgstr "完成"

#, fuzzy
msgid "Draft"
msgstr "草稿"

msgid "Keep {name}"
msgstr ""
"""


def test_po_fills_msgstr_and_plurals_marks_fuzzy_and_keeps_the_rest():
    import polib

    out, outcome = translated(".po", PO)
    before, after = polib.pofile(PO), polib.pofile(out.decode())
    assert after.metadata == before.metadata and after.header == before.header
    fields = ("msgid", "msgid_plural", "msgctxt", "comment", "tcomment", "occurrences")
    assert [[getattr(e, f) for f in fields] for e in after] == [
        [getattr(e, f) for f in fields] for e in before
    ]
    hello, cats, done, draft, keep = after
    assert hello.msgstr == "hELLO %s, WHERE IS THE STATION?" and hello.flags == [
        "python-format",
        "fuzzy",
    ]
    assert (
        cats.msgstr_plural == {0: "i HAVE %d CAT.", 1: "i HAVE %d CATS."} and "fuzzy" in cats.flags
    )
    assert (done.msgstr, done.flags, draft.msgstr) == ("完成", [], "草稿")  # a person's: kept
    assert keep.msgstr == "kEEP {name}"
    assert outcome.translated == 4


def test_po_keeps_every_byte_but_the_entries_it_fills():
    """polib wrote the header's fields in its own order (Language moved above Content-Type)
    and rewrapped every entry: now only a filled entry is written anew."""
    po = (
        '# header\nmsgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Language: zh\\n"\n"X-Custom:  two  spaces\\n"\n\n'
        '#: a.c:1\nmsgid ""\n"Already "\n"done."\nmsgstr "Fait."\n\n'
        '#: a.c:2\nmsgid "Where is the station?"\nmsgstr ""\n\n'
        '#~ msgid "gone"\n#~ msgstr "parti"\n'
    )
    out = translated(".po", po)[0].decode()
    filled = '#: a.c:2\n#, fuzzy\nmsgid "Where is the station?"\nmsgstr "wHERE IS THE STATION?"\n'
    assert out == po.replace('#: a.c:2\nmsgid "Where is the station?"\nmsgstr ""\n', filled)


def test_srt_and_vtt_keep_every_byte_but_the_cue_text():
    """An .srt gained a trailing blank line and its timings were rewritten by `srt`: now
    numbers, timings, blank lines and the file's end stay as they were."""
    srt_text = (
        "1\r\n00:00:01,000 --> 00:00:02,500\r\nWhere is it?\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:05,000  X1:10\r\nWhy?"
    )
    out = translated(".srt", srt_text)[0].decode()
    assert out == srt_text.replace("Where is it?", "wHERE IS IT?").replace("Why?", "wHY?")
    vtt = "WEBVTT\n\n00:01.000 --> 00:02.000 align:start\nHello there.\n"
    assert translated(".vtt", vtt)[0].decode() == vtt.replace("Hello there.", "hELLO THERE.")


def test_po_leaves_untranslated_what_lost_a_placeholder():
    import polib

    def drops(lines):
        return [re.sub(r"%[sd]", "", line) for line in lines]

    hello, cats, *_ = polib.pofile(translated(".po", PO, drops)[0].decode())
    assert hello.msgstr == "" and "fuzzy" not in hello.flags
    assert cats.msgstr_plural == {0: "", 1: ""}


def test_a_po_with_a_syntax_error_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"not a gettext catalogue: .*line"):
        translated(".po", 'msgid "a"\nmsgstr "b"\nnonsense here\n')
    other = tmp_path / "other.po"
    other.write_text(PO, encoding="utf-8")
    with pytest.raises(ValueError, match="not a gettext catalogue"):  # text, never a path to read
        translated(".po", str(other))


# ---------------------------------------------------------------- Markdown
MARKDOWN = """---
title: Where is the station?
---
# Where is the *station*?

Call `make demo` or read [the guide](docs/guide.md "The guide") and <https://example.com>.
A second line of the same paragraph.

```sh
echo "Where is the station?"
```

    indented code stays

- Why do we **work**?
  1. Good morning.

> Thank you.

| Word | Note |
|------|------|
| Good morning. | ![a cat](cat.png) |

<div>Where is the station?</div>
"""


def test_markdown_keeps_code_targets_front_matter_html_and_structure():
    from markdown_it import MarkdownIt

    out = translated(".md", MARKDOWN)[0].decode()
    lines, before = out.split("\n"), MARKDOWN.split("\n")
    for kept in (0, 1, 2, 8, 9, 10, 12, 20, 23):  # front matter, fences, code, html block
        assert before[kept] in lines, before[kept]
    assert lines[3] == "# wHERE IS THE *STATION*?"
    assert lines[5] == (
        'cALL `make demo` OR READ [THE GUIDE](docs/guide.md "The guide") AND '
        "<https://example.com>. a SECOND LINE OF THE SAME PARAGRAPH."
    )
    assert "- wHY DO WE **WORK**?" in lines and "  1. gOOD MORNING." in lines
    assert "> tHANK YOU." in lines and "| gOOD MORNING. | ![A CAT](cat.png) |" in lines

    def shape(text):
        md = MarkdownIt("commonmark").enable("table")
        return [(t.type, t.tag, t.markup) for t in md.parse(text) if t.type != "inline"]

    assert shape(out) == shape(MARKDOWN)


def test_a_flagged_markdown_string_is_quoted_as_the_reader_wrote_it():
    """The warning quotes what the file says, not the fragment the model read: no tags, no
    entities, a code span kept aside shown as `…`."""
    sent: list[str] = []
    convert(
        ".md",
        b"Run `make test` now, **please** & thanks.\n",
        lambda x: sent.extend(x) or x,
        Outcome(),
    )
    assert [as_written(line) for line in sent] == ["Run `…` now, please & thanks."]
    assert "<code" in sent[0] and "&amp;" in sent[0]  # what the model read: a fragment


def test_markdown_image_alt_text_is_translated_and_a_cell_keeps_its_pipes():
    """An image's alt text is translated (its target kept; a bracket the translation writes
    escaped, one the source escaped left alone); a `|` a translation writes in a table cell is
    escaped, so the row keeps its cells."""
    from markdown_it import MarkdownIt

    src = '| Word | Note |\n|---|---|\n| Hello | x |\n\n![A red \\[cat\\]](cat.png "T") ![Dog](d.png)\n'

    def odd(lines):
        return [line.replace("Hello", "He|llo").replace("Dog", "D[o]g") for line in lines]

    out = translated(".md", src, odd)[0].decode()
    assert "| He\\|llo | x |" in out
    assert '![A red \\[cat\\]](cat.png "T") ![D\\[o\\]g](d.png)' in out
    tokens = MarkdownIt("commonmark").enable("table").parse(out)
    assert [t.type for t in tokens].count("td_open") == 2
    images = [c for t in tokens if t.type == "inline" for c in t.children if c.type == "image"]
    assert [i.attrGet("src") for i in images] == ["cat.png", "d.png"]
    assert (
        translated(".md", src)[0]
        .decode()
        .endswith('![a RED \\[CAT\\]](cat.png "T") ![dOG](d.png)\n')
    )


def test_markdown_reference_links_stay_reference_links():
    """Full, collapsed and shortcut reference links come back as references to the same
    definitions (a shortcut's label follows its translated text); every link's target, as the
    parser reads it, is the source's; a code span that looks like a link changes nothing."""
    from markdown_it import MarkdownIt

    src = (
        'See [the guide][g], [Docs] and [more][] or [inline](http://i "t") and `a[0]` [x].\n'
        "\nRun `[y](z)` then [the guide][g].\n\n[g]: http://g\n[docs]: http://d\n[more]: http://m\n"
    )
    out = translated(".md", src)[0].decode()
    assert out.startswith(
        'sEE [THE GUIDE][g], [dOCS][Docs] AND [MORE][more] OR [INLINE](http://i "t") AND `a[0]` [X].'
    )
    assert out.endswith("[g]: http://g\n[docs]: http://d\n[more]: http://m\n")

    def targets(text):
        inline = [t for t in MarkdownIt("commonmark").parse(text) if t.type == "inline"]
        return [c.attrGet("href") for t in inline for c in t.children if c.type == "link_open"]

    assert (
        targets(out) == targets(src) == ["http://g", "http://d", "http://m", "http://i", "http://g"]
    )


def test_markdown_spaces_stay_outside_the_markers():
    def moves(lines):
        return [line.replace('<em data-k="0">', '<em data-k="0"> ') for line in lines]

    out = translated(".md", "Where is the *station*?\n", moves)[0].decode()
    assert out == "Where is the  *station*?\n"


# ---------------------------------------------------------------- HTML
HTML = """<!DOCTYPE html>
<html><head><title>Good morning</title>
<style>p { color: red; }</style><script>var s = "Where is the station?";</script></head>
<body><p>Where is the <b>station</b>?</p>
<img src="cat.png" alt="A red cat" title='Tom&#39;s "cat"'>
<pre>keep   this</pre><p translate="no">Do not translate</p><code>x = 1</code>
</body></html>
"""


def test_html_translates_shown_attributes_in_their_tags_with_their_quotes_escaped():
    seen = []

    def attributes_only(lines):  # the document itself comes back as it went
        seen.extend(line for line in lines if "<" in line)
        return [line if "<" in line else swapcase([line])[0] for line in lines]

    out = translated(".html", HTML, attributes_only)[0].decode()
    assert 'alt="a RED CAT"' in out and "title='tOM&#39;S \"CAT\"'" in out
    assert out == HTML.replace('alt="A red cat"', 'alt="a RED CAT"').replace(
        "title='Tom&#39;s \"cat\"'", "title='tOM&#39;S \"CAT\"'"
    )
    assert seen == [out.strip()]  # the whole document, once, through the markup mode


# ---------------------------------------------------------------- Word
def _docx() -> bytes:
    import docx

    document = docx.Document()
    p = document.add_paragraph("Where is the ")
    p.add_run("station").bold = True
    p.add_run("?")
    document.add_heading("Why do we work?", level=1)
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Good morning.", "Thank you."
    document.sections[0].header.paragraphs[0].text = "I have three cats."
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _read_docx(data: bytes):
    import docx

    document = docx.Document(io.BytesIO(data))
    body = [(p.style.name, [(r.text, r.bold) for r in p.runs]) for p in document.paragraphs]
    cells = [c.text for c in document.tables[0].rows[0].cells]
    return body, cells, document.sections[0].header.paragraphs[0].text


def test_docx_keeps_styles_run_formatting_tables_and_headers():
    out, outcome = translated(".docx", _docx())
    body, cells, header = _read_docx(out)
    assert body == [
        ("Normal", [("wHERE IS THE ", None), ("STATION", True), ("?", None)]),
        ("Heading 1", [("wHY DO WE WORK?", None)]),
    ]
    assert (cells, header) == (["gOOD MORNING.", "tHANK YOU."], "i HAVE THREE CATS.")
    assert outcome.translated == 5


def test_docx_runs_follow_the_translations_word_order():
    def reorders(lines):  # "X<span>Y</span>Z" -> "<span>Y</span>XZ", as Chinese puts 车站 first
        return [re.sub(r"^(.*?)(<span[^>]*>.*?</span>)(.*)$", r"\2\1\3", line) for line in lines]

    body = _read_docx(translated(".docx", _docx(), reorders)[0])[0]
    assert body[0][1] == [("station", True), ("Where is the ?", None)]


def test_a_truncated_docx_and_a_zip_bomb_are_refused(monkeypatch):
    from mtcli.documents import word

    with pytest.raises(ValueError, match="not a whole zip archive"):
        translated(".docx", _docx()[:3000])
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\0" * (3 << 20))  # 3 MB of zeros in ~3 kB
    monkeypatch.setattr(word, "MAX_UNPACKED", 2 << 20)
    with pytest.raises(ValueError, match="unpacks to 3 MB"):
        translated(".docx", bomb.getvalue())


# ---------------------------------------------------------------- the command
def test_the_command_checks_its_output_before_anything_loads(tmp_path):
    src = tmp_path / "a.srt"
    src.write_text(SRT, encoding="utf-8")
    theirs = tmp_path / "theirs.srt"
    theirs.write_text("mine\n", encoding="utf-8")
    cases = {
        (str(src),): "give -o OUT",
        (str(src), "-o", str(src), "--force"): "is the document itself",
        (str(src), "-o", str(theirs)): "exists; mtcli will not overwrite it",
        (
            str(src),
            "-o",
            str(tmp_path / "x.srt"),
            "--file-format",
            "pdf",
        ): "--file-format pdf: one of",
        (str(tmp_path / "none.srt"), "-o", "x", "--file-format", "srt"): "no such file",
        (str(src), "-o", str(tmp_path / "y.srt"), "--format", "jsonl"): "its own format",
        (str(src), "-o", str(tmp_path / "z.srt"), "--min-confidence", "0.5"): "--min-confidence",
    }
    for args, message in cases.items():
        result = invoke(*args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    assert theirs.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.srt",
        "theirs.srt",
    ]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("bad.txt", b"caf\xe9\n", "not UTF-8 (byte 3)"),
        ("bad.po", b'msgid "a"\nnonsense\n', "not a gettext catalogue"),
        ("bad.docx", b"PK\x03\x04 truncated", "not a Word document: not a whole zip"),
        ("deep.json", b"[" * 10_000 + b"]" * 10_000, "nested too deep"),
    ],
)
def test_a_damaged_document_is_one_line_naming_it_and_nothing_is_written(
    tmp_path, name, data, message
):
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / ("out" + src.suffix)
    result = invoke(str(src), "-o", str(out))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {src}: {message}"), lines
    assert not out.exists() and "Traceback" not in result.output
