"""`mtcli translate FILE -o OUT` for a document: the command's part that reads no lines but a
whole file (mtcli/documents does the work; this only checks, shows progress and reports)."""

from __future__ import annotations

from pathlib import Path

from rich.progress import MofNCompleteColumn, Progress

from mtcli.cli.console import console
from mtcli.documents.formats import FORMATS
from mtcli.documents.segments import as_written
from mtcli.engines.result import flagged_texts, report_records
from mtcli.engines.routing import stream
from mtcli.errors import UserError


def check_document_output(src: str, output_path: str) -> None:
    """A document goes to a file of its own: -o is needed, and is not the document itself."""
    if not output_path or output_path == "-":
        raise UserError(f"{src}: a document is written to a file: give -o OUT")
    if Path(output_path).resolve() == Path(src).resolve():
        raise UserError(f"-o {output_path}: is the document itself; write to another file")


def translate_file(
    src: str, ext: str, output_path: str, translator, chunk_lines: int, warn, report
) -> tuple[list[str], int]:
    """The document translated into -o, with a progress bar of its strings on a terminal;
    returns the strings flagged and how many were translated."""
    from mtcli.documents.document import translate_document

    with Progress(
        *Progress.get_default_columns(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(Path(src).name, total=None)

        flagged: list[str] = []
        strings = 0  # the document's strings so far (a format may translate in several calls)

        def translate(lines: list[str]) -> list[str]:
            nonlocal strings
            bar.update(task, total=len(lines))
            out = []
            markup = FORMATS[ext].markup
            for t in stream(translator.translate_chunk, lines, chunk_lines):
                out.append(t.text)
                written = as_written(t.source) if markup else t.source
                flagged.extend(flagged_texts(t, written))
                strings += 1
                report.add(report_records(t, strings, "string", written))
                bar.advance(task)
            return out

        outcome = translate_document(src, output_path, ext, translate)
    if flagged:
        shown = "; ".join(repr(s[:60]) for s in flagged[:3]) + ("; ..." if len(flagged) > 3 else "")
        every = (
            f" (--report {report.path} lists each)"
            if report.path
            else " (--report FILE lists each)"
        )
        warn(
            f"{_strings(len(flagged))} flagged as unreliable (a number or name missing, or low "
            f"confidence): read them in {output_path}: {shown}{every}"
        )
    if outcome.kept:
        warn(
            f"{outcome.kept} of {_strings(outcome.kept + outcome.translated)} kept as their source: "
            "their translation lost or changed a placeholder or tag"
        )
    console.print(f"wrote {output_path} ({_strings(outcome.translated)} translated)", markup=False)
    return flagged, outcome.translated + outcome.kept


def _strings(n: int) -> str:
    return f"{n} string" if n == 1 else f"{n} strings"
