"""The formats mtcli translates, by extension: the module that reads and writes each (one per
format, each `translate(data, translate, outcome, ext) -> bytes`) and whether its strings are
HTML fragments for the text layer's markup mode (tags placed by word alignment)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from mtcli.documents.segments import Outcome, Translate


@dataclass(frozen=True)
class Format:
    name: str  # what --file-format and the server call it
    module: str  # mtcli.documents.<module>
    markup: bool  # its strings are HTML fragments: translated with html=True


FORMATS = {
    ".txt": Format("txt", "text", False),
    ".srt": Format("srt", "subtitles", False),
    ".vtt": Format("vtt", "subtitles", False),
    ".json": Format("json", "json_strings", False),
    ".po": Format("po", "po", False),
    ".pot": Format("pot", "po", False),
    ".md": Format("md", "markdown", True),
    ".html": Format("html", "html", True),
    ".htm": Format("htm", "html", True),
    ".docx": Format("docx", "word", True),
}


def convert(ext: str, data: bytes, translate: Translate, outcome: Outcome) -> bytes:
    """`data`, a document of the format `ext`, with its strings translated."""
    module = import_module(f"mtcli.documents.{FORMATS[ext].module}")
    return module.translate(data, translate, outcome, ext)
