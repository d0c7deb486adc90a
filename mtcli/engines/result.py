"""What a translation is, and the one way it is written as a JSON record (`mtcli translate
--format jsonl` and the server's /v1/translate). Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtcli.decoding.stepper import AttentionTrace, Reading


@dataclass
class AttentionMaps:
    """Every attention that produced the best hypothesis, and the pieces it is over.

    source: source pieces + </s> (S); target: output pieces + </s> (T); trace: encoder
    (L, H, S, S), encoder-decoder (L, H, T, S) and decoder (L, H, T, T) attention.
    """

    source: list[str]
    target: list[str]
    trace: AttentionTrace

    def cross_mean(self) -> Any:
        """(T, S): the last decoder layer's encoder-decoder attention, averaged over heads."""
        return self.trace.cross[-1].mean(dim=0)


@dataclass
class SearchReading:
    """What the search read on its way to the output `text`, written as `tokens` (decoding/
    stepper.py's Reading): the confidence takes the model's own scores from it instead of a
    second pass. It describes those tokens alone: a result whose text was changed since
    (numbers put right), or whose text the tokenizer writes in other pieces than the search
    chose, is scored by a pass over the text's own pieces, as the confidence was fitted."""

    text: str
    tokens: list[int]
    reading: Reading
    # where the reranker read it back into its source with the reverse model (engines/
    # rerank.py): that source as the model read it, and the Scores the confidence takes
    source: str = ""
    reverse: Any = None


@dataclass
class Translation:
    """One input line's result; `nbest` holds (text, score) pairs, best first."""

    source: str
    text: str
    score: float
    nbest: list[tuple[str, float]] = field(default_factory=list)
    truncated: bool = False
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), with --align
    passthrough: bool = False  # no model translates this line (no letters): it is left as is
    attention: AttentionMaps | None = None  # with align=True
    trace: list[dict] | None = None  # with trace=True: every step of the search (JSON-ready)
    pieces: list[str] | None = None  # with align=True: the output's pieces (what alignment counts)
    # when the chosen model translates from another language than the line is surely in
    # (engines/language_check.py): {"identified": "zh", "model_source": "en"}; translated anyway
    wrong_language: dict | None = None
    # numbers the translation writes that its source holds nowhere (text/spans.py): flagged
    invented_numbers: list[str] | None = None
    # with confidence on (engines/confidence.py): the estimated probability that the line is a
    # good translation (its least sure sentence's), each sentence's, and whether it is flagged
    # as unreliable (below the model's threshold, or a number or span known to be wrong)
    confidence: float | None = None
    sentence_confidences: list[float] | None = None
    flagged: bool = False
    # of an HTML line of several blocks (a whole document): the texts of the blocks flagged,
    # so a reader is shown which, not the line's start
    flagged_parts: list[str] | None = None
    kept_source: bool = False  # written as its source: less sure than --min-confidence
    reading: SearchReading | None = None  # where the confidence is wanted (mtcli's engine)


def flagged_texts(t: Translation, written: str) -> list[str]:
    """The strings of a line a reader should check: a whole HTML document's flagged blocks
    where it has them, else the line as `written` in its file; none where it is not flagged."""
    if not t.flagged:
        return []
    return t.flagged_parts or [written]


def flag_reasons(t: Translation) -> list[str]:
    """Why a reader should check the translation `t`, each reason a short phrase (empty: none
    known): what --report writes, so a flagged line says why."""
    reasons = []
    if t.invented_numbers:
        reasons.append(f"writes {', '.join(t.invented_numbers)}, which its source does not have")
    if t.wrong_language is not None:
        w = t.wrong_language
        reasons.append(f"in {w['identified']}; the model translates from {w['model_source']}")
    if t.flagged and not t.invented_numbers:
        reasons.append(
            "low confidence: a part of the sentence or a fact in it may be lost or changed"
        )
    return reasons


def report_records(t: Translation, number: int, unit: str, source: str | None = None) -> list[dict]:
    """The --report records of `t`, the `number`-th line or string (`unit`): one where it has
    a reason to be read (flag_reasons), one per flagged block of a whole HTML document, else
    none. `source`: the source as the reader wrote it, where the model read another form."""
    reasons = flag_reasons(t)
    if not reasons:
        return []
    confidence = None if t.confidence is None else round(t.confidence, 4)
    if t.flagged_parts:  # a whole HTML document: its blocks, whose translations are not apart
        return [
            {unit: number, "block": part, "confidence": confidence, "why": reasons}
            for part in t.flagged_parts
        ]
    source = t.source if source is None else source
    return [
        {
            unit: number,
            "source": source,
            "translation": t.text,
            "confidence": confidence,
            "why": reasons,
        }
    ]


def translation_record(t: Translation, *, alignment: bool = True, attention: bool = False) -> dict:
    """A Translation as JSON-ready fields: the text, its score and n-best list, and what was
    recorded (a trace, word alignments; the attention matrix when asked)."""
    record: dict = {"source": t.source, "translation": t.text, "score": round(t.score, 4)}
    record["nbest"] = [{"translation": s, "score": round(sc, 4)} for s, sc in t.nbest]
    if t.passthrough:
        record["passthrough"] = True  # no model translates this line: it is left as it was
    if t.wrong_language is not None:  # the model translates from another language
        record["wrong_language"] = t.wrong_language
    if t.invented_numbers:  # a number the source does not hold: read it with care
        record["invented_numbers"] = t.invented_numbers
    if t.confidence is not None:  # asked for, and the model has fitted weights
        record["confidence"], record["flagged"] = round(t.confidence, 4), t.flagged
        if t.kept_source:
            record["kept_source"] = True
        if t.sentence_confidences and len(t.sentence_confidences) > 1:
            record["sentence_confidences"] = [round(c, 4) for c in t.sentence_confidences]
    if t.trace is not None:
        record["trace"] = t.trace
    if alignment and t.alignment is not None:
        record["alignment"] = [list(pair) for pair in t.alignment]
    if attention and t.attention is not None:
        record["attention"] = {
            "source_tokens": t.attention.source,
            "target_tokens": t.attention.target,
            "weights": [[round(float(w), 4) for w in row] for row in t.attention.cross_mean()],
        }
    return record
