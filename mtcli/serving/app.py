"""The HTTP app of `mtcli serve`: request validation, the batching queue, the routes.

Translates through translate.Translator (never decodes by itself) and prints nothing: each
request is reported through a `log` callback.

  POST /translate      LibreTranslate's API: q (a string or a list), source, target, format,
                       api_key, alternatives; a JSON or a form body
  GET  /languages      LibreTranslate's list of languages and their targets
  POST /v1/translate   mtcli's own: lines, beam size, n-best with scores, alignments, attention
  GET  /health         200 once the models are loaded, 503 before
  GET  /               the web page;  /docs  the OpenAPI docs

Lines from requests that arrive together are decoded together (batching.py); a line's
translation is the one `mtcli translate` gives with the same model and settings.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import astuple, dataclass, field, replace
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from mtcli.config import DecodeConfig
from mtcli.data.language import source_language
from mtcli.data.textio import invalid_utf8_at
from mtcli.engines.routing import Translation
from mtcli.errors import UserError
from mtcli.serving.batching import Batcher, Job, QueueFull

LANGUAGE_NAMES = {"en": "English", "zh": "Chinese", "de": "German", "fr": "French"}
PAGE = Path(__file__).resolve().parent / "web" / "index.html"


@dataclass
class ServeConfig:
    """Limits and batching of the server (the flags of `mtcli serve`)."""

    batch_wait_ms: float = 5.0  # how long the worker waits for more requests to join a batch
    batch_tokens: int = 4000  # source tokens gathered into one batch at most
    max_chars: int = 1000  # characters in one line
    max_lines: int = 64  # lines in one request (each q item may hold several)
    max_body: int = 256 * 1024  # bytes in one request body
    queue_size: int = 64  # requests waiting for the worker; beyond, 503 with Retry-After
    api_key: str = ""  # when set, every translate request must carry it
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # defaults a request may override


class ApiError(Exception):
    """A request mistake (4xx) or a busy server (503), shown as {"error": message}."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# ---------------------------------------------------------------- models
@dataclass
class Served:
    """One loaded model, the direction it translates, and how to make a translator of it
    for given settings (mtcli's Translator, or CTranslate2's for an exported model)."""

    name: str
    src_lang: str
    tgt_lang: str
    make_translator: Callable[[DecodeConfig, bool], object]  # (settings, align) -> translator
    count_tokens: Callable[[str], int]  # source tokens of a line, for the batch budget


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, for uvicorn to serve on (as uvicorn binds its own: IPv6
    when the host has a colon, SO_REUSEADDR). Bound before the models start loading, so a port
    in use or a host this machine is not is one line at once: left to uvicorn, its bind failed
    while a model loaded in the background, and the process aborted."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:  # socket.gaierror too: a host that does not resolve
        sock.close()
        raise UserError(
            f"--host {host} --port {port}: cannot listen there ({e.strerror or e})"
        ) from None
    return sock


