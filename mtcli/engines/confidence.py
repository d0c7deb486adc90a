"""How sure mtcli is of a translation: cheap signals, combined into a calibrated confidence.

Each sentence the model translated is scored from:
- the model itself on (source, output): the mean and the lowest log-probability of the output's
  tokens, and how much of the source its cross-attention covers (a dropped clause is a part of
  the source no output token looked at). The search computed all three on its way to the
  output (Translation.reading): they are read from there; an output the search did not write
  (a glossary's constrained search, numbers put right, a corrupted pair in bench/) gets them
  from a teacher-forced pass, the same arithmetic (tests/test_confidence.py compares the two);
- the reverse model (the installed model the other way, e.g. zh-en-tiny for en-zh-tiny),
  teacher-forced on (output, source) in batches, one call per batch: how well the translation
  explains its source (the round trip without decoding: a made-up or truncated output
  explains it badly), and how much of the output its attention covers (words the source does
  not need). It is loaded when the first sentence is scored, not before;
and by text alone: the length ratio against the typical one, repeated bigrams of pieces (a
loop), and how much of the source and of the output is in the model's languages. A logistic
regression fitted on held-out data (calibration.py; bench/confidence.py fits it) turns them
into the probability that the sentence is a good translation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.data.batches import pad, padding_mask
from mtcli.data.placeholders import PIECE_ANY_CASE
from mtcli.data.tokenizer import Tokenizer
from mtcli.device import release_freed_memory
from mtcli.engines.calibration import Calibration
from mtcli.engines.loading import ready_to_decode
from mtcli.model.kv_cache import AttentionRecord
from mtcli.model.transformer import Seq2Seq
from mtcli.text.language import HAN, source_language

SIGNALS = (
    "logprob", "min_logprob", "coverage", "reverse_logprob", "reverse_min_logprob",
    "reverse_coverage", "length_gap", "repeats", "source_in_language", "output_in_language",
)  # fmt: skip
FLOOR = -20.0  # a log-probability below this says nothing more
BATCH = 64  # sentence pairs per forced pass
# its batches grow (sorted by length), and the heap with them: the blocks freed for reuse are
# handed back every this many pairs (a 100,000-character line: +310 MB of heap otherwise)
TRIMMED_EVERY = 256
PROJECTED = 256  # output positions projected onto the vocabulary at a time (6 MB at V = 6,042)


@dataclass
class Direction:
    """A model and its tokenizer, read one way (forward: source -> output)."""

    model: Seq2Seq
    tokenizer: Tokenizer

    def limit(self) -> int:
        """Tokens a side may hold, its EOS or BOS included."""
        return self.model.cfg.max_positions - 1


# what a teacher-forced pass or a search read of one pair: the log-probability of each output
# token and its EOS (T,), and the cross-attention each source token received (S, its EOS last)
Scores = tuple[np.ndarray, np.ndarray]


class ConfidenceEstimator:
    """sources and outputs (the sentences as the model read and wrote them), with what the
    search read where it did -> confidences. `reverse`: the reverse Direction, or what loads it."""

    def __init__(
        self,
        forward: Direction,
        reverse: Direction | Callable[[], Direction],
        calibration: Calibration,
        src_lang: str,
        tgt_lang: str,
        device,
    ):
        self.forward, self.calibration = forward, calibration
        self._reverse = reverse
        self.src_lang, self.tgt_lang, self.device = src_lang, tgt_lang, torch.device(device)

    @property
    def reverse(self) -> Direction:
        if not isinstance(self._reverse, Direction):
            self._reverse = self._reverse()
        return self._reverse

    @property
    def threshold(self) -> float:
        return self.calibration.threshold

    def __call__(self, sources: list[str], outputs: list[str], readings=None) -> list[float]:
        """`readings[i]`: the Translation.reading of output i, or None (scored by a pass)."""
        if not sources:
            return []
        signals = self.signals(sources, outputs, readings)
        return [float(c) for c in self.calibration.confidence(signals)]

    def signals(self, sources: list[str], outputs: list[str], readings=None) -> np.ndarray:
        """(N, len(SIGNALS)) for N sentence pairs."""
        raw = self.raw_signals(sources, outputs, readings)
        mu = self.calibration.constants.get("log_length_ratio", 0.0)
        raw["length_gap"] = np.abs(raw.pop("log_length_ratio") - mu)
        return np.stack([raw[name] for name in SIGNALS], axis=1)

    def raw_signals(
        self, sources: list[str], outputs: list[str], readings=None
    ) -> dict[str, np.ndarray]:
        """Every signal, the length ratio as the raw log ratio (the fit learns its typical value)."""
        fwd = self.forward
        src_ids = [_cut(fwd.tokenizer.encode_src(s), fwd.limit()) for s in sources]
        out_ids = [_cut(fwd.tokenizer.encode_tgt(o), fwd.limit()) for o in outputs]
        there = self._forward_scores(src_ids, out_ids, outputs, readings)
        back = self._reverse_scores(sources, outputs, readings)
        columns = {
            "logprob": [lp.mean() for lp, _ in there],
            "min_logprob": [lp.min() for lp, _ in there],
            "coverage": [coverage(r) for _, r in there],
            "reverse_logprob": [lp.mean() for lp, _ in back],
            "reverse_min_logprob": [lp.min() for lp, _ in back],
            "reverse_coverage": [coverage(r) for _, r in back],
            "log_length_ratio": [
                math.log((len(o) + 1) / (len(s) + 1)) for s, o in zip(src_ids, out_ids, strict=True)
            ],
            "repeats": [repeated_bigrams(fwd.tokenizer.tgt_id_to_piece(o)) for o in out_ids],
            "source_in_language": [in_language(s, self.src_lang) for s in sources],
            "output_in_language": [in_language(o, self.tgt_lang) for o in outputs],
        }
        return {name: np.asarray(values, dtype=float) for name, values in columns.items()}

    def _reverse_scores(self, sources: list[str], outputs: list[str], readings) -> list[Scores]:
        """The reverse model's scores of each pair: those the reranker computed for that very
        pair (engines/rerank.py: its pass over the candidates is this pass), one batched
        pass for the others."""
        shared = [
            r.reverse
            if r is not None and r.reverse is not None and (r.source, r.text) == (s, o)
            else None
            for s, o, r in zip(sources, outputs, readings or [None] * len(outputs), strict=True)
        ]
        return _filled(
            shared,
            lambda missing: reverse_pass(
                self.reverse,
                [sources[i] for i in missing],
                [outputs[i] for i in missing],
                self.device,
            ),
        )

    def _forward_scores(self, src_ids, out_ids, outputs: list[str], readings) -> list[Scores]:
        """The forward model's scores of each pair: what the search read where it wrote that
        very output, a teacher-forced pass (one batched call) for the others."""
        readings = readings or [None] * len(outputs)
        found = [
            read_scores(r, o, ids) for r, o, ids in zip(readings, outputs, out_ids, strict=True)
        ]
        return _filled(
            found,
            lambda missing: forced_pass(
                self.forward.model,
                [src_ids[i] for i in missing],
                [out_ids[i] for i in missing],
                self.device,
            ),
        )


def _filled(found: list, score: Callable[[list[int]], list[Scores]]) -> list[Scores]:
    """`found` with its Nones replaced by what one call of `score` gives for their indices."""
    missing = [i for i, scores in enumerate(found) if scores is None]
    if missing:
        for i, scores in zip(missing, score(missing), strict=True):
            found[i] = scores
    return found


def read_scores(reading, output: str, out_ids: list[int]) -> Scores | None:
    """A Translation.reading's scores, where it describes `output` written as `out_ids` (the
    pieces the tokenizer gives it, which the fitted weights were fitted on; the search may
    write a word in others: 迟到 了 for 迟到了, 8% of the shipped model's test outputs); else
    None."""
    if reading is None or reading.text != output or reading.tokens != out_ids:
        return None
    logprobs = np.maximum(np.asarray(reading.reading.logprobs, dtype=np.float32), FLOOR)
    return logprobs, np.asarray(reading.reading.received, dtype=np.float32)


def reverse_pass(
    reverse: Direction, sources: list[str], outputs: list[str], device
) -> list[Scores]:
    """Each output read back into its source by the reverse model (teacher-forced, batched):
    the Scores of log P(source | output)."""
    return forced_pass(
        reverse.model,
        [_cut(reverse.tokenizer.encode_src(o), reverse.limit()) for o in outputs],
        [_cut(reverse.tokenizer.encode_tgt(s), reverse.limit()) for s in sources],
        device,
    )


def _cut(ids: list[int], limit: int) -> list[int]:
    return ids[:limit]


@torch.inference_mode()
def forced_pass(model: Seq2Seq, src: list[list[int]], out: list[list[int]], device) -> list[Scores]:
    """For each pair (source ids, output ids, neither with EOS) its Scores: the log-probabilities
    (T,) of the output's tokens and its EOS, and the attention each source token (S, its EOS
    last) received from them (the last decoder layer's, averaged over heads), in the order
    given. Batches of similar lengths; one encoder and one decoder call each, recording only
    that layer's cross-attention."""
    results: list = [None] * len(src)
    order = sorted(range(len(src)), key=lambda i: (len(src[i]), len(out[i])))
    last = len(model.decoder_layers) - 1
    for start in range(0, len(order), BATCH):
        if start and start % TRIMMED_EVERY == 0:
            release_freed_memory()
        batch = order[start : start + BATCH]
        src_ids = pad([src[i] + [EOS_ID] for i in batch]).to(device)  # (B, S)
        fed = pad([[BOS_ID] + out[i] for i in batch]).to(device)  # (B, T)
        gold = pad([out[i] + [EOS_ID] for i in batch]).to(device)  # (B, T)
        src_mask = padding_mask(src_ids)
        record = AttentionRecord(only=last)
        cache = model.new_cache(fed.size(1), record)  # the cache is what records attention
        states = model.decode_states(fed, model.encode(src_ids, src_mask), src_mask, cache)
        log_probs = gold_log_probs(model, states, gold)  # (B, T)
        cross = record.layers[last][0].float().mean(dim=1)  # (B, T, S)
        real = (gold != PAD_ID)[..., None]  # (B, T, 1): the output's positions, not padding
        # one array per batch, each pair's rows views of it: a small array per pair would
        # take a piece of each freed block of this batch, and the next, larger batch could
        # not reuse it (a 50,000-character line: +470 MB of heap)
        log_probs = log_probs.clamp(min=FLOOR).cpu().numpy()  # (B, T)
        received = (cross * real).sum(dim=1).cpu().numpy()  # (B, S)
        for row, i in enumerate(batch):
            results[i] = (log_probs[row, : len(out[i]) + 1], received[row, : len(src[i]) + 1])
    return results


def gold_log_probs(model: Seq2Seq, states: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """states (B, T, D), gold (B, T) -> the log-probability of each gold token (B, T): the output
    projection and its log-softmax PROJECTED rows at a time, never the whole (B, T, V) table
    (64 outputs of 256 tokens over 6,042 pieces: 400 MB, and as much again for its softmax)."""
    flat, wanted = states.reshape(-1, states.size(-1)), gold.reshape(-1, 1)
    out = torch.empty(wanted.size(0), device=states.device)
    for start in range(0, flat.size(0), PROJECTED):
        rows = slice(start, start + PROJECTED)
        log_probs = model.out_proj(flat[rows]).float().log_softmax(dim=-1)  # (rows, V)
        out[rows] = log_probs.gather(1, wanted[rows])[:, 0]
    return out.view_as(gold)


def coverage(received: np.ndarray) -> float:
    """received (S,): the attention each source token got, its EOS last -> the mean over the
    source tokens (EOS left out) of what they received, each capped at 1: 1 when every source
    token was looked at."""
    received = received[:-1]
    return float(np.minimum(received, 1.0).mean()) if received.size else 1.0


def repeated_bigrams(pieces: list[str]) -> float:
    """The share of the output's piece bigrams that repeat an earlier one (0: no loop)."""
    bigrams = list(zip(pieces, pieces[1:], strict=False))
    return 1 - len(set(bigrams)) / len(bigrams) if bigrams else 0.0


def in_language(text: str, language: str) -> float:
    """How much of `text` is in `language`: for Chinese, the share of its letters that are Han
    characters; for others, 1 where the identifier names that language (or none), else 0.
    Placeholder pieces say nothing of it."""
    text = PIECE_ANY_CASE.sub(" ", text)
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 1.0
    if language == "zh":
        return sum(1 for c in letters if HAN.match(c)) / len(letters)
    return 1.0 if source_language(text) in (None, language) else 0.0


# ---------------------------------------------------------------- made for a translator
def estimator_for(loaded, device, quantize: str = "") -> ConfidenceEstimator | None:
    """The estimator for a LoadedModel: its directory's fitted weights and the installed model
    the other way as the reverse (loaded when the first sentence is scored); None where either
    is missing (an imported model)."""
    calibration = Calibration.load(loaded.path)
    if calibration is None:
        return None
    reverse = reverse_for(loaded, device, quantize)
    if reverse is None:
        return None
    return ConfidenceEstimator(
        Direction(loaded.model, loaded.tokenizer),
        reverse,
        calibration,
        loaded.src_lang,
        loaded.tgt_lang,
        device,
    )


def reverse_for(loaded, device, quantize: str = "") -> Callable[[], Direction] | None:
    """What loads the installed model the other way for a LoadedModel (once per process and
    device, shared by the confidence and the reranker); None where there is none."""
    from mtcli.store import registry

    if not loaded.src_lang or not loaded.tgt_lang:
        return None
    info = registry.for_direction(loaded.tgt_lang, loaded.src_lang)
    if info is None:
        return None
    return functools.partial(_reverse_model, info.path, str(device), quantize)


@functools.cache
def _reverse_model(path: str, device: str, quantize: str) -> Direction:
    """The reverse model at `path`, loaded once per process and device."""
    from mtcli.store.checkpoint import load_model

    loaded = ready_to_decode(load_model(Path(path), device), quantize)
    return Direction(loaded.model.eval(), loaded.tokenizer)
