"""Greedy search, beam search and sampling over token ids. Knows nothing about text, files or
the CLI.

The encoder runs once per batch; the decoder runs one token per step through an explicit
KVCache, feeding each chosen token back in (stepper.py: what every search sets up the same
way). Beam search keeps batch x beam beams in one tensor: no Python loop over sentences or
beams inside a step; the decoder runs only on the live ones (_Rows). Each search takes
StepRules (a forced prefix, banned repeated n-grams) and optionally a Tracer that records each
step for a reader to watch (steering.py).

Scores are sums of log-probabilities divided by the GNMT length penalty
lp(n) = ((5 + n) / 6) ** alpha, where n counts the output tokens including EOS.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mtcli.config import EOS_ID, PAD_ID
from mtcli.decoding.steering import NO_RULES, StepRules, Tracer
from mtcli.decoding.stepper import (
    NEG_INF,
    AttentionRecorder,
    Hypothesis,
    Models,
    Reading,
    Search,
    length_penalty,
    strip_special,
)
from mtcli.model.kv_cache import BeamRows


@torch.inference_mode()
def greedy(
    models: Models,
    src_ids: Tensor,
    src_mask: Tensor,
    *,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    alpha: float = 1.0,
    use_cache: bool = True,
    with_attention: bool = False,
    with_reading: bool = False,
    rules: StepRules = NO_RULES,
    tracer: Tracer | None = None,
) -> list[Hypothesis]:
    """Pick the most probable token at each step. src_ids, src_mask (B, S) -> B hypotheses,
    each with its Reading where `with_reading` asks.

    A sentence that has produced EOS leaves the batch, so late steps cost only the long ones
    (on the 2,000 Tatoeba test lines, 2.2x fewer decoder rows); a trace of attention needs
    stable rows, so recording keeps everyone.
    """
    B, device = src_ids.size(0), src_ids.device
    search = Search.start(
        models,
        src_ids,
        src_mask,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        use_cache=use_cache,
        with_attention=with_attention,
        with_reading=with_reading,
    )
    max_lens, n_steps = search.max_lens, search.n_steps
    outputs = _GreedyOutputs(B, n_steps, src_mask, with_reading)
    rows = torch.arange(B, device=device)  # (N,) the sentence in each decoder row
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (N,) rows that ended, kept to record
    for step in range(n_steps):
        so_far = outputs.tokens[rows, :step]  # (N, step)
        shown = outputs.raw[rows].masked_fill(done, NEG_INF) if tracer is not None else None
        best_lp, best = search.candidates(
            so_far, step, rows, max_lens[rows], 1, rules, tracer, shown
        )
        best_lp, best = best_lp[:, 0], best[:, 0]  # (N,)
        outputs.add(step, rows, ~done, best_lp, best, search.stepper.attention_read())
        ended = (best == EOS_ID) & ~done  # (N,)
        if tracer is not None:
            outputs.traced(tracer, rows[ended], alpha)
        done |= ended
        if bool(done.all()):
            break
        if search.recorder is None and bool(done.any()):
            stay = (~done).nonzero().squeeze(1)
            rows, done = rows[stay], done[stay]
            search.stepper.select(stay, stay)
    return outputs.hypotheses(alpha, search.recorder)


class _GreedyOutputs:
    """Greedy search's outputs as they grow, per sentence: its tokens (B, steps), their summed
    log-probability and length (B,), and where asked what it read: each token's log-probability
    and the source position it attended to most (B, steps), and the cross-attention its source
    tokens received (B, S), summed step by step."""

    def __init__(self, B: int, n_steps: int, src_mask: Tensor, reading: bool):
        device, self.src_mask = src_mask.device, src_mask
        self.tokens = torch.full((B, n_steps), PAD_ID, dtype=torch.long, device=device)
        self.raw = torch.zeros(B, device=device)
        self.lengths = torch.zeros(B, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(B, n_steps, device=device) if reading else None
        self.received = torch.zeros(B, src_mask.size(1), device=device) if reading else None
        self.attended = (
            torch.zeros(B, n_steps, dtype=torch.long, device=device) if reading else None
        )

    def add(
        self,
        step: int,
        rows: Tensor,
        live: Tensor,
        logprobs: Tensor,
        chosen: Tensor,
        attention: Tensor | None,
    ) -> None:
        """The step's chosen tokens (N,), their log-probabilities (N,) and attention (N, S) of
        the decoder rows' sentences `rows` (N,), kept where `live` (N,): not yet ended."""
        sentences = rows[live]
        self.tokens[sentences, step] = chosen[live]
        self.raw[sentences] += logprobs[live]
        self.lengths[sentences] += 1
        if self.logprobs is not None:
            self.logprobs[sentences, step] = logprobs[live]
            self.received[sentences] += attention[live]
            self.attended[sentences, step] = attention[live].argmax(dim=1)

    def traced(self, tracer: Tracer, ended: Tensor, alpha: float) -> None:
        """Sentences `ended` at this step, shown to the tracer with their scores."""
        for b in ended.tolist():
            score = float(self.raw[b] / length_penalty(float(self.lengths[b]), alpha))
            tracer.finish(b, strip_special(self.tokens[b].tolist()), score)

    def hypotheses(self, alpha: float, recorder: AttentionRecorder | None) -> list[Hypothesis]:
        """Each sentence's output as its hypothesis, length-penalised, with its attention where
        a recorder kept it and its Reading where asked."""
        scores = self.raw / length_penalty(self.lengths.float(), alpha)
        hyps = [
            Hypothesis(strip_special(t.tolist()), float(s))
            for t, s in zip(self.tokens, scores, strict=True)
        ]
        src_lens, lengths = self.src_mask.sum(dim=1).tolist(), self.lengths.tolist()
        for b, h in enumerate(hyps):
            if recorder is not None:  # a sentence stays in its row: row b at every step
                h.attention = recorder.trace(b, src_lens[b], [b] * lengths[b])
            if self.logprobs is not None:
                h.reading = Reading(
                    self.logprobs[b, : lengths[b]].tolist(),
                    self.received[b, : src_lens[b]].tolist(),
                    self.attended[b, : lengths[b]].tolist(),
                )
        return hyps


