"""Lines in, lines out: chunked, length-sorted batches, input order kept, results streamed.

Prints nothing itself; warnings go to a callback the caller supplies.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from mtcli.attention import align_words
from mtcli.config import DecodeConfig
from mtcli.data import pad, padding_mask
from mtcli.decode import AttentionTrace, Hypothesis, beam_search, greedy
from mtcli.model import Seq2Seq
from mtcli.tokenizer import EOS_ID, Tokenizer


@dataclass
class AttentionMaps:
    """Every attention that produced the best hypothesis, and the pieces it is over.

    source: source pieces + </s> (S); target: output pieces + </s> (T); trace: encoder
    (L, H, S, S), encoder-decoder (L, H, T, S) and decoder (L, H, T, T) attention.
    """

    source: list[str]
    target: list[str]
    trace: AttentionTrace

    def cross_mean(self) -> torch.Tensor:
        """(T, S): the last decoder layer's encoder-decoder attention, averaged over heads."""
        return self.trace.cross[-1].mean(dim=0)


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


def quantize_int8(model: Seq2Seq) -> Seq2Seq:
    """Dynamic int8 quantization of the Linear layers, for CPU decoding (torch.ao).

    The tied output projection is not an nn.Linear and stays fp32. torch 2.10+ marks
    torch.ao.quantization deprecated; it still works, so the warnings are silenced here
    rather than shown to every user.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


class Translator:
    """Translate text with a loaded model and tokenizer under a DecodeConfig."""

    def __init__(
        self,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        cfg: DecodeConfig,
        *,
        device: str | torch.device = "cpu",
        warn: Callable[[str], None] = lambda message: None,
        align: bool = False,
    ):
        self.model, self.tokenizer, self.cfg = model.eval(), tokenizer, cfg
        self.align = align  # record attention while decoding and turn it into word alignments
        self.device = torch.device(device)
        self.warn = warn
        self._warned_truncation = False
        # the source and the output share the position table; keep room for the output
        self.max_src_tokens = model.cfg.max_positions - 1

    def encode(self, line: str) -> tuple[list[int], bool]:
        """Source ids ending in EOS, cut to the model's positions; and whether it was cut."""
        ids = self.tokenizer.encode_src(line)
        truncated = len(ids) > self.max_src_tokens
        if truncated:
            ids = ids[: self.max_src_tokens]
            if not self._warned_truncation:
                self.warn(
                    f"an input line has more than {self.max_src_tokens} tokens; "
                    "long lines are truncated to the model's max positions"
                )
                self._warned_truncation = True
        return ids + [EOS_ID], truncated

    def search(self, src: list[list[int]]) -> list[list[Hypothesis]]:
        """Decode one batch of source id lists; n-best lists in the same order."""
        src_ids = pad(src).to(self.device)  # (B, S)
        src_mask = padding_mask(src_ids)
        cfg = self.cfg
        common = dict(
            max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, alpha=cfg.length_penalty,
            use_cache=cfg.use_cache, with_attention=self.align,
        )  # fmt: skip
        if cfg.beam_size == 1:
            return [[h] for h in greedy(self.model, src_ids, src_mask, **common)]
        return beam_search(
            self.model, src_ids, src_mask, beam_size=cfg.beam_size, nbest=cfg.nbest, **common
        )

    def _batches(self, lengths: list[int]) -> Iterator[list[int]]:
        """Indices sorted by length, cut so padded source tokens x beam stay under budget."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batch: list[int] = []
        for i in order:
            width = max(lengths[i], max((lengths[j] for j in batch), default=0))
            if batch and (len(batch) + 1) * width * self.cfg.beam_size > self.cfg.batch_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def translate_chunk(self, lines: list[str]) -> list[Translation]:
        """Translate a list of lines, sorted internally by length, returned in input order."""
        results: list[Translation | None] = [None] * len(lines)
        encoded = []
        for i, line in enumerate(lines):
            text = line.strip()
            if not text:
                # an empty line stays an empty line
                results[i] = Translation(line, "", 0.0, alignment=[] if self.align else None)
            else:
                encoded.append((i, *self.encode(text)))
        lengths = [len(ids) for _, ids, _ in encoded]
        for batch in self._batches(lengths):
            nbests = self.search([encoded[j][1] for j in batch])
            for j, hyps in zip(batch, nbests, strict=True):
                i, src_ids, truncated = encoded[j]
                texts = [(self.tokenizer.decode_tgt(h.tokens), h.score) for h in hyps]
                best_text, best_score = texts[0] if texts else ("", float("-inf"))
                results[i] = Translation(lines[i], best_text, best_score, texts, truncated)
                if self.align and hyps:
                    attention = self._attention(src_ids, hyps[0])
                    results[i].attention = attention
                    results[i].alignment = align_words(
                        attention.cross_mean(), attention.source[:-1], attention.target[:-1],
                        tgt_has_spaces=" " in best_text,
                    )  # fmt: skip
        return results  # type: ignore[return-value]

    def _attention(self, src_ids: list[int], hyp: Hypothesis) -> AttentionMaps:
        src_pieces = [self.tokenizer.src.id_to_piece(i) for i in src_ids[:-1]] + ["</s>"]
        tgt_pieces = self.tokenizer.tgt_id_to_piece(hyp.tokens) + ["</s>"]
        return AttentionMaps(src_pieces, tgt_pieces, hyp.attention)

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        """Translate lines (or ready-made chunks of lines) and yield results in input order."""
        return stream(self.translate_chunk, lines, self.cfg.chunk_lines)


def stream(
    translate_chunk: Callable[[list[str]], list[Translation]],
    lines: Iterable[str] | Iterable[list[str]],
    chunk_lines: int,
) -> Iterator[Translation]:
    """Results in input order, chunk by chunk. Plain lines are read `chunk_lines` at a time
    (memory stays bounded on any input); chunks a reader made (textio.read_chunks: what a
    pipe had ready) are translated the moment each one arrives, never held for the next."""
    it = iter(lines)
    first = next(it, None)
    if first is None:
        return
    if isinstance(first, list):
        for chunk in itertools.chain([first], it):
            yield from translate_chunk(chunk)
        return
    it = itertools.chain([first], it)
    while chunk := list(itertools.islice(it, chunk_lines)):
        yield from translate_chunk([line.rstrip("\r\n") for line in chunk])


class Router:
    """Each line to the translator for its source language, in one pass that keeps order.

    `language_of(line)` names the language (None: no letters, the line passes through);
    `translator_for(language)` gives a translator, or None when no model translates it (the
    line passes through, and `warn` says so once). Translators are asked for only when a line
    needs them, so a pipeline of English never loads the Chinese model.
    """

    def __init__(
        self,
        language_of: Callable[[str], str | None],
        translator_for: Callable[[str], Translator | None],
        chunk_lines: int,
        warn: Callable[[str], None] = lambda message: None,
    ):
        self.language_of, self.translator_for = language_of, translator_for
        self.chunk_lines, self.warn = chunk_lines, warn
        self._translators: dict[str, Translator | None] = {}

    def translate_chunk(self, lines: list[str]) -> list[Translation]:
        results = [Translation(line, line, 0.0, passthrough=True) for line in lines]
        groups: dict[str, list[int]] = {}
        for i, line in enumerate(lines):
            if not line.strip():
                results[i] = Translation(line, "", 0.0)
            elif (language := self.language_of(line)) is not None:
                groups.setdefault(language, []).append(i)
        for language, rows in groups.items():
            translator = self._translator(language)
            if translator is not None:
                translated = translator.translate_chunk([lines[i] for i in rows])
                for i, result in zip(rows, translated, strict=True):
                    results[i] = result
        return results

    def _translator(self, language: str) -> Translator | None:
        if language not in self._translators:
            self._translators[language] = self.translator_for(language)
            if self._translators[language] is None:
                self.warn(f"no installed model translates from {language}: such lines pass through")
        return self._translators[language]

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        return stream(self.translate_chunk, lines, self.chunk_lines)
