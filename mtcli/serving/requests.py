"""What a request to `mtcli serve` may be, checked before anything is translated: the server's
limits, its errors, mtcli's own /v1 schema, bodies read with a bound, LibreTranslate's fields,
and the decode settings a request may choose.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, replace

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import ClientDisconnect

from mtcli.config import ConfigError, DecodeConfig, ServeConfig
from mtcli.data.textio import invalid_utf8_at


class ApiError(Exception):
    """A request mistake (4xx) or a busy server (503), shown as {"error": message} (and a
    machine-readable "reason" where a client acts on it: the page asks for a missing key)."""

    def __init__(self, status: int, message: str, headers: dict | None = None, reason: str = ""):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}
        self.reason = reason

    def body(self) -> dict:
        return {"error": self.message, **({"reason": self.reason} if self.reason else {})}


class V1Request(BaseModel):
    """POST /v1/translate."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is a 400, not ignored

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
    confidence: bool = Field(
        False,
        description="A calibrated confidence for each line, and whether it is flagged as unreliable.",
    )
    api_key: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _q_as_lines(cls, data):
        """LibreTranslate's q (a text, or a list of texts) is taken as the lines: a text's lines
        each get their translation, as `lines` would."""
        if not isinstance(data, dict) or "q" not in data:
            return data
        if "lines" in data:
            raise ValueError("give lines or q (LibreTranslate's name), not both")
        data = dict(data)
        q = data.pop("q")
        data["lines"] = q.splitlines() or [q] if isinstance(q, str) else q
        return data


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
    confidence: float | None = Field(
        None, description="With confidence: the probability it is good."
    )
    flagged: bool | None = Field(None, description="With confidence: below the model's threshold.")


class V1Response(BaseModel):
    translations: list[V1Translation]


def parse_v1(body: bytes) -> V1Request:
    try:
        return V1Request.model_validate_json(body or b"{}")
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        shape = ' (the body is {"lines": ["a line", ...]}; q as LibreTranslate has it is taken too)'
        missing = err["type"] == "missing" and where == "lines"
        raise ApiError(400, f"{where}: {err['msg']}{shape if missing else ''}") from None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes `limit`: memory stays bounded."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes; at most {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"request body over {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed at the request deadline: nobody to answer
        raise ApiError(400, "the client went away before its body arrived") from None
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
    except RecursionError:  # [[[[ ... 5,000 deep: Python's parser recurses per level
        raise ApiError(400, "the body is nested too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


@dataclass
class LibreRequest:
    """LibreTranslate's /translate fields, checked: each q item split into its lines."""

    items: list[list[str]]  # the lines of each q item (a q item may hold several)
    one: bool  # q was a string, not a list: so is the answer
    source: str  # a language code, or "auto": each line by its script
    target: str
    alternatives: int  # extra hypotheses wanted per item
    html: bool = False  # format "html": each item one document, its tags kept

    @property
    def lines(self) -> list[str]:
        return [line for item in self.items for line in item]


LIBRE_FIELDS = {"q", "source", "target", "format", "api_key", "alternatives", "secret"}


def check_fields(fields: dict, known: set[str]) -> None:
    """Unknown fields are a 400 (a misspelt `targte` was ignored), and so is a field other
    than q given twice (a form's repeated key)."""
    if unknown := sorted(set(fields) - known):
        raise ApiError(400, f"invalid request: unknown field {unknown[0][:40]!r}")
    for name, value in fields.items():
        if name == "q":
            continue  # its lines are checked one by one, by number (check_lines)
        if isinstance(value, list):
            raise ApiError(400, f"invalid request: {name} given {len(value)} times")
        check_text(name, value)


def check_q(q) -> None:
    """LibreTranslate's q: a string or a list of strings (for /translate and /detect)."""
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
        raise ApiError(400, "invalid request: q must be a string or a list of strings")


def beam_cap(cfg: ServeConfig) -> int:
    """The widest beam, n-best list or alternatives + 1 a request may ask (--max-beam)."""
    return cfg.max_beam or cfg.decode.beam_size


def check_text(name: str, value) -> None:
    """A string field (or a list's strings) must be valid Unicode: JSON can escape a lone
    surrogate, which no encoder writes (it was a 500 where the field reached a message)."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and (at := invalid_utf8_at(item)) is not None:
            raise ApiError(
                400, f"invalid request: {name} is not valid Unicode (character {at + 1})"
            )


def parse_libre(fields: dict) -> LibreRequest:
    check_fields(fields, LIBRE_FIELDS)
    q = fields.get("q")
    if q is None:
        raise ApiError(400, "invalid request: missing q parameter")
    check_q(q)
    target = fields.get("target")
    if not isinstance(target, str) or not target:
        raise ApiError(400, "invalid request: missing target parameter")
    for name in ("source", "format"):
        if not isinstance(fields.get(name) or "", str):
            raise ApiError(400, f"invalid request: {name} must be a string")
    fmt = fields.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"format {fmt!r} is not supported; use text or html")
    alternatives = _alternatives(fields.get("alternatives"))
    items = [q] if isinstance(q, str) else q
    # a text item may hold several lines; an HTML item is one document (newlines are spaces)
    split = [[item] if fmt == "html" else item.split("\n") for item in items]
    source = fields.get("source") or "auto"
    return LibreRequest(split, isinstance(q, str), source, target, alternatives, fmt == "html")


def _alternatives(value) -> int:
    """LibreTranslate's `alternatives`: absent, or a whole number of at least 1."""
    if value is None or value == "":
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ApiError(400, "invalid request: alternatives must be a whole number") from None
    if isinstance(value, bool) or number < 1 or (isinstance(value, float) and value != number):
        raise ApiError(
            400, f"invalid request: alternatives {value!r}: must be 1 or more (or absent)"
        )
    return number


def check_lines(lines: list[str], cfg: ServeConfig) -> None:
    """A request's lines within the server's limits, each valid Unicode."""
    if len(lines) > cfg.max_lines:
        raise ApiError(413, f"{len(lines)} lines in one request; at most {cfg.max_lines}")
    for i, line in enumerate(lines):
        if len(line) > cfg.max_chars:
            raise ApiError(413, f"line {i + 1} has {len(line)} characters; at most {cfg.max_chars}")
        if (at := invalid_utf8_at(line)) is not None:  # JSON can escape a lone surrogate
            raise ApiError(400, f"line {i + 1} is not valid Unicode (byte {at + 1})")


def request_decode(
    cfg: ServeConfig, beam_size=None, nbest=None, length_penalty=None
) -> DecodeConfig:
    """The server's decode settings with what a request chose, within the server's caps (a
    beam, n-best list or alternatives above --max-beam is a 400); config.py's rules judge the
    rest (nbest above the beam among them), as they judge the command line's flags."""
    defaults, cap = cfg.decode, beam_cap(cfg)
    for name, value in (("beam_size", beam_size), ("nbest", nbest)):
        if value is not None and value > cap:
            raise ApiError(400, f"{name} {value}: this server allows at most {cap} (--max-beam)")
    alpha = defaults.length_penalty if length_penalty is None else length_penalty
    chosen = {"beam_size": beam_size, "length_penalty": length_penalty}
    # what the request left open, the model's generation defaults may still set
    from_model = tuple(k for k in defaults.from_model if chosen.get(k) is None)
    try:
        return replace(
            defaults,
            beam_size=beam_size or defaults.beam_size,
            nbest=nbest or 1,
            length_penalty=alpha,
            from_model=from_model,
        )
    except ConfigError as e:
        raise ApiError(400, f"{e.key} {e.value}: {e.why}") from None
