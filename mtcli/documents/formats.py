"""The formats mtcli translates, by extension: the module that reads and writes each (one per
format, each `translate(data, translate, outcome, ext) -> bytes`) and whether its strings are
HTML fragments for the text layer's markup mode (tags placed by word alignment)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec

from mtcli.documents.segments import DocumentError, Outcome, Translate


@dataclass(frozen=True)
class Format:
    name: str  # what --file-format and the server call it
    module: str  # mtcli.documents.<module>
    markup: bool  # its strings are HTML fragments: translated with html=True
    library: str = ""  # the library that reads and writes it (the documents extra), if any


FORMATS = {
    ".txt": Format("txt", "text", False),
    ".srt": Format("srt", "subtitles", False, "srt"),
    ".vtt": Format("vtt", "subtitles", False),
    ".json": Format("json", "json_strings", False),
    ".po": Format("po", "po", False, "polib"),
    ".pot": Format("pot", "po", False, "polib"),
    ".md": Format("md", "markdown", True, "markdown_it"),
    ".html": Format("html", "html", True),
    ".htm": Format("htm", "html", True),
    ".docx": Format("docx", "word", True, "docx"),
}


def extension_of(name: str) -> str:
    """A file name's format as FORMATS keys it: its extension after the last dot, lower case
    ("" where it has none)."""
    return "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""


def missing_library(ext: str) -> str | None:
    """The library the format `ext` needs and this install lacks (None: it has what it needs)."""
    library = FORMATS[ext].library
    return library if library and find_spec(library) is None else None


def convert(ext: str, data: bytes, translate: Translate, outcome: Outcome) -> bytes:
    """`data`, a document of the format `ext`, with its strings translated."""
    if library := missing_library(ext):
        raise DocumentError(f"needs the {library} library: pip install 'mtcli[documents]'")
    module = import_module(f"mtcli.documents.{FORMATS[ext].module}")
    return module.translate(data, translate, outcome, ext)
