"""Word alignments from the cross-attention a search recorded: which source word each target
word attends to most. Pure functions over pieces and weights; draws nothing (the heatmaps of
`mtcli attention` are cli/heatmap.py's).
"""

from __future__ import annotations

import torch


def piece_words(pieces: list[str], by_space: bool) -> list[int]:
    """Word index of each piece: '▁' starts a word; without spaces every piece is a word."""
    index, out = -1, []
    for i, piece in enumerate(pieces):
        if not by_space or piece.startswith("▁") or i == 0:
            index += 1
        out.append(index)
    return out


def align_words(
    cross: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str], tgt_has_spaces: bool
) -> list[tuple[int, int]]:
    """Pharaoh-style (source word, target word) pairs from the argmax of cross-attention.

    cross (T, S) covers the pieces plus EOS on both sides; EOS rows and columns are ignored.
    """
    src_word = piece_words(src_pieces, by_space=True)
    tgt_word = piece_words(tgt_pieces, by_space=tgt_has_spaces)
    real = cross[: len(tgt_pieces), : len(src_pieces)]
    links = {(src_word[int(real[t].argmax())], tgt_word[t]) for t in range(len(tgt_pieces))}
    return sorted(links, key=lambda pair: (pair[1], pair[0]))
