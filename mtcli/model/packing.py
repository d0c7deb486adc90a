"""The real tokens of a padded batch, gathered into rows of their own, so that the steps which
act on each position alone (projections, feed-forward, layer norms, residuals) skip the padding.
Only attention, which lines positions up by sentence, needs the padded (B, S) grid. Knows
nothing about layers or text.

Why: a batch is padded to its longest sentence; over the 2,000 Tatoeba test lines 24% of the
encoder's positions were padding in greedy batches (8,000 padded tokens each) and 7% at beam 5.
"""

from __future__ import annotations

from torch import Tensor


class Packing:
    """Where the real tokens of a (B, S) batch sit: N of its B * S positions."""

    def __init__(self, mask: Tensor):
        """mask (B, S) bool, True at real tokens."""
        self.B, self.S = mask.shape
        self.index = mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat positions, in order

    @classmethod
    def of(cls, mask: Tensor) -> Packing | None:
        """The packing of `mask` (B, S), or None where it has no padding to skip."""
        return None if bool(mask.all()) else cls(mask)

    def pack(self, x: Tensor) -> Tensor:
        """(B, S, F) -> (N, F): the real positions' rows, sentence by sentence."""
        return x.reshape(self.B * self.S, -1).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """(N, F) -> (B, S, F), zeros at the padding."""
        grid = x.new_zeros(self.B * self.S, x.size(-1))
        return grid.index_copy_(0, self.index, x).view(self.B, self.S, -1)
