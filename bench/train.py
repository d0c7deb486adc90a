"""Training throughput: mtcli fp32 and bf16 beside a plain torch.nn.Transformer, same batches.

    python bench/train.py [--steps 200] [--warmup-steps 10]

Each model trains `steps` timed optimizer steps (after untimed warm-up steps) on the same
Tatoeba batches (max_tokens 4096, the default preset's shape). Reported, in one JSON object
(also bench/results/train.json):
  - target tokens/s of each, and mtcli / reference ratios;
  - validation loss of mtcli fp32 and bf16 after those steps (same init, same batches);
  - model FLOP/s as a share of the matmul FLOP/s torch reaches here at the model's own GEMM shapes.

FLOPs per batch (forward), counted from the real shapes: 2·m·n·k for every Linear
(m = rows = B·S or B·T), plus 4·B·H·Tq·Tk·K for attention's two matmuls, plus the output
projection 2·B·T·D·V. Training = 3 x forward (backward costs two forwards).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED, peak_rss_mb, write_result  # noqa: E402
from mtcli.config import (  # noqa: E402
    PAD_ID,  # noqa: E402
    ModelConfig,
    TrainConfig,
)
from mtcli.data.batches import collate, epoch_batches  # noqa: E402
from mtcli.data.parallel_text import read_parallel  # noqa: E402
from mtcli.data.token_store import Filters, encode_pairs  # noqa: E402
from mtcli.data.tokenizer import TokenizerOptions, train_tokenizer  # noqa: E402
from mtcli.device import limit_kernel_caches  # noqa: E402
from mtcli.model.linear import Linear  # noqa: E402
from mtcli.model.transformer import Seq2Seq  # noqa: E402
from mtcli.training.loop import Precision, lr_at, make_optimizer  # noqa: E402
from mtcli.training.validation import smoothed_loss, validate_loss  # noqa: E402


class ReferenceTransformer(nn.Module):
    """torch.nn.Transformer with the same sizes, shared embeddings and tied output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=PAD_ID)
        self.core = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_enc_layers,
            num_decoder_layers=cfg.n_dec_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
        )
        self.register_buffer(
            "positions", Seq2Seq(dataclasses.replace(cfg, n_enc_layers=0, n_dec_layers=0)).positions
        )

    def forward(self, src_ids, tgt_ids):
        scale = math.sqrt(self.cfg.d_model)
        src = self.embed(src_ids) * scale + self.positions[: src_ids.size(1)]
        tgt = self.embed(tgt_ids) * scale + self.positions[: tgt_ids.size(1)]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_ids.size(1))
        out = self.core(
            src,
            tgt,
            tgt_mask=causal,
            src_key_padding_mask=src_ids == PAD_ID,
            memory_key_padding_mask=src_ids == PAD_ID,
            tgt_is_causal=True,
        )
        return F.linear(out, self.embed.weight)


def forward_flops(cfg: ModelConfig, B: int, S: int, T: int) -> float:
    """Forward FLOPs of one padded batch (see the module docstring)."""
    D, F_, H, V = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.tgt_vocab_size
    K = D // H
    enc = cfg.n_enc_layers * (
        2 * B * S * D * 4 * D + 2 * B * S * D * F_ * 2 + 4 * B * H * S * S * K
    )
    dec_self = 2 * B * T * D * 4 * D + 4 * B * H * T * T * K
    dec_cross = 2 * B * T * D * 2 * D + 2 * B * S * D * 2 * D + 4 * B * H * T * S * K
    dec = cfg.n_dec_layers * (dec_self + dec_cross + 2 * B * T * D * F_ * 2)
    return enc + dec + 2 * B * T * D * V


def matmul_peak(cfg: ModelConfig, rows: int, dtype: torch.dtype, repeats: int = 20) -> float:
    """FLOP/s torch reaches on this machine at the model's GEMM shapes (rows x D @ D x N): the
    faster of `@` (MKL in fp32) and mtcli's Linear (oneDNN in fp32; the same `@` in bf16)."""
    D, F_, V = cfg.d_model, cfg.d_ff, cfg.tgt_vocab_size
    shapes = [(rows, D, 3 * D), (rows, D, D), (rows, D, F_), (rows, F_, D), (rows, D, V)]
    total_flops, total_time = 0.0, 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        layer = Linear(k, n, bias=False).to(dtype)
        total_time += min(_seconds(lambda: a @ b, repeats), _seconds(lambda: layer(a), repeats))  # noqa: B023
        total_flops += 2 * m * k * n * repeats
    return total_flops / total_time


@torch.no_grad()
def _seconds(product, repeats: int) -> float:
    for _ in range(3):
        product()
    start = time.perf_counter()
    for _ in range(repeats):
        product()
    return time.perf_counter() - start


