"""The HTTP app of `mtcli serve`: the routes, and what they do between a checked request and
its answer. Never decodes by itself and prints nothing: each request is reported through a
`log` callback.

  POST /translate      LibreTranslate's API: q (a string or a list), source, target, format,
                       api_key, alternatives; a JSON or a form body
  POST /detect         LibreTranslate's language detection: q (a string or a list)
  GET  /languages      LibreTranslate's list of languages and their targets
  POST /v1/translate   mtcli's own: lines, beam size, n-best with scores, alignments, attention
  GET  /health         200 once the models are loaded, 503 before
  GET  /explain        `mtcli explain`'s page for one sentence (q, source, target, model)
  GET  /               the web page;  /docs  the OpenAPI docs

A request's lines are routed as the command line routes them (engines.routing.route: empty
lines stay empty, a line no model translates passes through), and the lines of requests that
arrive together are decoded together (batching.py); a line's translation is the one
`mtcli translate` gives with the same model and settings.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
import time
import traceback
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mtcli.config import DecodeConfig
from mtcli.data.language_codes import LANGUAGE_NAMES
from mtcli.documents.formats import FORMATS
from mtcli.documents.segments import Outcome
from mtcli.engines.result import Translation, translation_record
from mtcli.engines.routing import route
from mtcli.errors import UserError
from mtcli.serving.batching import Batcher, Job, QueueFull
from mtcli.serving.files import (
    AT_ONCE,
    FileJob,
    FileStore,
    check_file_fields,
    download_headers,
    media_type,
    read_upload,
    supported_formats,
    translate_upload,
    upload_format,
)
from mtcli.serving.models import (  # noqa: F401
    Models,
    Served,
    TranslatorKey,
    Wanted,
    ct2_served,
    mtcli_served,
)
from mtcli.serving.requests import (
    ApiError,
    LibreRequest,
    ServeConfig,
    V1Request,
    V1Response,
    beam_cap,
    check_fields,
    check_lines,
    check_q,
    check_text,
    parse_libre,
    parse_v1,
    read_body,
    read_fields,
    request_decode,
)
from mtcli.text.language import detect
from mtcli.text.layer import least_sure

PAGE = Path(__file__).resolve().parent / "web" / "index.html"


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


Routed = tuple[Translation, Served | None]  # a line's result and the model that made it


class Service:
    """What the routes do once a request is read: check it, route its lines to models, queue
    them for the batch worker, and shape the answer."""

    def __init__(self, models: Models, cfg: ServeConfig):
        self.models, self.cfg = models, cfg
        self.batcher: Batcher | None = None  # started with the app (create_app's lifespan)
        self.files = FileStore(cfg.keep_files)  # translated documents waiting for download

    def check_key(self, given, header: str | None) -> None:
        """The server's key, from the body's api_key (as LibreTranslate clients send it) or
        the X-API-Key header, compared in constant time (hmac: no timing to learn it from)."""
        if not self.cfg.api_key:
            return
        given = given or header
        if not given:
            raise ApiError(403, "an API key is required", reason="api_key_required")
        if not (
            isinstance(given, str)
            and hmac.compare_digest(given.encode(), self.cfg.api_key.encode())
        ):
            raise ApiError(403, "invalid API key", reason="api_key_invalid")

    async def translate(
        self,
        state,
        lines: list[str],
        pick,
        decode: DecodeConfig,
        align: bool = False,
        html: bool = False,
        confidence: bool = False,
        limits: bool = True,
    ) -> list[Routed]:
        """Lines -> (Translation, the Served that made it or None) each, through the queue.

        `pick(line)` names the model for a line (None: it passes through unchanged); `state`
        is the request's, whose log line counts the lines; `limits`: the per-request caps on
        lines, characters and tokens apply.
        """
        self.models.check_ready()
        if limits:  # a document's strings are bounded by its size and deadline instead
            check_lines(lines, self.cfg)
        state.lines = len(lines)
        results, groups = route(lines, lambda line: s.name if (s := pick(line)) else None)
        work = [(self.models.by_name(name), rows) for name, rows in groups.items()]
        tokens = [sum(s.count_tokens(lines[i]) + 1 for i in rows) for s, rows in work]
        if limits and (total := sum(tokens)) > (cap := self.cfg.request_tokens):
            raise ApiError(413, f"{total} source tokens in one request; at most {cap}")
        jobs: list[tuple[Job, list[int], Served]] = []
        try:
            for (served, rows), n in zip(work, tokens, strict=True):
                key = TranslatorKey.of(served.name, decode, Wanted(align, html, confidence))
                job = self._submit(key, [lines[i] for i in rows], n)
                jobs.append((job, rows, served))
        except ApiError:
            for job, _, _ in jobs:  # the request fails whole: its queued lines are not decoded
                job.future.cancel()
            raise
        routed: list[Routed] = [(r, None) for r in results]
        for job, rows, served in jobs:
            for i, result in zip(rows, await job.future, strict=True):
                routed[i] = (result, served)
        return routed

    def _submit(self, key: TranslatorKey, lines: list[str], tokens: int) -> Job:
        """One job for the batch worker; a full queue is a 503 (jobs of the request cancelled)."""
        loop = asyncio.get_running_loop()
        job = Job(key, lines, tokens, loop.create_future(), loop)
        try:
            self.batcher.submit(job)
        except QueueFull as e:
            raise ApiError(503, f"server busy ({e}); retry shortly", {"Retry-After": "1"}) from None
        return job

    async def libretranslate(self, state, req: LibreRequest) -> dict:
        """LibreTranslate's answer: translatedText (and alternatives, detectedLanguage) in q's shape."""
        pick = self.models.picker(req.source, req.target)
        if req.source != "auto":
            pick(
                req.lines[0] if req.lines else ""
            )  # an unknown pair is an error even for empty text
        cap = beam_cap(self.cfg)
        if req.alternatives + 1 > cap:
            raise ApiError(
                400, f"alternatives {req.alternatives}: at most {cap - 1} here (--max-beam)"
            )
        decode = request_decode(self.cfg, nbest=req.alternatives + 1)
        # a confidence in every reply: an extra field, which LibreTranslate's clients ignore
        results = await self.translate(
            state, req.lines, pick, decode, html=req.html, confidence=True
        )
        out, start = [], 0
        for lines in req.items:
            out.append(_libre_answer(results[start : start + len(lines)], req))
            start += len(lines)
        if req.one:
            return out[0]
        merged = {"translatedText": [a["translatedText"] for a in out]}
        for key in ("alternatives", "detectedLanguage", "confidence"):
            if any(key in a for a in out):  # an item that passed through has no confidence: null
                merged[key] = [a.get(key) for a in out]
        return merged

    async def translate_file(
        self, state, name: str, data: bytes, ext: str, source: str, target: str
    ) -> tuple[bytes, Outcome, FileJob]:
        """An uploaded document translated (files.py): its bytes, how its strings fared, and
        its job (how many strings were flagged as unreliable, and the report of each)."""
        pick = self.models.picker(source, target)  # an unknown pair: a 400 before any work
        decode = request_decode(self.cfg)

        async def run(lines: list[str], html: bool) -> list[Translation]:
            routed = await self.translate(
                state, lines, pick, decode, html=html, confidence=True, limits=False
            )
            return [t for t, _ in routed]

        timeout = self.cfg.file_timeout
        loop = asyncio.get_running_loop()
        job = FileJob(run, FORMATS[ext].markup, time.monotonic() + timeout, timeout, loop)
        translated, outcome = await translate_upload(job, name, data, ext)
        state.lines = outcome.translated + outcome.kept
        return translated, outcome, job

    async def v1(self, state, req: V1Request) -> dict:
        """mtcli's own answer: n-best with scores, alignments and attention when asked."""
        decode = request_decode(self.cfg, req.beam_size, req.nbest, req.length_penalty)
        for name in ("source", "target", "model"):
            check_text(name, getattr(req, name))
        self.models.check_ready()
        pick = self.models.picker(req.source, req.target, req.model)
        results = await self.translate(
            state, req.lines, pick, decode, req.align or req.attention, confidence=req.confidence
        )
        return {"translations": [_v1_record(t, s, req) for t, s in results]}


