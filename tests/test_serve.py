"""`mtcli serve`: the LibreTranslate-compatible API, mtcli's own, limits and errors, dynamic
batching under concurrency, backpressure, graceful shutdown, and a disconnecting client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from mtcli.config import DecodeConfig
from mtcli.serving.app import Models, ServeConfig, Served, create_app, mtcli_served
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, copy_sentences, free_port, reference_translations, wait_ready


def _models(path: Path, delay: float = 0.0) -> Models:
    def load():
        time.sleep(delay)
        loaded = load_model(path)
        loaded.config["src_lang"], loaded.config["tgt_lang"] = "en", "zh"
        return [mtcli_served("letters", loaded, "cpu")]

    return Models(load)


@pytest.fixture(scope="module")
def serving_forks():
    """`mtcli serve` processes forked from a parent that imported torch and the server once."""
    from tests.forked import SERVING, ForkServer

    server = ForkServer(SERVING)
    yield server
    server.close()


@pytest.fixture
def client(copy_model_dir):
    logs: list[str] = []
    app = create_app(
        _models(copy_model_dir), ServeConfig(max_lines=8, max_chars=200, max_body=4096), logs.append
    )
    with TestClient(app) as c:
        c.logs = logs
        assert wait_ready(c)
        yield c


def test_libretranslate_shapes(client, copy_model_dir, copy_lines):
    """q as a string or a list, JSON or form bodies (urlencoded and multipart), auto source with
    detectedLanguage, alternatives from the n-best list; the answer has q's shape."""
    a, b = copy_lines[:2]
    want = reference_translations(copy_model_dir, [a, b])
    r = client.post("/translate", json={"q": a, "source": "en", "target": "zh"})
    assert r.status_code == 200 and r.json() == {"translatedText": want[0]}
    r = client.post("/translate", json={"q": [a, b], "source": "en", "target": "zh"})
    assert r.json() == {"translatedText": want}
    r = client.post("/translate", data={"q": a, "source": "en", "target": "zh"})
    assert r.json() == {"translatedText": want[0]}
    r = client.post("/translate", files={"q": (None, a), "source": (None, "en"), "target": (None, "zh")})  # fmt: skip
    assert r.json() == {"translatedText": want[0]}
    r = client.post(
        "/translate", json={"q": f"{a}\n{b}", "source": "auto", "target": "zh", "alternatives": 2}
    )
    body = r.json()
    assert body["translatedText"] == "\n".join(want)
    detected = body["detectedLanguage"]  # letters of no language: English, not surely
    assert detected["language"] == "en" and 0 < detected["confidence"] < 100
    assert client.get("/languages").json() == [{"code": "en", "name": "English", "targets": ["zh"]}]


