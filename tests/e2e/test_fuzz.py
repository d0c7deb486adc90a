"""The server under a fuzzer: thousands of random and mutated bodies, none a 500. In
`make e2e` (which .ci/run runs) rather than `make test`: 5,000 requests take ~20 s."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from mtcli.config import ServeConfig
from mtcli.serving.app import create_app
from tests.conftest import wait_ready
from tests.test_serve import _models

pytestmark = pytest.mark.e2e


def _fuzzed_bodies(rng, n: int):
    """`n` request bodies for the three POST routes: valid ones mutated, fields of every wrong
    type, nesting, junk bytes, lying or missing content types."""
    values = [None, True, -1, 0, 10**30, 1.5, float("nan"), "", "a b", "\ud800", "x" * 3000,
              [], ["a b"], [["a"]], {}, {"q": "a"}, "zh", "auto", "html", "text", -4, "1e9"]  # fmt: skip
    valid = {
        "/translate": {"q": "a b", "source": "en", "target": "zh"},
        "/v1/translate": {"lines": ["a b"], "beam_size": 2, "nbest": 2},
        "/detect": {"q": "a b"},
    }
    kinds = ["application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
             "multipart/form-data", "text/plain", None]  # fmt: skip
    for _ in range(n):
        path = rng.choice(list(valid))
        body = dict(valid[path])
        for _ in range(rng.randint(0, 3)):  # fields of other types, or unknown ones
            body[rng.choice([*body, "format", "alternatives", "api_key", "zzz"])] = rng.choice(
                values
            )
        choice = rng.random()
        if choice < 0.15:
            raw = "[" * rng.randint(100, 6000) + "]" * rng.randint(0, 6000)
        elif choice < 0.3:
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        else:
            raw = json.dumps(body, allow_nan=True)
            if rng.random() < 0.4:  # mutated: cut, repeated or a byte flipped
                at = rng.randint(0, len(raw))
                flipped = raw[:at] + chr(rng.randrange(1, 0x3000)) + raw[at + 1 :]
                raw = rng.choice([raw[:at], raw + raw[at:], flipped])
        kind = rng.choice(kinds) if rng.random() < 0.4 else "application/json"
        if (
            kind
            and kind.startswith("application/x-www")
            and isinstance(raw, str)
            and rng.random() < 0.5
        ):
            raw = "&".join(f"{k}={v}" for k, v in body.items()) + "&q=again&target=de"
        content = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        yield path, content, ({"content-type": kind} if kind else {})


def test_no_body_makes_a_500(copy_model_dir):
    """5,000 random and mutated bodies to /translate, /v1/translate and /detect: every answer
    is a 2xx or a 4xx with one message, nothing reaches the log as an internal error, and the
    server still answers /health."""
    import random

    logs: list[str] = []
    app = create_app(_models(copy_model_dir), ServeConfig(max_lines=8, max_chars=200), logs.append)
    statuses = []
    with TestClient(app, raise_server_exceptions=False) as c:
        assert wait_ready(c)
        for path, content, headers in _fuzzed_bodies(random.Random(5), 5000):
            r = c.post(path, content=content, headers=headers)
            statuses.append(r.status_code)
            assert r.status_code < 500, (path, content[:200], headers, r.text)
            if r.status_code >= 400:
                assert isinstance(r.json()["error"], str) and "\n" not in r.json()["error"]
        assert c.get("/health").status_code == 200
    assert not [line for line in logs if "internal error" in line]
    assert statuses.count(200) > 100 and len(set(statuses)) > 2  # both kinds were sent


def _documents() -> dict[str, bytes]:
    """A small valid file of each format the server takes."""
    from tests.test_documents import PO, _docx
    from tests.test_serve_files import SRT

    return {
        "a.txt": b"Where is the station?\n\nWhy do we work?\n",
        "a.srt": SRT.encode(),
        "a.vtt": b"WEBVTT\n\n00:01.000 --> 00:02.000\n<i>Hello</i> there.\n",
        "a.json": b'{"a": "Hello, {name}!", "b": {"c": ["{n, plural, one {# cat} other {# cats}}"]}}',
        "a.po": PO.encode(),
        "a.md": b"---\ntitle: x\n---\n# Where is the *station*?\n\n- a `code` item\n\n```\nkeep\n```\n",
        "a.html": b'<p>Where is the <b>station</b>?<img alt="A red cat"></p><script>x()</script>',
        "a.docx": _docx(),
    }


def _mutated(rng, data: bytes) -> bytes:
    """`data` cut, doubled, a stretch overwritten with random bytes, or a byte flipped."""
    at = rng.randrange(len(data))
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return rng.choice([
        data[:at], data + data[at:], data[:at] + junk + data[at + len(junk):],
        data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:],
    ])  # fmt: skip


def test_no_upload_makes_a_500():
    """2,000 uploads of each format's sample mutated (cut, doubled, overwritten, a bit
    flipped; a docx's zip and XML damaged so): every answer a 200 or a 4xx with one message,
    no internal error in the log, nothing held but what was translated."""
    import random

    from tests.test_serve_files import _app, _files

    app = _app()
    documents, rng, statuses = _documents(), random.Random(7), []
    with TestClient(app, raise_server_exceptions=False) as c:
        assert wait_ready(c)
        for _ in range(2000):
            name = rng.choice(list(documents))
            data = _mutated(rng, documents[name])
            form = {"source": "en", "target": "zh"}
            r = c.post("/translate_file", data=form, files={"file": (name, data)})
            statuses.append(r.status_code)
            assert r.status_code < 500, (name, data[:300], r.text)
            if r.status_code >= 400:
                assert "\n" not in r.json()["error"]
            else:
                assert c.get(r.json()["translatedFileUrl"]).status_code == 200
        assert c.get("/health").status_code == 200
    assert _files(app).held == {} and statuses.count(200) > 200 and statuses.count(400) > 200