class _Beams:
    """A beam search's state over the sentences still searching (Ba of them, k beams each):
    the live prefixes and their summed log-probabilities, and each sentence's pool of the k
    best finished hypotheses (length-normalised), with the decoder row each ended in."""

    def __init__(self, k: int, search: Search, reading: _BeamReading | None):
        B, device = search.max_lens.numel(), search.max_lens.device
        self.k, self.n_steps, self.device = k, search.n_steps, device
        self.max_lens = search.max_lens  # (Ba,) each sentence's most output tokens
        self.row_max = self.max_lens.repeat_interleave(k)  # (Ba*k,) the same, per beam
        self.reading = reading  # what was read on the way to each beam, carried alike
        self.alive_tokens = torch.full(
            (B, k, 0), PAD_ID, dtype=torch.long, device=device
        )  # (B, k, t)
        self.alive_raw = torch.full((B, k), NEG_INF, device=device)  # summed log-probs
        self.alive_raw[:, 0] = 0.0  # one real start; the copies would only duplicate it
        self.fin_tokens = torch.full((B, k, self.n_steps), PAD_ID, dtype=torch.long, device=device)
        self.fin_scores = torch.full((B, k), NEG_INF, device=device)  # normalised
        self.fin_rows = torch.zeros((B, k), dtype=torch.long, device=device)  # row of the EOS step
        self.parents: list[Tensor] = []  # per step, (B*k,): the row each next-step row continues
        self.active = torch.arange(B, device=device)  # original index of each sentence searching
        # the pools of sentences that are done and have left the batch
        self.out_tokens, self.out_scores = self.fin_tokens.clone(), self.fin_scores.clone()

    def rows(self, step: int) -> tuple[Tensor, Tensor, Tensor]:
        """The decoder rows of this step: outputs so far (N, step), sentence and score (N,).
        The first step has one row per sentence (all its beams would start from the same
        BOS); after it the rows are Ba*k, beams of a sentence adjacent."""
        if step == 0:
            return self.alive_tokens[:, 0], self.active, self.alive_raw[:, 0]
        Ba = self.active.numel()
        return (
            self.alive_tokens.view(Ba * self.k, step),
            self.active.repeat_interleave(self.k),
            self.alive_raw.view(-1),
        )

    def extend(
        self,
        step: int,
        row_raw: Tensor,
        row_token: Tensor,
        attention: Tensor | None,
        alpha: float,
        tracer,
    ) -> Tensor:
        """Keep each sentence's k best continuations of the rows' candidates (row_raw,
        row_token (Ba*k, kk)): those ending in EOS join the finished pool, the others stay
        live. `attention` (Ba*k, S): each beam's at this step, where readings are kept.
        Returns (Ba, k): the decoder row each kept continuation came from."""
        Ba, k, kk = self.active.numel(), self.k, row_raw.size(-1)
        cand = (self.alive_raw[:, :, None] + row_raw.view(Ba, k, kk)).view(Ba, k * kk)
        top_raw, top_idx = cand.topk(k, dim=1)  # (Ba, k), best first; dead beams give -inf
        top_beam = top_idx // kk  # (Ba, k)
        top_token = row_token.view(Ba, k * kk).gather(1, top_idx)  # (Ba, k)
        is_eos = (top_token == EOS_ID) & torch.isfinite(top_raw)
        prefix = self.alive_tokens.gather(
            1, top_beam[:, :, None].expand(-1, -1, step)
        )  # (Ba, k, step)
        rows = torch.arange(Ba, device=self.device)[:, None] * k + top_beam  # (Ba, k)
        if self.reading is not None:
            token_lp = row_raw.view(Ba, k * kk).gather(1, top_idx)  # (Ba, k)
            self.reading.extend(top_beam, token_lp, attention)
        self._finish(step, is_eos, top_raw / length_penalty(step + 1, alpha), prefix, rows, tracer)
        # the other continuations stay live; a finished slot is dead (-inf) from now on
        self.alive_raw = top_raw.masked_fill(is_eos, NEG_INF)
        self.alive_tokens = torch.cat([prefix, top_token[:, :, None]], dim=2)  # (Ba, k, step + 1)
        self.parents.append(rows.view(-1))
        return rows

    def _finish(
        self, step: int, is_eos: Tensor, normalised: Tensor, prefix: Tensor, rows: Tensor, tracer
    ) -> None:
        """EOS continuations into the finished pool (sorted, k kept), with the length penalty."""
        Ba, k, n_steps = self.active.numel(), self.k, self.n_steps
        new_scores = torch.where(is_eos, normalised, NEG_INF)  # (Ba, k)
        new_tokens = torch.full((Ba, k, n_steps), PAD_ID, dtype=torch.long, device=self.device)
        new_tokens[:, :, :step] = prefix
        new_tokens[:, :, step] = EOS_ID
        if tracer is not None:
            for b, j in is_eos.nonzero().tolist():
                tracer.finish(int(self.active[b]), prefix[b, j].tolist(), float(new_scores[b, j]))
        self.fin_scores, keep = torch.cat([self.fin_scores, new_scores], dim=1).topk(k, dim=1)
        if self.reading is not None:
            self.reading.finish(keep)
        all_tokens = torch.cat([self.fin_tokens, new_tokens], dim=1)  # (Ba, 2k, n_steps)
        self.fin_tokens = all_tokens.gather(1, keep[:, :, None].expand(-1, -1, n_steps))
        self.fin_rows = torch.cat([self.fin_rows, rows], dim=1).gather(1, keep)

    def judge(self, step: int, nbest: int, alpha: float, drop: bool) -> Tensor:
        """(Ba,) the sentences done after this step: every beam finished or hopeless (see
        _hopeless), or the output limit reached. With `drop`, a hopeless beam ends here and
        its row goes (no result changes)."""
        hopeless = _hopeless(self.alive_raw, self.fin_scores, self.max_lens, nbest, alpha)
        if drop:
            self.alive_raw = self.alive_raw.masked_fill(hopeless, NEG_INF)
        return hopeless.all(dim=1) | (step >= self.max_lens)

    def leave(self, done: Tensor, parents: Tensor) -> tuple[Tensor, Tensor]:
        """Sentences that are done leave the batch (their pools kept aside). Returns the
        sentences that stay (Ba',) and the `parents` (Ba*k,) of their beams (Ba'*k,)."""
        gone, stay = done.nonzero().squeeze(1), (~done).nonzero().squeeze(1)
        self.out_tokens[self.active[gone]] = self.fin_tokens[gone]
        self.out_scores[self.active[gone]] = self.fin_scores[gone]
        if self.reading is not None:
            self.reading.leave(self.active[gone], gone, stay)
        self.active = self.active[stay]
        self.alive_raw, self.alive_tokens = self.alive_raw[stay], self.alive_tokens[stay]
        self.fin_tokens, self.fin_scores = self.fin_tokens[stay], self.fin_scores[stay]
        self.fin_rows = self.fin_rows[stay]
        stay_rows = (stay[:, None] * self.k + torch.arange(self.k, device=self.device)).view(-1)
        self.max_lens, self.row_max = self.max_lens[stay], self.row_max[stay_rows]
        return stay, parents[stay_rows]

    def results(self, nbest: int) -> list[list[Hypothesis]]:
        self.out_tokens[self.active], self.out_scores[self.active] = (
            self.fin_tokens,
            self.fin_scores,
        )
        results = _collect(self.out_tokens, self.out_scores, nbest)
        if self.reading is not None:
            self.reading.give(results, self.active)
        return results


