"""Word alignments of a parallel corpus, for the training pipeline that puts placeholders and
inline tags at aligned positions (training/augment.py).

Words: a run of letters or digits, or one other character; in text without spaces (Chinese)
each CJK character is a word of its own (eflomal learns which characters make one word of the
other side). The aligner is eflomal (Östling and Tiedemann 2016; `pip install eflomal`, the
`align` extra): a Bayesian IBM-model aligner in C, ~20 s for Tatoeba's 25k pairs on 2 cores,
run both ways and joined by grow-diag (Koehn et al. 2005): the links both directions agree on,
grown into the neighbouring links of either where a word is still unaligned (so baseball gets
棒球, not only 棒).
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mtcli.errors import UserError
from mtcli.files import write_file_atomic

WORD = re.compile(r"[^\W\d_\u3400-\u9fff]+|\d+|[\u3400-\u9fff]|[^\s]", re.UNICODE)


def words(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of the words of `text`."""
    return [m.span() for m in WORD.finditer(text)]


Links = list[tuple[int, int]]  # (source word, target word)


def align(src: Sequence[str], tgt: Sequence[str]) -> list[Links]:
    """The intersected eflomal links of every pair, by word index."""
    try:
        from eflomal import Aligner
    except ImportError:
        raise UserError(
            "the placeholder pipeline aligns words with eflomal: pip install 'mtcli[align]'"
        ) from None

    def joined(texts: Sequence[str]) -> list[str]:
        return [" ".join(line[a:b] for a, b in words(line)).lower() or "." for line in texts]

    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        Aligner().align(
            joined(src), joined(tgt), links_filename_fwd=str(fwd), links_filename_rev=str(rev)
        )
        forward = fwd.read_text().splitlines()
        backward = rev.read_text().splitlines()
    return [grow_diag(_parse(f), _parse(r)) for f, r in zip(forward, backward, strict=True)]


NEIGHBOURS = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]


def grow_diag(forward: set[tuple[int, int]], backward: set[tuple[int, int]]) -> Links:
    """The intersection of two directional alignments, grown by neighbouring union links that
    align a word not yet aligned."""
    links, union = forward & backward, forward | backward
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                new = (i + di, j + dj)
                if new in union and new not in links and _unaligned(links, *new):
                    links.add(new)
                    grew = True
    return sorted(links)


def _unaligned(links: set[tuple[int, int]], i: int, j: int) -> bool:
    return all(a != i for a, _ in links) or all(b != j for _, b in links)


def _parse(line: str) -> set[tuple[int, int]]:
    return {tuple(map(int, link.split("-"))) for link in line.split()}  # type: ignore[misc]


def save_links(path: Path, links: list[Links]) -> None:
    """All pairs' links in one .npz (written atomically): offsets (N+1,) and links (L, 2)."""
    counts = np.array([len(pair) for pair in links], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    flat = np.array([link for pair in links for link in sorted(pair)], dtype=np.uint16)
    buffer = io.BytesIO()
    np.savez(buffer, offsets=offsets, links=flat.reshape(-1, 2))
    write_file_atomic(path, buffer.getvalue())


class LinkTable:
    """The links of a saved .npz, pair by pair."""

    def __init__(self, path: Path):
        with np.load(path) as saved:
            self.offsets, self.links = saved["offsets"], saved["links"]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Links:
        rows = self.links[self.offsets[i] : self.offsets[i + 1]]
        return [(int(a), int(b)) for a, b in rows]
