"""mtcli's Translator: lines in, lines out, in length-sorted batches, input order kept.

Prints nothing itself; warnings go to a callback the caller supplies. What a translation is,
and the streaming and routing of lines, live in result.py and routing.py (no torch there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import torch

from mtcli.config import EOS_ID, PAD_ID, DecodeConfig
from mtcli.data.batches import pad, padding_mask
from mtcli.data.tokenizer import Tokenizer, piece_words
from mtcli.decoding.alignment import align_words
from mtcli.decoding.constraints import constrained_beam_search
from mtcli.decoding.search import beam_search, greedy, sample
from mtcli.decoding.steering import StepRules, Tracer, TraceStep
from mtcli.decoding.stepper import Hypothesis, Models, as_list, output_limit
from mtcli.engines.result import AttentionMaps, SearchReading, Translation
from mtcli.engines.routing import Truncator, stream
from mtcli.model.int8 import quantize_linears
from mtcli.model.transformer import Seq2Seq


def quantize_int8(model: Seq2Seq) -> Seq2Seq:
    """int8 Linear layers for CPU decoding, each row of input scaled on its own (so that a
    sentence translates and scores alike in any batch; mtcli.model.int8), in place. The output
    projection, tied to the target embedding, gets an int8 copy beside the fp32 embedding the
    decoder's input still reads."""
    return quantize_linears(model)


