"""`make bench`: run every benchmark in its own process, then print one table.

    python bench/run.py [--minutes 20]
        [--only train,data,decode,ct2,memory,distill,serve,hostile,attention,quality,documents,
                threads,own,default,confidence,long,real,rerank]

Each benchmark writes bench/results/NAME.json; the table is built from those files, so a
benchmark can also be re-run alone (python bench/train.py) and the table re-printed
(python bench/run.py --table).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, RESULTS  # noqa: E402


def _run(script: str, *args: str) -> None:
    print(f"== {script} {' '.join(args)}", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, str(REPO / "bench" / script), *args], check=True, cwd=REPO)


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def data_rows() -> list[tuple[str, str, str, str]]:
    """bench/data.py: each corpus size's binarize, train and resume figures, then tokens/s."""
    d = _load("data")
    if not d:
        return []
    rows = []
    for r in d["scale"]:
        n, b, t, ddp, again = (
            f"{r['pairs']:,} pairs",
            r["binarize"],
            r["train"],
            r["torchrun_2"],
            r["resume"],
        )
        rows += [
            ("data", f"binarize {n}", "s | pairs/s | store MB",
             f"{b['wall_s']:.1f} | {b['pairs_per_s']:,} | {r['store_mb']:,}"),
            ("data", f"train --data, {n}", "peak RSS MB | s to step 1",
             f"{t['peak_rss_mb']} | {t['marks_s']['step 1 ']:.1f}"),
            ("data", f"resumed, {n}", "peak RSS MB | s to step 4",
             f"{again['peak_rss_mb']} | {again['marks_s']['step 4 ']:.1f}"),
            ("data", f"torchrun 2 ranks, {n}", "peak RSS MB of each", " | ".join(map(str, ddp["ranks_peak_rss_mb"]))),
        ]  # fmt: skip
        if before := r.get("before"):
            rows.append(("data", f"before (text in memory), {n}", "peak RSS MB | s to step 1",
                         f"{before['peak_rss_mb']} | {before['marks_s']['step 1 ']:.1f}"))  # fmt: skip
    for name, s in d["speed_first_100_steps_tatoeba"].items():
        rows.append(("data", f"first 100 steps, Tatoeba: {name}", "tgt tok/s | vs store",
                     f"{s['tgt_tokens_per_s']:,} | {s['vs_store']:.2f}x"))  # fmt: skip
    return rows


def thread_rows() -> list[tuple[str, str, str, str]]:
    """bench/threads.py: the default thread count idle and beside a CPU-bound process."""
    d = _load("threads")
    if not d:
        return []
    what = "s: default | threads 1 | all CPUs, OpenMP's spin"
    rows = []
    for name, key in (("idle", "idle_s"), ("beside a busy core", "busy_s")):
        rows.append(
            ("threads", f"{d['lines']} lines, {name}", what, " | ".join(map(str, d[key].values())))
        )
    rows.append(
        ("threads", "busy: default / threads 1", "ratio", f"{d['busy_default_vs_threads_1']:.2f}x")
    )
    rows.append(
        ("threads", "idle: default / all CPUs", "ratio", f"{d['idle_default_vs_all_cpus']:.2f}x")
    )
    return rows


def document_rows() -> list[tuple[str, str, str, str]]:
    """bench/documents.py: each format's words/s, and its speed against plain lines."""
    d = _load("documents")
    if not d:
        return []
    lines = d["lines"]["words_per_s"]
    rows = [("documents", f"{d['sentences']} sentences as lines", "words/s", f"{lines:,}")]
    for ext, r in d["formats"].items():
        value = f"{r['words_per_s']:,} | {r['vs_lines']:.2f}x"
        rows.append(("documents", ext, "words/s | vs lines", value))
    return rows


def distill_rows() -> list[tuple[str, str, str, str]]:
    """bench/distill.py: each direction's teacher and student, whole processes."""
    d = _load("distill")
    if not d:
        return []
    rows = []
    for direction, pair in d["directions"].items():
        for name, r in pair["rows"].items():
            speed, bleu = (
                f"{r['speed_vs_teacher']:.2f}x",
                f"{r['bleu']:.2f} ({r['bleu_vs_teacher']:+.2f})",
            )
            value = f"{r['seconds']:.2f} | {speed} | {bleu} | {r['chrf2']:.2f}"
            what = "s | speed | BLEU (vs teacher) | chrF2"
            rows.append(("distill", f"{direction} {name}", what, value))
    return rows


