"""An epoch of a token store as batches: token-bucketed under a padded-token budget, made with
numpy from the lengths array alone, and padded into tensors (with BPE-dropout's re-split when on).

Knows about token ids and tensors, never about models. Masks are bool, True = may attend.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.data.token_store import TokenStore
from mtcli.errors import UserError


@dataclass
class EpochBatches:
    """One epoch's batches: batch k holds the pairs order[starts[b]:starts[b + 1]], b = picks[k].

    Arrays, not lists of lists: 10M pairs cost 40 MB here (int32), not ~300 MB of Python ints.
    """

    order: np.ndarray  # (n,) int32: pair indices, each pool sorted by length
    starts: np.ndarray  # (n_batches + 1,) int64: where each batch begins in `order`
    picks: np.ndarray  # (k,) int64: the batches in the order they are trained on

    def __len__(self) -> int:
        return len(self.picks)

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def __getitem__(self, k: int) -> np.ndarray:
        b = self.picks[k]
        return self.order[self.starts[b] : self.starts[b + 1]]

    def share(self, rank: int, world: int) -> EpochBatches:
        """Rank `rank`'s batches: every `world`-th from the rank-th, an equal count on every rank
        (DDP's collectives need equal counts). Strided, so step k of all ranks together trains on
        batches k*world .. k*world + world - 1: what one process with world times the --accum
        would train on at its step k."""
        share = len(self.picks) // world
        return EpochBatches(self.order, self.starts, self.picks[rank : share * world : world])


def make_batches(
    src_lens,
    tgt_lens,
    *,
    max_tokens: int,
    seed: int,
    epoch: int,
    pool_batches: int = 100,
) -> EpochBatches:
    """Split one epoch into batches of indices under a padded-token budget.

    Shuffle (seeded by seed and epoch), cut into pools of about `pool_batches` batches,
    sort each pool by length so neighbours pad little, fill batches greedily (a pair joins
    while (pairs + 1) * (longest source + longest target) stays within the budget), then
    shuffle the batch order. Every index appears exactly once per epoch.
    """
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)  # a store's: no copy
    n = len(src_lens)
    longest = _longest_pair(src_lens, tgt_lens)
    if longest > max_tokens:
        raise UserError(
            f"--max-tokens {max_tokens} is smaller than the longest pair ({longest} tokens); "
            "raise --max-tokens or lower --max-len"
        )
    rng = np.random.default_rng([seed, epoch])
    order = np.arange(n, dtype=np.int32)
    rng.shuffle(order)
    mean_len = (int(src_lens.sum(dtype=np.int64)) + int(tgt_lens.sum(dtype=np.int64))) / max(n, 1)
    pool_size = max(1, int(pool_batches * max_tokens / max(mean_len, 1)))
    starts = [0]
    for begin in range(0, n, pool_size):
        pool = order[begin : begin + pool_size]
        s, t = src_lens[pool].astype(np.int64), tgt_lens[pool].astype(np.int64)
        by_length = np.lexsort((t, s))  # by source, then target
        pool[:] = pool[by_length]
        for size in _greedy_sizes(s[by_length], t[by_length], max_tokens):
            starts.append(starts[-1] + size)
    bounds = np.asarray(starts, dtype=np.int64)
    return EpochBatches(order, bounds, rng.permutation(len(bounds) - 1))


def _longest_pair(src_lens: np.ndarray, tgt_lens: np.ndarray, block: int = 1 << 20) -> int:
    """max(src + tgt) in blocks: a (n,) temporary would be 40 MB more at 10M pairs."""
    longest = 0
    for i in range(0, len(src_lens), block):
        total = src_lens[i : i + block].astype(np.int32) + tgt_lens[i : i + block]
        longest = max(longest, int(total.max()))
    return longest


def _greedy_sizes(s: np.ndarray, t: np.ndarray, max_tokens: int) -> list[int]:
    """Batch sizes of a pool sorted by source length, filled greedily under the budget.

    A batch from i of k pairs pads to k * (s[i + k - 1] + max(t[i : i + k])) tokens: s is
    sorted, and the running max of t gives the rest, so each batch is one vectorised search
    over at most max_tokens // (s[i] + t[i]) candidates.
    """
    sizes, i, m = [], 0, len(s)
    while i < m:
        w = min(m - i, max(1, max_tokens // int(s[i] + t[i])))
        cost = np.arange(1, w + 1) * (s[i : i + w] + np.maximum.accumulate(t[i : i + w]))
        over = np.flatnonzero(cost > max_tokens)
        size = max(1, int(over[0]) if over.size else w)
        sizes.append(size)
        i += size
    return sizes


def epoch_batches(store: TokenStore, *, max_tokens: int, seed: int, epoch: int) -> EpochBatches:
    """`make_batches` over a store's lengths."""
    return make_batches(
        store.src_lens(), store.tgt_lens(), max_tokens=max_tokens, seed=seed, epoch=epoch
    )


def pad(seqs: list) -> torch.Tensor:
    """Right-pad id sequences (lists or arrays) with PAD_ID into a (B, L) long tensor."""
    width = max(len(s) for s in seqs)
    out = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = seq
    return torch.from_numpy(out)


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


Resplit = Callable[[list[int]], tuple[list, list]]  # pair indices -> (source ids, target ids)


def collate(store: TokenStore, indices, resplit: Resplit | None = None) -> Batch:
    """Pad the pairs at `indices` into a Batch (their stored split, or `resplit`'s)."""
    indices = [int(i) for i in indices]
    if resplit is None:
        src, tgt = [store.src.pair(i) for i in indices], [store.tgt.pair(i) for i in indices]
    else:
        src, tgt = resplit(indices)
    eos, bos = np.array([EOS_ID]), np.array([BOS_ID])
    return Batch(
        src_ids=pad([np.concatenate([s, eos]) for s in src]),
        tgt_in=pad([np.concatenate([bos, t]) for t in tgt]),
        tgt_out=pad([np.concatenate([t, eos]) for t in tgt]),
    )


def dropout_resplit(
    store: TokenStore,
    sample_src: Callable[[list[str], random.Random], list[list[int]]],
    sample_tgt: Callable[[list[str], random.Random], list[list[int]]],
    *,
    max_len: int,
    seed: str,
    rewrite: Callable[[int, str, str], tuple[str, str]] | None = None,
) -> Resplit:
    """BPE-dropout for one batch: its pairs' stored text split into subwords anew.

    The draws are seeded by `seed` (the run's seed and the epoch) and the batch's first pair
    (each pair is in one batch of an epoch), so a resumed run re-splits each batch as the
    first run did, on any number of ranks. `rewrite(i, src, tgt)` changes pair i's text first
    (the placeholder pipeline, seeded per pair). A pair whose sampled split grows past `max_len`
    keeps its stored split, so no pair exceeds what the filter allowed; the batch was made
    from the stored lengths, and the longer sampled splits may pad a little past the budget.
    """
    if not store.has_text:
        where = store.path or "the corpus"
        raise UserError(
            f"{where}: holds no text, which BPE-dropout re-splits; binarize with --keep-text"
        )

    def resplit(indices: list[int]) -> tuple[list, list]:
        rng = random.Random(f"{seed}:{indices[0]}")
        texts = [(store.src.pair_text(i), store.tgt.pair_text(i)) for i in indices]
        if rewrite is not None:
            texts = [rewrite(i, s, t) for i, (s, t) in zip(indices, texts, strict=True)]
        src = sample_src([s for s, _ in texts], rng)
        tgt = sample_tgt([t for _, t in texts], rng)
        out_s, out_t = [], []
        for i, s, t in zip(indices, src, tgt, strict=True):
            fits = len(s) <= max_len and len(t) <= max_len
            out_s.append(np.asarray(s) if fits else store.src.pair(i))
            out_t.append(np.asarray(t) if fits else store.tgt.pair(i))
        return out_s, out_t

    return resplit


def padding_mask(ids: torch.Tensor) -> torch.Tensor:
    """(B, L) bool, True at real tokens (may be attended to)."""
    return ids != PAD_ID
