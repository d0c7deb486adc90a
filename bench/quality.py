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
from mtcli.checkpoint import load_model  # noqa: E402
from mtcli.config import DecodeConfig, ModelConfig, TrainConfig  # noqa: E402
from mtcli.evaluate import MetricOptions, bleu_tokenizer_for, score_system  # noqa: E402
from mtcli.prepare import PrepareOptions, prepare  # noqa: E402
from mtcli.tokenizer import TokenizerOptions, train_tokenizer  # noqa: E402
from mtcli.train import train  # noqa: E402
from mtcli.translate import Translator  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--corpus", default="multi30k-en-de", choices=["multi30k-en-de", "tatoeba-en-zh"]
    )
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix=f"mtcli-bench-{args.corpus}-"))
    manifest = prepare(
        args.corpus, work / "data", PrepareOptions(from_dir=str(SHARED / args.corpus / "raw"))
    )
    data = work / "data"
    train_tokenizer(
        data / "train.src",
        data / "train.tgt",
        work / "tok",
        TokenizerOptions(vocab_size=args.vocab_size),
    )
    cfg = TrainConfig(
        src=str(data / "train.src"), tgt=str(data / "train.tgt"),
        valid_src=str(data / "valid.src"), valid_tgt=str(data / "valid.tgt"),
        tokenizer=str(work / "tok"), out=str(work / "run"), src_lang=manifest["src_lang"],
        tgt_lang=manifest["tgt_lang"], max_time=args.minutes, warmup=1000, lr_factor=1.0,
        valid_every=500, valid_bleu_lines=300, precision=args.precision, model=ModelConfig(),
    )  # fmt: skip
    result, train_seconds = timed(lambda: train(cfg))
    loaded = load_model(work / "run" / "best")
    sources, refs = read_lines(data / "test.src"), read_lines(data / "test.tgt")
    translator = Translator(loaded.model, loaded.tokenizer, DecodeConfig(beam_size=5))
    hyps, decode_seconds = timed(lambda: [t.text for t in translator.translate_stream(sources)])
    opts = MetricOptions(bleu_tokenizer_for(manifest["tgt_lang"]), 0, ("bleu", "chrf"))
    scores = {s.name: round(s.score, 2) for s in score_system(hyps, [refs], opts)}
    record = {
        "corpus": args.corpus, "minutes": args.minutes, "precision": args.precision,
        "steps": result.step, "train_seconds": round(train_seconds), "best_checkpoint_step": loaded.config["step"],
        "test_lines": len(sources), "beam": 5, "bleu_tokenize": opts.tokenize, **scores,
        "decode_seconds": round(decode_seconds, 1), "parameters": loaded.model.num_parameters(),
        "threads": torch.get_num_threads(), "peak_rss_mb": round(peak_rss_mb()),
    }  # fmt: skip
    write_result(f"quality-{args.corpus}", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
