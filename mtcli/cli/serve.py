"""`mtcli serve`: the translation server (LibreTranslate-compatible API, mtcli's own, a web page)."""

from __future__ import annotations

import dataclasses
import signal

import click

from mtcli.cli.console import console
from mtcli.cli.options import FiniteRange, build_decode_config, decode_options, engine_option
from mtcli.config import ServeConfig
from mtcli.errors import UserError

SERVE = ServeConfig()  # the defaults of the server's limits


def _limit(name: str, default: int, help: str, low: int = 1):
    """A server limit: a whole number of at least `low`."""
    return click.option(
        name, default=default, show_default=True, type=click.IntRange(min=low), help=help
    )


def _duration(name: str, default: float, help: str, low: float = 0.1, high: float = 3600):
    """A server time limit (seconds, or milliseconds where the flag says): finite, in [low, high]."""
    return click.option(
        name, default=default, show_default=True, type=FiniteRange(low, high), help=help
    )


# the flags whose ServeConfig field has another name (the others are the flag's own)
LIMITS = {"max_batch_tokens": "batch_tokens", "max_request_tokens": "request_tokens"}


def _limit_names() -> list[str]:
    """serve's flags that are ServeConfig's limits (api_key and decode are passed apart)."""
    fields = {f.name for f in dataclasses.fields(ServeConfig)} - {"api_key", "decode"}
    return [name for name in (*fields, *LIMITS) if name not in LIMITS.values()]


def _model_paths(models: tuple[str, ...]):
    """-m NAME|DIR (repeatable); without -m, every shipped model."""
    from mtcli.store import registry

    if models:
        return [registry.find(m) for m in models]
    shipped = registry.shipped_models_dir()
    paths = [info.path for info in registry.installed() if info.path.parent == shipped]
    if not paths:
        raise UserError(f"no shipped models in {shipped}; name one with -m")
    return paths


@click.command("serve")
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    help="Model name or directory; repeat for several.  [default: every shipped model]",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface).",
)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@_duration(
    "--batch-wait-ms", SERVE.batch_wait_ms, "Milliseconds a batch waits for more requests.", 0, 1000
)
@_limit("--max-batch-tokens", SERVE.batch_tokens, "Source tokens gathered into one batch.")
@_limit("--max-chars", SERVE.max_chars, "Characters in one line.")
@_limit("--max-lines", SERVE.max_lines, "Lines in one request.")
@_limit("--max-body", SERVE.max_body, "Bytes in one request body.", low=64)
@_limit("--queue-size", SERVE.queue_size, "Requests waiting; beyond, 503 with Retry-After.")
@_limit(
    "--max-beam",
    SERVE.max_beam,
    "Widest beam, n-best or alternatives a request asks (0: -b).",
    low=0,
)
@_limit(
    "--max-connections",
    SERVE.max_connections,
    "Connections held; beyond, the stalest unfinished goes.",
)
@_duration(
    "--request-timeout", SERVE.request_timeout, "Seconds a request's headers and body may take."
)
@_duration("--keep-alive", SERVE.keep_alive, "Seconds an idle connection stays open.")
@_limit(
    "--max-request-tokens", SERVE.request_tokens, "Source tokens of one request's lines together."
)
@_limit("--max-file-bytes", SERVE.max_file_bytes, "Bytes of one document sent to /translate_file.")
@_duration("--file-timeout", SERVE.file_timeout, "Seconds a document may take to translate.")
@_duration(
    "--keep-files", SERVE.keep_files, "Seconds a translated document waits for its download."
)
@click.option(
    "--api-key",
    envvar="MTCLI_API_KEY",
    default="",
    help="Require this key (api_key field or X-API-Key header).  [env: MTCLI_API_KEY]",
)
@click.option(
    "--shutdown-timeout",
    default=30,
    show_default=True,
    type=click.IntRange(min=1),
    help="Seconds requests in flight get to finish on SIGTERM/SIGINT.",
)
@engine_option("models")
@decode_options
def serve_command(
    models, host, port, api_key, shutdown_timeout, engine, device, threads, **options
) -> None:
    """Serve translation over HTTP: LibreTranslate's API, mtcli's own, and a web page at /.

    \b
    curl -s localhost:8000/translate -H 'Content-Type: application/json' \\
         -d '{"q": "Why do we work?", "source": "en", "target": "zh"}'
    """
    limits = {LIMITS.get(name, name): options.pop(name) for name in _limit_names()}
    decode_cfg = build_decode_config(**options)
    if limits["max_beam"] and limits["max_beam"] < (beam := decode_cfg.beam_size):
        raise UserError(
            f"--max-beam {limits['max_beam']}: below --beam-size {beam}, the server's own"
        )
    paths = _model_paths(models)
    try:
        import uvicorn

        from mtcli.serving import app as serve
        from mtcli.serving.models import loader
    except ImportError as e:
        raise UserError(f"mtcli serve needs {e.name}: pip install 'mtcli[serve]'") from None
    sock = serve.listening_socket(host, port)  # before torch and the models: see its docstring
    load = loader(
        paths, engine, device, threads, ready=lambda line: console.print(line, markup=False)
    )
    cfg = ServeConfig(**limits, api_key=api_key, decode=decode_cfg)
    app = serve.create_app(
        serve.Models(load), cfg, log=lambda line: console.print(line, markup=False)
    )
    console.print(f"serving on http://{host}:{port}  (web page /, API docs /docs)", markup=False)
    _run(uvicorn, app, sock, cfg, shutdown_timeout)


def _run(uvicorn, app, sock, cfg, shutdown_timeout: int) -> None:
    """uvicorn on the bound socket until SIGTERM/SIGINT, which end it gracefully; its
    connections have deadlines and a cap (serving/connections.py)."""
    from mtcli.serving.connections import protocol

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=shutdown_timeout,
            http=protocol(cfg.request_timeout, cfg.max_connections),
            timeout_keep_alive=cfg.keep_alive,
        )
    )
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again to the handler
    # that was there before it: a quiet one, so a clean shutdown exits 0, not by the signal
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    server.run(sockets=[sock])
    if not server.started:
        host, port = sock.getsockname()[:2]
        raise UserError(f"the server on {host}:{port} did not start")
