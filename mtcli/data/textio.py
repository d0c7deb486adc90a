"""Text in: files and streams read line by line as UTF-8, with errors that name file and line.

Imports only the stdlib, so commands that only read text start fast. Used for corpora, the
tokenizer's training text, translate's input and eval's hypotheses alike.
"""

from __future__ import annotations

import gzip
import json
import os
import select
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from mtcli.errors import UserError


def open_binary(path: str | Path) -> BinaryIO:
    """A file's bytes; a name ending in .gz is read through gzip (corpora are shipped so)."""
    try:
        if str(path).endswith(".gz"):
            with open(path, "rb"):  # the errors below name a missing file, not gzip's
                pass
            return gzip.open(path, "rb")
        return open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None


def decode_line(raw: bytes, name: str | Path, line_no: int) -> str:
    """One line as text without its line ending; invalid UTF-8 names the file, line and byte.

    A byte-order mark opening line 1 (as Windows editors save UTF-8) is dropped: it is not
    text, and kept it became a piece of its own and a difference from the reference.
    """
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        if line_no == 1 and (kind := binary_kind(raw)):
            raise UserError(f"{name}: {kind}, not text: mtcli reads UTF-8 text") from None
        raise UserError(f"{name}:{line_no}: invalid UTF-8 (byte {e.start + 1})") from None
    return text.removeprefix("\ufeff") if line_no == 1 else text


# the first bytes of the files most often given where text was meant, and what each is
MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive (or an Office or OpenDocument file)",
    b"\x1f\x8b": "a gzip archive",
    b"BZh": "a bzip2 archive",
    b"\xfd7zXZ": "an xz archive",
    b"7z\xbc\xaf": "a 7-Zip archive",
    b"\x7fELF": "a program (ELF)",
    b"\xd0\xcf\x11\xe0": "an old Office document (.doc, .xls, .ppt)",
    b"\xff\xfe": "UTF-16 text (save it as UTF-8)",
    b"\xfe\xff": "UTF-16 text (save it as UTF-8)",
}


def binary_kind(head: bytes) -> str | None:
    """What a file is, from its first bytes, where it is a known kind that is not UTF-8 text
    ("a PNG image"); None otherwise. RIFF holds WebP images and WAV sound alike."""
    if head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE"):
        return "a WebP image" if head[8:12] == b"WEBP" else "a WAV sound file"
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def invalid_utf8_at(text: str) -> int | None:
    """The byte offset (0-based) at which `text` stops being valid UTF-8, None if it is valid.

    A str can still hold what is not text: a command-line argument whose bytes were not UTF-8
    (Python keeps each such byte as a lone surrogate) or a JSON string with a lone surrogate
    escape; sentencepiece rejected both with an internal error.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return len(text[: e.start].encode("utf-8"))
    return None


def read_lines(path: str | Path) -> Iterator[str]:
    """Stream the lines of a UTF-8 file without newlines; '-' is stdin."""
    if str(path) == "-":
        yield from read_stream(sys.stdin.buffer, "stdin")
        return
    with open_binary(path) as f:
        yield from read_stream(f, path)


def read_stream(f: BinaryIO, name: str | Path) -> Iterator[str]:
    line_no = 1
    while raw := read_raw_line(f, name, line_no):
        yield decode_line(raw, name, line_no)
        line_no += 1


# far beyond any sentence; without a cap, input without newlines (a binary file, /dev/zero)
# was read into memory whole, as one line
MAX_LINE_BYTES = 1 << 20


def read_raw_line(f: BinaryIO, name: str | Path, line_no: int) -> bytes:
    """Line `line_no`'s bytes with their ending (b"" at the end of the file), refused past
    MAX_LINE_BYTES."""
    try:
        raw = f.readline(MAX_LINE_BYTES + 2)  # room for the longest line and its \r\n
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise UserError(f"{name}:{line_no}: damaged gzip data ({e or 'truncated'})") from None
    if len(raw) > MAX_LINE_BYTES and len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:  # no copy per line
        _too_long(name, line_no)
    return raw


def _too_long(name: str | Path, line_no: int):
    raise UserError(f"{name}:{line_no}: a line of more than {MAX_LINE_BYTES:,} bytes (is it text?)")


def read_json(path: Path):
    """A JSON file's value; invalid JSON (or text) is one line naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def read_json_object(path: Path, missing: str = "missing") -> dict:
    """A JSON file that must hold an object: one line naming the file when it is absent
    (`missing` says why it should be there), invalid, or another kind of value."""
    if not path.is_file():
        raise UserError(f"{path}: {missing}")
    value = read_json(path)
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def read_chunks(fd: int, max_lines: int, name: str = "stdin") -> Iterator[list[str]]:
    """Lines from a file descriptor in chunks of at most `max_lines`.

    A chunk also ends when no more input is ready right now, so a slow producer
    (`tail -f log | mtcli translate`) sees each line translated as soon as it arrives,
    while a fast one still gets full, well-sorted batches.
    """
    pending = b""
    lines: list[str] = []
    line_no = 0
    while True:
        if lines and (len(lines) >= max_lines or not select.select([fd], [], [], 0)[0]):
            yield lines
            lines = []
        data = os.read(fd, 1 << 16)
        if not data:
            break
        *complete, pending = (pending + data).split(b"\n")
        if len(pending) > MAX_LINE_BYTES:
            _too_long(name, line_no + len(complete) + 1)
        for raw in complete:
            line_no += 1
            lines.append(decode_line(raw, name, line_no))
        while len(lines) > max_lines:
            yield lines[:max_lines]
            lines = lines[max_lines:]
    if pending:
        lines.append(decode_line(pending, name, line_no + 1))
    if lines:
        yield lines