class _BeamReading:
    """What beam search read on the way to each beam (the Readings), carried with the beams as
    _Beams carries their tokens: per step, the token's log-probability and the source position
    its row attended to most ((..., t, 2): live (Ba, k, t, 2), in the finished pool
    (Ba, k, n_steps, 2)), and the cross-attention each source token has received ((Ba, k, S)
    live and finished); and aside, both, for sentences that left the batch."""

    def __init__(self, B: int, k: int, n_steps: int, src_mask: Tensor):
        device, S = src_mask.device, src_mask.size(1)
        self.src_lens = src_mask.sum(dim=1).tolist()
        self.alive_steps = torch.zeros(B, k, 0, 2, device=device)
        self.alive_received = torch.zeros(B, k, S, device=device)
        self.fin_steps = torch.zeros(B, k, n_steps, 2, device=device)
        self.fin_received = torch.zeros(B, k, S, device=device)
        self.out_steps, self.out_received = self.fin_steps.clone(), self.fin_received.clone()
        self.new_steps = self.new_received = None  # this step's continuations, for _finish

    def extend(self, top_beam: Tensor, token_lp: Tensor, attention: Tensor) -> None:
        """The kept continuations (Ba, k) of beams top_beam, their tokens' log-probabilities
        token_lp; attention (Ba*k, S): what each beam's row read at this step."""
        Ba, k, step, _ = self.alive_steps.shape
        attention = attention.view(Ba, k, -1)
        steps = self.alive_steps.gather(1, top_beam[:, :, None, None].expand(-1, -1, step, 2))
        attended = attention.argmax(dim=2).gather(1, top_beam).float()  # (Ba, k)
        this_step = torch.stack([token_lp, attended], dim=2)[:, :, None]  # (Ba, k, 1, 2)
        received = (self.alive_received + attention).gather(
            1, top_beam[:, :, None].expand(-1, -1, attention.size(2))
        )
        self.new_steps = torch.cat([steps, this_step], dim=2)  # (Ba, k, step + 1, 2)
        self.new_received = received
        self.alive_steps, self.alive_received = self.new_steps, received

    def finish(self, keep: Tensor) -> None:
        """The finished pool after _finish picked `keep` (Ba, k) of [pool, continuations]."""
        Ba, k, n_steps, _ = self.fin_steps.shape
        new_steps = self.new_steps.new_zeros(Ba, k, n_steps, 2)
        new_steps[:, :, : self.new_steps.size(2)] = self.new_steps
        steps = torch.cat([self.fin_steps, new_steps], dim=1)
        self.fin_steps = steps.gather(1, keep[:, :, None, None].expand(-1, -1, n_steps, 2))
        received = torch.cat([self.fin_received, self.new_received], dim=1)
        self.fin_received = received.gather(1, keep[:, :, None].expand(-1, -1, received.size(2)))

    def leave(self, sentences: Tensor, gone: Tensor, stay: Tensor) -> None:
        """Sentences `gone` (their original indices `sentences`) leave; `stay` stay."""
        self.out_steps[sentences], self.out_received[sentences] = (
            self.fin_steps[gone],
            self.fin_received[gone],
        )
        self.alive_steps, self.alive_received = self.alive_steps[stay], self.alive_received[stay]
        self.fin_steps, self.fin_received = self.fin_steps[stay], self.fin_received[stay]

    def give(self, results: list[list[Hypothesis]], active: Tensor) -> None:
        """Each hypothesis of `results` its Reading (the pools are sorted as the results are)."""
        self.out_steps[active], self.out_received[active] = self.fin_steps, self.fin_received
        for b, hyps in enumerate(results):
            for j, h in enumerate(hyps):
                steps = self.out_steps[b, j, : len(h.tokens) + 1]
                h.reading = Reading(
                    steps[:, 0].tolist(),
                    self.out_received[b, j, : self.src_lens[b]].tolist(),
                    steps[:, 1].long().tolist(),
                )