def own_corpus_rows() -> list[tuple[str, str, str, str]]:
    """bench/own_corpus.py: the README's routes from the same raw files, test BLEU and chrF."""
    path = RESULTS / "own_corpus.json"
    if not path.is_file():
        return []
    rows = []
    for r in json.loads(path.read_text()):
        busy = ", a core busy" if r["busy"] else ""
        setting = f"{r['corpus']} {r['pairs']:,} pairs, {r['minutes']:g} min{busy}: {r['route']}"
        rows.append(
            ("own corpus", setting, "test BLEU | chrF", f"{r['bleu']:.2f} | {r['chrf']:.2f}")
        )
    return rows


def long_line_rows() -> list[tuple[str, str, str, str]]:
    """bench/long_line.py: one very long line against 2,000 lines, whole processes."""
    d = _load("long_line")
    if d is None:
        return []
    inputs = ("2,000 lines", "200,000 characters", "1 MB", "200,000 characters, no punctuation")
    what = "s, MB: 2,000 lines | 200k chars | 1 MB | 200k bare"
    rows = []
    for setting in ("default", "greedy"):
        runs = [d[f"{setting}: {name}"] for name in inputs]
        figure = " | ".join(f"{r['seconds']:.0f} s, {r['peak_rss_mb']}" for r in runs)
        ratio = d[f"{setting}: peak RSS of the 1 MB line / the 2,000 lines"]
        rows.append(("long line", f"{setting}, zh-en-tiny", what, figure))
        rows.append(("long line", f"{setting}: peak RSS 1 MB / 2,000 lines", "ratio", f"{ratio}x"))
    return rows


def default_path_rows() -> list[tuple[str, str, str, str]]:
    """bench/default_path.py: `mtcli translate` at its defaults beside CTranslate2."""
    d = _load("default_path")
    if d is None:
        return []
    rows = []
    for search in ("beam 5", "greedy"):
        mine, theirs = d[f"mtcli {search}"], d[f"ctranslate2 {search}"]
        figure = (
            f"{mine['seconds']} | {theirs['seconds']} s, {mine['peak_rss_mb']} | "
            f"{theirs['peak_rss_mb']} MB; speed {d[f'mtcli speed vs ctranslate2, {search}']}x"
        )
        what = "mtcli | CTranslate2: time, peak RSS"
        rows.append(("default", f"2,000 lines, whole process, {search}", what, figure))
    return rows


def real_text_rows() -> list[tuple[str, str, str, str]]:
    """bench/real_text.py: lines with numbers against their twins without, per word."""
    d = _load("real_text")
    if d is None:
        return []
    rows = []
    for setting in ("default", "no confidence"):
        r = d[setting]
        figure = (
            f"{r['ms_per_word']['digits']} | {r['ms_per_word']['plain']} | "
            f"{r['digits_over_plain_per_word']:.2f}x | "
            f"{r['decoded_again']['digits']} of {r['sentences']['digits']}"
        )
        what = "ms/word digits | plain | ratio | decoded again"
        rows.append(("real text", f"{setting}, en-zh-tiny", what, figure))
    return rows


def confidence_rows() -> list[tuple[str, str, str, str]]:
    """bench/confidence.py: the confidence's cost, and its scores read from the search."""
    d = _load("confidence")
    if d is None:
        return []
    rows = []
    for name in ("en-zh-tiny", "zh-en-tiny"):
        beam, greedy = d["time"][f"{name} beam 5"], d["time"][f"{name} beam 1"]
        figure = f"+{beam['cost']:.0%} | +{greedy['cost']:.0%}"
        rows.append(("confidence", f"{name}, 1,000 lines", "cost: beam 5 | greedy", figure))
    for name, r in d.items():
        if isinstance(r, dict) and "read_from_the_search" in r:
            read = r["read_from_the_search"]
            figure = f"{read['max_difference']} | {read['flagged_alike']:.1%} | {read['auc_read']}"
            what = "vs a 2nd pass: max diff | flags alike | AUC"
            rows.append(("confidence", f"{name}, read from the search", what, figure))
    return rows


def rerank_rows() -> list[tuple[str, str, str, str]]:
    """bench/rerank.py: the search's first choice against the noisy channel's (test split)."""
    d = _load("rerank")
    if d is None:
        return []
    from bench.rerank import SHIPPED_CANDIDATES

    rows = []
    for direction, r in d.items():
        first = r["test"]["first choice"]
        shown = ("MBR chrF", f"noisy channel, first {SHIPPED_CANDIDATES[direction]}")
        for name, s in r["test"].items():
            if name in shown:
                figure = f"{first['bleu']} | {s['bleu']} | {s['bleu'] - first['bleu']:+.2f}"
                rows.append(
                    ("rerank", f"{direction}, {name}", "BLEU first | chosen | gain", figure)
                )
    return rows


