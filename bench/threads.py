"""The default thread count on an idle machine and beside a CPU-bound process: whole
`mtcli translate` processes over the same test lines, each setting interleaved in one run.

    python bench/threads.py [--lines 300] [--rounds 2]

Settings: the default (threads from the idle CPUs, OpenMP's spin count lowered: device.py),
--threads 1, and all CPUs with OpenMP's own spin count (what the default was before). The
ratio that matters: the default beside a busy process against --threads 1 there (1.0x: the
default degrades to what one thread does), and the default idle against all CPUs idle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, write_result  # noqa: E402

BUSY = "while True: pass"  # one core held, as another job on a laptop holds it
SETTINGS = {
    "default": ([], {}),
    "threads 1": (["--threads", "1"], {}),
    # what the default was: every CPU, libgomp's own 300,000 spins
    "all CPUs, OpenMP's spin": (["--threads", str(os.cpu_count() or 2)], {"GOMP_SPINCOUNT": "300000"}),
}  # fmt: skip


def _test_lines(n: int, folder: Path) -> Path:
    """The first `n` lines of the prepared Tatoeba test split, else of the raw corpus."""
    prepared = REPO / "data" / "tatoeba" / "test.src"
    source = prepared if prepared.is_file() else SHARED / "tatoeba-en-zh" / "test.src"
    lines = source.read_text(encoding="utf-8").splitlines()[:n]
    path = folder / "lines.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _seconds(lines: Path, args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mtcli", "translate", "-q", "-i", str(lines), *args],
        check=True, stdout=subprocess.DEVNULL, cwd=REPO, env={**os.environ, **env},
    )  # fmt: skip
    return time.perf_counter() - start


def _round(lines: Path) -> dict[str, float]:
    return {name: _seconds(lines, args, env) for name, (args, env) in SETTINGS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lines = _test_lines(args.lines, Path(tmp))
        _seconds(lines, [], {})  # the page cache and bytecode warm
        idle, busy = [], []
        for _ in range(args.rounds):
            idle.append(_round(lines))
            hog = subprocess.Popen([sys.executable, "-c", BUSY])
            try:
                time.sleep(0.5)
                busy.append(_round(lines))
            finally:
                hog.kill()
                hog.wait()
    best = lambda runs: {k: round(min(r[k] for r in runs), 3) for k in SETTINGS}  # noqa: E731
    idle_s, busy_s = best(idle), best(busy)
    record = {
        "lines": args.lines,
        "cpus": os.cpu_count(),
        "idle_s": idle_s,
        "busy_s": busy_s,
        "busy_default_vs_threads_1": round(busy_s["default"] / busy_s["threads 1"], 2),
        "busy_old_default_vs_threads_1": round(
            busy_s["all CPUs, OpenMP's spin"] / busy_s["threads 1"], 2
        ),
        "idle_default_vs_all_cpus": round(idle_s["default"] / idle_s["all CPUs, OpenMP's spin"], 2),
    }
    print(write_result("threads", record))


if __name__ == "__main__":
    main()