def _libre_answer(part: list[Routed], req: LibreRequest) -> dict:
    """One q item's answer from the results of its lines."""
    answer: dict = {"translatedText": "\n".join(r.text for r, _ in part)}
    if req.alternatives:
        answer["alternatives"] = [t for t, _ in part[0][0].nbest[1:]] if len(part) == 1 else []
    judged = least_sure(r.confidence for r, _ in part)
    if judged is not None:  # models without fitted weights give none
        answer["confidence"] = round(judged, 4)
    if req.source == "auto":
        top, confidence = detect("\n".join(r.source for r, _ in part))
        answer["detectedLanguage"] = {"confidence": confidence, "language": top or "en"}
    return answer


def _detected(text: str) -> list[dict]:
    language, confidence = detect(text)
    return [{"confidence": confidence, "language": language or "en"}]


def _v1_record(t: Translation, served: Served | None, req: V1Request) -> dict:
    record = translation_record(t, alignment=req.align, attention=req.attention)
    record["model"] = served.name if served else None  # None: passed through
    if not record["nbest"]:  # a line passed through, or empty: itself
        record["nbest"] = [{"translation": t.text, "score": 0.0}]
    return record


# ---------------------------------------------------------------- the app
def create_app(
    models: Models, cfg: ServeConfig, log: Callable[[str], None] = lambda line: None
) -> FastAPI:
    """The server's ASGI app; `models` may still be loading when it starts."""
    service = Service(models, cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.batcher = Batcher(
            models.translate,
            wait_s=cfg.batch_wait_ms / 1000,
            max_tokens=cfg.batch_tokens,
            queue_size=cfg.queue_size,
        )
        app.state.batcher = service.batcher
        yield
        await asyncio.get_running_loop().run_in_executor(None, service.batcher.close)  # drain

    app = FastAPI(
        title="mtcli",
        summary="Neural machine translation: LibreTranslate-compatible and mtcli's own API",
        lifespan=lifespan,
    )
    _log_requests(app, log)
    _errors_as_json(app)
    _translation_routes(app, service)
    _file_routes(app, service)
    _settings_route(app, service)
    _other_routes(app, service)
    _explain_route(app, service)
    return app


def _log_requests(app: FastAPI, log: Callable[[str], None]) -> None:
    """One log line a request; an internal error is a JSON 500 and its message in that line."""

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


def _errors_as_json(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code)


def _translation_routes(app: FastAPI, service: Service) -> None:
    cfg = service.cfg

    @app.post("/translate", summary="LibreTranslate-compatible translation")
    async def libretranslate(request: Request):
        """LibreTranslate's /translate: `q` a string or a list of strings; `translatedText`
        has the same shape. `source` may be "auto" (each line by its script)."""
        fields = await read_fields(request, cfg.max_body)
        service.check_key(fields.get("api_key"), request.headers.get("x-api-key"))
        service.models.check_ready()
        return await service.libretranslate(request.state, parse_libre(fields))

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
        },
    )
    async def v1_translate(request: Request):
        """Lines in, one translation each: n-best with scores, word alignments and, when asked,
        the cross-attention matrix (the last decoder layer, mean over heads)."""
        req = parse_v1(await read_body(request, cfg.max_body))
        service.check_key(req.api_key, request.headers.get("x-api-key"))
        return await service.v1(request.state, req)


