"""Translation throughput: greedy and beam 5, with and without the KV cache, fp32 and int8.

    python bench/decode.py [--lines 1000] [--model models/en-zh-tiny]

Prints one JSON object (also written to bench/results/decode.json): sentences/s and target
tokens/s for each setting on the first N lines of ../shared/data/tatoeba-en-zh/test.en, the
cached/uncached speed-up of beam 5 (on the N lines, and on the first 500 alone), int8/fp32,
beam 5 through the text layer (sentences, kept spans, casing: mtcli/text) against the
Translator alone, and BLEU of each against the references. Settings run interleaved, ROUNDS times each; the
fastest run of each counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from functools import partial

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, peak_rss_mb, read_lines, timed, write_result  # noqa: E402
from mtcli.config import DecodeConfig  # noqa: E402
from mtcli.device import keep_freed_memory, limit_kernel_caches  # noqa: E402
from mtcli.engines.build import EngineOptions, build_translator  # noqa: E402
from mtcli.engines.routing import stream  # noqa: E402
from mtcli.engines.translator import Translator, quantize_int8  # noqa: E402
from mtcli.store.checkpoint import load_model  # noqa: E402
from mtcli.training.metrics import bleu  # noqa: E402

ROUNDS = 3  # every setting runs once per round, settings interleaved, and each keeps its
# fastest round (as timeit does): on this shared 2-core machine the same setting varied by up to
# 30% between runs minutes apart, and interleaving exposes the settings compared to the same drift


@dataclass
class Setting:
    model: torch.nn.Module
    lines: list[str]
    refs: list[str]
    beam: int
    use_cache: bool
    text_layer: bool = False  # real text handling around the Translator (mtcli/text)


def _translate_all(translator, lines: list[str]) -> list:
    return list(stream(translator.translate_chunk, lines, DecodeConfig().chunk_lines))


def _translator(st: Setting, loaded, cfg: DecodeConfig):
    """The Translator alone, or through the text layer as `mtcli translate` uses it."""
    if not st.text_layer:
        return Translator(st.model, loaded.tokenizer, cfg)
    model = dataclasses.replace(loaded, model=st.model)
    return build_translator([model], cfg, EngineOptions(device="cpu"))


def time_settings(settings: dict[str, Setting], loaded) -> dict[str, dict]:
    """Run each setting ROUNDS times, round-robin; figures from each one's fastest run."""
    best: dict[str, float] = {}
    outputs: dict[str, list] = {}
    for _ in range(ROUNDS):
        for name, st in settings.items():
            cfg = DecodeConfig(beam_size=st.beam, use_cache=st.use_cache)
            translator = _translator(st, loaded, cfg)
            outputs[name], seconds = timed(partial(_translate_all, translator, st.lines))
            best[name] = min(seconds, best.get(name, seconds))
    rows, tokenizer = {}, loaded.tokenizer
    for name, st in settings.items():
        texts = [r.text for r in outputs[name]]
        n_tokens = sum(len(tokenizer.encode_tgt(t)) + 1 for t in texts)
        seconds = best[name]
        rows[name] = {
            "beam": st.beam,
            "cache": st.use_cache,
            "text_layer": st.text_layer,
            "lines": len(st.lines),
            "seconds": round(seconds, 2),
            "sentences_per_s": round(len(st.lines) / seconds, 1),
            "tgt_tokens_per_s": round(n_tokens / seconds, 1),
            "bleu": round(bleu(texts, st.refs, tokenize="zh"), 2),
        }
    return rows


def _speedup(rows: dict[str, dict], fast: str, slow: str) -> float:
    """How many times more sentences per second `fast` translated than `slow`."""
    return round(rows[fast]["sentences_per_s"] / rows[slow]["sentences_per_s"], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--model", default=str(SHIPPED))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    limit_kernel_caches()  # as mtcli translate does (engines.build.prepare_decoding)
    keep_freed_memory()
    loaded = load_model(args.model)
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", args.lines)
    refs = read_lines(SHARED / "tatoeba-en-zh" / "test.zh", args.lines)
    # issue 4's figure: the cache speed-up on the first 500 lines (shorter sentences than the
    # next 500, so a smaller speed-up: the uncached cost grows with output length)
    head = min(500, len(lines))
    fp32, int8 = loaded.model, quantize_int8(load_model(args.model).model)  # in place: a copy
    settings = {
        "greedy_cached": Setting(fp32, lines, refs, 1, True),
        "greedy_uncached": Setting(fp32, lines, refs, 1, False),
        "beam5_cached": Setting(fp32, lines, refs, 5, True),
        "beam5_uncached": Setting(fp32, lines, refs, 5, False),
        f"beam5_cached_first{head}": Setting(fp32, lines[:head], refs[:head], 5, True),
        f"beam5_uncached_first{head}": Setting(fp32, lines[:head], refs[:head], 5, False),
        "beam5_cached_int8": Setting(int8, lines, refs, 5, True),
        "beam5_cached_text_layer": Setting(fp32, lines, refs, 5, True, text_layer=True),
    }
    rows = time_settings(settings, loaded)
    record = {
        "lines": len(lines),
        "model": os.path.relpath(args.model, REPO),
        "threads": torch.get_num_threads(),
        "rounds": ROUNDS,
        "parameters": loaded.model.num_parameters(),
        "results": rows,
        "beam5_cache_speedup": _speedup(rows, "beam5_cached", "beam5_uncached"),
        "beam5_cache_speedup_first500": _speedup(
            rows, f"beam5_cached_first{head}", f"beam5_uncached_first{head}"
        ),
        "greedy_cache_speedup": _speedup(rows, "greedy_cached", "greedy_uncached"),
        "int8_speedup": _speedup(rows, "beam5_cached_int8", "beam5_cached"),
        "text_layer_speed": _speedup(rows, "beam5_cached_text_layer", "beam5_cached"),
        "text_layer_bleu_delta": round(
            rows["beam5_cached_text_layer"]["bleu"] - rows["beam5_cached"]["bleu"], 2
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
