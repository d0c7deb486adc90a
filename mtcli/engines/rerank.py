"""Noisy-channel reranking (Yee et al. 2019; fairseq's examples/noisychannel): the search's
first few candidates chosen again by their own score, how well the reverse model reads each one
back into its source, and their length. A candidate that drops a clause or invents a word
explains its source badly; the search, which only looks forward, cannot see that.

    choice = argmax  search score + a · mean log P(source | candidate) + b · log length ratio

`a`, `b` and how many candidates are weighed are fitted on the validation split by
`python bench/rerank.py --fit` into the model's directory (rerank.json). The reverse pass over
the chosen candidate is the one the confidence needs (its Scores travel on the SearchReading),
so the default path pays for one reverse pass over the candidates, not two.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtcli.engines.confidence import Direction, Scores, reverse_pass
from mtcli.errors import UserError

RERANK_FILE = "rerank.json"


@dataclass(frozen=True)
class RerankWeights:
    """The fitted weights of one model: a (reverse), b (length) and the candidates weighed."""

    reverse: float
    length: float
    candidates: int

    @classmethod
    def load(cls, model_dir: Path) -> RerankWeights | None:
        """The directory's rerank.json, or None where it has none; one line where it is damaged."""
        path = Path(model_dir) / RERANK_FILE
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            weights = cls(float(raw["reverse"]), float(raw["length"]), int(raw["candidates"]))
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not mtcli's reranking weights ({e})") from None
        finite = all(math.isfinite(v) for v in (weights.reverse, weights.length))
        if not finite or weights.candidates < 2:
            raise UserError(f"{path}: weights must be finite and candidates at least 2")
        return weights


def length_ratio(source: str, candidate: str) -> float:
    """log((characters of the candidate + 1) / (characters of the source + 1))."""
    return math.log((len(candidate) + 1) / (len(source) + 1))


class Reranker:
    """(sources, each source's candidates as (text, search score), best first) -> for each
    source the index of the candidate chosen and, where the reverse model read it, its Scores."""

    def __init__(
        self, weights: RerankWeights, reverse: Direction | Callable[[], Direction], device
    ):
        self.weights, self._reverse, self.device = weights, reverse, device

    @property
    def candidates(self) -> int:
        return self.weights.candidates

    @property
    def reverse(self) -> Direction:
        if not isinstance(self._reverse, Direction):
            self._reverse = self._reverse()
        return self._reverse

    def __call__(
        self, sources: list[str], candidates: list[list[tuple[str, float]]]
    ) -> list[tuple[int, Scores | None]]:
        weighed = [c[: self.candidates] for c in candidates]
        read = self._read_back(sources, weighed)
        chosen = []
        for source, cands, scores in zip(sources, weighed, read, strict=True):
            if not cands:
                chosen.append((0, None))
                continue
            total = [self._total(source, c, s) for c, s in zip(cands, scores, strict=True)]
            best = int(np.argmax(total))
            chosen.append((best, scores[best]))
        return chosen

    def _total(self, source: str, candidate: tuple[str, float], scores: Scores | None) -> float:
        text, score = candidate
        total = score + self.weights.length * length_ratio(source, text)
        if scores is not None:
            total += self.weights.reverse * float(scores[0].mean())
        return total

    def _read_back(self, sources: list[str], weighed) -> list[list[Scores | None]]:
        """Each candidate's reverse Scores, in one batched pass (none where `a` is 0: the
        length alone chooses, and nothing is read)."""
        if self.weights.reverse == 0.0:
            return [[None] * len(c) for c in weighed]
        pairs = [(i, text) for i, cands in enumerate(weighed) for text, _ in cands]
        passed = iter(
            reverse_pass(
                self.reverse, [sources[i] for i, _ in pairs], [t for _, t in pairs], self.device
            )
        )
        return [[next(passed) for _ in cands] for cands in weighed]
