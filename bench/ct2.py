"""mtcli's decoder beside CTranslate2 on the same weights (the shipped en-zh-tiny, exported
exactly), same lines, same threads: decode time without start-up, start-up, peak memory.

    python bench/ct2.py [--lines 2000] [--threads 2] [--rounds 3]

Decode times: each engine and setting in a fresh process of its own, which translates the
Tatoeba test lines after a warm-up and reports the time of that pass alone (no start-up);
settings and engines are interleaved over `rounds` and each keeps its fastest round.
Start-up: the whole `mtcli translate "Why do we work?"` process, beside `python -c "import
torch"`. Peak RSS: the median over the rounds of those same processes' peaks; import RSS,
the median of their RSS once their imports are done (before the model loads); run RSS, the
peak minus the import RSS. Writes
bench/results/ct2.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, read_lines, write_result  # noqa: E402
from mtcli.store.ct2_export import export_ctranslate2  # noqa: E402

SETTINGS = {  # name: (beam size, int8)
    "beam5_fp32": (5, False),
    "greedy_fp32": (1, False),
    "beam5_int8": (5, True),
}

ENGINE_SCRIPT = """
import sys, time
from pathlib import Path
engine, model, beam, int8, threads, src = sys.argv[1:7]
lines = Path(src).read_text(encoding="utf-8").splitlines()
from mtcli.config import DecodeConfig
cfg = DecodeConfig(beam_size=int(beam))
def rss_mb(field):
    line = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field)]
    return int(line[0].split()[1]) / 1024
if engine == "ctranslate2":
    import ctranslate2, sentencepiece
    from mtcli.engines.ct2 import CT2Translator
    imported = rss_mb("VmRSS:")  # the engine's imports, before the model
    t = CT2Translator(Path(model), cfg, threads=int(threads), quantize="int8" if int8 == "1" else "none")
else:
    import torch
    from mtcli.device import keep_freed_memory, limit_kernel_caches
    torch.set_num_threads(int(threads))
    limit_kernel_caches()  # as mtcli translate does (engines.build.prepare_decoding)
    keep_freed_memory()
    from mtcli.store.checkpoint import load_model
    from mtcli.engines.loading import decoding_only
    from mtcli.engines.translator import Translator, quantize_int8
    imported = rss_mb("VmRSS:")
    loaded = load_model(model)
    # as mtcli translate decodes: int8, or fp32 with the weights in oneDNN's layout alone
    net = quantize_int8(loaded.model) if int8 == "1" else decoding_only(loaded).model
    del loaded.model
    t = Translator(net, loaded.tokenizer, cfg)
t.translate_chunk(lines[:50])  # warm-up: first-call costs out of the timing
print("timed pass", flush=True)  # where bench/ct2_matmuls.py starts counting
start = time.perf_counter()
for chunk in range(0, len(lines), 1000):
    t.translate_chunk(lines[chunk:chunk + 1000])
took = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's
print(took, rss_mb("VmHWM:"), imported)
"""


def engine_args(engine: str, model: Path, name: str, threads: int, src: Path) -> list[str]:
    beam, int8 = SETTINGS[name]
    return [engine, str(model), str(beam), str(int(int8)), str(threads), str(src)]


def run_engine(args: list[str]) -> tuple[float, float, float]:
    """(decode seconds, peak RSS, RSS after its imports, in MB) of one fresh process running
    ENGINE_SCRIPT."""
    out = subprocess.run(
        [sys.executable, "-c", ENGINE_SCRIPT, *args],
        check=True, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    seconds, mb, imported = out.stdout.strip().splitlines()[-1].split()
    return float(seconds), float(mb), float(imported)


def startup(args: list[str], repeats: int = 3) -> float:
    """Fastest of `repeats` whole-process runs, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, cwd=REPO)
        best = min(best, time.perf_counter() - start)
    return best


def prepare(n_lines: int) -> tuple[list[str], Path, Path]:
    """The first `n_lines` Tatoeba test lines, the shipped model exported for CTranslate2, and
    those lines in a file for the engine processes (both in a new temporary directory)."""
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", n_lines)
    work = Path(tempfile.mkdtemp(prefix="mtcli-bench-ct2-"))
    exported = export_ctranslate2(SHIPPED, work / "en-zh-tiny-ct2")
    src = work / "test.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines, exported, src


def startup_times(exported: Path) -> dict[str, float]:
    """Fastest whole-process seconds of `import torch`, and of a one-sentence `mtcli translate`
    on each engine."""
    py, sentence = sys.executable, "Why do we work?"
    mtcli = [py, "-m", "mtcli", "translate"]
    return {
        "import_torch_s": round(startup([py, "-c", "import torch"]), 3),
        "mtcli_s": round(startup([*mtcli, "-m", str(SHIPPED), sentence]), 3),
        "ctranslate2_engine_s": round(
            startup([*mtcli, "--engine", "ctranslate2", "-m", str(exported), sentence]), 3
        ),
    }


def medians(mb: dict[tuple[str, str], list[float]], engines) -> dict[str, int]:
    """The median over the rounds of each engine's beam-5 figures in MB, fp32 and int8: peak
    RSS differs by up to 50 MB between identical runs here (glibc's arenas)."""
    return {
        f"{engine}_{name}_mb": round(statistics.median(mb[engine, name]))
        for engine in engines
        for name in ("beam5_fp32", "beam5_int8")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lines, exported, src = prepare(args.lines)

    # each engine alone in its own process: loaded side by side in one process, both ran
    # 10-40% slower (two OpenMP runtimes sharing two cores)
    models = {"mtcli": SHIPPED, "ctranslate2": exported}
    times: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], list[float]] = {}
    imports: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name in SETTINGS:
            for engine, model in models.items():
                took, mb, imported = run_engine(engine_args(engine, model, name, args.threads, src))
                times.setdefault((engine, name), []).append(took)
                peaks.setdefault((engine, name), []).append(mb)
                imports.setdefault((engine, name), []).append(imported)
    best = {key: min(values) for key, values in times.items()}
    decode = {
        name: {
            "mtcli_s": round(best[("mtcli", name)], 2),
            "ctranslate2_s": round(best[("ctranslate2", name)], 2),
            "mtcli_vs_ct2": round(best[("ctranslate2", name)] / best[("mtcli", name)], 3),
        }
        for name in SETTINGS
    }
    start = startup_times(exported)
    rss, imported = medians(peaks, models), medians(imports, models)
    # what the run itself holds: the peak minus the process's RSS once its imports are done
    # (torch and mtcli; ctranslate2, sentencepiece and mtcli's CT2 engine)
    run = {key: rss[key] - imported[key] for key in rss}
    record = {
        "lines": len(lines),
        "threads": args.threads,
        "decode": decode,
        "startup": {
            **start,
            "mtcli_minus_import_torch_s": round(start["mtcli_s"] - start["import_torch_s"], 3),
        },  # fmt: skip
        "peak_rss": rss,
        "import_rss": imported,
        "run_rss": run,
    }
    write_result("ct2", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
