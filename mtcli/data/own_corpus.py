"""Any aligned corpus (two files or a TSV, gzip accepted) prepared as prepare.py prepares
Tatoeba: normalised, script-converted, filtered, deduplicated, split by source sentence into
train/valid/test, with a manifest; streamed, so the text is never held in memory.

Two passes. The first streams the input, normalises and filters each pair and writes the
survivors to a scratch file, keeping two 8-byte hashes per pair (the pair's, for exact
duplicates; its English key's, for the split): 16 bytes a pair, not its text. Between them,
numpy finds first occurrences and draws the held-out source sentences. The second streams the
scratch file into the splits. The directory is built aside and swapped in whole.
Knows nothing about models; reports progress through a callback.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtcli.data.parallel_text import read_corpus
from mtcli.data.prepare import english_key, normalize_text
from mtcli.errors import UserError
from mtcli.files import built_aside, check_replaceable, sha256_of, write_json

Progress = Callable[[str, int], None]  # (phase, pairs so far)
SCRATCH = "all.tsv"
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class OwnCorpusOptions:
    """How a corpus of the user's is cleaned and split (the Tatoeba preparation's defaults)."""

    # the corpus's languages, which the command finds (text/corpus_languages.py): a Chinese
    # side is converted to Simplified script
    src_lang: str = ""
    tgt_lang: str = ""
    zh_script: str = "simplified"  # a Chinese side converted to Simplified script, or "keep"
    unicode_form: str = "NFC"  # NFC keeps full-width CJK punctuation; NFKC folds it
    # held-out pairs; None: a share of the corpus (held_out_sizes), so a small corpus keeps
    # most of its pairs to train on
    n_test: int | None = None
    n_valid: int | None = None
    seed: int = 1234
    max_chars: int = 1000  # characters per side; longer pairs are dropped (rarely sentences)
    # UTF-8 bytes of the longer side over the shorter: bytes, not characters, because a
    # Chinese character (3 bytes) carries about what 3 English letters do
    max_ratio: float = 9.0
    force: bool = False


def validation_beside(src: str, tgt: str) -> tuple[str, str] | None:
    """(valid source, valid target) of the `data prepare` folder whose train files `src` and
    `tgt` are (train.tgt as --src: the sides swap), where its manifest and valid files are
    there; None for any other pair of files."""
    src_path, tgt_path = Path(src), Path(tgt)
    sides = (src_path.name, tgt_path.name)
    if sides not in (("train.src", "train.tgt"), ("train.tgt", "train.src")):
        return None
    folder = src_path.parent
    if tgt_path.parent.resolve() != folder.resolve() or not (folder / "manifest.json").is_file():
        return None
    valid = tuple(str(folder / name.replace("train.", "valid.")) for name in sides)
    return valid if all(Path(v).is_file() for v in valid) else None


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


@dataclass
class FirstPass:
    kept: int
    dropped: dict[str, int]
    pair_hashes: np.ndarray  # (kept,) uint64
    key_hashes: np.ndarray  # (kept,) uint64


def _clean_pair(s: str, t: str, opts: OwnCorpusOptions, convert) -> tuple[str, str] | str:
    """The normalised pair, or why it is dropped ("empty", "too_long", "bad_ratio")."""
    s, t = normalize_text(s, opts.unicode_form), normalize_text(t, opts.unicode_form)
    if convert is not None:
        s, t = (
            (convert(s) if opts.src_lang == "zh" else s),
            (convert(t) if opts.tgt_lang == "zh" else t),
        )
    if not s or not t:
        return "empty"
    if len(s) > opts.max_chars or len(t) > opts.max_chars:
        return "too_long"
    n_s, n_t = len(s.encode("utf-8")), len(t.encode("utf-8"))
    if max(n_s, n_t) / min(n_s, n_t) > opts.max_ratio:
        return "bad_ratio"
    return s, t


def first_pass(lines, scratch: Path, opts: OwnCorpusOptions, progress: Progress) -> FirstPass:
    """Normalise and filter every pair into `scratch` (source TAB target), hashing each."""
    convert = None
    if opts.zh_script == "simplified" and "zh" in (opts.src_lang, opts.tgt_lang):
        import opencc

        convert = opencc.OpenCC("t2s").convert
    dropped = {"empty": 0, "too_long": 0, "bad_ratio": 0}
    pair_h, key_h, read = array("Q"), array("Q"), 0  # 8 bytes an entry, not a Python int
    with open(scratch, "w", encoding="utf-8") as out:
        for _, s, t in lines:
            read += 1
            cleaned = _clean_pair(s, t, opts, convert)
            if isinstance(cleaned, str):
                dropped[cleaned] += 1
            else:
                out.write(f"{cleaned[0]}\t{cleaned[1]}\n")  # normalize_text left no tab or newline
                pair_h.append(_hash64(cleaned[0] + "\t" + cleaned[1]))
                key_h.append(_hash64(english_key(cleaned[0])))
            if read % 100_000 == 0:
                progress("clean", read)
    progress("clean", read)
    as_array = lambda xs: np.frombuffer(xs, dtype=np.uint64)  # noqa: E731
    return FirstPass(len(pair_h), dropped, as_array(pair_h), as_array(key_h))


def first_occurrences(hashes: np.ndarray) -> np.ndarray:
    """(n,) bool: True at the first pair with each hash (exact duplicates after it are False)."""
    keep = np.zeros(len(hashes), dtype=bool)
    keep[np.unique(hashes, return_index=True)[1]] = True
    return keep


HELD_OUT_SHARE = 0.05  # of the pairs, for valid and for test each
HELD_OUT_FLOOR = 100  # fewer pairs say little: BLEU on 50 lines moves by points between runs
# what a known corpus holds out: past 20k / 40k pairs a share would only take pairs from training
HELD_OUT_CEILING = {"test": 2000, "valid": 1000}
TRAIN_SHARE_WARNED = 0.8  # a split leaving less than this to train on is said


def held_out_sizes(pairs: int, n_test: int | None, n_valid: int | None) -> tuple[int, int]:
    """(test, valid) pairs: those asked for, else HELD_OUT_SHARE of `pairs` each, at least
    HELD_OUT_FLOOR (where the corpus holds 10 times that) and at most HELD_OUT_CEILING."""

    def scaled(asked: int | None, split: str) -> int:
        if asked is not None:
            return asked
        share = round(pairs * HELD_OUT_SHARE)
        floor = HELD_OUT_FLOOR if pairs >= 10 * HELD_OUT_FLOOR else share
        return min(max(share, floor), HELD_OUT_CEILING[split])

    return scaled(n_test, "test"), scaled(n_valid, "valid")


def held_out_keys(keys: np.ndarray, n_test: int, n_valid: int, seed: int) -> dict[int, str]:
    """Source-sentence keys drawn for test, then valid: whole groups, in a seeded order, until
    each split has its size (a group is never cut, so no test sentence is also in train)."""
    unique, counts = np.unique(keys, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(unique))
    unique, counts = unique[order], counts[order]
    before = np.cumsum(counts) - counts  # pairs in the groups drawn before each one
    test = before < n_test
    in_test = int(counts[test].sum())
    valid = ~test & (before - in_test < n_valid)
    return {int(k): "test" for k in unique[test]} | {int(k): "valid" for k in unique[valid]}


def prepare_own(
    src: str,
    tgt: str,
    out: str | Path,
    opts: OwnCorpusOptions,
    progress: Progress = lambda p, n: None,
) -> dict:
    """Prepare `src`/`tgt` (or the TSV `src` when `tgt` is "") into `out`; returns the manifest."""
    out = Path(out)
    inputs = [p for p in (src, tgt) if p]
    check_replaceable(out, "corpus", "--out", opts.force, reads=inputs)
    if not (opts.src_lang and opts.tgt_lang):
        raise UserError("the corpus's languages are needed (text.corpus_languages finds them)")
    with built_aside(out, "manifest.json") as tmp:
        first = first_pass(read_corpus(src, tgt or None), tmp / SCRATCH, opts, progress)
        keep = first_occurrences(first.pair_hashes)
        duplicates = int(first.kept - keep.sum())
        n_test, n_valid = held_out_sizes(first.kept - duplicates, opts.n_test, opts.n_valid)
        if n_test + n_valid >= first.kept - duplicates:
            raise UserError(
                f"--test-size {n_test} and --valid-size {n_valid} leave no training "
                f"pairs: {src} has {first.kept - duplicates:,} after cleaning"
            )
        where = held_out_keys(first.key_hashes[keep], n_test, n_valid, opts.seed)
        counts = _write_splits(tmp, keep, first.key_hashes, where, progress)
        (tmp / SCRATCH).unlink()
        manifest = _manifest(inputs, opts, counts, {**first.dropped, "duplicate": duplicates})
        write_json(tmp / "manifest.json", manifest)
    return manifest


def _write_splits(tmp: Path, keep: np.ndarray, keys: np.ndarray, where: dict, progress) -> dict:
    """Second pass: the scratch file's kept pairs into train/valid/test, in file order."""
    names = [(split, side) for split in SPLITS for side in ("src", "tgt")]
    # six files open at once, closed in the finally below
    files = {(sp, si): open(tmp / f"{sp}.{si}", "w", encoding="utf-8") for sp, si in names}  # noqa: SIM115
    counts = dict.fromkeys(SPLITS, 0)
    try:
        with open(tmp / SCRATCH, encoding="utf-8") as scratch:
            for i, line in enumerate(scratch):
                if not keep[i]:
                    continue
                s, t = line.rstrip("\n").split("\t")
                split = where.get(int(keys[i]), "train")
                files[split, "src"].write(s + "\n")
                files[split, "tgt"].write(t + "\n")
                counts[split] += 1
                if i % 100_000 == 0:
                    progress("split", i)
    finally:
        for f in files.values():
            f.close()
    return counts


def _manifest(inputs: list[str], opts: OwnCorpusOptions, counts: dict, dropped: dict) -> dict:
    return {
        "corpus": "own",
        "src_lang": opts.src_lang,
        "tgt_lang": opts.tgt_lang,
        "counts": counts,
        "dropped": dropped,
        "inputs": [{"path": str(p), "sha256": sha256_of(p)} for p in inputs],
        "options": {
            k: getattr(opts, k)
            for k in ("zh_script", "unicode_form", "seed", "max_chars", "max_ratio")
        },
    }