class Models:
    """The models of this server, loaded once, in the background (so /health can say when)."""

    def __init__(self, load: Callable[[], list[Served]]):
        self.served, self.error = [], None
        self.ready = threading.Event()
        self._translators: dict[tuple, object] = {}  # a translator per (model, settings)
        threading.Thread(target=self._load, args=(load,), daemon=True).start()

    def _load(self, load) -> None:
        try:
            self.served = load()
        except Exception as e:  # reported by /health and every request
            self.error = str(e)
        self.ready.set()

    def check_ready(self) -> None:
        if self.error:
            raise ApiError(500, f"models failed to load: {self.error}")
        if not self.ready.is_set():
            raise ApiError(503, "models are still loading", {"Retry-After": "1"})

    def languages(self) -> list[dict]:
        """LibreTranslate's /languages: each source language and the targets it reaches."""
        targets: dict[str, list[str]] = {}
        for s in self.served:
            targets.setdefault(s.src_lang, []).append(s.tgt_lang)
        return [
            {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": sorted(to)}
            for code, to in sorted(targets.items())
        ]

    def for_pair(self, source: str, target: str | None) -> Served:
        for s in self.served:
            if s.src_lang == source and (target is None or s.tgt_lang == target):
                return s
        pairs = ", ".join(f"{s.src_lang}->{s.tgt_lang}" for s in self.served)
        raise ApiError(400, f"no model translates {source}->{target or '*'} (served: {pairs})")

    def by_name(self, name: str) -> Served:
        for s in self.served:
            if s.name == name:
                return s
        raise ApiError(400, f"no model named {name!r} (served: {', '.join(s.name for s in self.served)})")  # fmt: skip

    def translate(self, key: tuple, lines: list[str]) -> list[Translation]:
        """Decode `lines` with the translator `key` names (called by the batch worker)."""
        if key not in self._translators:
            name, settings, align = key
            self._translators[key] = self.by_name(name).make_translator(DecodeConfig(*settings), align)  # fmt: skip
        return self._translators[key].translate_chunk(lines)


# ---------------------------------------------------------------- requests
class V1Request(BaseModel):
    """POST /v1/translate."""

    lines: list[str] = Field(description="Lines to translate, one translation per line.")
    source: str = Field("auto", description="Source language; auto: by the script of each line.")
    target: str | None = Field(None, description="Target language (default: any model's).")
    model: str | None = Field(None, description="A model by name; overrides source/target.")
    beam_size: int | None = Field(None, ge=1, le=32, description="1 = greedy.")
    nbest: int | None = Field(None, ge=1, le=32, description="Hypotheses per line (<= beam).")
    length_penalty: float | None = Field(
        None, ge=0, le=10, allow_inf_nan=False, description="GNMT alpha."
    )
    align: bool = Field(False, description="Word alignments from cross-attention.")
    attention: bool = Field(False, description="The cross-attention matrix of each translation.")
    api_key: str | None = None


class V1Hypothesis(BaseModel):
    translation: str
    score: float


class V1Attention(BaseModel):
    source_tokens: list[str]
    target_tokens: list[str]
    weights: list[list[float]] = Field(description="Rows: target tokens; columns: source tokens.")


class V1Translation(BaseModel):
    source: str
    translation: str
    score: float
    model: str | None = Field(description="The model that translated it (None: passed through).")
    nbest: list[V1Hypothesis]
    alignment: list[list[int]] | None = None
    attention: V1Attention | None = None


class V1Response(BaseModel):
    translations: list[V1Translation]


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    return f"{where}: {err['msg']}"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes `limit`: memory stays bounded."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes; at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_fields(request: Request, limit: int) -> dict:
    """A JSON object or a form (urlencoded or multipart) as a dict of fields."""
    body = await read_body(request, limit)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        form = urllib.parse.parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
        return {k: v if len(v) > 1 else v[0] for k, v in form.items()}
    if kind == "multipart/form-data":

        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        form = await Request(request.scope, replay).form()
        return {k: (vs if len(vs := form.getlist(k)) > 1 else vs[0]) for k in form}
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


# ---------------------------------------------------------------- the app
def create_app(
    models: Models, cfg: ServeConfig, log: Callable[[str], None] = lambda line: None
) -> FastAPI:
    """The server's ASGI app; `models` may still be loading when it starts."""
    batcher: Batcher | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal batcher
        batcher = Batcher(
            models.translate, wait_s=cfg.batch_wait_ms / 1000, max_tokens=cfg.batch_tokens,
            queue_size=cfg.queue_size,
        )  # fmt: skip
        app.state.batcher = batcher
        yield
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)  # drain, then stop

    app = FastAPI(
        title="mtcli", summary="Neural machine translation: LibreTranslate-compatible and mtcli's own API",
        lifespan=lifespan,
    )  # fmt: skip

    @app.middleware("http")
    async def log_requests(request: Request, call_next):
        start = time.monotonic()

        def line(status: int) -> str:
            ms = 1000 * (time.monotonic() - start)
            lines = getattr(request.state, "lines", 0)
            return f"{request.method} {request.url.path} {status} lines={lines} {ms:.0f} ms"

        try:
            response = await call_next(request)
        except Exception as e:  # not the client's doing: one log line, as the CLI's internal errors
            log(f"{line(500)} internal error: {type(e).__name__}: {e} (MTCLI_DEBUG=1 shows where)")
            if os.environ.get("MTCLI_DEBUG"):
                traceback.print_exc()
            return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)
        log(line(response.status_code))
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code)

    def check_key(given) -> None:
        if cfg.api_key and given != cfg.api_key:
            raise ApiError(403, "invalid API key" if given else "an API key is required")

    async def translate(request: Request, lines: list[str], pick, decode: DecodeConfig, align=False):  # fmt: skip
        """Lines -> (Translation, Served or None) each, through the batching queue.

        `pick(line)` names the model for a line (None: it passes through unchanged).
        """
        models.check_ready()
        if len(lines) > cfg.max_lines:
            raise ApiError(413, f"{len(lines)} lines in one request; at most {cfg.max_lines}")
        for i, line in enumerate(lines):
            if len(line) > cfg.max_chars:
                raise ApiError(413, f"line {i + 1} has {len(line)} characters; at most {cfg.max_chars}")  # fmt: skip
            if (at := invalid_utf8_at(line)) is not None:  # JSON can escape a lone surrogate
                raise ApiError(400, f"line {i + 1} is not valid Unicode (byte {at + 1})")
        request.state.lines = len(lines)
        results: list = [(Translation(line, line, 0.0, passthrough=True), None) for line in lines]
        groups: dict[str, list[int]] = {}
        for i, line in enumerate(lines):
            if not line.strip():
                results[i] = (Translation(line, "", 0.0), None)
            elif (served := pick(line)) is not None:
                groups.setdefault(served.name, []).append(i)
        loop = asyncio.get_running_loop()
        jobs = []
        for name, rows in groups.items():
            served = models.by_name(name)
            group_lines = [lines[i] for i in rows]
            tokens = sum(served.count_tokens(line) + 1 for line in group_lines)
            key = (name, astuple(decode), align)  # lines of one key can share a batch
            job = Job(key, group_lines, tokens, loop.create_future(), loop)
            try:
                batcher.submit(job)
            except QueueFull as e:
                for other in jobs:
                    other[0].future.cancel()
                raise ApiError(503, f"server busy ({e}); retry shortly", {"Retry-After": "1"}) from None  # fmt: skip
            jobs.append((job, rows, served))
        for job, rows, served in jobs:
            for i, result in zip(rows, await job.future, strict=True):
                results[i] = (result, served)
        return results

    def decode_config(beam_size=None, nbest=None, length_penalty=None) -> DecodeConfig:
        beam = beam_size or cfg.decode.beam_size
        n = nbest or 1
        if n > beam:
            raise ApiError(400, f"nbest {n} is more than beam_size {beam}")
        alpha = cfg.decode.length_penalty if length_penalty is None else length_penalty
        return replace(cfg.decode, beam_size=beam, nbest=n, length_penalty=alpha)

    def picker(source: str, target: str | None, model: str | None = None):
        """How each line finds its model: by name, by the pair, or by its script (auto)."""
        if model:
            served = models.by_name(model)
            return lambda line: served
        if source != "auto":
            served = models.for_pair(source, target)
            return lambda line: served

        def by_script(line: str):
            language = source_language(line)
            return models.for_pair(language, target) if language else None

        return by_script

    @app.post("/translate", summary="LibreTranslate-compatible translation")
    async def libretranslate(request: Request):
        """LibreTranslate's /translate: `q` a string or a list of strings; `translatedText`
        has the same shape. `source` may be "auto" (each line by its script)."""
        fields = await read_fields(request, cfg.max_body)
        check_key(fields.get("api_key"))
        models.check_ready()
        q = fields.get("q")
        if q is None:
            raise ApiError(400, "invalid request: missing q parameter")
        if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
            raise ApiError(400, "invalid request: q must be a string or a list of strings")
        target = fields.get("target")
        if not isinstance(target, str) or not target:
            raise ApiError(400, "invalid request: missing target parameter")
        source = fields.get("source") or "auto"
        if fields.get("format", "text") != "text":
            raise ApiError(400, f"format {fields.get('format')!r} is not supported; use text")
        try:
            alternatives = int(fields.get("alternatives") or 0)
        except (TypeError, ValueError):
            raise ApiError(400, "invalid request: alternatives must be a number") from None
        items = [q] if isinstance(q, str) else q
        split = [item.split("\n") for item in items]  # a q item may hold several lines
        flat = [line for lines in split for line in lines]
        pick = picker(source, target)
        if source != "auto":
            pick(flat[0] if flat else "")  # an unknown pair is an error even for empty text
        nbest = min(alternatives + 1, cfg.decode.beam_size)
        results = await translate(request, flat, pick, decode_config(nbest=nbest))
        out, start = [], 0
        for lines in split:
            part = results[start : start + len(lines)]
            start += len(lines)
            answer = {"translatedText": "\n".join(r.text for r, _ in part)}
            if alternatives:
                answer["alternatives"] = [t for t, _ in part[0][0].nbest[1:]] if len(part) == 1 else []  # fmt: skip
            if source == "auto":
                langs = [s.src_lang for _, s in part if s is not None]
                top = max(set(langs), key=langs.count) if langs else "en"
                share = langs.count(top) / len(langs) if langs else 0.0
                answer["detectedLanguage"] = {"confidence": round(100 * share, 1), "language": top}
            out.append(answer)
        if isinstance(q, str):
            return out[0]
        merged = {"translatedText": [a["translatedText"] for a in out]}
        for key in ("alternatives", "detectedLanguage"):
            if out and key in out[0]:
                merged[key] = [a[key] for a in out]
        return merged

    @app.get("/languages", summary="LibreTranslate-compatible list of languages")
    async def languages():
        models.check_ready()
        return models.languages()

    @app.post(
        "/v1/translate",
        response_model=V1Response,
        response_model_exclude_none=True,
        summary="mtcli's translation API",
        openapi_extra={
            "requestBody": {
                "content": {"application/json": {"schema": V1Request.model_json_schema()}},
                "required": True,
            }
        },  # fmt: skip
    )
    async def v1_translate(request: Request):
        """Lines in, one translation each: n-best with scores, word alignments and, when asked,
        the cross-attention matrix (the last decoder layer, mean over heads)."""
        body = await read_body(request, cfg.max_body)
        try:
            req = V1Request.model_validate_json(body or b"{}")
        except ValidationError as e:
            raise ApiError(400, _first_error(e)) from None
        check_key(req.api_key or request.headers.get("x-api-key"))
        decode = decode_config(req.beam_size, req.nbest, req.length_penalty)
        models.check_ready()
        pick = picker(req.source, req.target, req.model)
        with_attention = req.align or req.attention
        results = await translate(request, req.lines, pick, decode, with_attention)
        return {"translations": [_v1(t, s, req) for t, s in results]}

    @app.get("/health", summary="200 once the models are loaded")
    async def health():
        if models.error:
            return JSONResponse({"status": "failed", "error": models.error}, status_code=500)
        if not models.ready.is_set():
            return JSONResponse({"status": "loading"}, status_code=503)
        names = [{"name": s.name, "source": s.src_lang, "target": s.tgt_lang} for s in models.served]  # fmt: skip
        stats = {"batches": batcher.batches, "jobs": batcher.jobs_done} if batcher else {}
        return {"status": "ok", "models": names, **stats}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    return app


