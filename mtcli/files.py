"""Atomic directory writes: build beside the target, then rename into place.

Imports only the stdlib. Used for tokenizers, model directories and prepared corpora, so a
kill at any moment leaves either the old complete directory or the new one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def temp_dir_beside(dst: str | Path) -> Path:
    """A fresh empty directory next to `dst` (same filesystem, so a rename is atomic)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dst.name + ".tmp-", dir=dst.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a model directory should be shareable
    return tmp


def replace_dir(tmp: Path, dst: Path) -> None:
    """Move a finished directory into place. At every instant either `dst` or `dst.old` is whole.

    POSIX cannot rename onto a non-empty directory, so the old one steps aside first; a crash
    between the two renames leaves `dst.old`, which `resolve_dir` falls back to.
    """
    old = dst.with_name(dst.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        os.replace(dst, old)
    os.replace(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)


def resolve_dir(path: str | Path, marker: str) -> Path:
    """The directory to read: `path`, or `path.old` left by a write interrupted mid-swap."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    if not (path / marker).is_file() and (old / marker).is_file():
        return old
    return path
