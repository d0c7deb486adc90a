"""Durable, atomic directory writes, and the rule that mtcli never replaces what it did not write.

Imports only the stdlib (and mtcli.errors). A directory is built beside its destination under
a temporary name, every file and the directory itself are fsynced, and then it takes the
destination's place in one step: on Linux an atomic exchange of the two names (renameat2
RENAME_EXCHANGE), so at every instant the destination is the whole old directory or the whole
new one. Where the exchange is missing, the old directory steps aside to NAME.old first, and
`resolve_dir` reads NAME.old while NAME is absent. Leftovers of a killed writer (NAME.tmp-*,
NAME.old) are removed by `clean_leftovers` on the next start.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from mtcli.errors import UserError

_TEMP = re.compile(r"^(?P<name>.+)\.tmp-(?P<pid>\d+)-[^.]+$")


# ---------------------------------------------------------------- contents
def sha256_of(path: str | Path) -> str:
    """sha256 of a file, read in 4 MiB blocks (a corpus of gigabytes is never held in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- durability
def fsync_path(path: Path) -> None:
    """fsync one file or directory (a directory's fsync makes its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file below `root`, then every directory, deepest first."""
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def shareable(path: Path) -> None:
    """Give a file or directory the permissions the umask allows (mkdtemp and some writers
    make 0600/0700; a model directory should be readable by whoever may read its folder)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def write_file_atomic(path: str | Path, data: bytes) -> None:
    """Write a whole file beside `path`, fsync it, rename it into place, fsync the folder."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        shareable(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


# ---------------------------------------------------------------- atomic directories
def temp_dir_beside(dst: str | Path) -> Path:
    """A fresh empty directory next to `dst` (same filesystem, so a rename is atomic).

    Its name carries this process's id, so `clean_leftovers` can tell a dead writer's
    leftovers from a live writer's work in progress.
    """
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{dst.name}.tmp-{os.getpid()}-", dir=dst.parent))
    shareable(tmp)
    return tmp


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux renameat2). False where it is unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def replace_dir(tmp: Path, dst: Path, marker: str) -> None:
    """Make the finished directory `tmp` durable, then put it in `dst`'s place.

    At every instant `dst` is whole: the old one or the new one. Without an atomic exchange,
    the old one is `dst.old` for the moment between two renames (see resolve_dir). A `dst.old`
    holding `marker` (the file every directory of this kind has) is such a copy, left by a
    kill, and goes; any other `dst.old` is the user's and stays.
    """
    fsync_tree(tmp)
    old = dst.with_name(dst.name + ".old")
    stale = old.is_dir() and (old / marker).is_file()
    if not dst.exists():  # nothing to set aside: one atomic rename
        os.replace(tmp, dst)
        fsync_path(dst.parent)
        if stale:  # the only copy a kill left, superseded now
            shutil.rmtree(old, ignore_errors=True)
        return
    if dst.is_dir() and _exchange(tmp, dst):
        fsync_path(dst.parent)
        shutil.rmtree(tmp, ignore_errors=True)  # the old content, under the temporary name
        return
    if old.exists():
        if not stale:
            raise UserError(
                f"{old}: in the way; mtcli sets {dst.name} aside under that name while it "
                "replaces it (move it)"
            )
        shutil.rmtree(old)
    os.replace(dst, old)
    os.replace(tmp, dst)
    fsync_path(dst.parent)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def built_aside(dst: str | Path, marker: str) -> Iterator[Path]:
    """A directory to fill, beside `dst`, that takes `dst`'s place whole (replace_dir) when the
    block ends, and is removed if it raises or is interrupted. What an earlier writer killed
    mid-way left beside `dst` is cleaned first. `marker` is the file every directory of this
    kind holds (the block writes it, last)."""
    dst = Path(dst)
    clean_leftovers(dst.parent, marker, dst.name.__eq__)
    tmp = temp_dir_beside(dst)
    try:
        yield tmp
        replace_dir(tmp, dst, marker)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: Path, value) -> None:
    """A JSON file as mtcli writes its manifests: indented, UTF-8 kept, one final newline."""
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def remove_dir(path: Path) -> None:
    """Delete a directory so that no half-deleted copy is ever seen under its name: it is
    renamed to a temporary name first (one atomic step), then removed; a kill in between
    leaves only a leftover that `clean_leftovers` removes."""
    trash = path.with_name(f"{path.name}.tmp-{os.getpid()}-removed")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def link_or_copy_dir(src: Path, dst: Path) -> None:
    """Fill `dst` with hard links to the files of `src` (copies where links are not possible).

    A checkpoint is written once and then appears as step-N, last and best at no extra cost;
    files are never changed in place, so the links can never show a half-written file.
    """
    for item in src.iterdir():
        try:
            os.link(item, dst / item.name)
        except OSError:
            shutil.copy2(item, dst / item.name)


