"""A document file translated into another: its format from the extension (or --file-format),
read whole, its strings translated, the result written atomically (fsync, rename) so a kill
leaves the old output or the new one, never half of one."""

from __future__ import annotations

from pathlib import Path

from mtcli import files
from mtcli.documents.formats import FORMATS, convert, missing_library
from mtcli.documents.segments import DocumentError, Outcome, Translate
from mtcli.errors import UserError

MAX_BYTES = 64 << 20  # a document bigger than this is not one to translate in one go


def document_format(path: str | Path, asked: str | None = None) -> str | None:
    """The format of `path` (".srt"), from --file-format or its extension; None where the path
    is not a file of a format mtcli translates (then it is text to translate, not a file)."""
    path = Path(path)
    if asked:
        ext = "." + asked.lstrip(".").lower()
        if ext not in FORMATS:
            names = ", ".join(f.name for f in FORMATS.values())
            raise UserError(f"--file-format {asked}: one of {names}")
        if not path.is_file():
            raise UserError(f"{path}: no such file (--file-format {asked} translates a file)")
    else:
        ext = path.suffix.lower()
        if ext not in FORMATS or not path.is_file():
            return None
    if library := missing_library(ext):  # before the model loads, not after
        raise UserError(f"{path}: a {ext} file needs {library}: pip install 'mtcli[documents]'")
    return ext


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
