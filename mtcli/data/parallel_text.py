"""Parallel text: two aligned files, or one TSV file, streamed line by line with clear errors.

Knows nothing of tokens or tensors (data.py builds those), so a command can check a corpus
before it imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mtcli.data.textio import decode_line, open_binary, read_lines, read_raw_line
from mtcli.errors import UserError


def _count_rest(f) -> int:
    return sum(1 for _ in f)


def read_parallel(src: str | Path, tgt: str | Path) -> Iterator[tuple[int, str, str]]:
    """Stream (line number, source, target) from two aligned files.

    The files are read in lockstep, so memory stays flat; a length mismatch is found when
    the shorter one ends, and the error names both files and both line counts.
    """
    with open_binary(src) as fs, open_binary(tgt) as ft:
        line_no = 0
        while True:
            raw_s, raw_t = read_raw_line(fs, src, line_no + 1), read_raw_line(ft, tgt, line_no + 1)
            if not raw_s or not raw_t:
                if raw_s or raw_t:
                    n_src = line_no + bool(raw_s) + _count_rest(fs)
                    n_tgt = line_no + bool(raw_t) + _count_rest(ft)
                    raise UserError(
                        f"{src} has {n_src} lines but {tgt} has {n_tgt}: the files must be aligned"
                    )
                return
            line_no += 1
            yield line_no, decode_line(raw_s, src, line_no), decode_line(raw_t, tgt, line_no)


def read_tsv(path: str | Path) -> Iterator[tuple[int, str, str]]:
    """Stream (line number, source, target) from a tab-separated file (extra columns ignored)."""
    for line_no, line in enumerate(read_lines(path), 1):
        cols = line.split("\t")
        if len(cols) < 2:
            raise UserError(f"{path}:{line_no}: expected at least 2 tab-separated columns")
        yield line_no, cols[0], cols[1]


def read_corpus(src: str | Path, tgt: str | Path | None = None) -> Iterator[tuple[int, str, str]]:
    """Two aligned files, or one TSV file when `tgt` is None."""
    return read_tsv(src) if tgt is None else read_parallel(src, tgt)


def check_parallel(src: str | Path, tgt: str | Path | None) -> int:
    """Read a corpus once to find mistakes early; returns the number of pairs."""
    return sum(1 for _ in read_corpus(src, tgt))