def test_v1_translate_fields(client, copy_model_dir, copy_lines):
    """n-best sorted by score, word alignments, and an attention matrix whose rows (target
    tokens + EOS) each sum to 1 over the source tokens + EOS; emoji passes through."""
    line = copy_lines[3]
    r = client.post(
        "/v1/translate", json={"lines": [line, "🙂"], "nbest": 3, "align": True, "attention": True}
    )
    assert r.status_code == 200, r.text
    first, emoji = r.json()["translations"]
    assert first["translation"] == reference_translations(copy_model_dir, [line])[0]
    scores = [h["score"] for h in first["nbest"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert first["alignment"] and first["model"] == "letters"
    att = first["attention"]
    assert len(att["weights"]) == len(att["target_tokens"]) and att["source_tokens"][-1] == "</s>"
    assert all(
        len(row) == len(att["source_tokens"]) and abs(sum(row) - 1) < 1e-3 for row in att["weights"]
    )
    assert emoji["translation"] == "🙂" and "model" not in emoji


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("request_kwargs", "status", "message"),
    [
        (
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
            400,
            "not valid JSON",
        ),  # fmt: skip
        ({"json": {"source": "en", "target": "zh"}}, 400, "missing q"),
        (  # valid JSON, not text: a lone surrogate (an internal error and a traceback before)
            {"content": rb'{"q": "ok \ud800", "source": "en", "target": "zh"}', "headers": JSON},
            400,
            "line 1 is not valid Unicode (byte 4)",
        ),  # fmt: skip
        ({"json": {"q": 3, "target": "zh"}}, 400, "q must be a string"),
        ({"json": {"q": "a", "source": "en", "target": "de"}}, 400, "no model translates en->de"),
        ({"json": {"q": "a", "source": "en"}}, 400, "missing target"),
        (
            {"json": {"q": "a", "source": "en", "target": "zh", "format": "markdown"}},
            400,
            "format 'markdown' is not supported; use text or html",
        ),  # fmt: skip
        ({"json": {"q": ["a"] * 9, "source": "en", "target": "zh"}}, 413, "9 lines in one request"),
        ({"json": {"q": "a" * 201, "source": "en", "target": "zh"}}, 413, "201 characters"),
        ({"json": {"q": "a" * 5000, "source": "en", "target": "zh"}}, 413, "at most 4096"),
    ],
)
def test_libretranslate_errors_are_one_clear_message(client, request_kwargs, status, message):
    """Each mistake: a 4xx JSON {"error": ...} naming it, and the server stays healthy."""
    r = client.post("/translate", **request_kwargs)
    assert r.status_code == status and message in r.json()["error"], r.text
    assert client.get("/health").status_code == 200


def test_an_internal_error_is_a_500_and_one_log_line(capsys):
    """A failure that is not the client's: a JSON 500 naming its kind, one log line with the
    message, no traceback (uvicorn printed one when the exception left the app)."""

    def broken(cfg, wanted):
        raise RuntimeError("boom")

    logs: list[str] = []
    models = Models(lambda: [Served("broken", "en", "zh", broken, len)])
    app = create_app(models, ServeConfig(), logs.append)
    with TestClient(app) as c:
        assert wait_ready(c)
        r = c.post("/translate", json={"q": "a", "source": "en", "target": "zh"})
        assert c.get("/health").status_code == 200
    assert r.status_code == 500 and r.json() == {"error": "internal error: RuntimeError"}
    failed = [line for line in logs if " 500 " in line]
    assert len(failed) == 1 and failed[0].startswith("POST /translate 500 lines=1 "), logs
    assert failed[0].endswith(" internal error: RuntimeError: boom (MTCLI_DEBUG=1 shows where)")
    assert "Traceback" not in capsys.readouterr().err


def test_v1_errors_and_the_request_log(client):
    """A bad field is one message; nbest above the beam is refused; one log line per request."""
    r = client.post("/v1/translate", json={"lines": "not a list"})
    assert r.status_code == 400 and r.json()["error"].startswith("lines:")
    r = client.post("/v1/translate", json={"lines": ["a"], "beam_size": 2, "nbest": 3})
    assert r.status_code == 400 and r.json()["error"] == "nbest 3: must not exceed beam_size (2)"
    r = client.post("/v1/translate", json={"lines": ["a"], "model": "nope"})
    assert r.status_code == 400 and "no model named 'nope'" in r.json()["error"]
    r = client.post(
        "/v1/translate", content=b'{"lines": ["a"], "length_penalty": NaN}', headers=JSON
    )
    assert (
        r.status_code == 400
        and r.json()["error"] == "length_penalty: Input should be a finite number"
    )
    assert [line.split()[:3] for line in client.logs[-4:]] == [["POST", "/v1/translate", "400"]] * 4


def test_v1_takes_libretranslates_q_and_names_the_shape_it_expects(client, copy_lines):
    """{"q": ...} answered `lines: Field required`: q (a text of lines, or a list) is taken as
    the lines; a body with neither names the shape; both at once is refused."""
    lines = copy_lines[:2]
    by_lines = client.post("/v1/translate", json={"lines": lines}).json()["translations"]
    for q in ("\n".join(lines), lines):
        r = client.post("/v1/translate", json={"q": q})
        assert r.status_code == 200 and r.json()["translations"] == by_lines, r.text
    r = client.post("/v1/translate", json={"text": "a"})
    assert r.status_code == 400 and '{"lines": ["a line", ...]}' in r.json()["error"]
    r = client.post("/v1/translate", json={"q": "a", "lines": ["a"]})
    assert r.status_code == 400 and "lines or q" in r.json()["error"]


def test_api_key(copy_model_dir):
    """With --api-key, a missing or wrong key is 403 (compared in constant time, hmac); the
    right one (field or header) passes."""
    app = create_app(_models(copy_model_dir), ServeConfig(api_key="s3cret"))
    with TestClient(app) as c:
        assert wait_ready(c)
        q = {"q": "a b", "source": "en", "target": "zh"}
        assert c.post("/translate", json=q).status_code == 403
        assert c.post("/translate", json={**q, "api_key": "guess"}).json()["error"] == "invalid API key"  # fmt: skip
        assert c.post("/translate", json={**q, "api_key": "s3cret"}).status_code == 200
        assert (
            c.post(
                "/v1/translate", json={"lines": ["a"]}, headers={"X-API-Key": "s3cret"}
            ).status_code
            == 200
        )
        # a machine-readable reason (the page asks for the key on it); a key of the wrong type
        # is only wrong; the header serves LibreTranslate's routes too
        assert c.post("/translate", json=q).json()["reason"] == "api_key_required"
        wrong_type = {**q, "api_key": ["s3cret"]}
        assert c.post("/translate", json=wrong_type).json()["reason"] == "api_key_invalid"
        assert c.post("/translate", json=q, headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.post("/detect", json={"q": "a b"}).status_code == 403


def test_health_waits_for_the_models(copy_model_dir):
    """While the models load, /health and translation answer 503 with Retry-After."""
    app = create_app(_models(copy_model_dir, delay=1.0), ServeConfig())
    with TestClient(app) as c:
        r = c.get("/health")
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        r = c.post("/translate", json={"q": "a", "source": "en", "target": "zh"})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert wait_ready(c)


def test_a_full_queue_answers_503_with_retry_after(copy_model_dir):
    """Queue of 1 and a slow worker: of many requests at once some are refused (503,
    Retry-After), none waits forever, and every one that was accepted is answered."""
    models = _models(copy_model_dir)
    slow = models.translate
    models.translate = lambda key, lines: (time.sleep(0.3), slow(key, lines))[1]
    app = create_app(models, ServeConfig(queue_size=1, batch_wait_ms=0))

    async def burst():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            q = {"q": "a b", "source": "en", "target": "zh"}
            return await asyncio.gather(*(c.post("/translate", json=q) for _ in range(8)))

    with TestClient(app) as c:  # runs the lifespan: the batcher starts
        assert wait_ready(c)
        app.state.batcher = app.state.batcher  # the same app, driven concurrently below
        responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    assert 503 in codes and 200 in codes, codes
    assert all(r.headers.get("Retry-After") == "1" for r in responses if r.status_code == 503)


# ---------------------------------------------------------------- a real uvicorn process
class _Server:
    """`mtcli serve` in a process of its own on a free port; stderr is collected for the log
    lines. `forks`: forked from a warm parent (tests/forked.py) instead of a fresh Python."""

    def __init__(self, *args: str, forks=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = ["serve", "--port", str(self.port), *args]
        if forks is not None:
            self.proc = forks.spawn(argv)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mtcli", *argv],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, self.proc.stderr.read()
            time.sleep(0.1)
        raise AssertionError("server did not become ready")

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


@pytest.mark.slow
def test_concurrent_requests_are_batched_and_equal_mtcli_translate(
    copy_model_dir, tmp_path, serving_forks
):
    """64 concurrent requests of different lengths to a real server: each answer equals what
    `mtcli translate` prints for its line, and the worker ran fewer batches than requests."""
    lines = copy_sentences(64, seed=11)
    lines[5] = " ".join(lines[:20])  # a long one among short ones
    server = _Server("-m", str(copy_model_dir), "--batch-wait-ms", "20", forks=serving_forks)
    try:

        async def everyone():
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
                return await asyncio.gather(
                    *(c.post("/v1/translate", json={"lines": [line]}) for line in lines)
                )

        responses = asyncio.run(everyone())
        health = httpx.get(server.url + "/health").json()
    finally:
        code, err = server.stop()
    got = [r.json()["translations"][0]["translation"] for r in responses]
    cli = subprocess.run(
        [sys.executable, "-m", "mtcli", "translate", "-m", str(copy_model_dir)],
        input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=REPO, check=True,
    )  # fmt: skip
    assert got == cli.stdout.splitlines()
    assert health["jobs"] == 64 and health["batches"] < 64, health
    assert code == 0 and err.count("POST /v1/translate 200 lines=1") == 64
    print(f"64 requests in {health['batches']} batches")


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight(copy_model_dir, copy_lines, serving_forks):
    """SIGTERM while a request waits in the batch window: it is answered, then exit 0."""
    server = _Server("-m", str(copy_model_dir), "--batch-wait-ms", "1000", forks=serving_forks)
    result = {}

    def ask():
        q = {"q": copy_lines[0], "source": "en", "target": "en"}
        result["r"] = httpx.post(server.url + "/translate", json=q, timeout=60)

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(0.5)  # the request is in, waiting for others to join its batch
    code, err = server.stop()
    thread.join()
    assert result["r"].status_code == 200
    assert result["r"].json()["translatedText"] == copy_lines[0]  # the copy model copies it
    assert code == 0, err


@pytest.mark.slow
def test_a_client_that_disconnects_does_not_stall_the_worker(
    copy_model_dir, copy_lines, serving_forks
):
    """Clients that send a request and hang up at once leave the server answering others."""
    server = _Server("-m", str(copy_model_dir), "--batch-wait-ms", "200", forks=serving_forks)
    try:
        body = json.dumps({"q": "a b", "source": "en", "target": "en"}).encode()
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.port)) as s:
                s.sendall(
                    b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                )  # fmt: skip
        q = {"q": copy_lines[1], "source": "en", "target": "en"}
        r = httpx.post(server.url + "/translate", json=q, timeout=30)
        assert r.status_code == 200 and r.json()["translatedText"] == copy_lines[1]
    finally:
        code, _ = server.stop()
    assert code == 0


def test_requests_cannot_ask_for_more_than_the_server_allows(copy_model_dir):
    """--max-beam caps beam_size, nbest and alternatives (default: the server's beam size);
    alternatives below 1 is a 400; a request's source tokens are bounded."""
    cfg = ServeConfig(decode=DecodeConfig(beam_size=3), request_tokens=40)
    with TestClient(create_app(_models(copy_model_dir), cfg)) as c:
        assert wait_ready(c)
        q = {"q": "a b", "source": "en", "target": "zh"}
        for body, error in (
            ({"lines": ["a b"], "beam_size": 4}, "beam_size 4: this server allows at most 3 (--max-beam)"),
            ({"lines": ["a b"], "beam_size": 3, "nbest": 4}, "nbest 4: this server allows at most 3"),
        ):  # fmt: skip
            r = c.post("/v1/translate", json=body)
            assert r.status_code == 400 and r.json()["error"].startswith(error), r.text
        widest = {"lines": ["a b"], "beam_size": 3, "nbest": 3}
        assert c.post("/v1/translate", json=widest).status_code == 200
        for bad in (-4, 0, "x", True, 1.5):
            r = c.post("/translate", json={**q, "alternatives": bad})
            assert r.status_code == 400 and "alternatives" in r.json()["error"], (bad, r.text)
        r = c.post("/translate", json={**q, "alternatives": 3})
        assert r.status_code == 400 and "at most 2 here (--max-beam)" in r.json()["error"]
        assert len(c.post("/translate", json={**q, "alternatives": 2}).json()["alternatives"]) <= 2
        r = c.post("/translate", json={**q, "q": ["a b c d e f g h i j"] * 6})
        assert (
            r.status_code == 413 and "source tokens in one request; at most 40" in r.json()["error"]
        )


def test_memory_is_not_a_cache_of_settings(copy_model_dir):
    """Translators are kept for the latest few model+settings pairs, not one per setting."""
    from mtcli.serving.models import KEPT_TRANSLATORS

    models = _models(copy_model_dir)
    with TestClient(create_app(models, ServeConfig())) as c:
        assert wait_ready(c)
        for i in range(3 * KEPT_TRANSLATORS):
            body = {"lines": ["a b"], "length_penalty": i / 10}
            assert c.post("/v1/translate", json=body).status_code == 200
    assert len(models._translators) == KEPT_TRANSLATORS
