"""The text layer: real text in, the model's sentences out and back. Between the input (a line,
a server's `q` line) and a translator of one model, it splits a line into sentences (and a
sentence too long for the model at its clauses), gives ALL-CAPS and Title-Case sentences in
sentence case, asks that numbers, URLs, e-mail addresses, placeholders and code spans come
out as they went in (standing in for those the vocabulary cannot write), translates every
sentence of the chunk in one call, and rejoins each line with the target's spacing and casing.

A line of one plain sentence reaches the translator untouched, and its result comes back as
the translator gave it (alignments, attention, trace, n-best): the layer costs a regex pass.
Imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from mtcli.data.tokenizer import word_count
from mtcli.text.casing import casing_of, restyle, sentence_case
from mtcli.text.dates import invented_dates
from mtcli.text.language_check import LanguageCheck
from mtcli.text.placeholders import empty_tags, from_placeholders, to_placeholders
from mtcli.text.render import render
from mtcli.text.sentences import fit, join_sentences, split_sentences
from mtcli.text.spans import (
    NUMBER,
    find_spans,
    invented_numbers,
    lost_spans,
    missing_spans,
    renumbered,
    said_once,
    stand_in,
)

# spans a model reads as they are written (3 hours, 8:15, 15%): kept, not stood in for
VERBATIM_KINDS = ("number", "time", "pct")
# sentences translated, kept and judged at a time: a line of a megabyte is ~27,000 of them,
# and what each step holds for all of them at once grew the memory with the line
GROUP = 1024


class ModelTranslator(Protocol):
    """What the text layer drives: one model's engine (mtcli's Translator, CTranslate2's).
    Line i's translation starts with `prefixes[i]` where given, and contains the target
    phrases of `keep[i]` (token ids) where given: an engine that `constrains` finds such a
    translation by constrained search, one that does not translates freely (the layer names
    what is lost). It knows nothing of spans, casing or spacing."""

    constrains: bool

    def translate_chunk(
        self,
        lines: list[str],
        prefixes: list[str | None] | None = None,
        keep: list[list[list[int]]] | None = None,
    ) -> list: ...


@dataclass
class Segment:
    """One sentence of a line as the translator sees it, and how to give its output back."""

    text: str  # what is translated
    casing: str = "plain"  # the source's casing, given back to a cased target
    keep: list[str] = field(default_factory=list)  # strings the translation must contain
    stand_ins: dict[str, str] = field(default_factory=dict)  # stand-in -> the span it holds
    pieces: dict[str, str] = field(default_factory=dict)  # placeholder piece -> what it holds
    lost: bool = False  # its translation is empty, or lost a span: known to be wrong
    source: str = ""  # the sentence as the user wrote it: what a warning quotes


class TextLayer:
    """A translator of one model (src_lang -> tgt_lang) wrapped so real text comes out whole.

    `can_write(s)`: whether the translator's vocabulary writes `s` exactly (else a stand-in
    goes in its place); `count_tokens(s)`: source tokens of `s`, against `max_tokens`.
    """

    def __init__(
        self,
        inner: ModelTranslator,
        *,
        src_lang: str,
        tgt_lang: str,
        can_write: Callable[[str], bool],
        count_tokens: Callable[[str], int],
        max_tokens: int,
        to_phrases: Callable[[list[str]], list[list[int]]] | None = None,
        warn: Callable[[str], None] = lambda message: None,
        language_check: LanguageCheck | None = None,
        placeholders: list[str] | tuple[str, ...] = (),
        confidence=None,
        restore: Callable[[str, list[str], object], str | None] | None = None,
    ):
        if inner.constrains and to_phrases is None:
            raise ValueError("a translator that constrains needs to_phrases: the ids to keep")
        self.inner, self.src_lang, self.tgt_lang = inner, src_lang, tgt_lang
        # a model chosen by hand: lines in another language than its source are flagged
        self.language_check = language_check
        self.can_write, self.count_tokens, self.max_tokens = can_write, count_tokens, max_tokens
        # strings to keep -> the target token ids of each, as written inside a target sentence
        self.to_phrases = to_phrases
        self.warn = warn
        # the placeholder pieces the model was trained to carry (none: stand-ins do their work)
        self.placeholders = set(placeholders)
        self.decoded_again = 0  # sentences decoded a second time under constraints (a measure)
        # (sentence as the model read it, strings its translation lost, the translation) ->
        # the translation with them where its attention places them, or None (engines/
        # restore.py); None: every lost span is decoded again under constraints
        self.restore = restore
        self.restored = 0  # sentences whose lost spans were put back so (a measure)
        # (sentences as the model read them, its outputs, the results' readings) ->
        # confidences in [0, 1], with the `threshold` under which a line is flagged
        # (engines/confidence.py); None: not asked
        self.confidence = confidence

    def translate_chunk(self, lines: list[str], prefixes: list[str | None] | None = None) -> list:
        return self.checked(lines, self.translate_text(lines, prefixes))

    def checked(self, lines: list[str], results: list) -> list:
        """The results, each line in another language than the chosen model's flagged."""
        if self.language_check is not None:
            return self.language_check.mark(lines, results)
        return results

    def translate_text(self, lines: list[str], prefixes: list[str | None] | None) -> list:
        """Plain text lines, each through its plan: sentences, spans, casing, confidence."""
        plans = [self.plan(line) for line in lines]
        segments = [seg for segs in plans for seg in segs]
        owner = [i for i, segs in enumerate(plans) for _ in segs]
        wanted = None  # a line's prefix starts its first sentence
        if prefixes:
            firsts = {id(segs[0]) for segs in plans}
            wanted = [
                prefixes[i] if id(seg) in firsts else None
                for seg, i in zip(segments, owner, strict=True)
            ]
        results = []
        for start in range(0, len(segments), GROUP):
            group = slice(start, start + GROUP)
            results += self._translated(segments[group], wanted[group] if wanted else None)
        parts: list[list] = [[] for _ in lines]
        for i, result in zip(owner, results, strict=True):
            parts[i].append(result)
        return [self._line(line, plans[i], parts[i]) for i, line in enumerate(lines)]

    def _translated(self, segments: list[Segment], wanted: list[str | None] | None) -> list:
        """The segments' results: translated, their spans kept, their confidence estimated."""
        results = self.inner.translate_chunk([s.text for s in segments], wanted)
        results = self._keep_spans(segments, results, wanted)
        self._estimate(segments, results)
        for result in results:
            result.reading = None  # spent: a long line's results are many
        return results

    def _line(self, line: str, segments: list[Segment], parts: list):
        """A line's result from its sentences': rebuilt, its numbers checked, its confidence."""
        sentences = [p.confidence for p in parts if p.confidence is not None]
        result = self._flagged(self._rebuild(line, segments, parts), segments)
        if self.confidence is None or result.passthrough:
            return result
        confidence = least_sure(sentences, blank=1.0)  # a blank line: nothing to doubt
        if result.invented_numbers or any(seg.lost for seg in segments):
            confidence = min(confidence, self.confidence.threshold / 2)  # known wrong: flagged
        return replace(
            result,
            confidence=confidence,
            sentence_confidences=sentences,
            flagged=confidence < self.confidence.threshold,
        )

    def _estimate(self, segments: list[Segment], results: list) -> None:
        """Each sentence's confidence, from what the model read and wrote (one batched call)."""
        if self.confidence is None:
            return
        scored = [j for j, seg in enumerate(segments) if seg.text.strip()]
        values = self.confidence(
            [segments[j].text for j in scored],
            [results[j].text for j in scored],
            [results[j].reading for j in scored],  # what the search read, where it has
        )
        for j, value in zip(scored, values, strict=True):
            results[j].confidence = value

    def _flagged(self, result, segments: list[Segment]):
        """`result`, marked and named on stderr when it writes a number, a month or a weekday
        its source has not (a span given back as the target writes it counts as the source's:
        40 million is 4000万, May 5 is 5月5日)."""
        given = [t for seg in segments for t in (*seg.stand_ins.values(), *seg.pieces.values())]
        source = " ".join([result.source, *given])
        made_up = invented_numbers(source, result.text) + invented_dates(source, result.text)
        if result.passthrough or not made_up:
            return result
        self.warn(
            f"the translation of {_excerpt(result.source)} has {', '.join(made_up)}, which its "
            "source does not: read it with care"
        )
        return replace(result, invented_numbers=made_up)

    def _keep_spans(self, segments: list[Segment], results: list, wanted) -> list:
        """The results, where a free translation lost a span: its numbers put right where they
        pair up one to one, else the sentence decoded again with the spans as constraints
        (mtcli's engine; CTranslate2 has no constrained search, and what stays lost is named)."""
        free = results
        checked = [_numbers_put_right(seg, r) for seg, r in zip(segments, results, strict=True)]
        results = [result for result, _ in checked]
        again = [j for j, (_, kept) in enumerate(checked) if not kept]
        if self.restore is not None:
            again = [j for j in again if not self._restored(segments[j], free[j], results, j)]
        if again and self.inner.constrains:
            self.decoded_again += len(again)
            redone = self.inner.translate_chunk(
                [segments[j].text for j in again],
                [wanted[j] for j in again] if wanted else None,
                [self.to_phrases(segments[j].keep) for j in again],
            )
            for j, result in zip(again, redone, strict=True):
                # a forced 165 the model went on to write as 1650
                results[j] = _numbers_put_right(segments[j], result)[0]
        return results

    def _restored(self, segment: Segment, free, results: list, j: int) -> bool:
        """Whether the spans `free` (a free translation) lost could be put back where the
        model's attention places them (into results[j]): one decode, not two."""
        text = self.restore(segment.text, missing_spans(free.text, segment.keep), free)
        if text is None:
            return False
        result, kept = _numbers_put_right(segment, replace(free, text=text))
        if kept:
            results[j] = result
            self.restored += 1
        return kept

    def plan(self, line: str) -> list[Segment]:
        """The segments of a line: a sentence each (a long one cut at its clauses)."""
        if not line.strip():
            return [Segment(line)]
        # every sentence on its own, however short: two short ones given whole scored 0.3 BLEU
        # more on Tatoeba's test split, and the shipped models then dropped one of them
        # ("We are late. The bus left at 8:15." came out as the second alone)
        sentences = split_sentences(line, self.src_lang)
        sentences = [part for s in sentences for part in fit(s, self.count_tokens, self.max_tokens)]
        return [self._segment(s) for s in sentences]

    def _segment(self, sentence: str) -> Segment:
        """A sentence as the model is given it: in sentence case, its spans kept. A model
        trained with placeholders gets each span and inline tag as its piece. Otherwise a
        number, a time or a percentage the vocabulary writes stays (the model reads it); any
        other span travels as a stand-in number (a URL's pieces would only confuse the model,
        and a `%s` may be unwritable), given back as the target writes it (render.py)."""
        casing = casing_of(sentence) if self.src_lang == "en" else "plain"
        spans = find_spans(sentence, self.src_lang)
        text = _sentence_case_around(sentence, spans) if casing != "plain" else sentence
        segment = Segment(text, casing, source=sentence)
        if self.placeholders:
            sent = to_placeholders(text, spans, self.placeholders, self.tgt_lang)
            segment.text, segment.pieces, spans = sent.text, sent.given_back, sent.rest
            segment.keep += list(sent.given_back)
        for n, span in enumerate(spans):
            if span.kind in VERBATIM_KINDS and self.can_write(span.text):
                segment.keep.append(span.text)
                continue
            word = stand_in(n, sentence)
            segment.text = segment.text.replace(span.text, word, 1)
            segment.stand_ins[word] = render(span, self.tgt_lang)
            segment.keep.append(word)
        return segment

    def _rebuild(self, line: str, segments: list[Segment], parts: list):
        """The line's translation (an engines.result.Translation) from its segments'."""
        texts = [self._give_back(seg, part.text) for seg, part in zip(segments, parts, strict=True)]
        if len(parts) == 1:
            result, segment = parts[0], segments[0]
            nbest = result.nbest
            if nbest and (segment.keep or segment.casing != "plain"):
                # the best one as given back (numbers put right, spans in), the others alike
                numbers = [k for k in segment.keep if NUMBER.fullmatch(k)]
                rest = [
                    (self._give_back(segment, renumbered(t, numbers), quiet=True), s)
                    for t, s in nbest[1:]
                ]
                nbest = [(texts[0], nbest[0][1]), *rest]
            return replace(result, source=line, text=texts[0], nbest=nbest)
        text = join_sentences(texts, self.tgt_lang)
        score = sum(p.score for p in parts) / len(parts)
        traced = all(p.trace is not None for p in parts)
        trace = [step for p in parts for step in p.trace] if traced else None
        return replace(
            parts[0],
            source=line,
            text=text,
            score=score,
            nbest=[(text, score)],
            truncated=any(p.truncated for p in parts),
            alignment=_joined_alignment(parts),
            trace=trace,
            attention=None,
            pieces=_joined_pieces(parts),
        )

    def _give_back(self, segment: Segment, text: str, quiet: bool = False) -> str:
        """Stand-ins replaced by their spans, and the source's casing where the target has it;
        a span still missing is named in a warning."""
        text = restyle(text, segment.casing, self.tgt_lang)
        if not quiet and segment.text.strip() and not text.strip():
            segment.lost = True
            self.warn(
                f"the translation of {_excerpt(segment.source)} is empty: the sentence is lost"
            )
        if not quiet and (empty := empty_tags(text)):
            self.warn(
                f"the translation of {_excerpt(segment.source)} left {', '.join(empty)} empty"
            )
        text = from_placeholders(text, segment.pieces)
        for word, span in segment.stand_ins.items():
            text = text.replace(word, span)
        wanted = [segment.stand_ins.get(k, segment.pieces.get(k, k)) for k in segment.keep]
        if not quiet and (lost := lost_spans(text, wanted)):
            segment.lost = True
            self.warn(f"the translation of {_excerpt(segment.source)} lost {', '.join(lost)}")
        return text


