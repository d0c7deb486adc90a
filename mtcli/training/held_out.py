"""A validation set held out of the training files when the user gave none: OUT/heldout holds
the pairs to train on and those to validate on, split once by source sentence and reused while
the corpus, the size and the seed are the same (a resumed run validates on the same pairs).

Whole source sentences go one way: a source seen in validation is never trained on, so its
BLEU says how the model does on sentences it has not seen. Two passes over the corpus (count
and hash, then write); only the held-out sources' hashes are kept in memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
from pathlib import Path

from mtcli.config import TrainConfig
from mtcli.data.parallel_text import read_corpus
from mtcli.files import built_aside, sha256_of, write_json

FOLDER = "heldout"
NAMES = ("train.src", "train.tgt", "valid.src", "valid.tgt")


def with_held_out(cfg: TrainConfig, out: Path, say=lambda m: None) -> TrainConfig:
    """`cfg` training on OUT/heldout's train files and validating on its valid files, where it
    asks for a held-out set (valid_size) of --src/--tgt; the split is made on the first call and
    reused after. Unchanged otherwise (a validation set given, a token store, a TSV corpus)."""
    if not (cfg.valid_size and cfg.src and cfg.tgt) or cfg.data:
        return cfg
    folder = out / FOLDER
    key = _key(cfg)
    if _read_key(folder) != key:
        if cfg.valid_src:  # validation of the user's own, and no split of these files to reuse
            return cfg
        kept, held = _split(cfg, folder, key)
        say(
            f"validation: {held:,} of the {kept + held:,} pairs held out into {folder} (whole "
            "source sentences; --valid-size N or --valid-src/--valid-tgt choose)"
        )
    paths = {name: str(folder / name) for name in NAMES}
    return dataclasses.replace(
        cfg,
        src=paths["train.src"],
        tgt=paths["train.tgt"],
        valid_src=paths["valid.src"],
        valid_tgt=paths["valid.tgt"],
    )


def split_from(folder: Path) -> tuple[str, str] | None:
    """The user's files a held-out split was made from (None: not a split)."""
    key = _read_key(folder)
    return (key["src"], key["tgt"]) if key else None


def _key(cfg: TrainConfig) -> dict:
    return {
        "src": cfg.src,
        "tgt": cfg.tgt,
        "src_sha256": sha256_of(cfg.src),
        "tgt_sha256": sha256_of(cfg.tgt),
        "valid_size": cfg.valid_size,
        "seed": cfg.seed,
    }


def _read_key(folder: Path) -> dict | None:
    manifest = folder / "manifest.json"
    if not all((folder / name).is_file() for name in NAMES) or not manifest.is_file():
        return None
    return json.loads(manifest.read_text(encoding="utf-8")).get("key")


def _split(cfg: TrainConfig, folder: Path, key: dict) -> tuple[int, int]:
    """Write the split; (pairs kept to train on, pairs held out)."""
    held_sources = _held_out_sources(cfg)
    counts = [0, 0]
    with built_aside(folder, "manifest.json") as tmp:
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(tmp / n, "w", encoding="utf-8")) for n in NAMES]
            for _, src, tgt in read_corpus(cfg.src, cfg.tgt):
                held = _hash(src) in held_sources
                files[2 * held].write(src + "\n")
                files[2 * held + 1].write(tgt + "\n")
                counts[held] += 1
        write_json(tmp / "manifest.json", {"key": key, "train": counts[0], "valid": counts[1]})
    return counts[0], counts[1]


def _held_out_sources(cfg: TrainConfig) -> set[bytes]:
    """Hashes of the source sentences whose pairs are held out: distinct sources in a seeded
    order until valid_size pairs are covered."""
    per_source: dict[bytes, int] = {}
    for _, src, _ in read_corpus(cfg.src, cfg.tgt):
        h = _hash(src)
        per_source[h] = per_source.get(h, 0) + 1
    order = sorted(per_source)
    random.Random(cfg.seed).shuffle(order)
    held, covered = set(), 0
    for h in order:
        if covered >= cfg.valid_size:
            break
        held.add(h)
        covered += per_source[h]
    return held


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