@torch.inference_mode()
def beam_search(
    models: Models,
    src_ids: Tensor,
    src_mask: Tensor,
    *,
    beam_size: int = 5,
    alpha: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    nbest: int = 1,
    use_cache: bool = True,
    with_attention: bool = False,
    with_reading: bool = False,
    rules: StepRules = NO_RULES,
    tracer: Tracer | None = None,
) -> list[list[Hypothesis]]:
    """Beam search. src_ids, src_mask (B, S) -> for each sentence its `nbest` best hypotheses,
    each with its Reading where `with_reading` asks.

    Each step keeps the k best continuations of the live beams (found among the k best of
    each beam: k*k candidates, not k*V). Those that end in EOS are finished and keep their
    slot, so the beam narrows as hypotheses finish (as in Marian and Nematus): a beam of 1 is
    exactly greedy, and a beam as wide as the number of possible outputs is exhaustive
    search. A sentence is done when no beam is live, or when its best live raw score, divided
    by the largest length penalty it could still reach, cannot beat its nbest-th finished
    score; it leaves the batch (unless attention is recorded).
    """
    B, k = src_ids.size(0), beam_size
    search = Search.start(
        models,
        src_ids,
        src_mask,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        use_cache=use_cache,
        with_attention=with_attention,
        with_reading=with_reading,
    )
    reading = _BeamReading(B, k, search.n_steps, src_mask) if with_reading else None
    beams = _Beams(k, search, reading)
    rows = _Rows(B, k, search.recorder is not None or tracer is not None, src_ids.device)
    for step in range(search.n_steps):
        so_far, sentence, shown = beams.rows(step)
        shown = shown if tracer is not None else None  # the scores a tracer shows; none to pick
        # max_lens >= 1: no EOS is forced at step 0
        limit = beams.max_lens if step == 0 else beams.row_max
        so_far, sentence, limit, shown = rows.of_this_step(so_far, sentence, limit, shown)
        row_raw, row_token = search.candidates(
            so_far, step, sentence, limit, k, rules, tracer, shown
        )
        per_beam = rows.per_beam(row_raw, row_token, search.stepper.attention_read())
        parents = beams.extend(step, *per_beam, alpha, tracer).view(-1)
        done = beams.judge(step, nbest, alpha, drop=not rows.keep_all)
        if bool(done.all()):
            break
        stay = None
        if search.recorder is None and bool(done.any()):  # done sentences leave the batch
            stay, parents = beams.leave(done, parents)
        rows.follow(parents, beams.alive_raw, search.stepper, stay)
    return _with_attention(beams.results(nbest), search.recorder, beams, src_mask)


