"""Steering and watching a search: rules on what a step may produce (a forced prefix, no
repeated n-grams), and a Tracer that records every step for a person to read. Over token ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from mtcli.config import PAD_ID
from mtcli.decoding.stepper import NEG_INF


@dataclass
class StepRules:
    """Rules on what a step may produce beyond the model's preference.

    prefixes (B, P): target ids each sentence's output must start with (PAD where free), so
    a person can fix the first words and the model finishes; no_repeat_ngram: no n-gram may
    occur twice in an output (fairseq's --no-repeat-ngram-size), since small models loop.
    """

    prefixes: Tensor | None = None
    no_repeat_ngram: int = 0

    @property
    def active(self) -> bool:
        return self.prefixes is not None or self.no_repeat_ngram > 0

    def apply(self, log_probs: Tensor, step: int, tokens: Tensor, sentence: Tensor) -> Tensor:
        """log_probs (N, V) of rows whose outputs so far are tokens (N, step), each row of
        sentence[i] (N,); returns them with the forbidden tokens at -inf."""
        if self.prefixes is not None and step < self.prefixes.size(1):
            forced = self.prefixes[sentence, step][:, None]  # (N, 1), PAD where free
            only = torch.full_like(log_probs, NEG_INF).scatter(
                1, forced, log_probs.gather(1, forced)
            )
            log_probs = torch.where(forced != PAD_ID, only, log_probs)
        n = self.no_repeat_ngram
        if n > 0 and tokens.size(1) >= n - 1:
            for row, seq in enumerate(tokens.tolist()):
                if banned := repeating_tokens(seq, n):
                    log_probs[row, list(banned)] = NEG_INF
        return log_probs


def repeating_tokens(seq: list[int], n: int) -> set[int]:
    """The tokens that would end an n-gram `seq` already holds (fairseq's no-repeat rule)."""
    if len(seq) < n - 1:
        return set()
    tail = tuple(seq[len(seq) - n + 1 :]) if n > 1 else ()
    return {seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i : i + n - 1]) == tail}


NO_RULES = StepRules()


@dataclass
class TraceRow:
    """One decoder row at one step: what it was fed, what it is, what it considers next."""

    sentence: int
    prefix: list[int]  # output tokens so far (the last one is what was fed back; BOS at step 0)
    score: float  # summed log-probability of the prefix
    top: list[tuple[int, float]]  # the most probable next tokens and their probabilities


@dataclass
class TraceStep:
    step: int
    rows: list[TraceRow]
    finished: list[tuple[int, list[int], float]] = field(default_factory=list)


@dataclass
class Tracer:
    """Records every step of a search: each row's fed token, its top candidates with their
    probabilities, the beams' scores, and the hypotheses that finished. Costs nothing off."""

    top: int = 5
    steps: list[TraceStep] = field(default_factory=list)

    def record(
        self, step: int, log_probs: Tensor, tokens: Tensor, raw: Tensor, sentence: Tensor
    ) -> None:
        probs, ids = log_probs.exp().topk(min(self.top, log_probs.size(-1)), dim=-1)
        rows = [
            TraceRow(
                int(sentence[r]),
                tokens[r].tolist(),
                float(raw[r]),
                [(int(i), float(p)) for i, p in zip(ids[r], probs[r], strict=True) if p > 0],
            )
            for r in range(log_probs.size(0))
            if torch.isfinite(raw[r])
        ]
        self.steps.append(TraceStep(step, rows))

    def finish(self, sentence: int, tokens: list[int], score: float) -> None:
        self.steps[-1].finished.append((sentence, tokens, score))
