"""Documents over HTTP, as LibreTranslate has them: POST /translate_file (a multipart upload of
`file`, `source`, `target`, `api_key`) answers {"translatedFileUrl": ...}, and GET
/download_file/NAME hands the translation over once.

An upload is read whole within --max-file-bytes and translated by mtcli/documents in a worker
thread, whose strings go through the server's batch queue as any request's lines do (so a long
document and /translate share the model), within --file-timeout seconds. The translation is
held in memory, never on disk: until its one download or for --keep-files seconds, whichever
comes first, and only so many at once (beyond, 503): a server's memory stays bounded and
nothing a client sent outlives its use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import mimetypes
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fastapi import Request
from starlette.datastructures import UploadFile

from mtcli.documents.document import translate_bytes
from mtcli.documents.formats import FORMATS, extension_of, missing_library
from mtcli.documents.segments import Outcome, as_written
from mtcli.engines.result import flagged_texts, report_records
from mtcli.errors import UserError
from mtcli.serving.requests import ApiError, check_fields, read_body

FILE_FIELDS = {"source", "target", "api_key", "secret"}  # and `file`, the upload itself
FORM_SLACK = 64 * 1024  # bytes of a multipart body beyond its file: boundaries, the other fields
AT_ONCE = 4  # documents read or translated at the same time; beyond, 503 before any is read
HELD_FILES = 64  # translations waiting for their download at most
HELD_BYTES = 256 << 20  # and their bytes together
LINES_PER_JOB = 32  # a document's strings go to the queue in jobs of this many


def supported_formats() -> list[str]:
    """The extensions this server translates (a format whose library is missing is left out)."""
    return [ext for ext in FORMATS if not missing_library(ext)]


def upload_format(name: str) -> str:
    """The format of an uploaded file, from its name's extension: a 400 unless supported."""
    ext = extension_of(name)
    if ext not in supported_formats():
        known = ", ".join(supported_formats())
        raise ApiError(
            400,
            f"invalid request: file format {ext or '(none)'!r} is not supported; one of {known}",
        )
    return ext


def download_name(name: str) -> str:
    """The uploaded file's own name, without folders or characters a header or a file
    system would trip on (the download offers it; nothing is written under it here)."""
    base = re.split(r"[/\\]", name)[-1]
    safe = re.sub(r"[^\w.\- ]", "_", base).strip(" .")[-100:]
    return safe or "document"


@dataclass
class Held:
    name: str
    data: bytes
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False)


class FileStore:
    """Translations waiting for their download, in memory: each until taken once, or until
    `keep_s` seconds have passed; a full store is a 503."""

    def __init__(self, keep_s: float):
        self.keep_s = keep_s
        self.held: dict[str, Held] = {}
        self.busy = 0  # uploads being read or translated now

    def put(self, name: str, data: bytes) -> str:
        """Hold `data`; the id its download URL ends with (an unguessable token, then the name)."""
        if len(self.held) >= HELD_FILES or self.size + len(data) > HELD_BYTES:
            raise ApiError(
                503,
                "too many translated files wait for their download; retry shortly",
                {"Retry-After": "5"},
            )
        token = secrets.token_urlsafe(18)  # the URL is the capability: 144 random bits
        held = Held(download_name(name), data)
        held.expiry = asyncio.get_running_loop().call_later(self.keep_s, self.held.pop, token, None)
        self.held[token] = held
        return f"{token}.{held.name}"

    def take(self, file_id: str) -> Held:
        """The held file named by `file_id`, removed: a second download is a 404."""
        token = file_id.split(".", 1)[0]
        held = self.held.get(token)
        if held is None or not secrets.compare_digest(
            file_id.encode(), f"{token}.{held.name}".encode()
        ):
            raise ApiError(
                404,
                "no such file: translated files are downloaded once, within a while of their upload",
            )
        del self.held[token]
        held.expiry.cancel()
        return held

    @property
    def size(self) -> int:
        return sum(len(h.data) for h in self.held.values())