def _numbers_put_right(segment: Segment, result) -> tuple:
    """`result` with its numbers put right where they pair up with the segment's (one said
    twice, in words and as the span, said once), and whether it then holds every span of
    `segment`. Before the confidence reads it: it judges the sentence the reader gets."""
    values = {k: segment.pieces.get(k, segment.stand_ins.get(k, k)) for k in segment.keep}
    if (once := said_once(result.text, values)) != result.text:
        result = replace(result, text=once)
    if not segment.keep or not lost_spans(result.text, segment.keep):
        return result, True
    text = renumbered(result.text, [k for k in segment.keep if NUMBER.fullmatch(k)])
    return replace(result, text=text), not lost_spans(text, segment.keep)


def _sentence_case_around(sentence: str, spans) -> str:
    """The sentence in sentence case, its spans as they were written (a URL keeps its case)."""
    out, start = [], 0
    for span in spans:
        out.append(sentence[start : span.start])
        out.append("\0" * (span.end - span.start))
        start = span.end
    cased = sentence_case("".join(out) + sentence[start:])
    for span in spans:
        cased = cased[: span.start] + span.text + cased[span.end :]
    return cased


def _joined_alignment(parts: list) -> list[tuple[int, int]] | None:
    """The sentences' word alignments as one line's: each sentence's word indices shifted by
    the words of the sentences before it (counted from its attention maps' pieces as
    decoding/alignment.py counts them: a word starts at '▁', or at every piece without spaces)."""
    if any(p.alignment is None or p.attention is None for p in parts):
        return None
    joined, src_base, tgt_base = [], 0, 0
    for p in parts:
        joined += [(s + src_base, t + tgt_base) for s, t in p.alignment]
        src_base += word_count(p.attention.source[:-1], by_space=True)
        tgt_base += word_count(p.attention.target[:-1], by_space=" " in p.text)
    return joined


def _joined_pieces(parts: list) -> list[str] | None:
    if any(p.pieces is None for p in parts):
        return None
    return [piece for p in parts for piece in p.pieces]


def least_sure(confidences, blank: float | None = None) -> float | None:
    """A whole (a line, a document's string, a request's lines) is as sure as its least sure
    part; `blank` where no part has a confidence."""
    known = [c for c in confidences if c is not None]
    return min(known) if known else blank


def _excerpt(line: str, width: int = 60) -> str:
    return repr(line if len(line) <= width else line[: width - 1] + "…")
