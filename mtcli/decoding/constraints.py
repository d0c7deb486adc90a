"""Lexically constrained beam search: outputs that must contain given target phrases, as a
glossary demands (Hokamp & Liu 2017; Post & Vilar 2018's dynamic beam allocation).

Each hypothesis tracks which phrases it has produced (and how far into one it is). A step's
candidates are each beam's best tokens plus the tokens that would advance a constraint; they
are grouped into banks by how many constraint tokens they have met, and the beam's k slots
are shared among the banks (Post & Vilar's DBA), so hypotheses that have started on the
constraints are not crowded out by the model's unconstrained favourites. A hypothesis may end
only once every phrase is in it. Decodes one sentence at a time, through the same KV cache as
decoding/stepper.py; knows nothing about text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mtcli.config import EOS_ID
from mtcli.decoding.stepper import (
    NEG_INF,
    Hypothesis,
    Models,
    Stepper,
    length_penalty,
    max_output_lengths,
    output_limit,
)


@dataclass(frozen=True)
class Progress:
    """How far a hypothesis is through its constraints: which phrases are in it, and which
    phrase (if any) it is in the middle of, after how many tokens."""

    met: tuple[bool, ...]
    phrase: int = -1  # the phrase being produced, -1: none
    pos: int = 0  # tokens of it produced so far

    @staticmethod
    def start(n: int) -> Progress:
        return Progress((False,) * n)

    def after(self, token: int, phrases: list[list[int]]) -> Progress:
        """The progress once `token` is produced."""
        if self.phrase >= 0:
            wanted = phrases[self.phrase]
            if token == wanted[self.pos]:
                if self.pos + 1 == len(wanted):
                    return Progress(_set(self.met, self.phrase))
                return Progress(self.met, self.phrase, self.pos + 1)
            # the phrase was broken off: it counts as not produced; the token may start another
        for i, phrase in enumerate(phrases):
            if not self.met[i] and phrase[0] == token:
                return Progress(_set(self.met, i)) if len(phrase) == 1 else Progress(self.met, i, 1)
        return Progress(self.met)

    def needed(self, phrases: list[list[int]]) -> list[int]:
        """Tokens that would advance a constraint now."""
        if self.phrase >= 0:
            return [phrases[self.phrase][self.pos]]
        return sorted({p[0] for i, p in enumerate(phrases) if not self.met[i]})

    def done(self, phrases: list[list[int]]) -> int:
        """Constraint tokens produced so far (the bank of the hypothesis)."""
        return sum(len(p) for p, m in zip(phrases, self.met, strict=True) if m) + self.pos

    @property
    def complete(self) -> bool:
        return all(self.met) and self.phrase < 0


def _set(met: tuple[bool, ...], i: int) -> tuple[bool, ...]:
    return met[:i] + (True,) + met[i + 1 :]


def allocate(bank_sizes: dict[int, int], k: int, banks: int) -> dict[int, int]:
    """DBA: k slots shared evenly by `banks` banks; slots a bank cannot fill go to the banks
    with candidates left, most constraint tokens met first."""
    share = {b: k // banks + (1 if b >= banks - k % banks else 0) for b in range(banks)}
    taken = {b: min(share[b], bank_sizes.get(b, 0)) for b in range(banks)}
    spare = k - sum(taken.values())
    for b in sorted(range(banks), reverse=True):
        extra = min(spare, bank_sizes.get(b, 0) - taken[b])
        taken[b] += extra
        spare -= extra
    return taken


Beam = tuple[list[int], float, Progress]  # output tokens, summed log-probability, progress


@torch.inference_mode()
def constrained_beam_search(
    models: Models,
    src_ids: Tensor,
    src_mask: Tensor,
    phrases: list[list[int]],
    *,
    beam_size: int = 5,
    alpha: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    nbest: int = 1,
    prefix: list[int] | None = None,
    no_repeat_ngram: int = 0,
    glue: tuple[frozenset[int], frozenset[int]] | None = None,
) -> list[Hypothesis]:
    """The best outputs of one sentence (src_ids (1, S)) that contain every phrase of token
    ids, each starting with `prefix` (forced, and counted towards the phrases it holds), none
    repeating an n-gram of `no_repeat_ngram` tokens. Empty when no hypothesis could fit them
    within the length limit. A beam of 1 works: its one slot goes to the hypothesis furthest
    through the phrases. `glue` = (tokens that end in a digit, tokens that start with one, no
    space before): outside a phrase, the second never follows the first, so a number phrase
    is not run into the digits beside it (7301 then 55855 would read 730155855)."""
    prefix = prefix or []
    device, k = src_ids.device, beam_size
    extra = sum(len(p) for p in phrases)  # room for the phrases beyond the usual length
    limit = output_limit(models)
    max_len = int(max_output_lengths(src_mask, max_len_a, max_len_b + extra, limit)[0])
    stepper = Stepper(models, src_ids, src_mask, max_len + 1, use_cache=True)
    banks = extra + 1
    beams: list[Beam] = [([], 0.0, Progress.start(len(phrases)))]
    finished: list[Hypothesis] = []
    for step in range(max_len + 1):
        tokens = torch.tensor([b[0] for b in beams], dtype=torch.long, device=device)
        log_probs = stepper(tokens.view(len(beams), step))  # (beams, V)
        if step < len(prefix):  # the prefix's token alone, wherever the beam is
            log_probs = _only(log_probs, prefix[step])
        if no_repeat_ngram:
            log_probs = _no_repeats(log_probs, [b[0] for b in beams], no_repeat_ngram)
        if glue is not None:
            log_probs = _unglued(log_probs, beams, *glue)
        candidates = _candidates(beams, log_probs, phrases, k, last=step == max_len)
        # finished hypotheses leave the beam; the rest are banked by constraint tokens met
        by_bank: dict[int, list[tuple[float, int, int, Progress]]] = {}
        for (row, token), (raw, progress) in candidates.items():
            if token == EOS_ID:
                tokens_out = beams[row][0]
                norm = raw / length_penalty(len(tokens_out) + 1, alpha)
                finished.append(Hypothesis(list(tokens_out), norm))
            else:
                by_bank.setdefault(progress.done(phrases), []).append((raw, row, token, progress))
        for bank in by_bank.values():
            bank.sort(key=lambda c: -c[0])
        sizes = allocate({b: len(c) for b, c in by_bank.items()}, k, banks)
        chosen = [c for b, c in by_bank.items() for c in c[: sizes.get(b, 0)]]
        finished.sort(key=lambda h: -h.score)
        if not chosen or _hopeless(chosen, finished, nbest, max_len, alpha):
            break
        beams = [(beams[row][0] + [token], raw, progress) for raw, row, token, progress in chosen]
        stepper.select(torch.tensor([row for _, row, _, _ in chosen], device=device))
    return finished[:nbest]


def _only(log_probs: Tensor, token: int) -> Tensor:
    """(beams, V) with every token but `token` at -inf."""
    forced = torch.full_like(log_probs, NEG_INF)
    forced[:, token] = log_probs[:, token]
    return forced


def _no_repeats(log_probs: Tensor, outputs: list[list[int]], n: int) -> Tensor:
    """(beams, V) with -inf for each token that would repeat an n-gram of its beam's output
    (the rule of steering.StepRules, on one sentence's beams)."""
    log_probs = log_probs.clone()
    for row, seq in enumerate(outputs):
        if len(seq) < n - 1:
            continue
        tail = tuple(seq[len(seq) - n + 1 :]) if n > 1 else ()
        banned = {
            seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i : i + n - 1]) == tail
        }
        if banned:
            log_probs[row, list(banned)] = NEG_INF
    return log_probs


