"""What a training pair is in an epoch: as stored, split anew by BPE-dropout, and rewritten by
the placeholder pipeline (augment.py), each drawn from (seed, epoch, pair) so that a resumed
run, or another DDP rank, sees every pair of an epoch exactly as an uninterrupted run does.

The pipeline places pieces at aligned words: the corpus is aligned once (eflomal) into
OUT/links.npz, beside the key of the token store it aligns, and aligned again only when that
store changes.
"""

from __future__ import annotations

import json
from pathlib import Path

from mtcli.config import TrainConfig
from mtcli.data.alignment import LinkTable, align, save_links
from mtcli.data.batches import Resplit, dropout_resplit
from mtcli.data.token_store import TokenStore, read_manifest
from mtcli.data.tokenizer import Tokenizer
from mtcli.files import write_file_atomic
from mtcli.training.augment import Augmenter, Rates
from mtcli.training.distributed import ProcessGroup
from mtcli.training.reports import Message


def rates_of(cfg: TrainConfig) -> Rates:
    return Rates(cfg.placeholders, cfg.tags, cfg.casing, cfg.end_punct)


def epoch_resplit(
    store: TokenStore, tokenizer: Tokenizer, cfg: TrainConfig, epoch: int, augmenter=None
) -> Resplit | None:
    """How this epoch's batches are split into subwords: as stored, or anew (BPE-dropout, the
    placeholder pipeline, or both). Seeded by (seed, epoch) and each batch or pair."""
    if cfg.bpe_dropout <= 0 and augmenter is None:
        return None
    p = cfg.bpe_dropout
    rewrite = None
    if augmenter is not None:

        def rewrite(i: int, src: str, tgt: str) -> tuple[str, str]:
            return augmenter(i, epoch, src, tgt)

    return dropout_resplit(
        store,
        lambda texts, rng: tokenizer.sample_src(texts, p, rng),
        lambda texts, rng: tokenizer.sample_tgt(texts, p, rng),
        max_len=cfg.max_len,
        seed=f"{cfg.seed}:{epoch}",
        rewrite=rewrite,
    )


def make_augmenter(
    cfg: TrainConfig, store: TokenStore, out: Path, group: ProcessGroup, say
) -> Augmenter | None:
    """The run's placeholder pipeline, its corpus aligned first when it needs alignments."""
    rates = rates_of(cfg)
    if not rates.on:
        return None
    links: list | LinkTable = [[] for _ in range(len(store))]
    if rates.placeholders > 0 or rates.tags > 0:
        if group.is_main:
            ensure_links(store, out, say)
        group.barrier()
        links = LinkTable(out / "links.npz")
    return Augmenter(rates, links, cfg.src_lang, cfg.tgt_lang, cfg.seed)


def ensure_links(store: TokenStore, out: Path, say) -> None:
    """OUT/links.npz: the word alignments of every pair of `store`, made again when the
    store's key (corpus, tokenizer, filters) is not the one they were made for."""
    key = read_manifest(store.path)["key"] if store.path else None
    record = out / "links.json"
    made = (out / "links.npz").is_file() and record.is_file()
    if made and json.loads(record.read_text(encoding="utf-8")) == {"store": key}:
        return
    say(Message(f"aligning the words of {len(store):,} training pairs (eflomal)"))
    src = [store.src.pair_text(i) for i in range(len(store))]
    tgt = [store.tgt.pair_text(i) for i in range(len(store))]
    save_links(out / "links.npz", align(src, tgt))
    write_file_atomic(record, json.dumps({"store": key}).encode("utf-8"))