def time_training(
    model, corpus, batches, cfg: TrainConfig, precision: str, warmup_steps: int
) -> dict:
    """Train on `batches` (the first `warmup_steps` untimed); tokens/s and FLOP/s of the timed part."""
    # mtcli's own optimizer (fused Adam) for every model: the comparison is of the models
    optimizer = make_optimizer(model.parameters(), cfg, lr_at(1, cfg, model.cfg.d_model))
    device = torch.device("cpu")
    model.train()
    tokens = flops = 0.0
    start = None
    for i, indices in enumerate(batches):
        if i == warmup_steps:
            start = time.perf_counter()
        for g in optimizer.param_groups:
            g["lr"] = lr_at(i + 1, cfg, model.cfg.d_model)
        batch = collate(corpus, indices)
        with Precision(device, precision).autocast():
            logits = model(batch.src_ids, batch.tgt_in)
        loss = smoothed_loss(logits, batch.tgt_out, 0.1) / batch.n_tgt_tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup_steps:
            tokens += batch.n_tgt_tokens
            B, S = batch.src_ids.shape
            flops += 3 * forward_flops(model.cfg, B, S, batch.tgt_in.size(1))
    seconds = time.perf_counter() - start
    return {
        "tgt_tokens_per_s": round(tokens / seconds, 1),
        "flops_per_s": flops / seconds,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    limit_kernel_caches()  # as `mtcli train` does: before oneDNN first runs
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--vocab-size", type=int, default=8000)
    args = ap.parse_args()
    data = SHARED / "tatoeba-en-zh"
    tmp = Path(tempfile.mkdtemp())
    tok = train_tokenizer(
        data / "train.en",
        data / "train.zh",
        tmp / "tok",
        TokenizerOptions(vocab_size=args.vocab_size),
    )
    corpus = encode_pairs(read_parallel(data / "train.en", data / "train.zh"), tok, Filters())
    valid = encode_pairs(read_parallel(data / "valid.en", data / "valid.zh"), tok, Filters())
    cfg = TrainConfig(max_tokens=4096, warmup=4000, lr_factor=2.0)
    model_cfg = ModelConfig(
        src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size, dropout=0.1
    )
    epoch = epoch_batches(corpus, max_tokens=cfg.max_tokens, seed=1, epoch=0)
    batches = [epoch[k] for k in range(min(len(epoch), args.warmup_steps + args.steps))]

    results = {}
    for name, precision in (("mtcli_fp32", "fp32"), ("mtcli_bf16", "bf16")):
        torch.manual_seed(0)
        model = Seq2Seq(model_cfg)
        results[name] = time_training(model, corpus, batches, cfg, precision, args.warmup_steps)
        results[name]["valid_loss"] = round(
            validate_loss(
                model,
                valid,
                cfg.max_tokens,
                torch.device("cpu"),
                Precision(torch.device("cpu"), precision).autocast,
            ),
            4,
        )
        results[name]["parameters"] = model.num_parameters()
    # the reference in each precision too: like with like (bf16 under the same bf16 autocast)
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        reference = ReferenceTransformer(model_cfg)
        name = f"torch_nn_transformer_{precision}"
        results[name] = time_training(reference, corpus, batches, cfg, precision, args.warmup_steps)
        results[name]["parameters"] = sum(p.numel() for p in reference.parameters())

    tgt_lens = corpus.tgt_lens()
    mean_rows = sum(len(b) * int(tgt_lens[b].max()) for b in batches) / len(batches)
    peak_fp32 = matmul_peak(model_cfg, int(mean_rows), torch.float32)
    peak_bf16 = matmul_peak(model_cfg, int(mean_rows), torch.bfloat16)
    ref = {p: results[f"torch_nn_transformer_{p}"]["tgt_tokens_per_s"] for p in ("fp32", "bf16")}
    record = {
        "steps": args.steps,
        "threads": torch.get_num_threads(),
        "results": results,
        "fp32_vs_reference_fp32": round(results["mtcli_fp32"]["tgt_tokens_per_s"] / ref["fp32"], 3),
        "bf16_vs_reference_bf16": round(results["mtcli_bf16"]["tgt_tokens_per_s"] / ref["bf16"], 3),
        "bf16_valid_loss_change": round(
            results["mtcli_bf16"]["valid_loss"] / results["mtcli_fp32"]["valid_loss"] - 1, 4
        ),
        "matmul_peak_gflops": {
            "fp32": round(peak_fp32 / 1e9, 1),
            "bf16": round(peak_bf16 / 1e9, 1),
        },
        "model_flop_share_of_matmul_peak": {
            "fp32": round(results["mtcli_fp32"]["flops_per_s"] / peak_fp32, 3),
            "bf16": round(results["mtcli_bf16"]["flops_per_s"] / peak_bf16, 3),
        },
        "peak_rss_mb": round(peak_rss_mb()),
    }
    for r in results.values():
        r["gflops_per_s"] = round(r.pop("flops_per_s") / 1e9, 2)
    write_result("train", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
