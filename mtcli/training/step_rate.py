"""How many optimizer steps a second a shape trains at on this machine, measured in a few
seconds on a made-up batch the size of the corpus's own (auto.py sizes the model by it).

A real step: forward, label-smoothed loss, backward and Adam, in the precision the run will
use, after one untimed step (the first pays for allocations and kernel choice).
"""

from __future__ import annotations

import time

import torch

from mtcli.config import ModelConfig, TrainConfig
from mtcli.training.auto import PIECES_PER_WORD, SHAPES, CorpusFacts
from mtcli.training.loop import Precision, make_optimizer
from mtcli.training.validation import smoothed_loss

TIMED_STEPS = 2
# a run's own step rate over the timed one: validations, batching and the kernels each new
# batch shape needs cost the rest (bench/NOTES.md: ~3.6 steps a second trained against 5.0 timed)
LOOP_SHARE = 0.7


def steps_per_second(
    dims: tuple,
    facts: CorpusFacts,
    vocab: int,
    max_tokens: int,
    device: torch.device,
    precision: str,
) -> float:
    """Optimizer steps a second a run of a model of `dims` (d_model, heads, encoder and
    decoder layers, d_ff) makes on batches like the corpus's: the timed rate x LOOP_SHARE."""
    d_model, heads, enc, dec, d_ff = dims
    cfg = ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=heads,
        n_enc_layers=enc,
        n_dec_layers=dec,
        d_ff=d_ff,
    )
    from mtcli.model.transformer import Seq2Seq

    model = Seq2Seq(cfg).to(device).train()
    src_len = max(2, round(facts.src_words * PIECES_PER_WORD) + 1)
    tgt_len = max(2, round(facts.tgt_words * PIECES_PER_WORD) + 1)
    rows = max(1, max_tokens // (src_len + tgt_len))
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (rows, src_len), generator=generator).to(device)
    tgt = torch.randint(4, vocab, (rows, tgt_len + 1), generator=generator).to(device)
    amp = Precision(device, precision)
    optimizer = make_optimizer(model.parameters(), _NoDecay(), 1e-4)

    def step() -> None:
        with amp.autocast():
            logits = model(src, tgt[:, :-1])
        amp.backward(smoothed_loss(logits, tgt[:, 1:], 0.1) / tgt.numel())
        amp.step(optimizer, model.parameters(), 1.0)

    step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step()
    _sync(device)
    return LOOP_SHARE * TIMED_STEPS / (time.perf_counter() - started)


class _NoDecay:
    weight_decay = 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured_choices(
    facts: CorpusFacts, minutes: float, device: torch.device, world: int, say
) -> list:
    """auto.choose on the step rates of this machine: each shape timed once, in bf16 where
    that is clearly faster here than fp32 (it is on CPUs with AMX or AVX-512 BF16, and on
    GPUs), and the precision chosen said as a choice of its own."""
    from mtcli.training.auto import BATCH_TOKENS, Choice, choose, rule_for

    vocab = rule_for(facts.pairs).vocab
    per_process = max(256, BATCH_TOKENS // world)
    say(f"timing a few training steps of each model size on {device} to size the run")
    small = SHAPES["small"][0]
    fp32 = cached_rate(small, facts, vocab, per_process, device, "fp32")
    bf16 = cached_rate(small, facts, vocab, per_process, device, "bf16")
    precision = "bf16" if bf16 >= BF16_FASTER * fp32 else "fp32"

    def rate(shape: str) -> float:
        return cached_rate(SHAPES[shape][0], facts, vocab, per_process, device, precision)

    why = f"{bf16:.1f} steps a second against {fp32:.1f} in fp32 here"
    return [Choice(precision, {"precision": precision}, why), *choose(facts, minutes, rate, world)]


BF16_FASTER = 1.15  # bf16 is chosen where it is at least this much faster (it rounds more)


_RATES: dict[tuple, float] = {}


def cached_rate(
    dims: tuple, facts: CorpusFacts, vocab: int, max_tokens: int, device, precision: str
) -> float:
    """steps_per_second, timed once a process for each shape, batch and precision."""
    key = (dims, facts, vocab, max_tokens, str(device), precision)
    if key not in _RATES:
        _RATES[key] = steps_per_second(dims, facts, vocab, max_tokens, device, precision)
    return _RATES[key]


def rate_of(cfg: TrainConfig, facts: CorpusFacts, device: torch.device) -> float:
    """Steps a second of the run `cfg` describes (its shape, batch and precision)."""
    m = cfg.model
    dims = (m.d_model, m.n_heads, m.n_enc_layers, m.n_dec_layers, m.d_ff)
    return cached_rate(dims, facts, cfg.vocab_size, cfg.max_tokens, device, cfg.precision)
