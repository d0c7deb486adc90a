"""Where each engine's decode time goes: the projections' matmuls, timed by oneDNN itself,
against the rest of the pass. Both engines run their fp32 matmuls in oneDNN (mtcli through
torch's packed inner product, CTranslate2 through oneDNN's sgemm, which it links), and with
ONEDNN_VERBOSE=1 oneDNN prints every execution with its shape and time.

    python bench/ct2_matmuls.py [--lines 2000] [--threads 2]

The processes are bench/ct2.py's (the same model, lines, budget and threads; one per engine
and setting, fp32, beam 5 and greedy), counted from their timed pass on. Projections are the
products with the model's width or feed-forward width as their inner dimension (QKV, output
and feed-forward projections, cross-attention keys/values, the vocabulary projection);
CTranslate2's attention products (one small sgemm per sentence and head) are left out, as
mtcli's attention is not oneDNN's. Verbose output slows a process, CTranslate2's most (a line
per attention product), so read the seconds as oneDNN's timer under that load, and the wall
times as slower than bench/ct2.py's. Writes bench/results/ct2_matmuls.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHIPPED, write_result  # noqa: E402
from bench.ct2 import ENGINE_SCRIPT, engine_args, prepare  # noqa: E402
from mtcli.store.model_dir import CONFIG_FILE, model_config, read_config  # noqa: E402

# "24x256:256x768" (CTranslate2's sgemm: M x K : K x N) or "mb640ic256oc768" (an inner product)
GEMM = re.compile(r"^(\d+)x(\d+):\d+x(\d+)$")
INNER_PRODUCT = re.compile(r"^mb(\d+)ic(\d+)oc(\d+)")


def matmul_shape(line: str) -> tuple[int, int, int] | None:
    """(M, K, N) of a oneDNN verbose line that executed a matmul, else None."""
    fields = line.rstrip().split(",")
    if "exec" not in fields or len(fields) < 3:
        return None
    match = GEMM.match(fields[-2]) or INNER_PRODUCT.match(fields[-2])
    return tuple(map(int, match.groups())) if match else None


def projections(stdout: str, widths: set[int]) -> dict:
    """Calls, GFLOP and oneDNN's seconds of the matmuls whose inner dimension is in `widths`,
    from the line "timed pass" on; and the pass's wall time (the script's last line)."""
    lines = stdout.splitlines()
    start = lines.index("timed pass")
    calls, flop, ms = 0, 0, 0.0
    for line in lines[start:]:
        shape = matmul_shape(line)
        if shape and shape[1] in widths:
            M, K, N = shape
            calls, flop, ms = calls + 1, flop + 2 * M * K * N, ms + float(line.rsplit(",", 1)[1])
    wall = float(lines[-1].split()[0])
    seconds = ms / 1000
    return {
        "projection_calls": calls,
        "projection_gflop": round(flop / 1e9),
        "projection_s": round(seconds, 2),
        "projection_gflop_per_s": round(flop / 1e9 / seconds) if seconds else None,
        "pass_s": round(wall, 2),
        "rest_s": round(wall - seconds, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    lines, exported, src = prepare(args.lines)
    cfg = model_config(read_config(SHIPPED), SHIPPED / CONFIG_FILE)
    # attention products have the head width or a sequence length (below max_positions,
    # 256, so below both widths) as their inner dimension: they are not counted
    widths = {cfg.d_model, cfg.d_ff}
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    record: dict = {"lines": len(lines), "threads": args.threads}
    for name in ("beam5_fp32", "greedy_fp32"):
        for engine, model in (("mtcli", SHIPPED), ("ctranslate2", exported)):
            out = subprocess.run(
                [sys.executable, "-c", ENGINE_SCRIPT, *engine_args(engine, model, name, args.threads, src)],
                check=True, capture_output=True, text=True, cwd=REPO, env=env,
            )  # fmt: skip
            record.setdefault(name, {})[engine] = projections(out.stdout, widths)
            print(name, engine, record[name][engine], file=sys.stderr, flush=True)
    write_result("ct2_matmuls", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