def _v1(t: Translation, served: Served | None, req: V1Request) -> dict:
    record = {
        "source": t.source, "translation": t.text, "score": round(t.score, 4),
        "model": served.name if served else None,
        "nbest": [{"translation": s, "score": round(sc, 4)} for s, sc in t.nbest]
        or [{"translation": t.text, "score": 0.0}],  # a line passed through: itself
    }  # fmt: skip
    if req.align and t.alignment is not None:
        record["alignment"] = [list(pair) for pair in t.alignment]
    if req.attention and t.attention is not None:
        record["attention"] = {
            "source_tokens": t.attention.source,
            "target_tokens": t.attention.target,
            "weights": [[round(float(w), 4) for w in row] for row in t.attention.cross_mean()],
        }
    return record


def mtcli_served(name: str, loaded, device) -> Served:
    """A model of mtcli's own, decoded by its Translator."""
    from mtcli.engines.translator import Translator

    return Served(
        name, loaded.src_lang, loaded.tgt_lang,
        lambda cfg, align: Translator(loaded.model, loaded.tokenizer, cfg, device=device, align=align),
        lambda line: len(loaded.tokenizer.encode_src(line)),
    )  # fmt: skip


def ct2_served(name: str, path: Path, src_lang: str, tgt_lang: str, threads: int) -> Served:
    """A CTranslate2 export, decoded by CTranslate2 (no alignments or attention there)."""
    from mtcli.engines.ct2 import CT2Translator

    probe = CT2Translator(path, DecodeConfig(), threads=threads)

    def make(cfg: DecodeConfig, align: bool):
        if align:
            raise ApiError(400, "the CTranslate2 engine gives no alignments or attention")
        return CT2Translator(path, cfg, threads=threads)

    return Served(name, src_lang, tgt_lang, make, lambda line: len(probe.src.encode(line)))
