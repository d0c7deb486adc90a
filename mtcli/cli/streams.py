"""Where results go and come from: the streams for results whose errors name them, a standard
stream the shell closed, and the check that an output file is not the user's or the input.
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path

from mtcli.errors import UserError


class NamedOutput:
    """A text stream for results whose write errors name it, as a file's open errors do: a
    full disk is 'stdout: No space left on device', not '[Errno 28] No space left on device'."""

    def __init__(self, stream, name: str):
        self.stream, self.name = stream, name

    def write(self, text: str) -> None:
        self._named(self.stream.write, text)

    def flush(self) -> None:
        self._named(self.stream.flush)

    def close(self) -> None:
        """Close the file: its last buffered write may fail here (and would hide an earlier
        failure if not named too)."""
        self._named(self.stream.close)

    def _named(self, operation, *args) -> None:
        try:
            operation(*args)
        except BrokenPipeError:  # the reader left: stopped quietly in MtcliGroup.invoke
            raise
        except OSError as e:
            e.filename = e.filename or self.name
            raise


class ClosedStream(io.TextIOBase):
    """Stands in for a standard stream the shell closed (`mtcli translate <&-`), where Python
    leaves sys.stdin None and the first use was an AttributeError: reading or writing is an
    OSError naming the stream, which becomes one line as a file's error does."""

    def __init__(self, name: str):
        self.stream_name = name

    def _refuse(self, *args):
        raise OSError(errno.EBADF, "closed (Bad file descriptor)", self.stream_name)

    read = readline = write = fileno = _refuse

    @property
    def buffer(self):
        self._refuse()

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:  # nothing is ever buffered; Python flushes stdout at exit
        pass


def check_output_file(path: str | None, option: str, force: bool, reading=None) -> None:
    """An output file that already holds something is the user's: replaced only with --force.
    The file the command reads (`reading`, an open stream) is never one: opening it for
    writing would empty it before a line was read, --force or not."""
    if not path or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    if reading is not None and _same_file(p, reading):
        raise UserError(
            f"{option} {path}: is the input; writing it would erase it before it is read "
            "(write to another file, then move it)"
        )
    if p.exists() and p.stat().st_size > 0 and not force:
        raise UserError(f"{option} {path}: exists; mtcli will not overwrite it (--force to do so)")
    if not p.parent.is_dir():
        raise UserError(f"{option} {path}: no such directory {p.parent}")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"{option} {path}: permission denied")


def _same_file(path: Path, stream) -> bool:
    """Whether `path` is the file behind the open `stream` (a link to it, or stdin redirected
    from it, too)."""
    try:
        opened, there = os.fstat(stream.fileno()), path.stat()
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return False  # no file behind the stream (a pipe's inode never matches), or no file
    return (opened.st_dev, opened.st_ino) == (there.st_dev, there.st_ino)


def check_report_file(path: str | None, output_path: str, force: bool, reading=None) -> None:
    """--report FILE: a file of its own, checked as any output is (stdout carries results)."""
    if path == "-":
        raise UserError("--report -: stdout carries the translations; give the report a file")
    if path and output_path != "-" and Path(path).resolve() == Path(output_path).resolve():
        raise UserError(f"--report {path}: is the --output file; give the report its own")
    check_output_file(path, "--report", force, reading)


class ReportFile:
    """--report FILE: the records of lines to read with care, a JSON line each, written as
    they come (a killed run keeps what it found); no FILE: nothing is written."""

    def __init__(self, path: str | None):
        self.path, self.file = path, None

    def __enter__(self) -> ReportFile:
        if self.path:
            self.file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
        return self

    def add(self, records: list[dict]) -> None:
        if self.file is None:
            return
        for record in records:
            self.file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.file.flush()

    def __exit__(self, *exc) -> None:
        if self.file is not None:
            self.file.close()