class Translator:
    """Translate text with a loaded model (or an ensemble sharing one tokenizer) and its
    tokenizer under a DecodeConfig."""

    def __init__(
        self,
        model: Models,
        tokenizer: Tokenizer,
        cfg: DecodeConfig,
        *,
        device: str | torch.device = "cpu",
        warn: Callable[[str], None] = lambda message: None,
        align: bool = False,
        trace: bool = False,
        constraints: Callable[[str], list[list[int]]] | None = None,
        reading: bool = False,
        rerank=None,
    ):
        if cfg.sample and (align or trace):
            raise ValueError("sampling records no attention or search steps: no align or trace")
        self.models = [m.eval() for m in as_list(model)]
        # keep what the search read on the way to each output (Translation.reading), for the
        # confidence: one model's, so not for an ensemble; a draw is scored by a forced pass
        self.reading = reading and len(self.models) == 1 and not cfg.sample and cfg.use_cache
        # the target phrases (token ids) a line's translation must contain: a glossary's terms
        self.constraints = constraints
        # translate_chunk's `keep` is enforced (text/layer.py asks); not when sampling: a draw
        # is what it is, and constrained beam search would replace it by a search
        self.constrains = not cfg.sample
        self.tokenizer, self.cfg = tokenizer, cfg
        self.align = align  # record attention while decoding and turn it into word alignments
        self.trace = trace  # record every step of the search (Translation.trace)
        self.device = torch.device(device)
        self.warn = warn
        # the source and the output share the position table; keep room for the output
        self.truncate = Truncator(output_limit(self.models), warn)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        # (sources, their candidates as (text, score)) -> the one chosen of each, with its
        # reverse Scores (engines/rerank.py); only over a beam's candidates
        self.rerank = rerank if cfg.beam_size > 1 and not cfg.sample else None

    @property
    def model(self) -> Seq2Seq:
        return self.models[0]

    def encode(self, line: str) -> tuple[list[int], bool]:
        """Source ids ending in EOS, cut to the model's positions; and whether it was cut."""
        ids, truncated = self.truncate(self.tokenizer.encode_src(line))
        return ids + [EOS_ID], truncated

    def search(
        self,
        src: list[list[int]],
        prefixes: list[list[int]] | None = None,
        tracer: Tracer | None = None,
    ) -> list[list[Hypothesis]]:
        """Decode one batch of source id lists (each output starting with its prefix, when
        given); n-best lists in the same order."""
        src_ids = pad(src).to(self.device)  # (B, S)
        src_mask = padding_mask(src_ids)
        cfg = self.cfg
        forced = None  # (B, P) target ids each output starts with, PAD where free
        if prefixes and any(prefixes):
            forced = pad([p or [PAD_ID] for p in prefixes]).to(self.device)
        rules = StepRules(forced, cfg.no_repeat_ngram)
        common = dict(
            max_len_a=cfg.max_len_a,
            max_len_b=cfg.max_len_b,
            alpha=cfg.length_penalty,
            use_cache=cfg.use_cache,
            rules=rules,
        )
        if cfg.sample:
            return sample(
                self.models,
                src_ids,
                src_mask,
                n=cfg.nbest,
                temperature=cfg.temperature,
                top_k=cfg.top_k,
                top_p=cfg.top_p,
                generator=self.generator,
                **common,
            )
        common.update(with_attention=self.align, with_reading=self.reading, tracer=tracer)
        if cfg.beam_size == 1:
            return [[h] for h in greedy(self.models, src_ids, src_mask, **common)]
        return beam_search(
            self.models, src_ids, src_mask, beam_size=cfg.beam_size, nbest=self._kept(), **common
        )

    def _kept(self) -> int:
        """Hypotheses a beam search returns: those asked for, or those the reranker weighs."""
        if self.rerank is None:
            return self.cfg.nbest
        return max(self.cfg.nbest, min(self.rerank.candidates, self.cfg.beam_size))

    def _batches(self, lengths: list[int]) -> Iterator[list[int]]:
        """Indices sorted by length, cut so padded source tokens x rows per sentence (the beam,
        or the draws when sampling) stay under budget."""
        per_sentence = self.cfg.rows_per_line
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batch: list[int] = []
        for i in order:  # ascending: the newest sentence is the widest
            if batch and (len(batch) + 1) * lengths[i] * per_sentence > self.cfg.batch_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def translate_chunk(
        self,
        lines: list[str],
        prefixes: list[str | None] | None = None,
        keep: list[list[list[int]]] | None = None,
    ) -> list[Translation]:
        """Translate a list of lines, sorted internally by length, returned in input order.
        `prefixes[i]`, when given, is text line i's translation must start with; `keep[i]`,
        target phrases (token ids) it must contain (the text layer's spans, as the target
        writes them inside a sentence). A line with glossary terms or phrases to keep is
        decoded with constrained search, one at a time; the text layer asks for `keep` only
        where a free translation lost them."""
        results: list[Translation | None] = [None] * len(lines)
        encoded = []
        for i, line in enumerate(lines):
            text = line.strip()
            if not text:
                # an empty line stays an empty line
                results[i] = Translation(line, "", 0.0, alignment=[] if self.align else None)
            else:
                prefix = prefixes[i] if prefixes else None
                prefix_ids = self.tokenizer.encode_tgt(prefix) if prefix else []
                encoded.append((i, *self.encode(text), prefix_ids))
        if self.constraints is not None or keep:
            encoded = self._constrained(lines, encoded, results, keep)
        self._translate_batches(lines, encoded, results)
        return results  # type: ignore[return-value]

    def _translate_batches(self, lines: list[str], encoded: list, results: list) -> None:
        """The free translations of `encoded`, in length-sorted batches, into `results`."""
        lengths = [len(ids) for _, ids, _, _ in encoded]
        for batch in self._batches(lengths):
            tracer = Tracer() if self.trace else None
            nbests = self.search(
                [encoded[j][1] for j in batch], [encoded[j][3] for j in batch], tracer
            )
            texts = [
                [(self.tokenizer.decode_tgt(h.tokens), h.score) for h in hyps] for hyps in nbests
            ]
            choices = self._choices([lines[encoded[j][0]] for j in batch], texts)
            for position, (j, hyps, cands, choice) in enumerate(
                zip(batch, nbests, texts, choices, strict=True)
            ):
                i, src_ids, truncated, _ = encoded[j]
                hyps, cands = _chosen_first(hyps, choice[0]), _chosen_first(cands, choice[0])
                results[i] = self._result(lines[i], hyps, cands, truncated, choice[1])
                if tracer is not None:
                    results[i].trace = self._readable(_steps_of(tracer, position))
                if self.align and hyps:
                    self._add_alignment(results[i], src_ids, hyps[0])

    def _choices(self, sources: list[str], texts: list[list[tuple[str, float]]]) -> list[tuple]:
        """(index of the candidate chosen, its reverse Scores or None) for each source."""
        if self.rerank is None:
            return [(0, None)] * len(sources)
        return self.rerank(sources, texts)

    def _result(self, line: str, hyps, cands, truncated: bool, reverse) -> Translation:
        """The Translation of `line` from its candidates, the chosen first; the n-best asked."""
        best_text, best_score = cands[0] if cands else ("", float("-inf"))
        result = Translation(line, best_text, best_score, cands[: self.cfg.nbest], truncated)
        if hyps and hyps[0].reading is not None:
            result.reading = SearchReading(
                best_text, hyps[0].tokens, hyps[0].reading, line, reverse
            )
        return result

    def _add_alignment(self, result: Translation, src_ids: list[int], hyp: Hypothesis) -> None:
        attention = self._attention(src_ids, hyp)
        result.attention, result.pieces = attention, attention.target[:-1]
        result.alignment = align_words(
            attention.cross_mean(),
            piece_words(attention.source[:-1], by_space=True),
            piece_words(attention.target[:-1], by_space=" " in result.text),
        )

    def _constrained(self, lines: list[str], encoded: list, results: list, keep) -> list:
        """Translate the lines that have glossary terms or strings to keep one by one with
        constrained beam search (into `results`); return the others, for the usual batches
        untouched."""
        plain = []
        for item in encoded:
            i = item[0]
            terms = [p for p in self.constraints(lines[i]) if p] if self.constraints else []
            phrases = terms + self._phrases(keep, i)
            if not phrases:
                plain.append(item)
            elif not self._decode_constrained(lines, item, results, phrases):
                # the phrases did not fit in the length limit: translate freely
                if terms:
                    self.warn(
                        f"line {i + 1}: its glossary terms did not fit; translated without them"
                    )
                plain.append(item)
        return plain

    @staticmethod
    def _phrases(keep, i: int) -> list[list[int]]:
        """Line i's target phrases to keep (token ids), none empty."""
        return [ids for ids in keep[i] if ids] if keep else []

    def _decode_constrained(self, lines, item, results, phrases) -> bool:
        """Line `item` by constrained beam search into `results`; False when nothing fits."""
        i, src_ids, truncated, prefix_ids = item
        src = torch.tensor([src_ids], device=self.device)
        cfg = self.cfg
        hyps = constrained_beam_search(
            self.models,
            src,
            src != PAD_ID,
            phrases,
            beam_size=cfg.beam_size,
            alpha=cfg.length_penalty,
            max_len_a=cfg.max_len_a,
            max_len_b=cfg.max_len_b,
            nbest=cfg.nbest,
            prefix=prefix_ids,
            no_repeat_ngram=cfg.no_repeat_ngram,
            glue=self._digit_glue(),
        )
        if not hyps:
            return False
        texts = [(self.tokenizer.decode_tgt(h.tokens), h.score) for h in hyps]
        results[i] = Translation(lines[i], texts[0][0], texts[0][1], texts, truncated)
        if self.align:  # the attention of that very output: forced through greedy search
            self._add_alignment(results[i], src_ids, self._forced(src_ids, hyps[0].tokens))
        return True

    @functools.cached_property
    def _digit_glue_ids(self) -> tuple[frozenset[int], frozenset[int]]:
        sp = self.tokenizer.tgt
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        ends = frozenset(i for i, p in enumerate(pieces) if p[-1:].isdigit())
        starts = frozenset(i for i, p in enumerate(pieces) if p[:1].isdigit())  # no '▁' before
        return ends, starts

    def _digit_glue(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """Target tokens that end in a digit, and those that start with one (constraints.py)."""
        ends, starts = self._digit_glue_ids
        return (ends, starts) if ends and starts else None

    def _forced(self, src_ids: list[int], tokens: list[int]) -> Hypothesis:
        """`tokens` decoded as the output of `src_ids`, recording its attention."""
        src = torch.tensor([src_ids], device=self.device)
        forced = torch.tensor([tokens + [EOS_ID]], device=self.device)
        return greedy(
            self.models,
            src,
            src != PAD_ID,
            max_len_a=0,
            max_len_b=len(tokens) + 1,
            with_attention=True,
            rules=StepRules(forced),
        )[0]

    def _attention(self, src_ids: list[int], hyp: Hypothesis) -> AttentionMaps:
        src_pieces = [self.tokenizer.src.id_to_piece(i) for i in src_ids[:-1]] + ["</s>"]
        tgt_pieces = self.tokenizer.tgt_id_to_piece(hyp.tokens) + ["</s>"]
        return AttentionMaps(src_pieces, tgt_pieces, hyp.attention)

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        """Translate lines (or ready-made chunks of lines) and yield results in input order."""
        return stream(self.translate_chunk, lines, self.cfg.chunk_lines)

    def _readable(self, steps: list[TraceStep]) -> list[dict]:
        """A trace as JSON: token ids with their pieces, probabilities, scores, finished texts."""
        piece = self.tokenizer.tgt.id_to_piece
        return [
            {
                "step": s.step,
                "beams": [
                    {
                        "prefix": r.prefix,
                        "fed": piece(r.prefix[-1]) if r.prefix else "<s>",
                        "score": round(r.score, 4),
                        "next": [[t, piece(t), round(p, 4)] for t, p in r.top],
                    }
                    for r in s.rows
                ],
                "finished": [
                    {"text": self.tokenizer.decode_tgt(tokens), "score": round(score, 4)}
                    for _, tokens, score in s.finished
                ],
            }
            for s in steps
        ]


def _chosen_first(items: list, chosen: int) -> list:
    """`items` with the one at `chosen` moved to the front, the others in their order."""
    return [items[chosen], *items[:chosen], *items[chosen + 1 :]] if items else items


def _steps_of(tracer: Tracer, sentence: int) -> list[TraceStep]:
    """The trace of one sentence of a batch (its rows and finished hypotheses only)."""
    steps = []
    for step in tracer.steps:
        rows = [r for r in step.rows if r.sentence == sentence]
        finished = [f for f in step.finished if f[0] == sentence]
        if rows:
            steps.append(TraceStep(step.step, rows, finished))
    return steps
