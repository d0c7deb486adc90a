"""Where a beam-5 pass's memory goes, and what the settings that bound it cost in time: the
shipped en-zh-tiny over the 2,000 Tatoeba test lines, fp32, 2 threads, one fresh process per
setting (interleaved over `rounds`; fastest time, median memory).

    python bench/memory.py [--rounds 3]

Each process reports its RSS after the imports, after loading the model and after the whole
pass (and its peak, VmHWM), glibc's heap (mallinfo2: the heap's size, the bytes in use, the
bytes free but kept) and the highest "in use" a sampling thread saw every 2 ms; its time is
the pass after a 50-line warm-up, as in bench/ct2.py (without it, the plain weights' setting
read 0.87-0.89x the default's time, where interleaved A/Bs with a warm-up found no cost).
Settings:
`--batch-tokens` (8000, the default; 4000; 2000); freed memory kept for reuse
(device.keep_freed_memory, mtcli's default) with blocks from 32 MiB (the default), 4 MiB or
2 MiB in mappings of their own, which go back to the kernel when freed, or glibc's own
defaults; MALLOC_ARENA_MAX=1 (one glibc arena for every thread); and the Linear weights'
plain copies kept beside oneDNN's packed ones (as before engines.loading.decoding_only). Writes
bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, write_result  # noqa: E402

SETTINGS = {  # name: (batch tokens, glibc's own-mapping threshold in MiB or None, extra environment)
    "8000 tokens, own mappings from 32 MiB (default)": (8000, 32, {}),
    "8000 tokens, own mappings from 4 MiB": (8000, 4, {}),
    "8000 tokens, own mappings from 2 MiB": (8000, 2, {}),
    "8000 tokens, glibc's defaults (freed returned)": (8000, None, {}),
    "8000 tokens, MALLOC_ARENA_MAX=1": (8000, 32, {"MALLOC_ARENA_MAX": "1"}),
    "8000 tokens, plain weights kept beside oneDNN's": (8000, 32, {"BENCH_PLAIN_WEIGHTS": "1"}),
    "4000 tokens": (4000, 32, {}),
    "2000 tokens": (2000, 32, {}),
}

PROBE = r"""
import ctypes, json, sys, threading, time
from pathlib import Path
model, batch, threshold, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def rss(field):
    line = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field)]
    return int(line[0].split()[1]) // 1024

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
def heap():
    m = libc.mallinfo2()
    return {"heap": (m.arena + m.hblkhd) >> 20, "in_use": (m.uordblks + m.hblkhd) >> 20,
            "free_kept": m.fordblks >> 20}

import os
import torch
from mtcli.config import DecodeConfig
import mtcli.device as device
from mtcli.engines.loading import decoding_only
from mtcli.engines.translator import Translator, quantize_int8
from mtcli.store.checkpoint import load_model
torch.set_num_threads(2)
device.limit_kernel_caches()
if threshold:  # 0: glibc's own defaults, as a library caller that never asks would have
    device.MMAP_THRESHOLD = threshold << 20
    device.keep_freed_memory()
record = {"imports_mb": rss("VmRSS:")}
loaded = load_model(model)
if os.environ.get("BENCH_INT8"):  # --quantize int8
    quantize_int8(loaded.model)
elif not os.environ.get("BENCH_PLAIN_WEIGHTS"):  # mtcli translate keeps only the packed copies
    decoding_only(loaded)
t = Translator(loaded.model, loaded.tokenizer, DecodeConfig(beam_size=5, batch_tokens=batch))
record["loaded_mb"], record["loaded_heap"] = rss("VmRSS:"), heap()
lines = Path(src).read_text(encoding="utf-8").splitlines()
peak, done = [0], [False]
def sample():
    while not done[0]:
        peak[0] = max(peak[0], heap()["in_use"])
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
t.translate_chunk(lines[:50])  # warm-up, as bench/ct2.py: first-call costs out of the timing
start = time.perf_counter()
for i in range(0, len(lines), 1000):
    t.translate_chunk(lines[i:i + 1000])
record["decode_s"] = time.perf_counter() - start
done[0] = True
record.update(end_mb=rss("VmRSS:"), peak_mb=rss("VmHWM:"), end_heap=heap(), peak_in_use_mb=peak[0])
print(json.dumps(record))
"""


def probe(name: str, src: Path) -> dict:
    batch, threshold, env = SETTINGS[name]
    args = [sys.executable, "-c", PROBE, str(SHIPPED), str(batch), str(threshold or 0), str(src)]
    env = {**os.environ, **env}
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=REPO, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    """Fastest decode time; the median of every memory figure."""
    med = lambda key: round(statistics.median(r[key] for r in runs))  # noqa: E731
    heaps = {k: round(statistics.median(r["end_heap"][k] for r in runs)) for k in runs[0]["end_heap"]}  # fmt: skip
    return {
        "decode_s": round(min(r["decode_s"] for r in runs), 2),
        "imports_mb": med("imports_mb"), "loaded_mb": med("loaded_mb"), "end_mb": med("end_mb"),
        "peak_mb": med("peak_mb"), "peak_minus_imports_mb": med("peak_mb") - med("imports_mb"),
        "peak_in_use_mb": med("peak_in_use_mb"), "end_heap_mb": heaps,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    src = SHARED / "tatoeba-en-zh" / "test.en"
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name in SETTINGS:
            runs[name].append(probe(name, src))
    results = {name: summary(r) for name, r in runs.items()}
    base = results["8000 tokens, own mappings from 32 MiB (default)"]["decode_s"]
    for r in results.values():
        r["time_vs_default"] = round(r["decode_s"] / base, 3)
    record = {"model": "models/en-zh-tiny", "lines": 2000, "beam": 5, "rounds": args.rounds}
    record["results"] = results
    write_result("memory", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
