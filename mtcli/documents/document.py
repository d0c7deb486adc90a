"""A document file translated into another: its format from the extension (or --file-format),
read whole, its strings translated, the result written atomically (fsync, rename) so a kill
leaves the old output or the new one, never half of one."""

from __future__ import annotations

import os
import re
from pathlib import Path

from mtcli import files
from mtcli.data.textio import binary_kind
from mtcli.documents.formats import FORMATS, convert, extension_of, missing_library
from mtcli.documents.segments import DocumentError, Outcome, Translate
from mtcli.errors import UserError

MAX_BYTES = 64 << 20  # a document bigger than this is not one to translate in one go


# a word's ending as a file extension: up to 10 letters and digits after its last dot, one of them
# a letter ("shot.png", "report.docx"; "2.0" and "Hello." are no extension). Bounded, so a
# megabyte-long word is checked in linear time
EXTENSION = re.compile(r"[^.\s]\.([A-Za-z0-9]{1,10})$")
READS = " ".join(FORMATS)  # the extensions named where a file is not one mtcli reads


def names_a_file(text: str, output_path: str | None = None) -> bool:
    """Whether translate's TEXT names a file rather than being text to translate: it exists,
    or it is one word with a path separator or a file extension, or -o names a document."""
    one_word = bool(text) and not any(c.isspace() for c in text)
    if one_word and os.path.lexists(text):
        return True
    separator = "/" in text or os.sep in text
    # out.txt is where lines go too; out.srt or out.docx is only ever a document
    writes_document = extension_of(Path(output_path or "-").name) in set(FORMATS) - {".txt"}
    extension = EXTENSION.search(text)
    named = bool(extension) and any(c.isalpha() for c in extension.group(1))
    return one_word and (separator or named or writes_document)


def document_format(path: str | Path, asked: str | None = None) -> str:
    """The format of `path` (".srt"), a file translate's TEXT names (names_a_file), from
    --file-format or its extension; a missing file, or one of a format mtcli does not read, is
    one line saying so."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "no such file"
        raise UserError(f"{path}: {what} (a TEXT that names a file is translated as a file)")
    if asked:
        ext = "." + asked.lstrip(".").lower()
        if ext not in FORMATS:
            names = ", ".join(f.name for f in FORMATS.values())
            raise UserError(f"--file-format {asked}: one of {names}")
    else:
        ext = extension_of(path.name)
        if ext not in FORMATS:
            raise UserError(_not_read(path))
    if library := missing_library(ext):  # before the model loads, not after
        raise UserError(f"{path}: a {ext} file needs {library}: pip install 'mtcli[documents]'")
    return ext


def _not_read(path: Path) -> str:
    """Why mtcli does not translate the file `path`: what it is, and what mtcli reads."""
    with open(path, "rb") as f:
        kind = binary_kind(f.read(16))
    what = f"{kind}, " if kind else (f"a {path.suffix} file, " if path.suffix else "")
    return (
        f"{path}: {what}not a format mtcli translates: {READS} (else --file-format, or lines "
        "with -i FILE)"
    )


def translate_document(src: str | Path, out: str | Path, ext: str, translate: Translate) -> Outcome:
    """Translate the document `src` into `out` (checked by the caller: not the user's, not
    `src`); a damaged file is one line naming it, and nothing is written."""
    src = Path(src)
    size = src.stat().st_size
    if size > MAX_BYTES:
        raise UserError(
            f"{src}: {size / 1e6:,.0f} MB; documents of at most {MAX_BYTES >> 20} MB are translated"
        )
    data, outcome = translate_bytes(str(src), src.read_bytes(), ext, translate)
    files.write_file_atomic(out, data)
    return outcome


def translate_bytes(
    name: str, data: bytes, ext: str, translate: Translate
) -> tuple[bytes, Outcome]:
    """A document's bytes translated (the CLI's file, the server's upload); a damaged one is a
    UserError naming it."""
    outcome = Outcome()
    try:
        return convert(ext, data, translate, outcome), outcome
    except DocumentError as e:
        raise UserError(f"{name}: {e}") from None
