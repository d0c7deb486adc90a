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
from mtcli.decode import Hypothesis, beam_search, greedy
from mtcli.model import Seq2Seq
from mtcli.tokenizer import EOS_ID, Tokenizer


@dataclass
class Translation:
    """One input line's result; `nbest` holds (text, score) pairs, best first."""

    source: str
    text: str
    score: float
    nbest: list[tuple[str, float]] = field(default_factory=list)
    truncated: bool = False
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), with --align


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
                    results[i].alignment = self._alignment(src_ids, hyps[0], best_text)
        return results  # type: ignore[return-value]

    def _alignment(self, src_ids: list[int], hyp: Hypothesis, text: str) -> list[tuple[int, int]]:
        """Word alignment from the last decoder layer's cross-attention, averaged over heads."""
        src_pieces = [self.tokenizer.src.id_to_piece(i) for i in src_ids[:-1]]  # without EOS
        tgt_pieces = self.tokenizer.tgt_id_to_piece(hyp.tokens)
        cross = hyp.attention.cross[-1].mean(dim=0)  # (T, S)
        return align_words(cross, src_pieces, tgt_pieces, tgt_has_spaces=" " in text)

    def translate_stream(self, lines: Iterable[str] | Iterable[list[str]]) -> Iterator[Translation]:
        """Translate lines (or ready-made chunks of lines) and yield results in input order.

        Plain lines are read `chunk_lines` at a time, so memory stays bounded on any input.
        """
        for chunk in _as_chunks(lines, self.cfg.chunk_lines):
            yield from self.translate_chunk(chunk)


def _as_chunks(lines, size: int) -> Iterator[list[str]]:
    it = iter(lines)
    while chunk := list(itertools.islice(it, size)):
        if isinstance(chunk[0], list):  # already chunked by the reader
            yield from chunk
        else:
            yield [line.rstrip("\r\n") for line in chunk]