class _Rows:
    """Which beams the decoder rows hold. A beam that has finished keeps its place among the
    sentence's k (beams of a sentence stay adjacent) but loses its row: the next steps decode
    live beams only, and a beam that can no longer enter the n-best ends (see _hopeless). The
    search's results are the same either way: a finished beam's score is -inf, so nothing it
    would continue into is kept. Over the 2,000 Tatoeba test lines at beam 5 the decoder
    rows fall by 11% (en-zh-tiny 78,540 -> 69,800; zh-en-tiny 119,400 -> 106,163).

    Step 0 has one row per sentence (all its beams would start from the same BOS). A recorded
    or traced search keeps a row for every beam (`keep_all`), so that rows stay put.
    """

    DROP_FINISHED = True  # False keeps a row for every beam (tests compare the two)

    def __init__(self, B: int, k: int, keep_all: bool, device: torch.device):
        self.k, self.keep_all = k, keep_all or not self.DROP_FINISHED
        # (Ba*k,) the row holding each beam's state; None: beam i is row i
        self.row_of_beam: Tensor | None = torch.arange(B, device=device).repeat_interleave(k)
        self.beam_of_row: Tensor | None = None  # (N,) None: step 0, or every beam has a row

    def of_this_step(self, *per_beam: Tensor | None) -> tuple[Tensor | None, ...]:
        """Tensors with one row per beam (or per sentence at step 0) -> one per decoder row."""
        if self.beam_of_row is None:
            return per_beam
        return tuple(t if t is None else t[self.beam_of_row] for t in per_beam)

    def per_beam(self, *per_row: Tensor | None) -> tuple[Tensor | None, ...]:
        """The rows' candidates (N, kk), or what they read (N, S) -> each beam's (B*k, ...):
        its row's, or for a finished beam any row's (its -inf score drops them)."""
        if self.row_of_beam is None:
            return per_row
        return tuple(t if t is None else t.index_select(0, self.row_of_beam) for t in per_row)

    def follow(self, parents: Tensor, alive_raw: Tensor, stepper, stay: Tensor | None) -> None:
        """Rows for the next step: beam i (of (Ba*k,) `parents`, its beam at this step) gets a
        row continuing its parent's, if it is live (alive_raw (Ba, k) finite) or all are kept;
        `stay`, the sentences still searching (None: all)."""
        from_rows = parents if self.row_of_beam is None else self.row_of_beam[parents]
        live = None if self.keep_all else torch.isfinite(alive_raw.view(-1)).nonzero().squeeze(1)
        if live is None or live.numel() == parents.numel():
            stepper.select(from_rows, stay)
            stepper.place_beams(None)
            self.row_of_beam = self.beam_of_row = None
            return
        stepper.select(from_rows[live], stay)
        stepper.place_beams(BeamRows.of(live, self.k))
        self.row_of_beam = torch.zeros_like(parents)
        self.row_of_beam[live] = torch.arange(live.numel(), device=live.device)
        self.beam_of_row = live


