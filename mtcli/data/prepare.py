"""Real corpora: download (or take a local copy), verify, normalise, split, write with a manifest.

Writes DIR/{train,valid,test}.{src,tgt} (+ .attr where the corpus has attribution) and
DIR/manifest.json, all at once: the directory is built aside and swapped in whole. Downloads
are kept in the cache folder (see `mtcli.files.cache_dir`), not in DIR. Knows nothing about models.
Reports progress through a callback.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
import time
import unicodedata
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mtcli.errors import UserError
from mtcli.files import built_aside, cache_dir, check_replaceable, sha256_of, write_json

Progress = Callable[[int, int | None], None]  # (bytes so far, total or None)


@dataclass(frozen=True)
class RawFile:
    name: str  # file name in the download folder / --from folder
    url: str
    sha256: str  # of the file as downloaded


@dataclass(frozen=True)
class CorpusSpec:
    name: str
    src_lang: str
    tgt_lang: str
    files: tuple[RawFile, ...]
    license: str
    attribution: str
    official_splits: bool


TATOEBA = CorpusSpec(
    name="tatoeba-en-zh",
    src_lang="en",
    tgt_lang="zh",
    # manythings.org republishes this zip in place; the checksum pins the release whose text
    # (cmn.txt) we checked. Also accepted locally: cmn.txt or cmn.txt.gz (see _read_tatoeba).
    files=(RawFile("cmn-eng.zip", "https://www.manythings.org/anki/cmn-eng.zip", ""),),
    license="CC BY 2.0 FR",
    attribution=(
        "English-Chinese sentence pairs from the Tatoeba Project (tatoeba.org), CC BY 2.0 FR, "
        "via www.manythings.org/anki"
    ),
    official_splits=False,
)
TATOEBA_TEXT_SHA256 = "3a8ac6cb8cdaab6e235d3075ec3680084044d975882d6139c903bf7893097ff6"

_M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K = CorpusSpec(
    name="multi30k-en-de",
    src_lang="en",
    tgt_lang="de",
    files=tuple(
        RawFile(name, _M30K + name, sha)
        for name, sha in [
            ("train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
            ("train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
            ("val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
            ("val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
            (
                "test_2016_flickr.en.gz",
                "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
            ),
            (
                "test_2016_flickr.de.gz",
                "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
            ),
        ]
    ),
    license="non-commercial research and educational use only (Flickr30K terms)",
    attribution=(
        "Multi30K (Elliott et al. 2016, doi:10.18653/v1/W16-3210), task 1, "
        "from the multi30k/dataset repository"
    ),
    official_splits=True,
)
CORPORA = {c.name: c for c in (TATOEBA, MULTI30K)}


# ---------------------------------------------------------------- download
def download(
    url: str,
    dest: Path,
    sha256: str,
    *,
    timeout: float = 30.0,
    retries: int = 3,
    progress: Progress = lambda done, total: None,
) -> Path:
    """Fetch `url` to `dest` via `dest.part`, resuming a partial file; verify sha256; rename.

    A checksum mismatch deletes the partial file and raises, so nothing half-written is left.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last_error: Exception | None = None
    for attempt in range(retries):
        try:
            _fetch_into(url, part, timeout, progress)
            break
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            last_error = e
            time.sleep(min(2**attempt, 10) * 0.1)
    else:
        raise UserError(f"{url}: download failed after {retries} tries ({last_error})")
    if sha256:
        got = sha256_of(part)
        if got != sha256:
            part.unlink(missing_ok=True)
            raise UserError(
                f"{url}: checksum mismatch (sha256 {got[:12]}..., expected {sha256[:12]}...)"
            )
    os.replace(part, dest)
    return dest


def _fetch_into(url: str, part: Path, timeout: float, progress: Progress) -> None:
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416:  # nothing left to fetch: the partial file is complete
            return
        raise
    with response:
        resumed = response.status == 206
        mode = "ab" if resumed else "wb"
        done = have if resumed else 0
        length = response.headers.get("Content-Length")
        total = done + int(length) if length else None
        with open(part, mode) as f:
            while block := response.read(1 << 16):
                f.write(block)
                done += len(block)
                progress(done, total)


# ---------------------------------------------------------------- normalisation
_SPACES = re.compile(r"\s+")


def normalize_text(text: str, form: str = "NFC") -> str:
    """Unicode normal form, then every whitespace run becomes one space, ends stripped."""
    return _SPACES.sub(" ", unicodedata.normalize(form, text)).strip()


def english_key(text: str) -> str:
    """Key under which English sentences count as the same: case and final .!? ignored."""
    return (
        _SPACES.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip().rstrip(".!?").strip()
    )


def to_simplified(lines: list[str]) -> list[str]:
    """Traditional -> Simplified Chinese script with OpenCC (t2s)."""
    import opencc

    converter = opencc.OpenCC("t2s")
    return [converter.convert(line) for line in lines]


