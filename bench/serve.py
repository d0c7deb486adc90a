"""Serving throughput: the Tatoeba test lines through `mtcli serve`, one line per request, sent
by 32 concurrent clients, and then one request at a time to a server started with
`--batch-wait-ms 0`: alone, a request has nobody to wait for, so the sequential baseline does
not pay the batching window on every line (the same lines, the same model). Each server is
warmed by one untimed concurrent pass over the lines first.

    python bench/serve.py [--lines 2000] [--clients 32]

Reports the throughput ratio (what dynamic batching buys), p50/p99 latency, failed requests
and the server's peak RSS. Writes bench/results/serve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, read_lines, write_result  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtcli", "serve", "-m", "en-zh-tiny", "--port", str(port),
         "--queue-size", "256", *extra],
        cwd=REPO, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/health"
    for _ in range(600):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


def peak_rss_mb(pid: int) -> float:
    """VmHWM of another process: its peak resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def send(url: str, lines: list[str], clients: int) -> tuple[float, list[float], int]:
    """Every line as its own request, `clients` at a time; (seconds, latencies, failures)."""
    todo = list(enumerate(lines))
    latencies: list[float] = []
    failures = 0

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal failures
        while todo:
            _, line = todo.pop()
            start = time.perf_counter()
            r = await c.post("/translate", json={"q": line, "source": "en", "target": "zh"})
            latencies.append(time.perf_counter() - start)
            failures += r.status_code != 200

    start = time.perf_counter()
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        await asyncio.gather(*(client(c) for _ in range(clients)))
    return time.perf_counter() - start, latencies, failures


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    args = ap.parse_args()
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", args.lines)
    results, stats, rss = {}, {}, {}
    # name: (clients, the server's flags)
    runs = {
        "concurrent": (args.clients, ()),
        "sequential_no_batch_wait": (1, ("--batch-wait-ms", "0")),
    }
    for name, (clients, flags) in runs.items():
        port = _free_port()
        server = start_server(port, *flags)
        url = f"http://127.0.0.1:{port}"
        try:
            # warm-up, the same for both servers: every line once, concurrently (oneDNN makes a
            # kernel per new shape; a cold server at one line a request paid that in its timing)
            asyncio.run(send(url, lines, args.clients))
            seconds, latencies, failures = asyncio.run(send(url, lines, clients))
            results[name] = {
                "clients": clients, "server_flags": " ".join(flags), "seconds": round(seconds, 2),
                "lines_per_s": round(len(lines) / seconds, 1),
                "p50_ms": round(1000 * percentile(latencies, 50), 1),
                "p99_ms": round(1000 * percentile(latencies, 99), 1), "failed": failures,
            }  # fmt: skip
            stats[name] = httpx.get(url + "/health").json()
            rss[name] = peak_rss_mb(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)
    record = {
        "lines": len(lines),
        "results": results,
        "throughput_ratio": round(
            results["concurrent"]["lines_per_s"]
            / results["sequential_no_batch_wait"]["lines_per_s"],
            2,
        ),  # fmt: skip
        "batches": stats["concurrent"].get("batches"),
        "requests": stats["concurrent"].get("jobs"),
        "server_peak_rss_mb": round(rss["concurrent"]),
    }
    write_result("serve", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
