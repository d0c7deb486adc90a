"""Parallel corpora as token ids: length filtering, token-bucketed batches, padding (the text
itself is read by parallel_text.py).

Knows about token ids and tensors, never about models. Masks are bool, True = may attend.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.errors import UserError


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


@dataclass
class Corpus:
    """Token ids of a filtered parallel corpus. Source ids end with EOS; target ids do not."""

    src: list[list[int]] = field(default_factory=list)
    tgt: list[list[int]] = field(default_factory=list)
    stats: CorpusStats = field(default_factory=CorpusStats)
    texts: list[tuple[str, str]] = field(default_factory=list)  # the kept pairs, to re-split

    def __len__(self) -> int:
        return len(self.src)

    def src_len(self, i: int) -> int:
        return len(self.src[i])

    def tgt_len(self, i: int) -> int:
        return len(self.tgt[i]) + 1  # BOS in the decoder input / EOS in the output


def load_corpus(
    lines: Iterator[tuple[int, str, str]],
    encode_src: Callable[[str], list[int]],
    encode_tgt: Callable[[str], list[int]],
    *,
    max_len: int = 128,
    max_ratio: float = 9.0,
) -> Corpus:
    """Encode a stream of pairs, skipping empty sides and filtering by length and ratio."""
    corpus = Corpus()
    stats = corpus.stats
    for _, src_text, tgt_text in lines:
        stats.read += 1
        src_text, tgt_text = src_text.strip(), tgt_text.strip()
        if not src_text or not tgt_text:
            stats.empty += 1
            continue
        src_ids, tgt_ids = encode_src(src_text), encode_tgt(tgt_text)
        if len(src_ids) > max_len or len(tgt_ids) > max_len:
            stats.too_long += 1
            continue
        n_src, n_tgt = len(src_ids) + 1, len(tgt_ids) + 1
        if max(n_src, n_tgt) / min(n_src, n_tgt) > max_ratio:
            stats.bad_ratio += 1
            continue
        corpus.src.append(src_ids + [EOS_ID])
        corpus.tgt.append(tgt_ids)
        corpus.texts.append((src_text, tgt_text))
        stats.kept += 1
    return corpus


def resplit(
    corpus: Corpus,
    sample_src: Callable[[list[str]], list[list[int]]],
    sample_tgt: Callable[[list[str]], list[list[int]]],
    *,
    max_len: int,
) -> Corpus:
    """The same pairs split into subwords anew (BPE-dropout); the filtered set stays as it is.

    A sampled split is longer than the deterministic one; a pair that grows past `max_len`
    keeps its deterministic split, so batches never exceed what the filter allowed.
    """
    src = sample_src([s for s, _ in corpus.texts])
    tgt = sample_tgt([t for _, t in corpus.texts])
    out = Corpus(stats=corpus.stats, texts=corpus.texts)
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        fits = len(s) <= max_len and len(t) <= max_len
        out.src.append(s + [EOS_ID] if fits else corpus.src[i])
        out.tgt.append(t if fits else corpus.tgt[i])
    return out


def make_batches(
    src_lens: list[int],
    tgt_lens: list[int],
    *,
    max_tokens: int,
    seed: int,
    epoch: int,
    pool_batches: int = 100,
) -> list[list[int]]:
    """Split one epoch into batches of indices under a padded-token budget.

    Shuffle (seeded by seed and epoch), cut into pools of about `pool_batches` batches,
    sort each pool by length so neighbours pad little, fill batches greedily, then shuffle
    the batch order. Every index appears exactly once per epoch.
    """
    n = len(src_lens)
    longest = max((s + t for s, t in zip(src_lens, tgt_lens, strict=True)), default=0)
    if longest > max_tokens:
        raise UserError(
            f"--max-tokens {max_tokens} is smaller than the longest pair ({longest} tokens); "
            "raise --max-tokens or lower --max-len"
        )
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(n))
    rng.shuffle(order)
    mean_len = (sum(src_lens) + sum(tgt_lens)) / max(n, 1)
    pool_size = max(1, int(pool_batches * max_tokens / max(mean_len, 1)))
    batches: list[list[int]] = []
    for start in range(0, n, pool_size):
        pool = sorted(order[start : start + pool_size], key=lambda i: (src_lens[i], tgt_lens[i]))
        batch: list[int] = []
        max_s = max_t = 0
        for i in pool:
            new_s, new_t = max(max_s, src_lens[i]), max(max_t, tgt_lens[i])
            if batch and (len(batch) + 1) * (new_s + new_t) > max_tokens:
                batches.append(batch)
                batch, new_s, new_t = [], src_lens[i], tgt_lens[i]
            batch.append(i)
            max_s, max_t = new_s, new_t
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def epoch_batches(corpus: Corpus, *, max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """`make_batches` over a loaded corpus."""
    src_lens = [corpus.src_len(i) for i in range(len(corpus))]
    tgt_lens = [corpus.tgt_len(i) for i in range(len(corpus))]
    return make_batches(src_lens, tgt_lens, max_tokens=max_tokens, seed=seed, epoch=epoch)


def pad(seqs: list[list[int]]) -> torch.Tensor:
    """Right-pad id lists with PAD_ID into a (B, L) long tensor."""
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


@dataclass
class Batch:
    """One padded batch. Shapes: src_ids (B, S); tgt_in and tgt_out (B, T)."""

    src_ids: torch.Tensor
    tgt_in: torch.Tensor  # BOS + target ids: what the decoder reads
    tgt_out: torch.Tensor  # target ids + EOS: what it must predict (PAD = ignored)

    @property
    def n_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src_ids.to(device), self.tgt_in.to(device), self.tgt_out.to(device))


def collate(corpus: Corpus, indices: list[int]) -> Batch:
    """Pad the pairs at `indices` into a Batch."""
    src = [corpus.src[i] for i in indices]
    tgt = [corpus.tgt[i] for i in indices]
    return Batch(
        src_ids=pad(src),
        tgt_in=pad([[BOS_ID] + t for t in tgt]),
        tgt_out=pad([t + [EOS_ID] for t in tgt]),
    )


def padding_mask(ids: torch.Tensor) -> torch.Tensor:
    """(B, L) bool, True at real tokens (may be attended to)."""
    return ids != PAD_ID
