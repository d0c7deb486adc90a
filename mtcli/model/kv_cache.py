"""What a decoding pass keeps between steps: the decoder's key/value cache, and the attention
probabilities recorded when a caller asks to see them. Knows nothing about text or layers.

Shape legend as in transformer.py: B batch rows, S source len, T target len, H heads, K head dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class AttentionRecord:
    """Collects attention probabilities (B, H, Tq, Tk) per layer, when a caller asks to see them.

    Recording switches the product from the fused kernel to `attention_probs(...) @ V` (see
    model.attend), the same arithmetic written out, so the weights shown are the ones that
    made the output.
    """

    layers: dict[int, list[Tensor]] = field(default_factory=dict)
    # one layer alone (the confidence reads the last decoder layer's): the others are computed
    # by the fused kernel, as if nothing were recorded
    only: int | None = None
    # also the scores before the softmax, per layer (Q·Kᵀ, and Q·Kᵀ / √K): `mtcli explain`
    # shows each step of the arithmetic; None keeps none
    scores: dict[int, list[tuple[Tensor, Tensor]]] | None = None

    def wants(self, layer: int) -> bool:
        return self.only is None or layer == self.only

    def add(self, layer: int, probs: Tensor) -> None:
        if self.wants(layer):
            self.layers.setdefault(layer, []).append(probs.detach())

    def add_scores(self, layer: int, products: Tensor, scaled: Tensor) -> None:
        """products Q·Kᵀ and scaled Q·Kᵀ / √K, each (B, H, Tq, Tk), where scores are kept."""
        if self.scores is not None and self.wants(layer):
            self.scores.setdefault(layer, []).append((products.detach(), scaled.detach()))


class SourceWatch:
    """The newest decoding step's cross-attention of one decoder layer, averaged over heads:
    (N, S), a row per decoder row. What a search reads as it goes (how much of the source
    each output token looked at) without keeping every step's probabilities or every row.

    attend() writes to it as to an AttentionRecord (`add`); CrossAttention then turns what
    it wrote, grouped as a sentence's beams' queries, back into decoder rows (`take`).
    """

    def __init__(self, layer: int):
        self.layer = layer
        self.latest: Tensor | None = None  # (N, S)
        self._grouped: Tensor | None = None  # (B, g * T, S)

    def wants(self, layer: int) -> bool:
        return layer == self.layer

    def add_scores(self, layer: int, products: Tensor, scaled: Tensor) -> None:
        """A watch keeps no scores (attend() writes to it as to an AttentionRecord)."""

    def add(self, layer: int, probs: Tensor) -> None:
        """probs (B, H, g * T, S): the g beams of a sentence as one row's queries."""
        self._grouped = probs.mean(dim=1)

    def take(self, g: int, slots: Tensor | None = None) -> None:
        """What `add` was given, as the newest query of each decoder row: the beams' places
        among B * g, or only `slots` (the live beams' rows) where given."""
        B, GT, S = self._grouped.shape
        rows = self._grouped.view(B * g, GT // g, S)[:, -1]  # queries are beam-major in a row
        self.latest = rows if slots is None else rows.index_select(0, slots)
        self._grouped = None


@dataclass
class BeamRows:
    """Which beams the decoder rows hold, when beam search has dropped the rows of finished
    beams: row i is beam slots[i] % group of sentence slots[i] // group (slots ascending, every
    sentence with at least one row). Cross-attention, which groups each sentence's beams, reads it.
    """

    slots: Tensor  # (N,) each row's place among the B * group beams
    group: int  # beams per sentence
    first_rows: Tensor  # (B,) each sentence's first row

    @classmethod
    def of(cls, slots: Tensor, group: int) -> BeamRows:
        sentence = slots // group
        first = torch.ones_like(sentence, dtype=torch.bool)
        first[1:] = sentence[1:] != sentence[:-1]
        return cls(slots, group, first.nonzero().squeeze(1))


class KVCache:
    """Keys and values of the decoder's attention, for decoding one token per step.

    Self-attention K/V live in position-major buffers (T_cap, B, H, K), two per layer, filled
    up to `length`; each step writes one position. Position-major keeps the filled part one
    contiguous block, so following beam back-pointers is a single index_select into a spare
    buffer (which then takes the old buffer's place) instead of a gather and a strided copy
    back: 5x less time for that step at 665 rows. The buffers start with FIRST positions and
    grow by GROWTH times (to at least what the step needs) up to `max_len`, rather than being
    made for `max_len` at once: outputs mostly end far below the limit of 1.5 x source + 10
    (beam 5 over the Tatoeba test lines: memory in use at the peak 400 -> 299 MB, with 147 MB
    before decoding). They start small because the rows are at their most in the first steps
    (k per sentence, none finished yet): 8 positions from the start held 9 MB a buffer at the
    1,140 rows of the test lines' first batch, 2 hold a quarter of that, and by the time the
    buffers reach 8 positions most of those rows have finished. Growing by half, not by a fixed
    step, keeps the growths few for long outputs (2, 3, 5, 8, 12, 18, 27, ...). Against a growth of
    8 positions at a time, 10 interleaved rounds of beam 5 (fresh processes): run memory medians
    212 -> 192 MiB, fastest pass 4.24 -> 4.25 s, medians 4.73 -> 4.48; int8, 6 rounds: 189 ->
    172 MiB; the same outputs). Cross-attention K/V (B, H, S, K) are computed once from the
    encoder output by the first step and reused; they have one row per source, which the g
    beams of a sentence share (see CrossAttention).
    """

    FIRST = 2  # positions the buffers start with
    GROWTH = 1.5  # a full cache grows to this many times its positions; a growth copies what a reorder does

    def __init__(self, n_layers: int, max_len: int, record: AttentionRecord | None = None):
        self.n_layers, self.max_len = n_layers, max_len
        self.length = 0  # positions already decoded
        self.capacity = 0  # positions the buffers hold
        self.rows = 0  # B, rows of the decoder batch
        self.heads = (0, 0)  # (H, K), known from the first append
        self.buffers: list[Tensor] = []  # flat: K of layer 0, V of layer 0, K of layer 1, ...
        self.spare: Tensor | None = None  # one more, the destination of the next gather
        self.cross_k: list[Tensor | None] = [None] * n_layers
        self.cross_v: list[Tensor | None] = [None] * n_layers
        self.record = record  # cross-attention probabilities, when asked for (see AttentionRecord)
        # a record of one layer is a reading (the confidence's), not a trace: no self-attention
        traced = record is not None and record.only is None
        self.self_record: AttentionRecord | None = AttentionRecord() if traced else None
        self.watch: SourceWatch | None = None  # the newest step's cross-attention, for a search
        self.beam_rows: BeamRows | None = None  # None: each sentence's rows are all its beams

    def _positions(self, flat: Tensor, rows: int) -> Tensor:
        """Flat storage seen as (T_cap, rows, H, K)."""
        H, K = self.heads
        return flat[: self.capacity * rows * H * K].view(self.capacity, rows, H, K)

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store new K/V (B, H, Tn, K) at the next positions; return all so far (B, H, T, K)."""
        B, H, Tn, K = k.shape
        end = self.length + Tn
        if end > self.max_len:
            raise ValueError(f"KVCache holds {self.max_len} positions, asked for {end}")
        if not self.buffers:
            self.rows, self.heads = B, (H, K)
        if end > self.capacity:
            self._grow(end, k)
        seen = []
        for flat, new in ((self.buffers[2 * layer], k), (self.buffers[2 * layer + 1], v)):
            buf = self._positions(flat, self.rows)  # (T_cap, B, H, K)
            buf[self.length : end] = new.permute(2, 0, 1, 3)
            seen.append(buf[:end].permute(1, 2, 0, 3))  # (B, H, T, K), a view
        return seen[0], seen[1]

    def _grow(self, end: int, like: Tensor) -> None:
        """New buffers for at least `end` positions, holding the filled ones (all layers at once:
        layer 0 grows the cache before the other layers append at this step)."""
        n, H, K = self.length, *self.heads
        self.spare = None  # the next gather makes one of the new size
        grown = math.ceil(self.capacity * self.GROWTH) if self.capacity else self.FIRST
        self.capacity = min(self.max_len, max(end, grown))
        size = self.capacity * self.rows * H * K
        if not self.buffers:  # the first append
            self.buffers = [like.new_empty(size) for _ in range(2 * self.n_layers)]
            return
        # one buffer at a time, each old one freed before the next new one is made: at most one
        # old buffer lives beside the new ones, not all of them
        for i, previous in enumerate(self.buffers):
            filled = previous[: n * self.rows * H * K].view(n, self.rows, H, K)
            self.buffers[i] = like.new_empty(size)
            self._positions(self.buffers[i], self.rows)[:n] = filled
            del previous, filled

    @torch.no_grad()  # a cache serves decoding; index_select(out=...) takes no autograd
    def _gather_self(self, indices: Tensor) -> None:
        """Self-attention K/V of rows `indices` (N',) become the buffers' rows 0..N'-1.

        Each buffer's filled part is seen as n * B vectors of H*K, and one index_select along
        that first axis takes, for every position, the rows asked for: index_select along the
        row axis of (n, B, H*K) gave the same copy 2x slower at 1,000 rows and 10-25 positions
        (0.78 vs 0.24 ms at 10, 2.07 vs 1.03 at 15, 3.40 vs 1.68 at 25; equal at 6). Over the
        2,000 Tatoeba test lines at beam 5, 4 passes each interleaved in one process: 0.26 ->
        0.20 s of reordering a pass, about 1% of the decode; identical 5-best lists and scores."""
        n, rows, width = self.length, indices.numel(), self.heads[0] * self.heads[1]
        size = self.capacity * rows * width
        # row indices[j] of position t sits at t * B + indices[j]; built once for all buffers
        taken = (torch.arange(n, device=indices.device)[:, None] * self.rows + indices).view(-1)
        for i, flat in enumerate(self.buffers):
            if self.spare is None or self.spare.numel() < size:
                self.spare = flat.new_empty(size)
            out = self.spare[: n * rows * width].view(n * rows, width)
            torch.index_select(flat[: n * self.rows * width].view(-1, width), 0, taken, out=out)
            self.buffers[i], self.spare = self.spare, flat
        self.rows = rows

    def reorder(self, indices: Tensor) -> None:
        """Follow beam back-pointers: row i now continues row indices[i].

        Only self-attention K/V differ between beams of one sentence; the cross K/V of a
        sentence are the same in all its beams, so they stay (indices never cross sentences).
        """
        self.select(indices)

    def select(self, indices: Tensor, sources: Tensor | None = None) -> None:
        """Keep decoder rows `indices` (in that order, repeats allowed), and source rows
        `sources` of the cross K/V (None: all of them).

        A batch of one row per sentence widens into its beams this way (the sources stay),
        and finished sentences leave it (their rows and their source go).
        """
        if self.buffers:
            self._gather_self(indices)
        if sources is None:
            return
        for layer in range(self.n_layers):
            if self.cross_k[layer] is not None:
                self.cross_k[layer] = self.cross_k[layer].index_select(0, sources)
                self.cross_v[layer] = self.cross_v[layer].index_select(0, sources)
