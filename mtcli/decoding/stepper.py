"""What every search shares: the models' next-token log-probabilities one step at a time
(through the KV cache, or the uncached reference), each sentence's output limit, the length
penalty, the attention a search records, and the hypotheses it returns. Knows nothing about text.

Every search takes one model or several (an ensemble: at each step the models'
log-probabilities are averaged, each model with its own cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.decoding.top_k import top_k
from mtcli.model.kv_cache import AttentionRecord, BeamRows, SourceWatch
from mtcli.model.transformer import Seq2Seq

NEG_INF = float("-inf")
# rows of the output projection at a time when a search needs only each row's best few tokens.
# The (rows, V) tables were a beam-5 pass's largest tensors (at 1,140 rows and V = 6,000, three
# of 27 MB alive at once: the last step's log-probabilities, this step's logits and theirs);
# 128 rows take 3 MB. Over the 2,000 Tatoeba test lines (en-zh-tiny, fp32, fresh processes,
# fastest of 3): peak RSS 550 -> 436 MiB, decode 4.34 -> 4.17 s; 256 rows: 453 MiB, 4.31 s.
# An int8 model scales each row on its own (mtcli.model.int8): chunks change no result.
ROW_CHUNK = 128


@dataclass
class AttentionTrace:
    """The attention that produced one hypothesis, taken from the decoding pass itself.

    T counts the output tokens including EOS; S the source tokens including EOS.
    Every row sums to 1; padding and future positions hold exact zeros.
    """

    encoder: Tensor  # (L_enc, H, S, S) encoder self-attention
    cross: Tensor  # (L_dec, H, T, S) encoder-decoder attention
    decoder: Tensor  # (L_dec, H, T, T) masked decoder self-attention


@dataclass
class Hypothesis:
    """One output: token ids without BOS/EOS, and its length-normalised score."""

    tokens: list[int]
    score: float
    attention: AttentionTrace | None = None
    reading: Reading | None = None  # with_reading: what the search computed on the way


@dataclass
class Reading:
    """What a search computed on its way to one output, kept so that nothing computes it again
    (the confidence reads it): the log-probability of each output token and of its EOS (T,),
    and the cross-attention each source token, its EOS included, received over those T steps
    (S,): the last decoder layer's, averaged over heads; and for each of the T steps the source
    position it attended to most (T,), a word alignment's raw material. From a single model
    (an ensemble's averaged log-probabilities describe no one model)."""

    logprobs: list[float]
    received: list[float]
    attended: list[int]


class AttentionRecorder:
    """Attention probabilities recorded step by step, traced back for chosen hypotheses."""

    def __init__(self) -> None:
        self.encoder, self.cross = AttentionRecord(), AttentionRecord()
        self.decoder: AttentionRecord | None = None  # the cache's self-attention record

    def trace(self, sentence: int, src_len: int, rows: list[int]) -> AttentionTrace:
        """Attention of the hypothesis that sat in decoder row rows[s] at step s."""
        T = len(rows)
        encoder = torch.stack(
            [
                probs[0][sentence, :, :src_len, :src_len]
                for _, probs in sorted(self.encoder.layers.items())
            ]
        )
        cross, decoder = [], []
        for layer in sorted(self.cross.layers):
            steps = self.cross.layers[layer]
            cross.append(
                torch.stack([steps[s][rows[s], :, 0, :src_len] for s in range(T)], dim=1)
            )  # (H, T, S)
            self_steps = self.decoder.layers[layer]
            square = torch.zeros(self_steps[0].size(1), T, T)
            for s in range(T):
                square[:, s, : s + 1] = self_steps[s][rows[s], :, 0, : s + 1]
            decoder.append(square)  # (H, T, T)
        return AttentionTrace(
            encoder.float(), torch.stack(cross).float(), torch.stack(decoder).float()
        )


def length_penalty(n: Tensor | int | float, alpha: float) -> Tensor | float:
    """GNMT length penalty ((5 + n) / 6) ** alpha (Wu et al. 2016)."""
    return ((5.0 + n) / 6.0) ** alpha


def max_output_lengths(src_mask: Tensor, a: float, b: int, limit: int) -> Tensor:
    """(B,) most output tokens before the forced EOS: a * source length + b, capped by `limit`."""
    src_len = src_mask.sum(dim=1).float()
    return (a * src_len + b).floor().long().clamp(min=1, max=limit)


def _mask_never_generated(log_probs: Tensor) -> Tensor:
    """PAD and BOS are never produced; set their log-probabilities to -inf. (N, V) -> (N, V)."""
    log_probs[:, PAD_ID] = NEG_INF
    log_probs[:, BOS_ID] = NEG_INF
    return log_probs


def force_eos(log_probs: Tensor, rows: Tensor) -> Tensor:
    """On `rows` (bool, (N,)) only EOS may follow: every other token gets -inf."""
    if not bool(rows.any()):  # the usual case: skip two full (N, V) passes
        return log_probs
    eos = log_probs[:, EOS_ID].clone()
    log_probs[rows] = NEG_INF
    log_probs[:, EOS_ID] = eos
    return log_probs


Models = Seq2Seq | Sequence[Seq2Seq]


def as_list(models: Models) -> list[Seq2Seq]:
    return [models] if isinstance(models, Seq2Seq) else list(models)


def output_limit(models: Models) -> int:
    """The most output tokens every model's position table holds (+ BOS)."""
    return min(m.cfg.max_positions for m in as_list(models)) - 1


class Stepper:
    """Next-token log-probabilities for each row, with the KV cache (one token per step) or
    without it, from one model or the mean of several (an ensemble, each with its own cache).

    Without the cache every step re-feeds the whole prefix: the slow reference that the
    cache must match, kept for tests and benchmarks. Attention is recorded from the first
    model of an ensemble.
    """

    def __init__(
        self,
        models: Models,
        src_ids: Tensor,
        src_mask: Tensor,
        max_len: int,
        *,
        use_cache: bool,
        recorder: AttentionRecorder | None = None,
        watch: bool = False,
    ):
        if (recorder is not None or watch) and not use_cache:
            raise ValueError("attention is recorded through the cache; use_cache must be True")
        if watch and not isinstance(models, Seq2Seq) and len(models) > 1:
            raise ValueError("a reading describes one model, not an ensemble")
        self.models, self.src_mask = as_list(models), src_mask
        self.memories: list[Tensor | None] = []
        self.caches: list = []
        for i, model in enumerate(self.models):
            record = recorder if i == 0 else None
            self.memories.append(
                model.encode(src_ids, src_mask, record=record.encoder if record else None)
            )  # (B, S, D)
            cross = record.cross if record else None
            self.caches.append(model.new_cache(max_len, cross) if use_cache else None)
        if recorder is not None:
            recorder.decoder = self.caches[0].self_record
        if watch:
            last = len(self.models[0].decoder_layers) - 1
            self.caches[0].watch = SourceWatch(last)

    def attention_read(self) -> Tensor | None:
        """(N, S): the last decoder layer's cross-attention of this step's rows, averaged over
        heads, where the stepper watches it; else None."""
        cache = self.caches[0]
        return cache.watch.latest if cache is not None and cache.watch is not None else None

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (N, t) generated so far, without BOS -> log-probabilities (N, V) for position t.

        With the cache only the newest token is fed (BOS at step 0); the prefix is built
        only for the uncached reference, so the cached hot path copies nothing per step.
        """
        new = self._fed(tokens)
        total = None
        for i, (model, cache) in enumerate(zip(self.models, self.caches, strict=True)):
            logits = model.decode(new, self.memories[i], self.src_mask, cache)[:, -1]
            if cache is not None:
                self.memories[i] = None  # its keys/values are in the cache now
            log_probs = logits.float().log_softmax(dim=-1)  # (N, V)
            total = log_probs if total is None else total + log_probs
        mean = total if len(self.models) == 1 else total / len(self.models)
        return _mask_never_generated(mean)

    def _fed(self, tokens: Tensor) -> Tensor:
        """What the decoder is fed for tokens (N, t): the newest token (BOS at step 0) through
        the cache, BOS and the whole prefix without it. -> (N, 1) or (N, t + 1)."""
        cached = self.caches[0] is not None
        if cached and tokens.size(1) > 0:
            return tokens[:, -1:]
        bos = torch.full((tokens.size(0), 1), BOS_ID, dtype=torch.long, device=tokens.device)
        return bos if cached else torch.cat([bos, tokens], dim=1)

    @property
    def fused(self) -> bool:
        """Whether candidates() applies: one model, through its cache."""
        return len(self.models) == 1 and self.caches[0] is not None

    def candidates(self, tokens: Tensor, k: int, eos_only: Tensor) -> tuple[Tensor, Tensor]:
        """The k most probable next tokens of each row, best first, and their log-probabilities:
        tokens (N, t) -> (N, k) each. Rows where eos_only (N,) is set may only end.

        The same numbers as topk over __call__'s table, without ever holding that (N, V) table:
        the output projection, log-softmax and top-k run ROW_CHUNK rows at a time, on tables of
        one size at every step (so the allocator hands the same blocks back); top-k by way of
        block maxima (top_k.py).
        """
        model, cache = self.models[0], self.caches[0]
        states = model.decode_states(self._fed(tokens), self.memories[0], self.src_mask, cache)
        self.memories[0] = None  # its keys/values are in the cache now
        states = states[:, -1]  # (N, D)
        values, ids = [], []
        for start in range(0, states.size(0), ROW_CHUNK):
            part = slice(start, start + ROW_CHUNK)
            log_probs = model.out_proj(states[part]).float().log_softmax(dim=-1)  # (C, V)
            log_probs = force_eos(_mask_never_generated(log_probs), eos_only[part])
            best, best_ids = top_k(log_probs, k)  # (C, k) each
            values.append(best)
            ids.append(best_ids)
        if len(values) == 1:  # most steps of a small batch: no copy
            return values[0], ids[0]
        return torch.cat(values), torch.cat(ids)

    def place_beams(self, rows: BeamRows | None) -> None:
        """Tell the caches which beams the rows hold (None: all of each sentence's beams)."""
        for cache in self.caches:
            if cache is not None:
                cache.beam_rows = rows

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep decoder rows `rows` and, in the cache, the source K/V of `sentences` (None: all)."""
        for i, memory in enumerate(self.memories):
            if memory is not None:
                self.memories[i] = memory.index_select(0, rows)  # uncached: one copy per row
        self.src_mask = self.src_mask.index_select(0, rows)
        for cache in self.caches:
            if cache is not None:
                cache.select(rows, sentences)


def strip_special(ids: list[int]) -> list[int]:
    """Cut at the first EOS and drop padding."""
    if EOS_ID in ids:
        ids = ids[: ids.index(EOS_ID)]
    return [i for i in ids if i != PAD_ID]


@dataclass
class Search:
    """What every search sets up the same way: each sentence's output limit, the number of
    steps (+ the forced EOS), and the stepper that encodes the batch once (recording
    attention when asked)."""

    stepper: Stepper
    max_lens: Tensor  # (B,) most output tokens before the forced EOS
    n_steps: int
    recorder: AttentionRecorder | None
    reading: bool  # each output's Reading is kept (with_reading)

    @classmethod
    def start(
        cls,
        models: Models,
        src_ids: Tensor,
        src_mask: Tensor,
        *,
        max_len_a: float,
        max_len_b: int,
        use_cache: bool = True,
        with_attention: bool = False,
        with_reading: bool = False,
    ) -> Search:
        max_lens = max_output_lengths(src_mask, max_len_a, max_len_b, output_limit(models))
        n_steps = int(max_lens.max()) + 1
        recorder = AttentionRecorder() if with_attention else None
        stepper = Stepper(
            models,
            src_ids,
            src_mask,
            n_steps,
            use_cache=use_cache,
            recorder=recorder,
            watch=with_reading,
        )
        return cls(stepper, max_lens, n_steps, recorder, with_reading)

    def candidates(
        self,
        so_far: Tensor,
        step: int,
        sentence: Tensor,
        limit: Tensor,
        k: int,
        rules,
        tracer=None,
        shown=None,
    ) -> tuple[Tensor, Tensor]:
        """The k best next tokens of each row, best first, and their log-probabilities (N, k)
        each, under the same rules as log_probs(). From the whole (N, V) table only where rules,
        a tracer or an ensemble need it; otherwise fused, a few rows at a time."""
        if rules.active or tracer is not None or not self.stepper.fused:
            log_probs = self.log_probs(so_far, step, sentence, limit, rules, tracer, shown)
            return top_k(log_probs, min(k, log_probs.size(-1)))
        vocab = self.stepper.models[0].cfg.tgt_vocab_size
        return self.stepper.candidates(so_far, min(k, vocab), step >= limit)

    def log_probs(
        self,
        so_far: Tensor,
        step: int,
        sentence: Tensor,
        limit: Tensor,
        rules,
        tracer=None,
        shown=None,
    ) -> Tensor:
        """The step's log-probabilities (N, V) for rows whose outputs so far are so_far (N, step),
        each of sentence[i]: the models' mean, what `rules` forbid at -inf, only EOS where the
        row's `limit` (N,) is reached; recorded by `tracer` with the rows' `shown` scores."""
        log_probs = self.stepper(so_far)
        if rules.active:
            log_probs = rules.apply(log_probs, step, so_far, sentence)
        log_probs = force_eos(log_probs, step >= limit)
        if tracer is not None:
            tracer.record(step, log_probs, so_far, shown, sentence)
        return log_probs
