"""HTML documents through the text layer: each line a document whose runs of text are
translated as plain text (text/layer.py: sentences, spans, casing, confidence) and whose tags
go back around the words aligned to those they enclosed (text/markup.py). The translator under
the text layer must give word alignments.
"""

from __future__ import annotations

from dataclasses import replace

from mtcli.data.placeholders import PER_SENTENCE, span_piece
from mtcli.text.layer import TextLayer, least_sure
from mtcli.text.spans import stand_in
from mtcli.text.writing import UNSPACED


class MarkupLayer:
    """Lines that are HTML documents, translated through `layer`."""

    def __init__(self, layer: TextLayer):
        self.layer = layer
        self.src_lang, self.tgt_lang = layer.src_lang, layer.tgt_lang

    def translate_chunk(self, lines: list[str], prefixes: list[str | None] | None = None) -> list:
        """The runs of text of all the documents translated together (in batches, as lines
        are: one document at a time decoded a short run per batch, 7x slower), and each
        document's tags put back around its runs' translations."""
        from mtcli.text.markup import read, run_texts, written  # html.parser: only for HTML

        read_lines = [read(line, self._keep_word) for line in lines]
        texts = [run_texts(parts) for parts in read_lines]
        done = self.layer.translate_text([t for runs in texts for t in runs], None)
        spaced, start, results = self.tgt_lang not in UNSPACED, 0, []
        for line, parts, runs in zip(lines, read_lines, texts, strict=True):
            mine = done[start : start + len(runs)]
            start += len(runs)
            results.append(self._document(line, written(parts, mine, spaced), mine))
        return self.layer.checked(lines, results)

    def _document(self, line: str, text: str, done: list):
        """A document's result: its translated text, judged by its runs' results."""
        score = sum(r.score for r in done) / len(done) if done else 0.0
        base = done[0] if done else self.layer.inner.translate_chunk([""])[0]  # an empty line's
        return replace(
            base,
            source=line,
            text=text,
            score=score,
            nbest=[(text, score)],
            truncated=any(r.truncated for r in done),
            alignment=None,
            attention=None,
            trace=None,
            pieces=None,
            confidence=least_sure(r.confidence for r in done),
            sentence_confidences=None,
            flagged=any(r.flagged for r in done),
            flagged_parts=[r.source for r in done if r.flagged] if len(done) > 1 else None,
        )

    def _keep_word(self, n: int, text: str) -> str:
        """What the n-th inline code element of a run travels as: a code piece the model knows
        (numbered from the last, clear of the run's own code spans), else a stand-in."""
        piece = span_piece("code", PER_SENTENCE - n) if n < PER_SENTENCE else ""
        return piece if piece in self.layer.placeholders else stand_in(n, text)