def _unglued(
    log_probs: Tensor, beams: list[Beam], ends: frozenset[int], starts: frozenset[int]
) -> Tensor:
    """(beams, V) with -inf for tokens of `starts` after a token of `ends`, outside a phrase."""
    rows = [
        r
        for r, (tokens, _, progress) in enumerate(beams)
        if tokens and tokens[-1] in ends and progress.phrase < 0
    ]
    if rows:
        log_probs = log_probs.clone()
        log_probs[torch.tensor(rows)[:, None], torch.tensor(sorted(starts))[None, :]] = NEG_INF
    return log_probs


def _candidates(
    beams: list[Beam], log_probs: Tensor, phrases: list[list[int]], k: int, *, last: bool
) -> dict[tuple[int, int], tuple[float, Progress]]:
    """(row, token) -> (summed log-probability, progress) of each beam's k best tokens and the
    tokens that would advance a constraint. No ending before every phrase is in; at the last
    step (`last`: the length limit) only EOS, and only once complete."""
    candidates = {}
    for row, (_, raw, progress) in enumerate(beams):
        lp = log_probs[row]
        if not progress.complete or last:
            lp = lp.clone()
            if not progress.complete:
                lp[EOS_ID] = NEG_INF
            if last:
                eos = lp[EOS_ID].clone()
                lp[:] = NEG_INF
                lp[EOS_ID] = eos
        best = lp.topk(min(k, lp.numel())).indices.tolist()
        for token in {*best, *progress.needed(phrases)}:
            score = float(lp[token])
            if score > NEG_INF:
                candidates[(row, token)] = (raw + score, progress.after(token, phrases))
    return candidates


def _hopeless(chosen, finished: list[Hypothesis], nbest: int, max_len: int, alpha: float) -> bool:
    """True when no live beam can still beat the nbest-th finished hypothesis (raw scores only
    fall; the largest length penalty is at the longest output)."""
    if len(finished) < nbest:
        return False
    best_live = max(raw for raw, _, _, _ in chosen)
    return best_live / length_penalty(max_len + 1, alpha) <= finished[nbest - 1].score
