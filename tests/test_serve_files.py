"""`mtcli serve`'s documents: POST /translate_file and GET /download_file as LibreTranslate
has them, through a real HTTP client (httpx, in-process); the translation equals what
`mtcli translate FILE` writes with the same translator; hostile uploads are a 4xx and leave
nothing held; a translation is downloaded once, and not after its time.

The model is a stand-in that swaps case (tests/test_documents.py's), so what changed is known."""

from __future__ import annotations

import io
import threading
import time
import zipfile

import httpx
import pytest
from fastapi.testclient import TestClient

from mtcli.documents.formats import convert
from mtcli.documents.segments import Outcome
from mtcli.engines.result import Translation
from mtcli.serving.app import Models, ServeConfig, Served, create_app
from tests.conftest import wait_ready
from tests.test_documents import _docx, swapcase

SRT = (
    "1\n00:00:01,000 --> 00:00:02,500\n<i>Where is the station?</i>\n\n"
    "2\n00:00:03,000 --> 00:00:04,000\nI have {n} cats.\n"
)


class Swapping:
    """A translator whose translation is swapcase; a line holding 'unsure' is flagged."""

    def __init__(self, delay: float = 0.0):
        self.delay = delay

    def translate_chunk(self, lines):
        time.sleep(self.delay)
        return [
            Translation(line, out, 0.0, flagged="unsure" in line)
            for line, out in zip(lines, swapcase(lines), strict=True)
        ]


def _app(delay: float = 0.0, **cfg):
    served = Served(
        "swap", "en", "zh", lambda *a, **kw: Swapping(delay), lambda line: len(line.split())
    )
    return create_app(Models(lambda: [served]), ServeConfig(**cfg))


@pytest.fixture
def client():
    with TestClient(_app()) as c:
        assert wait_ready(c)
        yield c


def _upload(c, name: str, data: bytes, **fields):
    form = {"source": "en", "target": "zh", **fields}
    return c.post("/translate_file", data=form, files={"file": (name, data)})


def _expected(ext: str, data: bytes) -> bytes:
    return convert(ext, data, swapcase, Outcome())


def test_an_upload_is_translated_as_the_command_line_would_and_downloaded_once(client):
    r = _upload(client, "film.srt", SRT.encode())
    assert r.status_code == 200, r.text
    answer = r.json()
    url = answer["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/") and url.endswith(".film.srt")
    assert (answer["strings"], answer["keptAsSource"], answer["flagged"]) == (2, 0, 0)
    got = client.get(url)
    assert got.status_code == 200
    assert got.content == _expected(".srt", SRT.encode())
    assert "<i>wHERE IS THE STATION?</i>" in got.text and "{n}" in got.text
    assert got.headers["content-disposition"].startswith('attachment; filename="film.srt"')
    again = client.get(url)
    assert again.status_code == 404 and "once" in again.json()["error"]


def test_a_docx_a_json_and_a_flagged_string(client):
    docx = _docx()
    r = _upload(client, "report.docx", docx)
    assert r.status_code == 200, r.text
    got = client.get(r.json()["translatedFileUrl"])
    assert got.content == _expected(".docx", docx)
    assert got.headers["content-type"].startswith("application/vnd.openxmlformats")
    strings = b'{"a": "Hello, {name}!", "b": ["I am unsure."]}'
    r = _upload(client, "ui.json", strings)
    assert r.json()["flagged"] == 1
    assert client.get(r.json()["translatedFileUrl"]).content == _expected(".json", strings)


def test_frontend_settings_say_files_are_translated(client):
    settings = client.get("/frontend/settings").json()
    assert settings["filesTranslation"] is True
    assert {".srt", ".po", ".json", ".md", ".html", ".docx", ".txt"} <= set(
        settings["supportedFilesFormat"]
    )
    assert settings["language"]["source"]["code"] == "en"
    assert settings["language"]["target"]["code"] == "zh"


def test_the_key_rules_hold_for_files():
    with TestClient(_app(api_key="s3cret")) as c:
        assert wait_ready(c)
        r = _upload(c, "a.txt", b"Hello.")
        assert r.status_code == 403 and r.json()["reason"] == "api_key_required"
        assert _upload(c, "a.txt", b"Hello.", api_key="guess").json()["reason"] == "api_key_invalid"  # fmt: skip
        assert _upload(c, "a.txt", b"Hello.", api_key="s3cret").status_code == 200
        r = c.post(
            "/translate_file", data={"target": "zh"}, files={"file": ("a.txt", b"Hi.")},
            headers={"X-API-Key": "s3cret"},
        )  # fmt: skip
        assert r.status_code == 200 and c.get(r.json()["translatedFileUrl"]).text == "hI."
        assert c.get("/frontend/settings").json()["keyRequired"] is True


def _zip_bomb() -> bytes:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\0" * (3 << 20))  # 3 MB of zeros in ~3 kB
    return bomb.getvalue()


HOSTILE = [
    ("bomb.docx", _zip_bomb(), 400, "unpacks to 3 MB"),
    ("cut.docx", _docx()[:3000], 400, "not a whole zip archive"),
    ("deep.json", b"[" * 10_000 + b"]" * 10_000, 400, "nested too deep"),
    (
        "latin1.srt",
        "1\n00:00:01,000 --> 00:00:02,000\ncaf\xe9\n".encode("latin-1"),
        400,
        "not UTF-8",
    ),  # fmt: skip
    ("book.pdf", b"%PDF-1.4", 400, "'.pdf' is not supported"),
    ("noextension", b"Hello.", 400, "'(none)' is not supported"),
    ("bad.po", b'msgid "a"\nnonsense\n', 400, "not a gettext catalogue"),
]