def table() -> str:
    rows = [("benchmark", "setting", "figure", "value")]
    if t := _load("train"):
        for name, r in t["results"].items():
            rows.append(("train", name, "tgt tokens/s", f"{r['tgt_tokens_per_s']:,.0f}"))
        rows += [
            (
                "train",
                "mtcli fp32 / torch.nn.Transformer fp32",
                "ratio",
                f"{t['fp32_vs_reference_fp32']:.2f}x",
            ),
            (
                "train",
                "mtcli bf16 / torch.nn.Transformer bf16 (same autocast)",
                "ratio",
                f"{t['bf16_vs_reference_bf16']:.2f}x",
            ),
            ("train", "bf16 vs fp32 valid loss", "change", f"{t['bf16_valid_loss_change']:+.2%}"),
            (
                "train",
                "model FLOP/s / matmul FLOP/s",
                "fp32",
                f"{t['model_flop_share_of_matmul_peak']['fp32']:.2f}",
            ),
            (
                "train",
                "model FLOP/s / matmul FLOP/s",
                "bf16",
                f"{t['model_flop_share_of_matmul_peak']['bf16']:.2f}",
            ),
            ("train", "peak RSS", "MB", str(t["peak_rss_mb"])),
        ]
    rows += data_rows()
    if d := _load("decode"):
        for name, r in d["results"].items():
            rows.append(
                (
                    "decode",
                    name,
                    "sent/s | tok/s | BLEU",
                    f"{r['sentences_per_s']:.1f} | {r['tgt_tokens_per_s']:.0f} | {r['bleu']:.2f}",
                )
            )
        rows += [
            ("decode", "beam 5 cached / uncached", "ratio", f"{d['beam5_cache_speedup']:.2f}x"),
            (
                "decode",
                "beam 5 cached / uncached, first 500",
                "ratio",
                f"{d['beam5_cache_speedup_first500']:.2f}x",
            ),
            ("decode", "greedy cached / uncached", "ratio", f"{d['greedy_cache_speedup']:.2f}x"),
            ("decode", "int8 / fp32 (beam 5)", "ratio", f"{d['int8_speedup']:.2f}x"),
            ("decode", "int8 - fp32 BLEU", "points", f"{d['int8_bleu_delta']:+.2f}"),
            ("decode", "peak RSS", "MB", str(d["peak_rss_mb"])),
        ]
    if c := _load("ct2"):
        for name, r in c["decode"].items():
            rows.append(
                (
                    "ct2",
                    f"{name}, {c['lines']} lines",
                    "mtcli s | CT2 s | mtcli/CT2 speed",
                    f"{r['mtcli_s']:.2f} | {r['ctranslate2_s']:.2f} | {r['mtcli_vs_ct2']:.2f}x",
                )
            )
        st = c["startup"]
        rows.append(
            (
                "ct2",
                "start-up, one sentence",
                "import torch | mtcli | CT2 engine s",
                f"{st['import_torch_s']:.2f} | {st['mtcli_s']:.2f} | {st['ctranslate2_engine_s']:.2f}",
            )
        )
        what = "mtcli fp32 | int8 | CT2 fp32 | int8 MB"
        named = {"peak_rss": "peak RSS, beam 5, all lines", "run_rss": "peak RSS - import RSS, beam 5"}  # fmt: skip
        keys = [f"{e}_beam5_{p}_mb" for e in ("mtcli", "ctranslate2") for p in ("fp32", "int8")]
        for key, name in named.items():
            if mb := c.get(key):  # run_rss: the peak minus each process's RSS after its imports
                values = [mb[k] for k in keys]
                rows.append(("ct2", name, what, " | ".join(map(str, values))))
    if m := _load("memory"):
        for name, r in m["results"].items():
            memory = [r[k] for k in ("imports_mb", "peak_mb", "peak_minus_imports_mb", "peak_in_use_mb")]  # fmt: skip
            value = f"{r['decode_s']:.2f} ({r['time_vs_default']:.2f}x) | " + " | ".join(
                map(str, memory)
            )
            what = "decode s | imports | peak | peak-imports | in use MB"
            rows.append(("memory", f"beam 5, {name}", what, value))
    rows += distill_rows()
    rows += document_rows()
    rows += thread_rows()
    rows += own_corpus_rows()
    if sv := _load("serve"):
        for name, r in sv["results"].items():
            value = (
                f"{r['lines_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['failed']}"
            )
            rows.append(
                (
                    "serve",
                    f"{name} ({r['clients']} clients)",
                    "lines/s | p50 ms | p99 ms | failed",
                    value,
                )
            )
        rows += [
            (
                "serve",
                "concurrent / sequential (no batch wait)",
                "ratio",
                f"{sv['throughput_ratio']:.2f}x",
            ),
            ("serve", "server peak RSS", "MB", str(sv["server_peak_rss_mb"])),
        ]
    if h := _load("serve_hostile"):
        for engine, r in h.get("settings", {}).get("results", {}).items():
            n = h["settings"]["requests"]
            value = (
                f"{r['rss_after_100_mb']} -> {r[f'rss_after_{n}_mb']} ({100 * r['growth']:+.1f}%)"
            )
            rows.append(("serve", f"{n} distinct settings, {engine}", "RSS MB after 100 -> all", value))  # fmt: skip
        if s := h.get("soak"):
            rss = f"{s['rss_after_1_min_mb']} -> {s['rss_at_end_mb']}"
            value = (
                f"{s['failed_valid']}/{s['valid']} | {s['p99_ms']:.0f} | {rss} | {s['exit_code']}"
            )
            what = "failed | p99 ms | RSS MB | exit"
            rows.append(
                ("serve", f"soak {s['minutes']:g} min, {s['clients']} clients", what, value)
            )
    if at := _load("attention"):
        for kind, r in at["results"].items():
            value = f"{r['BLEU']:.2f} | {r['chrF2']:.2f} | {r['tgt_tokens_per_s']:,} ({r['steps']} steps)"
            rows.append(
                (
                    "attention",
                    f"{kind}, {at['minutes']:g} min CPU",
                    "BLEU | chrF2 | tgt tok/s",
                    value,
                )
            )
        rows.append(
            (
                "attention",
                "additive / dot training speed",
                "ratio",
                f"{at['additive_vs_dot_speed']:.2f}x",
            )
        )
    for corpus in ("multi30k-en-de", "tatoeba-en-zh"):
        if q := _load(f"quality-{corpus}"):
            rows.append(
                (
                    "quality",
                    f"{corpus}, {q['minutes']:g} min CPU",
                    "BLEU | chrF2",
                    f"{q['BLEU']:.2f} | {q['chrF2']:.2f} ({q['steps']} steps, peak {q['peak_rss_mb']} MB)",
                )
            )
    rows += default_path_rows() + confidence_rows() + long_line_rows() + real_text_rows()
    rows += rerank_rows()
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", default="20", help="training budget of each quality run")
    ap.add_argument(
        "--only",
        default="train,data,decode,ct2,memory,distill,serve,hostile,attention,quality,documents,"
        "threads,own,default,confidence,long,real,rerank",
    )
    ap.add_argument("--table", action="store_true", help="only print the table of existing results")
    args = ap.parse_args()
    if not args.table:
        only = set(args.only.split(","))
        if "train" in only:
            _run("train.py")
        if "data" in only:  # 10M synthetic pairs (~3.5 GB in a temporary folder, removed after)
            _run("data.py")
        if "decode" in only:
            _run("decode.py", "--lines", "1000")
        if "ct2" in only:
            _run("ct2.py")
        if "memory" in only:  # where a beam-5 pass's memory goes, RSS against time
            _run("memory.py")
        if "distill" in only:  # the shipped students beside their teachers
            _run("distill.py")
        if "serve" in only:
            _run("serve.py")
        if "hostile" in only:  # distinct settings on both engines, then the 10-minute soak
            _run("serve_hostile.py", "settings")
            _run("serve_hostile.py", "soak")
        if "attention" in only:
            _run("attention.py")
        if "quality" in only:
            _run("quality.py", "--corpus", "multi30k-en-de", "--minutes", args.minutes)
            _run("quality.py", "--corpus", "tatoeba-en-zh", "--minutes", args.minutes)
        if "documents" in only:  # words/s of each format against the same sentences as lines
            _run("documents.py")
        if "threads" in only:  # the default thread count idle and beside a CPU-bound process
            _run("threads.py")
        if (
            "own" in only
        ):  # `train --max-time 2` alone on 2,000 raw pairs (the full table: NOTES.md)
            _run("own_corpus.py", "--short")
        if "default" in only:  # `mtcli translate` as it runs by default, beside CTranslate2
            _run("default_path.py")
        if "confidence" in only:  # the confidence's cost and its agreement with a second pass
            _run("confidence.py")
        if "long" in only:  # one very long line against 2,000 lines: time and peak RSS
            _run("long_line.py")
        if "real" in only:  # lines with numbers against their twins without, per word
            _run("real_text.py")
        if "rerank" in only:  # the n-best chosen again by the reverse model
            _run("rerank.py")
    print(table())


if __name__ == "__main__":
    main()
