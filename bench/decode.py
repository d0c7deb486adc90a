"""Translation throughput: greedy and beam 5, with and without the KV cache, fp32 and int8.

    python bench/decode.py [--lines 1000] [--model models/en-zh-tiny]

Prints one JSON object (also written to bench/results/decode.json): sentences/s and target
tokens/s for each setting on the first N lines of ../shared/data/tatoeba-en-zh/test.en, the
cached/uncached speed-up of beam 5 (on the N lines, and on the first 500 alone), int8/fp32,
and BLEU of each against the references. Each time is the fastest of REPEATS runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, peak_rss_mb, read_lines, timed, write_result  # noqa: E402
from mtcli.checkpoint import load_model  # noqa: E402
from mtcli.config import DecodeConfig  # noqa: E402
from mtcli.evaluate import bleu  # noqa: E402
from mtcli.translate import Translator, quantize_int8  # noqa: E402

REPEATS = 3  # each setting is timed this often and the fastest kept (as timeit does): on
# this shared 2-core machine single runs of the same setting varied by up to 30%


def run(model, tokenizer, lines, refs, *, beam: int, use_cache: bool) -> dict:
    cfg = DecodeConfig(beam_size=beam, use_cache=use_cache)
    translator = Translator(model, tokenizer, cfg)
    times = []
    for _ in range(REPEATS):
        results, seconds = timed(lambda: list(translator.translate_stream(lines)))
        times.append(seconds)
    seconds = min(times)
    n_tokens = sum(len(tokenizer.encode_tgt(r.text)) + 1 for r in results)
    return {
        "beam": beam,
        "cache": use_cache,
        "seconds": round(seconds, 2),
        "sentences_per_s": round(len(lines) / seconds, 1),
        "tgt_tokens_per_s": round(n_tokens / seconds, 1),
        "bleu": round(bleu([r.text for r in results], refs, tokenize="zh"), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--model", default=str(SHIPPED))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", args.lines)
    refs = read_lines(SHARED / "tatoeba-en-zh" / "test.zh", args.lines)
    rows = {}
    for beam in (1, 5):
        for use_cache in (True, False):
            rows[
                f"{'greedy' if beam == 1 else 'beam5'}_{'cached' if use_cache else 'uncached'}"
            ] = run(loaded.model, loaded.tokenizer, lines, refs, beam=beam, use_cache=use_cache)
    # issue 4's figure: the cache speed-up on the first 500 lines (shorter sentences than the
    # next 500, so a smaller speed-up: the uncached cost grows with output length)
    head = min(500, len(lines))
    for use_cache in (True, False):
        rows[f"beam5_{'cached' if use_cache else 'uncached'}_first{head}"] = run(
            loaded.model, loaded.tokenizer, lines[:head], refs[:head], beam=5, use_cache=use_cache
        )
    int8 = quantize_int8(loaded.model)
    rows["beam5_cached_int8"] = run(int8, loaded.tokenizer, lines, refs, beam=5, use_cache=True)
    record = {
        "lines": len(lines),
        "model": os.path.relpath(args.model, REPO),
        "threads": torch.get_num_threads(),
        "repeats": REPEATS,
        "parameters": loaded.model.num_parameters(),
        "results": rows,
        "beam5_cache_speedup": round(
            rows["beam5_cached"]["sentences_per_s"] / rows["beam5_uncached"]["sentences_per_s"], 2
        ),
        "beam5_cache_speedup_first500": round(
            rows[f"beam5_cached_first{head}"]["sentences_per_s"]
            / rows[f"beam5_uncached_first{head}"]["sentences_per_s"],
            2,
        ),
        "greedy_cache_speedup": round(
            rows["greedy_cached"]["sentences_per_s"] / rows["greedy_uncached"]["sentences_per_s"], 2
        ),
        "int8_speedup": round(
            rows["beam5_cached_int8"]["sentences_per_s"] / rows["beam5_cached"]["sentences_per_s"],
            2,
        ),
        "int8_bleu_delta": round(
            rows["beam5_cached_int8"]["bleu"] - rows["beam5_cached"]["bleu"], 2
        ),
        "peak_rss_mb": round(peak_rss_mb()),
    }
    write_result("decode", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