def _other_routes(app: FastAPI, service: Service) -> None:
    models = service.models

    @app.post("/detect", summary="LibreTranslate-compatible language detection")
    async def detect_language(request: Request):
        """LibreTranslate's /detect: for `q` (a string, or a list: one answer each) the
        language and a confidence in percent."""
        fields = await read_fields(request, service.cfg.max_body)
        check_fields(fields, {"q", "api_key", "secret"})
        service.check_key(fields.get("api_key"), request.headers.get("x-api-key"))
        q = fields.get("q")
        check_q(q)
        answers = [_detected(text) for text in ([q] if isinstance(q, str) else q)]
        return answers[0] if isinstance(q, str) else answers

    @app.get("/languages", summary="LibreTranslate-compatible list of languages")
    async def languages():
        models.check_ready()
        return models.languages()

    @app.get("/health", summary="200 once the models are loaded")
    async def health():
        if models.error:
            return JSONResponse({"status": "failed", "error": models.error}, status_code=500)
        if not models.ready.is_set():
            return JSONResponse({"status": "loading"}, status_code=503)
        names = [
            {"name": s.name, "source": s.src_lang, "target": s.tgt_lang} for s in models.served
        ]
        batcher = service.batcher
        stats = {"batches": batcher.batches, "jobs": batcher.jobs_done} if batcher else {}
        return {"status": "ok", "models": names, **stats}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))


