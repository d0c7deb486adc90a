"""Helpers shared by the benchmarks: paths, timing, peak memory, JSON results."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
RESULTS = REPO / "bench" / "results"
SHIPPED = REPO / "models" / "en-zh-tiny"


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def write_result(name: str, record: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def read_lines(path: Path, n: int | None = None) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[:n] if n else lines