async def read_upload(request: Request, limit: int) -> tuple[dict, str, bytes]:
    """A multipart body's fields, its file's name and its bytes (at most `limit`: beyond, 413)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(
            400, "invalid request: send the document as multipart/form-data, in a field named file"
        )
    body = await read_body(request, limit + FORM_SLACK)

    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    fields: dict[str, list] = {}
    name, data = None, b""
    async with Request(request.scope, replay).form(
        max_files=1, max_fields=len(FILE_FIELDS)
    ) as form:
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key != "file":
                    raise ApiError(
                        400, f"invalid request: a file in field {key[:40]!r}; name it file"
                    )
                name, data = value.filename or "", await value.read(limit + 1)
            else:
                fields.setdefault(key, []).append(value)
    if name is None:
        raise ApiError(400, "invalid request: missing file parameter")
    fields = {k: v[0] if len(v) == 1 else v for k, v in fields.items()}  # repeated: a 400 later
    if len(data) > limit:
        raise ApiError(413, f"the file is over {limit} bytes (--max-file-bytes)")
    return fields, name, data


def check_file_fields(fields: dict) -> tuple[str, str]:
    """(source, target) of a /translate_file request; source defaults to auto."""
    check_fields(fields, FILE_FIELDS)
    target = fields.get("target")
    if not target:
        raise ApiError(400, "invalid request: missing target parameter")
    return fields.get("source") or "auto", target


@dataclass
class FileJob:
    """One document's translation: its strings, in jobs of the queue, before a deadline."""

    run: Callable[[list[str], bool], Awaitable[list]]  # lines, html -> Translations, queued
    html: bool
    deadline: float  # time.monotonic() by which the whole document is done
    timeout: float
    loop: asyncio.AbstractEventLoop
    flagged: int = 0
    # the strings to read with care, as `mtcli translate --report` writes them
    report: list[dict] = field(default_factory=list)
    strings: int = 0  # the document's strings so far (a format may translate in several calls)

    def translate(self, lines: list[str]) -> list[str]:
        """Called by mtcli/documents in the worker thread: the lines, translated."""
        out: list[str] = []
        for start in range(0, len(lines), LINES_PER_JOB):
            results = self._queued(lines[start : start + LINES_PER_JOB])
            out.extend(r.text for r in results)
            for r in results:
                self.strings += 1
                written = as_written(r.source) if self.html else r.source
                self.flagged += len(flagged_texts(r, written))
                self.report.extend(report_records(r, self.strings, "string", written))
        return out

    def _queued(self, chunk: list[str]) -> list:
        """One job through the queue; a full queue is waited out (a document is not failed
        for the traffic beside it), until the deadline."""
        while (left := self.deadline - time.monotonic()) > 0:
            future = asyncio.run_coroutine_threadsafe(self.run(chunk, self.html), self.loop)
            try:
                return future.result(timeout=left)
            except concurrent.futures.TimeoutError:
                future.cancel()  # its jobs leave the queue undecoded
                break
            except ApiError as e:
                if e.status != 503:
                    raise
                time.sleep(min(0.2, max(0.0, left)))
        raise ApiError(
            413,
            f"the document takes over {self.timeout:g} s to translate (--file-timeout); "
            "send a smaller one",
        )


async def translate_upload(job: FileJob, name: str, data: bytes, ext: str) -> tuple[bytes, Outcome]:
    """The upload translated in a worker thread (parsing a document is work too); a damaged
    file is a 400 naming what is wrong."""
    try:
        return await job.loop.run_in_executor(None, translate_bytes, name, data, ext, job.translate)
    except UserError as e:
        raise ApiError(400, f"invalid file: {e}") from None
    except RecursionError:  # a format's parser meeting a document nested thousands deep
        raise ApiError(400, f"invalid file: {name}: nested too deeply") from None


def download_headers(held: Held) -> dict[str, str]:
    """An attachment under the uploaded name (RFC 6266: an ASCII fallback and the UTF-8 name)."""
    ascii_name = held.name.encode("ascii", "replace").decode().replace("?", "_")
    quoted = urllib.parse.quote(held.name)
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quoted}"
    return {"Content-Disposition": disposition}


def media_type(held: Held) -> str:
    return mimetypes.guess_type(held.name)[0] or "application/octet-stream"
