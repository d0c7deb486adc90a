"""The k largest entries of each row of a wide table (a step's log-probabilities over the
vocabulary), by way of block maxima. Knows nothing about models, text or files.

Why: torch's CPU topk walks each row with index bookkeeping that does not vectorise; over the
shipped models' (128, 6,000) chunks of log-probabilities it took 0.5-0.65 ms, more than the
log-softmax before it (0.22 ms), while a plain maximum over blocks of the row (amax, no indices)
takes 0.07-0.1 ms. The k largest entries of a row lie in the k blocks with the largest maxima:
each of those k maxima is an entry at least as large as anything in the other blocks, so an
entry outside them is at best the k-th largest in a tie. So topk runs over the block maxima
(V / b of them) and then over the k * b entries of the chosen blocks, not over all V.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

# below this many entries in a row torch's own topk is as quick (the tests' tiny vocabularies)
MIN_WIDTH = 1024
# a block of fewer entries made amax slower, not faster (measured over (128, 6,000): 40 to 150
# entries 0.16-0.49 ms, erratically, 100 alone 0.07; 200 to 1,000 entries 0.04-0.14 ms)
MIN_BLOCK = 200


@functools.cache
def block_size(width: int, k: int) -> int | None:
    """Entries per block for rows of `width` and the k largest: the smallest divisor of width
    of at least sqrt(width * k) and MIN_BLOCK that still leaves 2k blocks (the k chosen ones at
    most half the row). None where none does, or the row is narrow: top_k then falls back to
    torch's topk.

    sqrt(width * k) balances the two passes' sizes: width / b block maxima against k * b
    entries in the chosen blocks.
    """
    if width < MIN_WIDTH:
        return None
    least = max(MIN_BLOCK, math.isqrt(width * k))
    for b in range(least, width // (2 * k) + 1):
        if width % b == 0:
            return b
    return None


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest entries of each row of x (N, V), largest first, and their columns: (N, k)
    each. The values are exactly torch.topk's; among equal values the columns may differ."""
    N, V = x.shape
    b = block_size(V, k) if x.is_contiguous() else None
    if b is None:
        return tuple(x.topk(k, dim=-1))
    maxima = x.view(N, V // b, b).amax(dim=-1)  # (N, V / b)
    blocks = maxima.topk(k, dim=-1).indices  # (N, k) the blocks holding the k largest
    columns = (blocks[:, :, None] * b + torch.arange(b, device=x.device)).view(N, k * b)
    values, where = x.gather(1, columns).topk(k, dim=-1)  # (N, k) each
    return values, columns.gather(1, where)
