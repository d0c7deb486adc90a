"""`mtcli serve` under clients a network has: distinct decode settings on every request, and a
soak of valid, bad and slow clients together.

    python bench/serve_hostile.py settings [--requests 10000]   # both engines
    python bench/serve_hostile.py soak [--minutes 10] [--clients 64]

settings: RSS after 100 and after N /v1 requests, each with its own length_penalty (the
translator cache was keyed by settings and never evicted: 100 settings took a CTranslate2
server from 208 MB to 6.2 GB). soak: p50/p99 of the valid requests, failed valid requests, RSS
after the first minute and at the end, and a SIGTERM with requests in flight (exit code).
Writes bench/results/serve_hostile.json (each part its own key).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, RESULTS, SHARED, SHIPPED, read_lines  # noqa: E402
from bench.serve import _free_port, percentile  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(*args: str) -> tuple[subprocess.Popen, str]:
    """The server, its log into a file (a pipe nobody reads fills after ~1,500 log lines, and
    the server then waits on it: a harness that did so measured 23 s stalls of its own)."""
    port = _free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="mtcli-serve-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtcli", "serve", "--port", str(port), *args],
        cwd=REPO, stderr=log, text=True,
    )  # fmt: skip
    proc.log_path = log.name
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


async def distinct_settings(url: str, lines: list[str], start_at: int, n: int) -> int:
    """`n` /v1 requests, request i with length_penalty (start_at + i) / 10,000; failures."""
    failures = 0
    todo = list(range(start_at, start_at + n))

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal failures
        while todo:
            i = todo.pop()
            body = {"lines": [lines[i % len(lines)]], "length_penalty": i / 10_000, "beam_size": 2}
            r = await c.post("/v1/translate", json=body)
            failures += r.status_code != 200

    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        await asyncio.gather(*(client(c) for _ in range(8)))
    return failures


def settings(requests: int) -> dict:
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", 2000)
    export = Path(tempfile.mkdtemp()) / "ct2"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mtcli",
            "export",
            "--format",
            "ctranslate2",
            str(SHIPPED),
            "--out",
            str(export),
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    out = {}
    for engine, args in (
        ("mtcli", ["-m", str(SHIPPED)]),
        ("ctranslate2", ["--engine", "ctranslate2", "-m", str(export)]),
    ):
        proc, url = start(*args)
        try:
            failed = asyncio.run(distinct_settings(url, lines, 0, 100))
            after_100 = rss_mb(proc.pid)
            started = time.monotonic()
            failed += asyncio.run(distinct_settings(url, lines, 100, requests - 100))
            after_n = rss_mb(proc.pid)
            out[engine] = {
                "rss_after_100_mb": round(after_100), f"rss_after_{requests}_mb": round(after_n),
                "growth": round(after_n / after_100 - 1, 3), "failed": failed,
                "seconds": round(time.monotonic() - started, 1),
            }  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        print(engine, out[engine], flush=True)
    return {"requests": requests, "results": out}


# ---------------------------------------------------------------- the soak
BAD = [
    b'{"q": [[[[[[', b'{"q": "a", "target": "zh", "targte": "x"}', b'{"q": 5, "target": "zh"}',
    b'{"q": "a", "target": "zh", "alternatives": -4}', b"\xff\xfe garbage",
    json.dumps({"q": ["a"] * 200, "target": "zh"}).encode(),
]  # fmt: skip


async def _slow(port: int, rng: random.Random) -> None:
    """A client that sends its headers and part of a body, waits, then finishes or leaves."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"q": "Why do we work?", "source": "en", "target": "zh"}).encode()
    writer.write(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])  # fmt: skip
    await writer.drain()
    await asyncio.sleep(rng.uniform(0.5, 15))  # some past the server's 10 s deadline
    try:
        if rng.random() < 0.5:
            writer.write(body[5:])
            await writer.drain()
            await asyncio.wait_for(reader.read(1), 30)
    except (TimeoutError, OSError):
        pass
    writer.close()


async def _soak(
    url: str, port: int, lines: list[str], clients: int, seconds: float, pid: int
) -> dict:
    rng = random.Random(7)
    latencies: list[float] = []
    counts = {"valid": 0, "failed_valid": 0, "bad": 0, "bad_5xx": 0, "slow": 0}
    rss_first_minute: list[float] = []
    end = time.monotonic() + seconds

    async def client(c: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            roll = rng.random()
            if roll < 0.1:
                counts["slow"] += 1
                await _slow(port, rng)
            elif roll < 0.3:
                r = await c.post(
                    "/translate",
                    content=rng.choice(BAD),
                    headers={"content-type": "application/json"},
                )
                counts["bad"] += 1
                counts["bad_5xx"] += r.status_code >= 500
            else:
                start = time.perf_counter()
                r = await c.post(
                    "/translate", json={"q": rng.choice(lines), "source": "en", "target": "zh"}
                )
                latencies.append(time.perf_counter() - start)
                counts["valid"] += 1
                counts["failed_valid"] += r.status_code != 200

    async def watch() -> None:
        await asyncio.sleep(60)
        rss_first_minute.append(rss_mb(pid))

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        await asyncio.gather(watch(), *(client(c) for _ in range(clients)))
    return {
        **counts, "p50_ms": round(1000 * percentile(latencies, 50), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "rss_after_1_min_mb": round(rss_first_minute[0]) if rss_first_minute else None,
        "rss_at_end_mb": round(rss_mb(pid)),
    }  # fmt: skip


async def _in_flight(url: str, lines: list[str]) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        return [
            r.status_code
            for r in await asyncio.gather(
                *(
                    c.post("/translate", json={"q": line, "source": "en", "target": "zh"})
                    for line in lines
                )
            )  # fmt: skip
        ]


def soak(minutes: float, clients: int) -> dict:
    lines = read_lines(SHARED / "tatoeba-en-zh" / "test.en", 2000)
    proc, url = start("-m", str(SHIPPED), "--queue-size", "256")
    port = int(url.rsplit(":", 1)[1])
    record = asyncio.run(_soak(url, port, lines, clients, minutes * 60, proc.pid))

    async def stop_with_requests_in_flight() -> list[int]:
        task = asyncio.create_task(_in_flight(url, lines[:64]))
        await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        return await task

    statuses = asyncio.run(stop_with_requests_in_flight())
    proc.wait(timeout=120)
    err = Path(proc.log_path).read_text()
    record.update(
        minutes=minutes, clients=clients, in_flight_at_sigterm=len(statuses),
        in_flight_answered_200=statuses.count(200), exit_code=proc.returncode,
        tracebacks_in_log=err.count("Traceback"), internal_errors_in_log=err.count("internal error"),
    )  # fmt: skip
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["settings", "soak"])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=64)
    args = ap.parse_args()
    path = RESULTS / "serve_hostile.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    if args.part == "settings":
        results["settings"] = settings(args.requests)
    else:
        results["soak"] = soak(args.minutes, args.clients)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(results[args.part], indent=2))


if __name__ == "__main__":
    main()
