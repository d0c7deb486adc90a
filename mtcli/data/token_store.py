"""A corpus as token ids stored once: flat id arrays, an index of offsets and lengths, a manifest.

`mtcli data binarize` (and `mtcli train --src/--tgt`, into OUT/data) encodes the filtered pairs
once with sentencepiece's threaded batch encoding; every later start, resume and DDP rank opens
the same files (the lengths memory-mapped, each pair read when its batch is made: see
`open_store`), so memory and start-up no longer grow with the corpus. A store built in memory
(`encode_pairs`, for validation sets and tests) is the same class.

A store directory holds, per side (src, tgt):
  SIDE.ids      the pairs' ids one after another (uint16 where the vocabulary fits, else uint32);
                no EOS/BOS: collate adds them
  SIDE.offsets  int64, n + 1: pair i is ids[offsets[i]:offsets[i + 1]]
  SIDE.lengths  uint8 (uint16 past 255): tokens per pair as the model reads them (ids + 1: EOS
                after a source, BOS before / EOS after a target); all batching reads, 1 byte a pair
  SIDE.text / SIDE.text_offsets   the pairs' UTF-8 text, only with --keep-text (BPE-dropout)
and tokenizer/ (a copy, so the store says which ids these are) and manifest.json: counts, the
filter settings, and the sha256 of the corpus files and of the tokenizer. It is built beside its
destination and renamed into place, so a kill leaves either the old store or the new one.

Knows nothing of tensors or models.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mtcli.data.parallel_text import read_corpus
from mtcli.data.textio import open_binary
from mtcli.data.tokenizer import Tokenizer, read_meta
from mtcli.errors import UserError
from mtcli.files import built_aside, check_replaceable, sha256_of, write_json

FORMAT = 1
MANIFEST = "manifest.json"
SIDES = ("src", "tgt")
CHUNK_PAIRS = 20_000  # pairs encoded per sentencepiece batch: threads stay busy, memory flat

Progress = Callable[[int], None]  # pairs read so far


@dataclass
class CorpusStats:
    """What reading and filtering kept and dropped, for the log."""

    read: int = 0
    kept: int = 0
    empty: int = 0  # a side was empty after stripping
    too_long: int = 0  # more than max_len tokens on a side
    bad_ratio: int = 0  # length ratio above max_ratio

    def summary(self) -> str:
        return (
            f"{self.kept} pairs kept of {self.read} "
            f"(dropped: {self.empty} empty, {self.too_long} too long, {self.bad_ratio} length ratio)"
        )

    def add(self, other: CorpusStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


@dataclass(frozen=True)
class Filters:
    """Which pairs a store keeps (recorded in its manifest: another setting is another store)."""

    max_len: int = 128  # tokens on either side, EOS not counted
    max_ratio: float = 9.0  # longer side / shorter side, EOS counted on each


# ---------------------------------------------------------------- one side of a store
@dataclass
class Side:
    """One language of the corpus: ids of every pair, where each starts, how long each is."""

    # arrays in memory; on disk, ids/offsets/text are FileArrays (read by slices)
    ids: np.ndarray | FileArray  # (N_tokens,) uint16 or uint32
    offsets: np.ndarray | FileArray  # (n + 1,) int64
    lengths: np.ndarray  # (n,) uint8 or uint16: ids + 1 (the EOS or BOS the model adds)
    text: np.ndarray | FileArray | None = None  # (N_bytes,) uint8: UTF-8 text (for BPE-dropout)
    text_offsets: np.ndarray | FileArray | None = None  # (n + 1,) int64

    def pair(self, i: int) -> np.ndarray:
        start, end = self.offsets[i : i + 2]  # one read each (see FileArray)
        return self.ids[start:end]

    def pair_text(self, i: int) -> str:
        start, end = self.text_offsets[i : i + 2]
        return bytes(self.text[start:end]).decode("utf-8")


@dataclass
class TokenStore:
    """Token ids of a filtered parallel corpus (mapped from disk, or built in memory)."""

    src: Side
    tgt: Side
    stats: CorpusStats = field(default_factory=CorpusStats)
    path: Path | None = None  # the store's directory; None when built in memory

    def __len__(self) -> int:
        return len(self.src.lengths)

    @property
    def has_text(self) -> bool:
        return self.src.text is not None

    @classmethod
    def from_ids(cls, src: list[list[int]], tgt: list[list[int]], id_type=np.uint16) -> TokenStore:
        """A store in memory from id lists (no EOS/BOS), for tests and benchmarks."""

        def side(rows: list[list[int]]) -> Side:
            lengths = np.array([len(r) for r in rows], dtype=np.int64)
            ids = np.array([i for r in rows for i in r], dtype=id_type)
            return Side(
                ids, np.concatenate([[0], np.cumsum(lengths)]), (lengths + 1).astype(np.uint16)
            )

        return cls(side(src), side(tgt), CorpusStats(read=len(src), kept=len(src)))

    def src_lens(self) -> np.ndarray:
        """(n,) source tokens per pair as the encoder reads them (ids + EOS); no copy."""
        return self.src.lengths

    def tgt_lens(self) -> np.ndarray:
        """(n,) target tokens per pair as the decoder reads them (BOS + ids, or ids + EOS); no copy."""
        return self.tgt.lengths


# ---------------------------------------------------------------- encoding and filtering
@dataclass
class EncodedChunk:
    """The kept pairs of one chunk: ids and texts per side, and what was dropped."""

    ids: dict[str, list[list[int]]]
    texts: dict[str, list[str]]
    stats: CorpusStats


def encode_chunk(
    pairs: list[tuple[str, str]], tokenizer: Tokenizer, filters: Filters, threads: int = 1
) -> EncodedChunk:
    """Strip, drop empty sides, encode both sides in one threaded sentencepiece batch each,
    and keep the pairs that pass the length and ratio filters."""
    stats = CorpusStats(read=len(pairs))
    stripped = [(s.strip(), t.strip()) for s, t in pairs]
    full = [(s, t) for s, t in stripped if s and t]
    stats.empty = len(pairs) - len(full)
    src_ids = tokenizer.src.encode([s for s, _ in full], num_threads=threads)
    tgt_ids = tokenizer.tgt.encode([t for _, t in full], num_threads=threads)
    out = EncodedChunk({"src": [], "tgt": []}, {"src": [], "tgt": []}, stats)
    for (s, t), si, ti in zip(full, src_ids, tgt_ids, strict=True):
        if len(si) > filters.max_len or len(ti) > filters.max_len:
            stats.too_long += 1
            continue
        n_src, n_tgt = len(si) + 1, len(ti) + 1
        if max(n_src, n_tgt) / min(n_src, n_tgt) > filters.max_ratio:
            stats.bad_ratio += 1
            continue
        for side, ids, text in (("src", si, s), ("tgt", ti, t)):
            out.ids[side].append(ids)
            out.texts[side].append(text)
    stats.kept = len(out.ids["src"])
    return out


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def length_dtype(max_len: int) -> np.dtype:
    return np.dtype(np.uint8 if max_len <= 255 else np.uint16)


def chunks_of(lines: Iterator[tuple[int, str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    for _, s, t in lines:
        chunk.append((s, t))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encode_pairs(
    lines: Iterator[tuple[int, str, str]],
    tokenizer: Tokenizer,
    filters: Filters,
    *,
    keep_text: bool = True,
) -> TokenStore:
    """A store in memory (a validation set, a test's corpus): the same filter as `binarize`."""
    writers = {side: _SideWriter(None, side, tokenizer, filters, keep_text) for side in SIDES}
    stats = _encode_into(writers, lines, tokenizer, filters)
    return TokenStore(*(writers[side].in_memory() for side in SIDES), stats=stats)


def _encode_into(
    writers: dict,
    lines,
    tokenizer: Tokenizer,
    filters: Filters,
    threads: int = 1,
    progress: Progress = lambda n: None,
) -> CorpusStats:
    """Encode and filter `lines` chunk by chunk into each side's writer; what was kept and dropped."""
    stats = CorpusStats()
    for chunk in chunks_of(lines, CHUNK_PAIRS):
        encoded = encode_chunk(chunk, tokenizer, filters, threads)
        stats.add(encoded.stats)
        for side in SIDES:
            writers[side].add(encoded.ids[side], encoded.texts[side])
        progress(stats.read)
    return stats


class _SideWriter:
    """Appends one side's pairs to its files (or to memory when `folder` is None)."""

    def __init__(
        self, folder: Path | None, side: str, tokenizer, filters: Filters, keep_text: bool
    ):
        vocab = tokenizer.src_vocab_size if side == "src" else tokenizer.tgt_vocab_size
        self.id_dtype, self.len_dtype = id_dtype(vocab), length_dtype(filters.max_len + 1)
        self.keep_text = keep_text
        self.n_ids = self.n_bytes = 0
        names = ["ids", "offsets", "lengths"] + (["text", "text_offsets"] if keep_text else [])
        if folder is None:
            self.files = {name: [] for name in names}
        else:
            # open for the writer's life, closed (after fsync) by close()
            self.files = {name: open(folder / f"{side}.{name}", "wb") for name in names}  # noqa: SIM115
        self._write("offsets", np.zeros(1, np.int64))
        if keep_text:
            self._write("text_offsets", np.zeros(1, np.int64))

    def _write(self, name: str, array: np.ndarray) -> None:
        f = self.files[name]
        f.append(array) if isinstance(f, list) else f.write(array.tobytes())

    def add(self, ids: list[list[int]], texts: list[str]) -> None:
        if not ids:
            return
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        self._write(
            "ids",
            np.fromiter(itertools.chain.from_iterable(ids), self.id_dtype, int(lengths.sum())),
        )
        self._write("offsets", self.n_ids + np.cumsum(lengths))
        self._write("lengths", (lengths + 1).astype(self.len_dtype))
        self.n_ids += int(lengths.sum())
        if self.keep_text:
            raw = [t.encode("utf-8") for t in texts]
            self._write("text", np.frombuffer(b"".join(raw), np.uint8))
            self._write(
                "text_offsets", self.n_bytes + np.cumsum([len(r) for r in raw], dtype=np.int64)
            )
            self.n_bytes += sum(map(len, raw))

    def close(self) -> None:
        for f in self.files.values():
            if not isinstance(f, list):
                f.flush()
                os.fsync(f.fileno())
                f.close()

    def in_memory(self) -> Side:
        dtypes = {
            "ids": self.id_dtype,
            "offsets": np.int64,
            "lengths": self.len_dtype,
            "text": np.uint8,
            "text_offsets": np.int64,
        }
        arrays = {
            name: np.concatenate(parts) if parts else np.zeros(0, dtypes[name])
            for name, parts in self.files.items()
        }
        return Side(**arrays)


# ---------------------------------------------------------------- hashes: what a store is of
def tokenizer_digest(directory: str | Path) -> str:
    """sha256 over a tokenizer directory's description and model files, in a fixed order."""
    directory = Path(directory)
    meta = read_meta(directory)
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted({meta["src_model"], meta["tgt_model"]}):
        h.update(sha256_of(directory / name).encode())
    return h.hexdigest()


def corpus_record(paths: list[str]) -> list[dict]:
    """Each corpus file's name, size, modification time and sha256, as the manifest keeps them."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append(
            {
                "path": str(p),
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "sha256": sha256_of(p),
            }
        )
    return out


def store_key(corpus: list[dict], tokenizer_sha: str, filters: Filters, keep_text: bool) -> dict:
    """What must be the same for a store to be reused: corpus contents, tokenizer, filters."""
    return {
        "corpus_sha256": [c["sha256"] for c in corpus],
        "tokenizer_sha256": tokenizer_sha,
        "filters": asdict(filters),
        "keep_text": keep_text,
    }


# ---------------------------------------------------------------- writing and opening
@dataclass
class BinarizeRequest:
    """What to binarize: the corpus (two aligned files, or a TSV with tgt ""), how, and where."""

    src: str
    tgt: str
    tokenizer_dir: Path
    out: Path
    filters: Filters = Filters()
    keep_text: bool = False
    threads: int = 1


def read_manifest(store: str | Path) -> dict | None:
    """The manifest of a whole store, or None where there is none (or it is not a store's)."""
    try:
        manifest = json.loads((Path(store) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(manifest, dict) and manifest.get("kind") == "tokens"):
        return None
    if wrong := _manifest_error(manifest):
        raise UserError(f"{Path(store) / MANIFEST}: {wrong}; binarize the corpus again")
    return manifest


_SHAPE = {  # what a manifest of this format holds, by path: the type of each value read
    ("format",): int, ("pairs",): int, ("key", "tokenizer_sha256"): str, ("key", "keep_text"): bool,
    ("key", "filters", "max_len"): int, ("key", "filters", "max_ratio"): (int, float),
    ("tokens", "src"): int, ("tokens", "tgt"): int,
    **{("stats", k): int for k in ("read", "kept", "empty", "too_long", "bad_ratio")},
}  # fmt: skip
_DTYPES = {"ids": ("uint16", "uint32"), "lengths": ("uint8", "uint16")}


def _manifest_error(manifest: dict) -> str:
    """What is wrong with a store's manifest ("" when nothing): a field missing or of another type."""
    for path, kind in _SHAPE.items():
        value = manifest
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"{'.'.join(path)} is missing or not {getattr(kind, '__name__', 'a number')}"
    for side in SIDES:
        for name, allowed in _DTYPES.items():
            if manifest.get("dtypes", {}).get(side, {}).get(name) not in allowed:
                return f"dtypes.{side}.{name} is not one of {', '.join(allowed)}"
    return ""


def is_current(manifest: dict | None, key: dict) -> bool:
    return manifest is not None and manifest.get("format") == FORMAT and manifest.get("key") == key


def check_binarize(req: BinarizeRequest, force: bool) -> None:
    """Before any work: --out may be made or replaced, the corpus and tokenizer can be read."""
    check_replaceable(
        req.out, "tokens", "--out", force, reads=[req.src, req.tgt, req.tokenizer_dir]
    )
    Tokenizer.load(req.tokenizer_dir)
    for p in (req.src, req.tgt):
        if p:
            open_binary(p).close()


def ensure_store(req: BinarizeRequest, progress: Progress = lambda n: None) -> tuple[dict, str]:
    """The store req.out as the request makes it: kept when its key (the sha256 of the corpus
    files and of the tokenizer, the filters) is the same, else built anew. Returns its manifest
    and what happened: "current", "new", or "changed" (a store of other inputs was replaced)."""
    corpus = corpus_record([p for p in (req.src, req.tgt) if p])
    key = store_key(corpus, tokenizer_digest(req.tokenizer_dir), req.filters, req.keep_text)
    try:
        manifest = read_manifest(req.out)
    except UserError:  # a damaged manifest of a store: what a new one replaces
        manifest = {}
    if is_current(manifest, key):
        return manifest, "current"
    made = binarize(req, read_corpus(req.src, req.tgt or None), key, corpus, progress)
    return made, "new" if manifest is None else "changed"


def binarize(
    req: BinarizeRequest,
    lines: Iterator[tuple[int, str, str]],
    key: dict,
    corpus: list[dict],
    progress: Progress = lambda n: None,
) -> dict:
    """Encode `lines` into a new store at req.out (built aside, renamed into place); returns
    its manifest. Streams in chunks of CHUNK_PAIRS: memory stays flat whatever the corpus."""
    tokenizer = Tokenizer.load(req.tokenizer_dir)
    started = time.monotonic()
    with built_aside(req.out, MANIFEST) as tmp:
        writers = {s: _SideWriter(tmp, s, tokenizer, req.filters, req.keep_text) for s in SIDES}
        stats = _encode_into(writers, lines, tokenizer, req.filters, req.threads, progress)
        for w in writers.values():
            w.close()
        _copy_tokenizer(req.tokenizer_dir, tmp / "tokenizer")
        manifest = _manifest(req, key, corpus, stats, writers, time.monotonic() - started)
        write_json(tmp / MANIFEST, manifest)
    return manifest


def _copy_tokenizer(source: Path, dst: Path) -> None:
    """The tokenizer's own files (a model directory holds weights too, which stay out)."""
    dst.mkdir()
    for name in Tokenizer.model_files(source):
        shutil.copy2(Path(source) / name, dst / name)


def _manifest(
    req: BinarizeRequest, key: dict, corpus, stats: CorpusStats, writers, seconds
) -> dict:
    return {
        "kind": "tokens",
        "format": FORMAT,
        "key": key,
        "corpus": corpus,
        "pairs": stats.kept,
        "stats": asdict(stats),
        "tokens": {side: w.n_ids for side, w in writers.items()},
        "dtypes": {
            side: {"ids": w.id_dtype.name, "lengths": w.len_dtype.name}
            for side, w in writers.items()
        },
        "seconds": round(seconds, 2),
    }


def open_store(path: str | Path) -> TokenStore:
    """Open a store read-only (nothing is read until used); errors name the file.

    The lengths, which batching reads whole, are memory-mapped. Ids, offsets and text are
    read a pair at a time with pread (FileArray): a mapped page fault here brought in ~0.8 MB
    around each random pair (fault-around over the kernel's large page-cache folios), so 600
    random pairs of a 1.2 GB file put 474 MB into the process's RSS; pread copies only the
    pair, and the file's pages stay in the page cache, one copy shared by every rank.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        raise UserError(f"{path}: not a token store (make one with `mtcli data binarize`)")
    if manifest.get("format") != FORMAT:
        raise UserError(
            f"{path}: token store format {manifest.get('format')}; this mtcli reads {FORMAT}"
        )
    n = manifest["pairs"]
    sides = {}
    for side in SIDES:
        dt = manifest["dtypes"][side]
        spec = {
            "ids": (dt["ids"], manifest["tokens"][side]),
            "offsets": ("int64", n + 1),
            "lengths": (dt["lengths"], n),
        }
        if manifest["key"]["keep_text"]:
            spec.update(text=("uint8", None), text_offsets=("int64", n + 1))
        arrays = {
            name: _open(path / f"{side}.{name}", *s, mapped=name == "lengths")
            for name, s in spec.items()
        }
        sides[side] = Side(**arrays)
    return TokenStore(sides["src"], sides["tgt"], CorpusStats(**manifest["stats"]), path)


class FileArray:
    """A read-only 1-D array on disk whose slices are read with pread (see open_store)."""

    def __init__(self, file: Path, dtype: np.dtype, length: int):
        self.file, self.dtype, self.length = file, np.dtype(dtype), length
        self.fd = os.open(file, os.O_RDONLY)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, where: slice) -> np.ndarray:
        start, stop, _ = where.indices(self.length)
        item = self.dtype.itemsize
        data = os.pread(self.fd, max(stop - start, 0) * item, start * item)
        return np.frombuffer(data, dtype=self.dtype)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


def _open(file: Path, dtype: str, count: int | None, *, mapped: bool) -> np.ndarray | FileArray:
    """`count` items of `dtype` (None: the whole file), checked against the file's size."""
    item = np.dtype(dtype).itemsize
    try:
        size = file.stat().st_size
    except OSError:
        raise UserError(f"{file}: missing from the token store; binarize it again") from None
    if count is not None and size != count * item:
        raise UserError(f"{file}: {size:,} bytes, expected {count * item:,}; binarize it again")
    if not mapped:
        return FileArray(file, np.dtype(dtype), size // item)
    if size == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype)
    return np.memmap(file, dtype=dtype, mode="r")