def resolve_dir(path: str | Path, marker: str) -> Path:
    """The directory to read: `path`, or `path.old` left by a write interrupted mid-swap."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    if not (path / marker).is_file() and (old / marker).is_file():
        return old
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def clean_leftovers(
    folder: Path, marker: str, ours: Callable[[str], bool], *, every_pid: bool = False
) -> list[str]:
    """Remove what killed writers left in `folder`: NAME.tmp-PID-* of dead processes (all of
    them with `every_pid`, when a lock proves no one else writes here) and NAME.old beside a
    whole NAME. A NAME.old without its NAME is renamed back: it is the only copy.

    Only for the NAMEs the command writes (`ours`), and only a NAME.old that holds `marker`
    (a directory of the kind mtcli writes): the folder may be the user's, and a backup.old
    of theirs was renamed to backup. Returns the names removed or restored, for the log.
    """
    done = []
    if not folder.is_dir():
        return done
    for entry in sorted(folder.iterdir()):
        m = _TEMP.match(entry.name)
        if (
            m
            and ours(m["name"])
            and entry.is_dir()
            and (every_pid or not _pid_alive(int(m["pid"])))
        ):
            shutil.rmtree(entry, ignore_errors=True)
            done.append(entry.name)
        elif entry.name.endswith(".old") and entry.is_dir() and (entry / marker).is_file():
            whole = entry.with_name(entry.name[: -len(".old")])
            if not ours(whole.name):
                continue
            if (whole / marker).is_file():
                shutil.rmtree(entry, ignore_errors=True)
            elif not whole.exists():
                os.replace(entry, whole)
            else:
                continue
            done.append(entry.name)
    return done


# ---------------------------------------------------------------- what mtcli may replace
# Each kind of directory mtcli writes, by the file that marks it and every name it may hold.
_TOKENIZER_FILES = r"tokenizer\.json|[^/]+\.model"  # a CTranslate2 export keeps these too
# a CTranslate2 model's config and vocabularies (.txt before CTranslate2 3.0), and the tokenizer
# files an imported one keeps under their own names
_CT2_FILES = r"config\.json|\w+\.json|\w+_vocabulary\.txt|(source|target)\.spm"
_MTDATA_FILES = r"train\.[\w.-]+|train-parts|tests|mono-[\w-]+|references\.bib(\.bak)?|errors\.tsv"
_HF_FILES = r"config\.json|model\.safetensors|(source|target)\.spm|\w+\.json|README\.md"  # a MarianMT export
_STORE_FILES = r"(src|tgt)\.(ids|offsets|lengths|text|text_offsets)"  # a token store's arrays
_MODEL_FILES = r"config\.json|model\.safetensors|trainer_state\.pt|README\.md"  # README: its card
KINDS = {
    "model": ("config.json", re.compile(rf"^({_MODEL_FILES}|{_TOKENIZER_FILES})$")),
    "tokenizer": ("tokenizer.json", re.compile(rf"^({_TOKENIZER_FILES})$")),
    "ct2": ("mtcli.json", re.compile(rf"^(mtcli\.json|model\.bin|{_CT2_FILES}|{_TOKENIZER_FILES})$")),
    "huggingface": ("config.json", re.compile(rf"^({_HF_FILES})$")),
    "tokens": ("manifest.json", re.compile(rf"^(manifest\.json|tokenizer|{_STORE_FILES})$")),
    "distill": ("distill.json", re.compile(r"^(distill\.json|teacher|init|student|model)$")),
    # what `mtcli data get` leaves: mtdata's layout and get.json
    "mtdata": ("get.json", re.compile(rf"^(get\.json|{_MTDATA_FILES})$")),
    "corpus": ("manifest.json", re.compile(r"^(manifest\.json|(train|valid|test)\.(src|tgt|attr))$")),
}  # fmt: skip


def _is_within(inner: Path, outer: Path) -> bool:
    """Whether `inner` is `outer` or lies below it (links resolved)."""
    inner, outer = inner.resolve(), outer.resolve()
    return inner == outer or outer in inner.parents


def is_own_dir(path: Path, kind: str) -> bool:
    """True when `path` is a directory mtcli wrote as `kind`, holding nothing else."""
    marker, names = KINDS[kind]
    if not (path / marker).is_file():
        return False
    if kind in ("model", "huggingface") and not json_has(path / marker, "mtcli_version"):
        return False
    return all(names.match(p.name) for p in path.iterdir())


def json_has(path: Path, key: str) -> bool:
    """Whether `path` is a JSON object holding `key` (False for anything unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and key in data


def check_replaceable(
    path: str | Path, kind: str, option: str, force: bool, reads: Iterable[str | Path] = ()
) -> None:
    """Refuse to write directory `kind` at `path` where something of the user's is.

    Free: a path that does not exist, an empty directory, or mtcli's own `kind` directory
    (which is replaced whole). Anything else needs `force`. Never, `force` or not: a `path`
    that is or holds one of the inputs the command `reads`, which replacing it would delete
    (`data prepare --from raw --out raw --force` deleted the raw files it had just read).
    """
    path = Path(path)
    for read in map(Path, reads):
        if _is_within(read, path):
            where = "is" if read.resolve() == path.resolve() else "holds"
            raise UserError(
                f"{option} {path}: {where} the input {read}; replacing it would delete that "
                "(write to another directory)"
            )
    if force or not path.exists():
        return
    if path.is_dir() and (not any(path.iterdir()) or is_own_dir(path, kind)):
        return
    what = "a file" if not path.is_dir() else "a directory that is not an mtcli " + kind
    raise UserError(
        f"{option} {path}: {what}; mtcli will not replace it (--force to replace it anyway)"
    )


def cache_dir() -> Path:
    """Where downloads stay between runs: $MTCLI_CACHE, else $XDG_CACHE_HOME/mtcli, else
    ~/.cache/mtcli (the place sacrebleu and pip also use for theirs)."""
    if env := os.environ.get("MTCLI_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mtcli"