@torch.inference_mode()
def sample(
    models: Models,
    src_ids: Tensor,
    src_mask: Tensor,
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    alpha: float = 1.0,
    use_cache: bool = True,
    rules: StepRules = NO_RULES,
) -> list[list[Hypothesis]]:
    """Draw `n` outputs per sentence, feeding each drawn token back in (as for back-translation
    of monolingual text). src_ids, src_mask (B, S) -> per sentence n hypotheses, best first;
    scores are the model's own log-probabilities of the drawn tokens (length-normalised)."""
    B, device = src_ids.size(0), src_ids.device
    search = Search.start(
        models, src_ids, src_mask, max_len_a=max_len_a, max_len_b=max_len_b, use_cache=use_cache
    )
    # step 0 sees one row per sentence, then each sentence widens to its n draws (rows adjacent)
    widen = torch.arange(B, device=device).repeat_interleave(n)  # (B*n,)
    row_max = search.max_lens.repeat_interleave(n)
    tokens = torch.zeros(B * n, 0, dtype=torch.long, device=device)
    raw = torch.zeros(B * n, device=device)
    lengths = torch.zeros(B * n, dtype=torch.long, device=device)
    done = torch.zeros(B * n, dtype=torch.bool, device=device)
    for step in range(search.n_steps):
        if step == 0:  # rules and limits act on each row alike: applied before the copies
            log_probs = search.log_probs(tokens[:B], 0, widen[::n], search.max_lens, rules)
            log_probs = log_probs.index_select(0, widen)  # (B*n, V)
            search.stepper.select(widen)
        else:
            log_probs = search.log_probs(tokens, step, widen, row_max, rules)
        drawn = sample_next(
            log_probs, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )
        drawn = drawn.masked_fill(done, PAD_ID)
        raw += log_probs.gather(1, drawn[:, None]).squeeze(1).masked_fill(done, 0.0)
        lengths += (~done).long()
        tokens = torch.cat([tokens, drawn[:, None]], dim=1)
        done |= drawn == EOS_ID
        if bool(done.all()):
            break
    scores = (raw / length_penalty(lengths.float(), alpha)).tolist()
    results = []
    for b in range(B):
        rows = range(b * n, (b + 1) * n)
        hyps = [Hypothesis(strip_special(tokens[r].tolist()), scores[r]) for r in rows]
        results.append(sorted(hyps, key=lambda h: -h.score))
    return results