@dataclass
class Pairs:
    src: list[str] = field(default_factory=list)
    tgt: list[str] = field(default_factory=list)
    attr: list[str] = field(default_factory=list)

    def add(self, src: str, tgt: str, attr: str = "") -> None:
        self.src.append(src)
        self.tgt.append(tgt)
        self.attr.append(attr)

    def __len__(self) -> int:
        return len(self.src)


def clean_pairs(pairs: Pairs, *, form: str, simplify: bool, dedupe: bool, dropped: dict) -> Pairs:
    """Normalise, convert script, drop empty sides and (optionally) exact duplicate pairs."""
    tgt = [normalize_text(t, form) for t in pairs.tgt]
    if simplify:
        tgt = to_simplified(tgt)
    out, seen = Pairs(), set()
    for s, t, a in zip(pairs.src, tgt, pairs.attr, strict=True):
        s = normalize_text(s, form)
        if not s or not t:
            dropped["empty"] = dropped.get("empty", 0) + 1
            continue
        if dedupe:
            if (s, t) in seen:
                dropped["duplicate"] = dropped.get("duplicate", 0) + 1
                continue
            seen.add((s, t))
        out.add(s, t, a)
    return out


def split_by_source(pairs: Pairs, *, n_test: int, n_valid: int, seed: int) -> dict[str, Pairs]:
    """Group pairs by `english_key`, shuffle the groups with `seed`, fill test, then valid, then train.

    Whole groups move together, so no valid/test English sentence appears in train, even
    with other case or final punctuation. Pairs keep their file order inside each split.
    """
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(pairs.src):
        groups.setdefault(english_key(s), []).append(i)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    where: dict[int, str] = {}
    counts = {"test": 0, "valid": 0}
    for key in keys:
        split = (
            "test" if counts["test"] < n_test else "valid" if counts["valid"] < n_valid else "train"
        )
        for i in groups[key]:
            where[i] = split
        if split != "train":
            counts[split] += len(groups[key])
    out = {name: Pairs() for name in ("train", "valid", "test")}
    for i in range(len(pairs)):
        out[where[i]].add(pairs.src[i], pairs.tgt[i], pairs.attr[i])
    return out


# ---------------------------------------------------------------- readers of raw files
def _read_tatoeba(raw: Path) -> tuple[Pairs, str]:
    """Parse cmn.txt (English TAB Chinese TAB attribution) from the zip or a (gzipped) copy."""
    for name in ("cmn-eng.zip", "cmn.txt.gz", "cmn.txt"):
        if (raw / name).is_file():
            data = _unpack(raw / name)
            break
    else:
        raise UserError(f"{raw}: expected cmn-eng.zip, cmn.txt.gz or cmn.txt")
    pairs = Pairs()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = data[: e.start].count(b"\n") + 1
        raise UserError(f"{raw / name}: cmn.txt line {line_no}: invalid UTF-8") from None
    for line_no, line in enumerate(text.splitlines(), 1):
        cols = line.split("\t")
        if len(cols) < 2:
            raise UserError(
                f"{raw}/cmn.txt:{line_no}: expected English TAB Chinese TAB attribution"
            )
        attr = cols[2].removeprefix("CC-BY 2.0 (France) Attribution: ") if len(cols) > 2 else ""
        pairs.add(cols[0], cols[1], attr)
    return pairs, hashlib.sha256(data).hexdigest()


def _unpack(path: Path) -> bytes:
    """The text of a raw file: cmn.txt inside a zip, a gzipped file, or a plain one."""
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as z:
                return z.read("cmn.txt")
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes())
        return path.read_bytes()
    except KeyError:
        raise UserError(f"{path}: the archive holds no cmn.txt") from None
    except (zipfile.BadZipFile, gzip.BadGzipFile, EOFError, OSError, zlib.error) as e:
        raise UserError(f"{path}: damaged archive ({e})") from None


def _read_gz_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise UserError(f"{path}: missing")
    data = _unpack(path)
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        line_no = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}: line {line_no}: invalid UTF-8") from None
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    return [line.rstrip("\r") for line in lines]


def _read_multi30k(raw: Path) -> dict[str, Pairs]:
    out = {}
    for split, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        src, tgt = _read_gz_lines(raw / f"{stem}.en.gz"), _read_gz_lines(raw / f"{stem}.de.gz")
        if len(src) != len(tgt):
            raise UserError(
                f"{raw}/{stem}.en.gz has {len(src)} lines but {stem}.de.gz has {len(tgt)}"
            )
        out[split] = Pairs(src, tgt, [""] * len(src))
    return out


# ---------------------------------------------------------------- the whole step
@dataclass
class PrepareOptions:
    from_dir: str | None = None  # local raw files instead of downloading
    zh_script: str = "simplified"  # simplified or keep
    unicode_form: str = "NFC"  # NFC keeps full-width CJK punctuation; NFKC folds it
    # a known corpus's held-out pairs (the shipped models' splits; own_corpus.py scales its own)
    n_test: int = 2000
    n_valid: int = 1000
    seed: int = 1234
    verify: bool = True  # check recorded checksums
    force: bool = False  # replace an --out that is not a prepared corpus


