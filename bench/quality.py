"""Quality at a fixed CPU budget: train the default config for N minutes, then score the test set.

    python bench/quality.py --corpus multi30k-en-de [--minutes 20]

Prepares the corpus from ../shared/data/NAME/raw, trains a joint BPE and the default model
(mtcli's ModelConfig defaults) for `minutes` of wall clock, then translates the test set with
beam 5 and scores it (BLEU 13a for German, zh for Chinese; chrF2). Writes
bench/results/quality-NAME.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED, peak_rss_mb, read_lines, timed, write_result  # noqa: E402
from mtcli.config import DecodeConfig, ModelConfig, TrainConfig  # noqa: E402
from mtcli.data.prepare import PrepareOptions, prepare  # noqa: E402
from mtcli.data.tokenizer import TokenizerOptions, train_tokenizer  # noqa: E402
from mtcli.device import limit_kernel_caches  # noqa: E402
from mtcli.engines.translator import Translator  # noqa: E402
from mtcli.store.checkpoint import load_model  # noqa: E402
from mtcli.training.loop import train  # noqa: E402
from mtcli.training.metrics import MetricOptions, bleu_tokenizer_for, score_system  # noqa: E402


def run_quality(
    corpus: str, minutes: float, vocab_size: int, precision: str, attention: str = "dot"
) -> dict:
    """Train the default model for `minutes`, then score the test set; the result record."""
    limit_kernel_caches()  # as `mtcli train` does: before oneDNN first runs
    work = Path(tempfile.mkdtemp(prefix=f"mtcli-bench-{corpus}-"))
    manifest = prepare(corpus, work / "data", PrepareOptions(from_dir=str(SHARED / corpus / "raw")))
    data = work / "data"
    train_tokenizer(
        data / "train.src",
        data / "train.tgt",
        work / "tok",
        TokenizerOptions(vocab_size=vocab_size),
    )
    cfg = TrainConfig(
        src=str(data / "train.src"), tgt=str(data / "train.tgt"),
        valid_src=str(data / "valid.src"), valid_tgt=str(data / "valid.tgt"),
        tokenizer=str(work / "tok"), out=str(work / "run"), src_lang=manifest["src_lang"],
        tgt_lang=manifest["tgt_lang"], max_time=minutes, warmup=1000, lr_factor=1.0,
        valid_every=500, valid_bleu_lines=300, precision=precision,
        model=ModelConfig(attention=attention),
    )  # fmt: skip
    result, train_seconds = timed(lambda: train(cfg))
    rates = [
        r["tokens_per_s"]
        for r in map(json.loads, (work / "run" / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train" and r["step"] > 1
    ]
    loaded = load_model(work / "run" / "best")
    sources, refs = read_lines(data / "test.src"), read_lines(data / "test.tgt")
    translator = Translator(loaded.model, loaded.tokenizer, DecodeConfig(beam_size=5))
    hyps, decode_seconds = timed(lambda: [t.text for t in translator.translate_stream(sources)])
    opts = MetricOptions(bleu_tokenizer_for(manifest["tgt_lang"]), 0, ("bleu", "chrf"))
    scores = {s.name: round(s.score, 2) for s in score_system(hyps, [refs], opts)}
    return {
        "corpus": corpus, "minutes": minutes, "precision": precision, "attention": attention,
        "steps": result.step, "train_seconds": round(train_seconds), "best_checkpoint_step": loaded.config["step"],
        "tgt_tokens_per_s": round(sum(rates) / max(len(rates), 1)),
        "test_lines": len(sources), "beam": 5, "bleu_tokenize": opts.tokenize, **scores,
        "decode_seconds": round(decode_seconds, 1), "parameters": loaded.model.num_parameters(),
        "threads": torch.get_num_threads(), "peak_rss_mb": round(peak_rss_mb()),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--corpus", default="multi30k-en-de", choices=["multi30k-en-de", "tatoeba-en-zh"]
    )
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    record = run_quality(args.corpus, args.minutes, args.vocab_size, args.precision)
    write_result(f"quality-{args.corpus}", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
