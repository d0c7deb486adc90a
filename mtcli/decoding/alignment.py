"""Word alignments from the cross-attention a search recorded: which source word each target
word attends to most. Pure functions over weights and each piece's word (data/tokenizer.py's
piece_words); draws nothing (the heatmaps of `mtcli attention` are cli/heatmap.py's).
"""

from __future__ import annotations

import torch


def align_words(
    cross: torch.Tensor, src_word: list[int], tgt_word: list[int]
) -> list[tuple[int, int]]:
    """Pharaoh-style (source word, target word) pairs from the argmax of cross-attention.

    cross (T, S) covers the pieces plus EOS on both sides; src_word (S-1) and tgt_word (T-1)
    give each piece's word. EOS rows and columns are ignored.
    """
    real = cross[: len(tgt_word), : len(src_word)]
    links = {(src_word[int(real[t].argmax())], tgt_word[t]) for t in range(len(tgt_word))}
    return sorted(links, key=lambda pair: (pair[1], pair[0]))