def fetch_raw(spec: CorpusSpec, opts: PrepareOptions, cache: Path, progress: Progress) -> Path:
    """The folder holding the raw files: --from as given, or a download into `cache`."""
    if opts.from_dir:
        raw = Path(opts.from_dir)
        if not raw.is_dir():
            raise UserError(f"--from {raw}: no such directory")
        return raw
    for f in spec.files:
        if not (cache / f.name).is_file():
            download(f.url, cache / f.name, f.sha256 if opts.verify else "", progress=progress)
    return cache


def prepare(
    name: str, out: str | Path, opts: PrepareOptions, progress: Progress = lambda d, t: None
) -> dict:
    """Prepare corpus `name` into `out`; returns the manifest written to out/manifest.json."""
    if name not in CORPORA:
        raise UserError(f"unknown corpus {name!r}; choose from {', '.join(CORPORA)}")
    spec = CORPORA[name]
    out = Path(out)
    check_replaceable(
        out, "corpus", "--out", opts.force, reads=[opts.from_dir] if opts.from_dir else []
    )
    if opts.n_test < 0 or opts.n_valid < 0:
        raise UserError("--test-size and --valid-size must be at least 0")
    raw = fetch_raw(spec, opts, cache_dir() / "downloads" / spec.name, progress)
    dropped: dict[str, int] = {}
    clean = _cleaner(spec, opts, dropped)
    if spec.official_splits:
        splits, checksums = _official_splits(spec, opts, raw, clean)
    else:
        splits, checksums = _split_tatoeba(spec, opts, raw, clean)
    manifest = {
        "corpus": spec.name,
        "src_lang": spec.src_lang,
        "tgt_lang": spec.tgt_lang,
        "counts": {split: len(p) for split, p in splits.items()},
        "dropped": dropped,
        "raw_sha256": checksums,
        "source": [f.url for f in spec.files],
        "license": spec.license,
        "attribution": spec.attribution,
        "options": {
            "zh_script": opts.zh_script,
            "unicode_form": opts.unicode_form,
            "seed": opts.seed,
        },
    }
    _write_splits(out, splits, manifest)
    return manifest


def _cleaner(spec: CorpusSpec, opts: PrepareOptions, dropped: dict[str, int]):
    """clean_pairs with the options' Unicode form and script, counting what it drops."""
    simplify = spec.tgt_lang == "zh" and opts.zh_script == "simplified"

    def clean(pairs: Pairs, dedupe: bool) -> Pairs:
        return clean_pairs(
            pairs, form=opts.unicode_form, simplify=simplify, dedupe=dedupe, dropped=dropped
        )

    return clean


def _official_splits(spec: CorpusSpec, opts: PrepareOptions, raw: Path, clean):
    """A corpus's own train/valid/test files (deduplicated within train only), checksummed."""
    splits = {split: clean(p, split == "train") for split, p in _read_multi30k(raw).items()}
    checksums = {f.name: sha256_of(raw / f.name) for f in spec.files}
    for f in spec.files:
        if opts.verify and f.sha256 and checksums[f.name] != f.sha256:
            raise UserError(
                f"{raw / f.name}: checksum differs from the recorded release (--no-verify to accept)"
            )
    return splits, checksums


def _split_tatoeba(spec: CorpusSpec, opts: PrepareOptions, raw: Path, clean):
    """Tatoeba's one file, cleaned and split by source sentence into train/valid/test."""
    pairs, text_sha = _read_tatoeba(raw)
    if opts.verify and text_sha != TATOEBA_TEXT_SHA256:
        raise UserError(f"{raw}: cmn.txt differs from the recorded release (--no-verify to accept)")
    cleaned = clean(pairs, True)
    if opts.n_test + opts.n_valid >= len(cleaned):
        raise UserError(
            f"--test-size {opts.n_test} and --valid-size {opts.n_valid} leave no training "
            f"pairs: {spec.name} has {len(cleaned):,} after cleaning"
        )
    splits = split_by_source(cleaned, n_test=opts.n_test, n_valid=opts.n_valid, seed=opts.seed)
    return splits, {"cmn.txt": text_sha}


def _write_splits(out: Path, splits: dict[str, Pairs], manifest: dict) -> None:
    """Build the whole directory aside, then swap it in: a kill never mixes old and new files."""
    with built_aside(out, "manifest.json") as tmp:
        for split, p in splits.items():
            for ext, lines in (("src", p.src), ("tgt", p.tgt), ("attr", p.attr)):
                if ext == "attr" and not any(lines):
                    continue
                (tmp / f"{split}.{ext}").write_text(
                    "".join(line + "\n" for line in lines), encoding="utf-8"
                )
        write_json(tmp / "manifest.json", manifest)