def _explain_route(app: FastAPI, service: Service) -> None:
    one_at_a_time = asyncio.Lock()  # a walk-through takes a core for ~0.3 s: never a pile

    @app.get("/explain", response_class=HTMLResponse, summary="The model's arithmetic, as a page")
    async def explain(
        request: Request,
        q: str = "",
        source: str = "auto",
        target: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
    ):
        """`mtcli explain`'s page for the sentence `q`: its pieces, embeddings, one encoder
        head worked through, the decoder step by step and what the model learned, with the
        served model's own numbers (the model by name, by the pair, else by q's language)."""
        service.check_key(api_key, request.headers.get("x-api-key"))
        service.models.check_ready()
        served = explained_model(service, q, source, target, model)
        async with one_at_a_time:
            page = await asyncio.get_running_loop().run_in_executor(
                None, explained_page, served.path, q
            )
        return HTMLResponse(page)


def explained_model(service: Service, q: str, source: str, target: str | None, model: str | None):
    """The served model that /explain walks through for `q`, or a 4xx saying why none."""
    if not q.strip():
        raise ApiError(400, "q is empty: there is nothing to explain")
    if len(q) > service.cfg.max_chars:
        raise ApiError(413, f"q has {len(q)} characters; at most {service.cfg.max_chars}")
    served = service.models.picker(source, target, model)(q)
    if served is None:
        raise ApiError(400, "no served model translates q (name one with model=)")
    if served.path is None:
        raise ApiError(400, f"{served.name} runs on CTranslate2, whose arithmetic cannot be shown")
    return served


def explained_page(model_dir, q: str) -> str:
    from mtcli.explain.page import page_for

    try:
        return page_for(model_dir, q)
    except UserError as e:
        raise ApiError(400, str(e)) from None


def _file_routes(app: FastAPI, service: Service) -> None:
    cfg, store = service.cfg, service.files

    @app.post("/translate_file", summary="LibreTranslate-compatible document translation")
    async def translate_file(request: Request):
        """LibreTranslate's /translate_file: a multipart `file` (its format from its extension:
        /frontend/settings lists them), `source` (or auto), `target`, `api_key`. The answer's
        `translatedFileUrl` downloads the translation once, within --keep-files seconds;
        `strings`, `keptAsSource` and `flagged` say how its strings fared, and `report` lists
        each string to read with care (as `mtcli translate --report` writes them)."""
        if store.busy >= AT_ONCE:  # before the body is read: memory stays bounded
            raise ApiError(
                503,
                f"{AT_ONCE} documents are being translated; retry shortly",
                {"Retry-After": "5"},
            )
        store.busy += 1
        try:
            fields, name, data = await read_upload(request, cfg.max_file_bytes)
            service.check_key(fields.get("api_key"), request.headers.get("x-api-key"))
            service.models.check_ready()
            source, target = check_file_fields(fields)
            ext = upload_format(name)
            translated, outcome, job = await service.translate_file(
                request.state, name, data, ext, source, target
            )
        finally:
            store.busy -= 1
        file_id = store.put(name, translated)
        return {
            "translatedFileUrl": str(request.url_for("download_file", file_id=file_id)),
            "strings": outcome.translated + outcome.kept,
            "keptAsSource": outcome.kept,
            "flagged": job.flagged,
            "report": job.report,
        }

    @app.get(
        "/download_file/{file_id}", name="download_file", summary="A translated document, once"
    )
    async def download_file(file_id: str):
        held = store.take(file_id)
        return Response(held.data, media_type=media_type(held), headers=download_headers(held))


def _settings_route(app: FastAPI, service: Service) -> None:
    cfg = service.cfg

    @app.get("/frontend/settings", summary="LibreTranslate's settings for its web page")
    async def frontend_settings():
        service.models.check_ready()
        languages = service.models.languages()
        source = languages[0] if languages else {"code": "en", "name": "English"}
        target = source.get("targets", ["zh"])[0]
        return {
            "charLimit": cfg.max_chars,
            "frontendTimeout": 500,
            "apiKeys": bool(cfg.api_key),
            "keyRequired": bool(cfg.api_key),
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": supported_formats(),
            "maxFileBytes": cfg.max_file_bytes,
            "language": {
                "source": {"code": source["code"], "name": source["name"]},
                "target": {"code": target, "name": LANGUAGE_NAMES.get(target, target)},
            },
        }
