"""How sure mtcli is of a translation: cheap signals, combined into a calibrated confidence.

Each sentence the model translated is scored after the search, in batches, by two teacher-forced
passes, one call per model and batch, not one per token:
- the model itself on (source, output): the mean and the lowest log-probability of the output's
  tokens, and how much of the source its cross-attention covers (a dropped clause is a part of
  the source no output token looked at);
- the reverse model (the installed model the other way, e.g. zh-en-tiny for en-zh-tiny) on
  (output, source): how well the translation explains its source (the round trip without
  decoding: a made-up or truncated output explains it badly), and how much of the output its
  attention covers (words the source does not need);
and by text alone: the length ratio against the typical one, repeated bigrams of pieces (a
loop), and how much of the source and of the output is in the model's languages. A logistic
regression fitted on held-out data (calibration.py; bench/confidence.py fits it) turns them
into the probability that the sentence is a good translation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mtcli.config import BOS_ID, EOS_ID
from mtcli.data.batches import pad, padding_mask
from mtcli.data.placeholders import PIECE_ANY_CASE
from mtcli.data.tokenizer import Tokenizer
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


@dataclass
class Direction:
    """A model and its tokenizer, read one way (forward: source -> output)."""

    model: Seq2Seq
    tokenizer: Tokenizer

    def limit(self) -> int:
        """Tokens a side may hold, its EOS or BOS included."""
        return self.model.cfg.max_positions - 1


class ConfidenceEstimator:
    """sources and outputs (the sentences as the model read and wrote them) -> confidences."""

    def __init__(
        self,
        forward: Direction,
        reverse: Direction,
        calibration: Calibration,
        src_lang: str,
        tgt_lang: str,
        device,
    ):
        self.forward, self.reverse, self.calibration = forward, reverse, calibration
        self.src_lang, self.tgt_lang, self.device = src_lang, tgt_lang, torch.device(device)

    @property
    def threshold(self) -> float:
        return self.calibration.threshold

    def __call__(self, sources: list[str], outputs: list[str]) -> list[float]:
        if not sources:
            return []
        return [float(c) for c in self.calibration.confidence(self.signals(sources, outputs))]

    def signals(self, sources: list[str], outputs: list[str]) -> np.ndarray:
        """(N, len(SIGNALS)) for N sentence pairs."""
        raw = self.raw_signals(sources, outputs)
        mu = self.calibration.constants.get("log_length_ratio", 0.0)
        raw["length_gap"] = np.abs(raw.pop("log_length_ratio") - mu)
        return np.stack([raw[name] for name in SIGNALS], axis=1)

    def raw_signals(self, sources: list[str], outputs: list[str]) -> dict[str, np.ndarray]:
        """Every signal, the length ratio as the raw log ratio (the fit learns its typical value)."""
        fwd, rev = self.forward, self.reverse
        src_ids = [_cut(fwd.tokenizer.encode_src(s), fwd.limit()) for s in sources]
        out_ids = [_cut(fwd.tokenizer.encode_tgt(o), fwd.limit()) for o in outputs]
        there = forced_pass(fwd.model, src_ids, out_ids, self.device)
        back = forced_pass(
            rev.model,
            [_cut(rev.tokenizer.encode_src(o), rev.limit()) for o in outputs],
            [_cut(rev.tokenizer.encode_tgt(s), rev.limit()) for s in sources],
            self.device,
        )
        columns = {
            "logprob": [lp.mean() for lp, _ in there],
            "min_logprob": [lp.min() for lp, _ in there],
            "coverage": [coverage(a) for _, a in there],
            "reverse_logprob": [lp.mean() for lp, _ in back],
            "reverse_min_logprob": [lp.min() for lp, _ in back],
            "reverse_coverage": [coverage(a) for _, a in back],
            "log_length_ratio": [
                math.log((len(o) + 1) / (len(s) + 1)) for s, o in zip(src_ids, out_ids, strict=True)
            ],
            "repeats": [repeated_bigrams(fwd.tokenizer.tgt_id_to_piece(o)) for o in out_ids],
            "source_in_language": [in_language(s, self.src_lang) for s in sources],
            "output_in_language": [in_language(o, self.tgt_lang) for o in outputs],
        }
        return {name: np.asarray(values, dtype=float) for name, values in columns.items()}


def _cut(ids: list[int], limit: int) -> list[int]:
    return ids[:limit]


@torch.inference_mode()
def forced_pass(
    model: Seq2Seq, src: list[list[int]], out: list[list[int]], device
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each pair (source ids, output ids, neither with EOS): the log-probabilities (T,) of
    the output's tokens and its EOS, and the last decoder layer's cross-attention averaged over
    heads (T, S) over the real positions (S counts the source's EOS), in the order given.
    Batches of similar lengths; one encoder and one decoder call each."""
    results: list = [None] * len(src)
    order = sorted(range(len(src)), key=lambda i: (len(src[i]), len(out[i])))
    for start in range(0, len(order), BATCH):
        batch = order[start : start + BATCH]
        src_ids = pad([src[i] + [EOS_ID] for i in batch]).to(device)  # (B, S)
        fed = pad([[BOS_ID] + out[i] for i in batch]).to(device)  # (B, T)
        gold = pad([out[i] + [EOS_ID] for i in batch]).to(device)  # (B, T)
        src_mask = padding_mask(src_ids)
        record = AttentionRecord()
        cache = model.new_cache(fed.size(1), record)  # the cache is what records attention
        logits = model.decode(fed, model.encode(src_ids, src_mask), src_mask, cache)  # (B, T, V)
        log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, gold[..., None])[..., 0]
        cross = record.layers[max(record.layers)][0].float().mean(dim=1)  # (B, T, S)
        for row, i in enumerate(batch):
            t, s = len(out[i]) + 1, len(src[i]) + 1
            lp = log_probs[row, :t].clamp(min=FLOOR).cpu().numpy()
            results[i] = (lp, cross[row, :t, :s].cpu().numpy())
    return results


def coverage(attention: np.ndarray) -> float:
    """attention (T, S) -> the mean over source tokens (its EOS left out) of the attention
    they received, each capped at 1: 1 when every source token was looked at."""
    received = attention[:, :-1].sum(axis=0)
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
    the other way as the reverse; None where either is missing (an imported model)."""
    calibration = Calibration.load(loaded.path)
    if calibration is None or not loaded.src_lang or not loaded.tgt_lang:
        return None
    reverse = _reverse_model(loaded.tgt_lang, loaded.src_lang, str(device), quantize)
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


@functools.cache
def _reverse_model(src: str, tgt: str, device: str, quantize: str) -> Direction | None:
    """The installed model from `src` to `tgt`, loaded once per process and device."""
    from mtcli.store import registry
    from mtcli.store.checkpoint import load_model

    info = registry.for_direction(src, tgt)
    if info is None:
        return None
    loaded = ready_to_decode(load_model(Path(info.path), device), quantize)
    return Direction(loaded.model.eval(), loaded.tokenizer)
