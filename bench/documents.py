"""Documents: words/s of `mtcli translate FILE` for each format, against the same sentences
translated as plain lines in the same run (the ratio is what a format's reading, markup and
writing cost beside the decode).

    python bench/documents.py [--sentences 300]

The sentences are the first of Tatoeba's en-zh test set (../shared/data), laid out as a file
of each kind: a line per sentence (txt), a cue per sentence (srt, vtt), a string per key (json),
an entry per msgid (po), paragraphs and list items with emphasis (md), paragraphs with a bold
word (html), paragraphs with a bold run (docx). The shipped en-zh-tiny, beam 5 and the
confidence on (translate's defaults), on the CPU; each format is timed twice, interleaved with
the lines (and the lines without the confidence, --no-confidence's cost), and the faster run
kept. Writes bench/results/documents.json.
"""

from __future__ import annotations

import argparse
import html
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED, SHIPPED, read_lines, write_result  # noqa: E402


def _emphasised(sentence: str, open_: str, close: str) -> str:
    """The sentence with its longest word wrapped in a markup pair."""
    words = sentence.split()
    longest = max(range(len(words)), key=lambda i: len(words[i].strip(".,?!")))
    word = words[longest]
    core = word.rstrip(".,?!")
    words[longest] = open_ + core + close + word[len(core) :]
    return " ".join(words)


def _srt(sentences: list[str], vtt: bool = False) -> str:
    cues = []
    for i, s in enumerate(sentences):
        start, end = f"00:{i // 60:02d}:{i % 60:02d}", f"00:{i // 60:02d}:{i % 60:02d}"
        sep = "." if vtt else ","
        cues.append(
            f"{'' if vtt else f'{i + 1}' + chr(10)}{start}{sep}000 --> {end}{sep}900\n{s}\n"
        )
    return ("WEBVTT\n\n" if vtt else "") + "\n".join(cues)


def _po(sentences: list[str]) -> str:
    head = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    entries = [f'msgid {json.dumps(s, ensure_ascii=False)}\nmsgstr ""\n' for s in sentences]
    return "\n".join([head, *entries])


def _md(sentences: list[str]) -> str:
    parts = []
    for i, s in enumerate(sentences):
        marked = _emphasised(s, "*", "*")
        parts.append(f"# {marked}" if i % 10 == 0 else f"- {marked}" if i % 3 == 0 else marked)
    return "\n\n".join(parts) + "\n"


def _html(sentences: list[str]) -> str:
    body = "\n".join(f"<p>{_emphasised(html.escape(s), '<b>', '</b>')}</p>" for s in sentences)
    return f"<!doctype html>\n<html><body>\n{body}\n</body></html>\n"


def _docx(sentences: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for s in sentences:
        words = s.split(" ", 1)
        paragraph = document.add_paragraph()
        paragraph.add_run(words[0]).bold = True
        paragraph.add_run(" " + words[1] if len(words) > 1 else "")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def documents(sentences: list[str]) -> dict[str, bytes]:
    """A file of each format holding `sentences` as its text."""
    texts = {
        ".txt": "\n".join(sentences) + "\n",
        ".srt": _srt(sentences),
        ".vtt": _srt(sentences, vtt=True),
        ".json": json.dumps({f"k{i}": s for i, s in enumerate(sentences)}, ensure_ascii=False),
        ".po": _po(sentences),
        ".md": _md(sentences),
        ".html": _html(sentences),
    }
    return {**{ext: t.encode() for ext, t in texts.items()}, ".docx": _docx(sentences)}


def _translators():
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    def build(markup: bool, confidence: bool = True):
        options = EngineOptions(device="cpu", html=markup, confidence=confidence)
        return build_translator([SHIPPED], DecodeConfig(), options)

    return build(False), build(True), build(False, confidence=False)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=300)
    args = ap.parse_args()
    from mtcli.documents.document import translate_bytes
    from mtcli.documents.formats import FORMATS

    sentences = read_lines(SHARED / "tatoeba-en-zh" / "test.en", args.sentences)
    words = sum(len(s.split()) for s in sentences)
    plain, markup, bare = _translators()
    for translator in (plain, markup, bare):  # warmed up: the first batch pays for allocation
        translator.translate_chunk(sentences[:8])

    def lines() -> None:
        plain.translate_chunk(sentences)

    def bare_lines() -> None:
        bare.translate_chunk(sentences)

    results, best_lines, best_bare = {}, float("inf"), float("inf")
    for ext, data in documents(sentences).items():
        translator = markup if FORMATS[ext].markup else plain

        outcomes = []

        def run(data=data, ext=ext, translator=translator, outcomes=outcomes) -> None:
            translate = lambda batch: [t.text for t in translator.translate_chunk(batch)]  # noqa: E731
            outcomes.append(translate_bytes("bench" + ext, data, ext, translate)[1])

        times = []
        for _ in range(2):
            best_lines = min(best_lines, _timed(lines))
            best_bare = min(best_bare, _timed(bare_lines))
            times.append(_timed(run))
        results[ext] = {
            "seconds": round(min(times), 2), "words_per_s": round(words / min(times)),
            # strings written as their source: their translation lost a placeholder or tag
            "strings": outcomes[0].translated + outcomes[0].kept, "kept_as_source": outcomes[0].kept,
        }  # fmt: skip
        print(f"{ext}: {results[ext]['words_per_s']:,} words/s", file=sys.stderr, flush=True)
    for r in results.values():
        r["vs_lines"] = round(best_lines / r["seconds"], 2)
    record = {
        "sentences": len(sentences), "words": words, "model": SHIPPED.name, "beam": 5,
        "confidence": True,
        "lines": {"seconds": round(best_lines, 2), "words_per_s": round(words / best_lines)},
        "lines_no_confidence": {"seconds": round(best_bare, 2), "words_per_s": round(words / best_bare)},
        "formats": results,
    }  # fmt: skip
    print(write_result("documents", record))


if __name__ == "__main__":
    main()