@pytest.mark.parametrize("name,data,status,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_a_4xx_and_nothing_is_held(monkeypatch, name, data, status, message):
    from mtcli.documents import word

    monkeypatch.setattr(word, "MAX_UNPACKED", 2 << 20)
    app = _app()
    with TestClient(app) as c:
        assert wait_ready(c)
        r = _upload(c, name, data)
        assert r.status_code == status and message in r.json()["error"], r.text
        assert c.get("/health").status_code == 200
    service_files = _files(app)
    assert service_files.held == {} and service_files.busy == 0


def _files(app):
    """The app's FileStore (the route closures hold it)."""
    for route in app.routes:
        if getattr(route, "path", "") == "/download_file/{file_id}":
            closure = route.endpoint.__closure__
            return next(c.cell_contents for c in closure if hasattr(c.cell_contents, "held"))
    raise AssertionError("no download route")


def test_requests_that_are_not_an_upload_are_one_clear_400(client):
    form = {"source": "en", "target": "zh"}
    no_file = client.post("/translate_file", data=form, files={"x": ("a.txt", b"")})
    assert "a file in field 'x'" in no_file.json()["error"]
    json_body = client.post("/translate_file", json={"file": "a", "target": "zh"})
    assert json_body.status_code == 400 and "multipart/form-data" in json_body.json()["error"]
    assert "missing target" in _upload(client, "a.txt", b"Hi.", target="").json()["error"]
    twice = _upload(client, "a.txt", b"Hi.", source=["en", "zh"])
    assert twice.json()["error"] == "invalid request: source given 2 times"
    assert "unknown field 'colour'" in _upload(client, "a.txt", b"Hi.", colour="red").json()["error"]  # fmt: skip
    assert "no model translates de->zh" in _upload(client, "a.txt", b"Hi.", source="de").json()["error"]  # fmt: skip
    assert client.get("/download_file/nothing-here.a.txt").status_code == 404
    assert client.get("/download_file/..%2F..%2Fetc%2Fpasswd").status_code == 404


def test_a_100_mb_upload_is_a_413_before_it_is_read():
    """Declared by Content-Length (refused at once), or streamed without one (refused as soon
    as the body passes the cap): either way nothing is held, and the server answers on."""
    app = _app(max_file_bytes=1 << 20)
    with TestClient(app) as c:
        assert wait_ready(c)
        r = _upload(c, "big.txt", b"a " * (50 << 20))  # 100 MB
        assert r.status_code == 413 and "bytes" in r.json()["error"]

        def chunks():
            for _ in range(40):
                yield b"x" * 65536

        r = c.post(
            "/translate_file", content=chunks(),
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        )  # fmt: skip
        assert r.status_code == 413
        assert _upload(c, "small.txt", b"Hi.").status_code == 200
    assert _files(app).busy == 0


def test_a_translation_waits_only_so_long_for_its_download():
    with TestClient(_app(keep_files=0.1)) as c:
        assert wait_ready(c)
        url = _upload(c, "a.txt", b"Hello.").json()["translatedFileUrl"]
        time.sleep(0.3)
        assert c.get(url).status_code == 404


def test_a_document_over_its_deadline_is_a_413_and_the_server_answers_on():
    """A slow translator (0.15 s a job) and a 0.25 s deadline: 100 paragraphs are refused once
    the deadline passes (not after every job), and /translate still works."""
    app = _app(delay=0.15, file_timeout=0.25)
    with TestClient(app) as c:
        assert wait_ready(c)
        start = time.monotonic()
        text = "\n\n".join(f"Paragraph {i}." for i in range(100)).encode()
        r = _upload(c, "long.txt", text)
        assert r.status_code == 413 and "--file-timeout" in r.json()["error"]
        assert time.monotonic() - start < 1.0
        ok = c.post("/translate", json={"q": "Hi", "source": "en", "target": "zh"})
        assert ok.json()["translatedText"] == "hI"
    assert _files(app).held == {}


def test_uploads_at_once_are_bounded():
    """Beyond four documents in flight, a fifth is a 503 with Retry-After before its body is
    read; once they finish, uploads are taken again."""
    app = _app(delay=0.5)
    with TestClient(app) as c:
        assert wait_ready(c)
        answers: list[int] = []

        def upload():
            answers.append(_upload(c, "a.txt", b"Hello.").status_code)

        threads = [threading.Thread(target=upload) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.25)
        r = _upload(c, "b.txt", b"Hi.")
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        for t in threads:
            t.join()
        assert answers == [200] * 4
        assert _upload(c, "b.txt", b"Hi.").status_code == 200


def test_a_real_http_client_over_a_socket(tmp_path):
    """httpx over a real socket against uvicorn: the multipart upload and the download."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(base + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        r = httpx.post(
            base + "/translate_file", data={"source": "en", "target": "zh"},
            files={"file": ("café.md", b"# Where is the *station*?\n")},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        got = httpx.get(r.json()["translatedFileUrl"])
        assert got.text == "# wHERE IS THE *STATION*?\n"
        assert "filename*=UTF-8''caf%C3%A9.md" in got.headers["content-disposition"]
    finally:
        server.should_exit = True
        thread.join(5)
