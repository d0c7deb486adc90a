"""A real `mtcli serve` under 2,000 slow clients (headers that promise a body that never comes):
all are closed by the request deadline, the connections held stay under their cap, a normal
client is answered meanwhile in well under a second, and the descriptors come back to where
they were. In `make e2e` (which .ci/run runs): it opens 2,000 sockets."""

from __future__ import annotations

import math
import os
import socket
import time

import httpx
import pytest

from tests.test_serve import _Server

pytestmark = pytest.mark.e2e
SLOW, DEADLINE, CAP = 2000, 10.0, 1000  # the server's default deadline and cap


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _slow_client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100000\r\n\r\n{")  # fmt: skip
    return s


def _closed(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_slow_clients_are_closed_and_cannot_starve_the_others():
    server = _Server("-m", "en-zh-tiny")
    try:
        pid, port = server.proc.pid, server.port
        baseline = _descriptors(pid)
        q = {"q": "Why do we work?", "source": "en", "target": "zh"}
        slow, started = [_slow_client(port) for _ in range(SLOW)], time.monotonic()
        latencies, held = [], 0
        with httpx.Client(timeout=10) as client:  # a normal client, meanwhile
            while time.monotonic() - started < DEADLINE - 0.2:
                t = time.monotonic()
                r = client.post(server.url + "/translate", json=q)
                latencies.append(time.monotonic() - t)
                assert r.status_code == 200 and r.json()["translatedText"] == "我们为什么工作？"
                held = max(held, _descriptors(pid) - baseline)
        time.sleep(max(0.0, DEADLINE + 1 - (time.monotonic() - started)))
        closed = sum(_closed(s) for s in slow)
        for s in slow:
            s.close()
        time.sleep(0.5)
        after = _descriptors(pid) - baseline
    finally:
        code, err = server.stop()
    # the first request queues behind the accepting of the 2,000 connections opened a moment
    # before (1.3-2.8 s here; always request 0): bounded on its own, the rest by their p99
    first, latencies = latencies[0], sorted(latencies[1:])
    p99 = latencies[math.ceil(0.99 * len(latencies)) - 1]  # nearest rank
    print(f"held at most {held} of {SLOW} slow connections (cap {CAP}); {len(latencies)} requests "
          f"meanwhile, the first {first:.3f} s, then p50 {latencies[len(latencies) // 2]:.3f} s, p99 {p99:.3f} s, "
          f"max {latencies[-1]:.3f} s; closed by the deadline {closed}/{SLOW}; "
          f"descriptors after {after:+d}")  # fmt: skip
    assert held <= CAP + 20  # the cap, and the descriptors of connections being dropped
    assert p99 < 1.0
    assert first < 5.0
    assert closed == SLOW
    assert after <= 2
    assert code == 0, err
