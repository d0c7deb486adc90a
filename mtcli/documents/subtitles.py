"""Subtitles, SubRip (.srt, read and written by `srt`) and WebVTT (.vtt): cue numbers, timings,
settings, headers and NOTE blocks as they were; the lines of one cue translated together and
re-wrapped to the cue's line count; tags that wrap a whole cue (<i>...</i>, {\\an8}) kept
around it."""

from __future__ import annotations

import re

from mtcli.documents.segments import (
    DocumentError,
    Outcome,
    Translate,
    decoded,
    joined,
    newline,
    rewrap,
    translate_strings,
)

WRAPPING_TAG = re.compile(r"^((?:<[A-Za-z][^<>]*>|\{\\[^{}]*\})+)(.*?)((?:</[A-Za-z]+>)*)$", re.S)


def _unwrapped(lines: list[str]) -> tuple[str, str, str]:
    """A cue's text as (tags opening it, the text inside, tags closing it)."""
    text = joined(lines)
    match = WRAPPING_TAG.match(text) if lines else None
    if match and match.group(1) and (match.group(3) or match.group(1).startswith("{")):
        return match.group(1), match.group(2), match.group(3)
    return "", text, ""


def cue_texts(cues: list[list[str]], translate: Translate, outcome: Outcome) -> list[list[str]]:
    """Each cue's lines translated together, as many lines as it had."""
    parts = [_unwrapped(lines) for lines in cues]
    done = translate_strings([inside for _, inside, _ in parts], translate, outcome)
    out = []
    for lines, (opening, _, closing), translation in zip(cues, parts, done, strict=True):
        wrapped = rewrap(translation, max(len(lines), 1))
        wrapped[0] = opening + wrapped[0]
        wrapped[-1] += closing
        out.append(wrapped)
    return out


def translate(data: bytes, translate: Translate, outcome: Outcome, ext: str) -> bytes:
    text = decoded(data)
    if ext == ".vtt":
        return _vtt(text, translate, outcome).encode("utf-8")
    return _srt(text, translate, outcome).encode("utf-8")


def _srt(text: str, translate: Translate, outcome: Outcome) -> str:
    import srt

    try:
        cues = list(srt.parse(text))
    except srt.SRTParseError as e:
        raise DocumentError(f"not SubRip: {str(e).splitlines()[0][:160]}") from None
    nl = newline(text)
    lines = text.split(nl)
    found = _cue_lines(lines)
    if len(found) != len(cues):  # cues the line scan does not see as srt does: srt writes all
        done = cue_texts([c.content.split("\n") for c in cues], translate, outcome)
        for cue, new in zip(cues, done, strict=True):
            cue.content = "\n".join(new)
        return srt.compose(cues, reindex=False, strict=False).replace("\n", nl)
    return _with_cues_translated(lines, found, translate, outcome, nl)


def _vtt(text: str, translate: Translate, outcome: Outcome) -> str:
    nl = newline(text)
    lines = text.split(nl)
    if not lines[0].startswith("WEBVTT"):
        raise DocumentError("not WebVTT (its first line is not WEBVTT)")
    return _with_cues_translated(lines, _cue_lines(lines), translate, outcome, nl)


def _cue_lines(lines: list[str]) -> list[tuple[int, int]]:
    """(index of the first text line, number of text lines) of each cue: the lines after a
    timing line, up to the blank line ending the cue (SubRip and WebVTT alike)."""
    cues = []
    i = 0
    while i < len(lines):
        if "-->" in lines[i]:
            start = i = i + 1
            while i < len(lines) and lines[i].strip():
                i += 1
            cues.append((start, i - start))
        i += 1
    return cues


def _with_cues_translated(lines, cues, translate: Translate, outcome: Outcome, nl: str) -> str:
    """The file's lines with each cue's text lines translated in place: numbers, timings,
    blank lines and the file's end stay byte for byte."""
    done = cue_texts([lines[s : s + n] for s, n in cues], translate, outcome)
    for (start, n), new in reversed(list(zip(cues, done, strict=True))):
        if n:
            lines[start : start + n] = new
    return nl.join(lines)