def sample_next(
    log_probs: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one token per row from softmax(log_probs / T), restricted to the `top_k` most
    probable tokens (0: all) and to the smallest set whose probability reaches `top_p`
    (nucleus sampling, Holtzman et al. 2020). log_probs (N, V) -> tokens (N,)."""
    logits = log_probs / temperature
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        # a token is cut when the tokens before it already hold top_p of the mass
        cut = probs.cumsum(dim=-1) - probs >= top_p
        logits = logits.scatter(1, order, ordered.masked_fill(cut, NEG_INF))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


def _with_attention(
    results: list[list[Hypothesis]], recorder: AttentionRecorder | None, beams, src_mask: Tensor
) -> list[list[Hypothesis]]:
    """`results`, each hypothesis with its attention where a recorder kept it: back-pointers
    followed from its EOS row to its first step."""
    if recorder is None:
        return results
    src_lens = src_mask.sum(dim=1).tolist()
    fin_rows, parents = beams.fin_rows, beams.parents
    for b, hyps in enumerate(results):
        for j, h in enumerate(hyps):
            steps = len(h.tokens) + 1
            back = [int(fin_rows[b, j])] if steps > 1 else []  # row of the EOS step
            for s in range(steps - 2, 0, -1):
                back.append(int(parents[s][back[-1]]))
            rows = [b] + back[::-1]  # the first step decoded one row per sentence
            h.attention = recorder.trace(b, src_lens[b], rows)
    return results


def _hopeless(
    alive_raw: Tensor, fin_scores: Tensor, max_lens: Tensor, nbest: int, alpha: float
) -> Tensor:
    """(Ba, k) bool: beams that are finished, or whose every continuation would score below
    the sentence's nbest-th finished hypothesis. A sentence is done when all its beams are.

    Raw scores are negative and only fall, and the largest penalty is at the longest output,
    so a beam can score at most raw / lp(max_len + 1). That bound only falls with raw, so the
    continuations that could still enter the n-best are all above every hopeless one: ending
    hopeless beams changes no result (barring a score exactly equal to the nbest-th), only the
    rows decoded.
    """
    bound = alive_raw / length_penalty((max_lens[:, None] + 1).float(), alpha)  # -inf: finished
    return bound <= fin_scores[:, nbest - 1 : nbest]  # -inf until nbest have finished


def _collect(fin_tokens: Tensor, fin_scores: Tensor, nbest: int) -> list[list[Hypothesis]]:
    """Turn the finished pools (sorted best first) into Python lists of Hypothesis."""
    results = []
    for b in range(fin_scores.size(0)):
        hyps = []
        for j in range(fin_scores.size(1)):
            score = float(fin_scores[b, j])
            if score == NEG_INF or len(hyps) == nbest:
                break
            hyps.append(Hypothesis(strip_special(fin_tokens[b, j].tolist()), score))
        results.append(hyps)
    return results
