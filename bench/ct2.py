"""mtcli's decoder beside CTranslate2 on the same weights (the shipped en-zh-tiny, exported
exactly), same lines, same threads: decode time without start-up, start-up, peak memory.

    python bench/ct2.py [--lines 2000] [--threads 2] [--rounds 3]

Decode times: each setting translates the Tatoeba test lines in this process after a warm-up;
settings are interleaved over `rounds` and each keeps its fastest round. Start-up: the whole
`mtcli translate "Why do we work?"` process, beside `python -c "import torch"`. Peak RSS: a
fresh process per setting translating every line. Writes bench/results/ct2.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, read_lines, write_result  # noqa: E402
from mtcli.checkpoint import load_model  # noqa: E402
from mtcli.config import DecodeConfig  # noqa: E402
from mtcli.ct2_engine import CT2Translator  # noqa: E402
from mtcli.ct2_export import export_ctranslate2  # noqa: E402
from mtcli.translate import Translator, quantize_int8  # noqa: E402

SETTINGS = {  # name: (beam size, int8)
    "beam5_fp32": (5, False),
    "greedy_fp32": (1, False),
    "beam5_int8": (5, True),
}

RSS_SCRIPT = """
import sys
from pathlib import Path
engine, model, beam, int8, threads, src = sys.argv[1:7]
lines = Path(src).read_text(encoding="utf-8").splitlines()
from mtcli.config import DecodeConfig
cfg = DecodeConfig(beam_size=int(beam))
if engine == "ctranslate2":
    from mtcli.ct2_engine import CT2Translator
    t = CT2Translator(Path(model), cfg, threads=int(threads), quantize="int8" if int8 == "1" else "none")
else:
    import torch
    torch.set_num_threads(int(threads))
    from mtcli.checkpoint import load_model
    from mtcli.translate import Translator, quantize_int8
    loaded = load_model(model)
    net = quantize_int8(loaded.model) if int8 == "1" else loaded.model
    del loaded.model
    t = Translator(net, loaded.tokenizer, cfg)
for chunk in range(0, len(lines), 1000):
    t.translate_chunk(lines[chunk:chunk + 1000])
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's
hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")]
print(int(hwm[0].split()[1]) / 1024)
"""


def engines(exported: Path, threads: int) -> dict:
    torch.set_num_threads(threads)
    loaded = load_model(SHIPPED)
    int8 = quantize_int8(load_model(SHIPPED).model)
    made = {}
    for name, (beam, quantized) in SETTINGS.items():
        cfg = DecodeConfig(beam_size=beam)
        made[("mtcli", name)] = Translator(int8 if quantized else loaded.model, loaded.tokenizer, cfg)  # fmt: skip
        made[("ctranslate2", name)] = CT2Translator(
            exported, cfg, threads=threads, quantize="int8" if quantized else "none"
        )
    return made


def seconds(translator, lines: list[str]) -> float:
    start = time.perf_counter()
    for i in range(0, len(lines), 1000):
        translator.translate_chunk(lines[i : i + 1000])
    return time.perf_counter() - start


def startup(args: list[str], repeats: int = 3) -> float:
    """Fastest of `repeats` whole-process runs, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, cwd=REPO)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", args.lines)
    work = Path(tempfile.mkdtemp(prefix="mtcli-bench-ct2-"))
    exported = export_ctranslate2(SHIPPED, work / "en-zh-tiny-ct2")
    src = work / "test.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")

    made = engines(exported, args.threads)
    for t in made.values():  # warm-up: first-call costs out of the timings
        t.translate_chunk(lines[:50])
    best = dict.fromkeys(made, float("inf"))
    for _ in range(args.rounds):
        for key, t in made.items():
            best[key] = min(best[key], seconds(t, lines))
    decode = {
        name: {
            "mtcli_s": round(best[("mtcli", name)], 2),
            "ctranslate2_s": round(best[("ctranslate2", name)], 2),
            "mtcli_vs_ct2": round(best[("ctranslate2", name)] / best[("mtcli", name)], 3),
        }
        for name in SETTINGS
    }
    py = sys.executable
    start = {
        "import_torch_s": round(startup([py, "-c", "import torch"]), 3),
        "mtcli_s": round(
            startup([py, "-m", "mtcli", "translate", "-m", str(SHIPPED), "Why do we work?"]), 3
        ),  # fmt: skip
        "ctranslate2_engine_s": round(
            startup(
                [
                    py,
                    "-m",
                    "mtcli",
                    "translate",
                    "--engine",
                    "ctranslate2",
                    "-m",
                    str(exported),
                    "Why do we work?",
                ]
            ),
            3,
        ),  # fmt: skip
    }
    rss = {}
    for engine, model in (("mtcli", SHIPPED), ("ctranslate2", exported)):
        for name in ("beam5_fp32", "beam5_int8"):
            beam, int8 = SETTINGS[name]
            out = subprocess.run(
                [py, "-c", RSS_SCRIPT, engine, str(model), str(beam), str(int(int8)), str(args.threads), str(src)],
                check=True, capture_output=True, text=True, cwd=REPO,
            )  # fmt: skip
            rss[f"{engine}_{name}_mb"] = round(float(out.stdout.strip().splitlines()[-1]))
    record = {
        "lines": len(lines),
        "threads": args.threads,
        "decode": decode,
        "startup": {
            **start,
            "mtcli_minus_import_torch_s": round(start["mtcli_s"] - start["import_torch_s"], 3),
        },  # fmt: skip
        "peak_rss": rss,
    }
    write_result("ct2", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
