"""Shared pieces of the command line: the stderr console, error handling, common options, and
configs assembled from flags and TOML with every value checked before any work starts.

Owns the stderr console (rich: colour only on a TTY, NO_COLOR respected) and maps errors to
one-line messages and exit codes. stdout carries results only. Imports no torch: a mistake
in the flags is reported in a fraction of a second, and commands import what they need.
"""

from __future__ import annotations

import errno
import gc
import io
import math
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

from mtcli.config import (
    THREADS,
    ConfigError,
    DecodeConfig,
    ModelConfig,
    TrainConfig,
    from_dict,
    read_toml,
    why_not,
)
from mtcli.data.textio import invalid_utf8_at
from mtcli.errors import Interrupted, UserError

console = Console(stderr=True, highlight=False)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/] {message}", soft_wrap=True)


def die(message: str, code: int = 2):
    console.print(f"[red]Error:[/] {message}", soft_wrap=True, markup=True, highlight=False)
    sys.exit(code)


def _os_error_line(e: OSError) -> tuple[str, int]:
    """A file system error as one line; the user's (2) when it is about a path they gave."""
    where = e.filename or ""
    users = isinstance(
        e,
        PermissionError
        | FileNotFoundError
        | IsADirectoryError
        | NotADirectoryError
        | FileExistsError,
    )
    return (f"{where}: {e.strerror}" if where else str(e)), (2 if users else 1)


class NamedOutput:
    """A text stream for results whose write errors name it, as a file's open errors do: a
    full disk is 'stdout: No space left on device', not '[Errno 28] No space left on device'."""

    def __init__(self, stream, name: str):
        self.stream, self.name = stream, name

    def write(self, text: str) -> None:
        self._named(self.stream.write, text)

    def flush(self) -> None:
        self._named(self.stream.flush)

    def close(self) -> None:
        """Close the file: its last buffered write may fail here (and would hide an earlier
        failure if not named too)."""
        self._named(self.stream.close)

    def _named(self, operation, *args) -> None:
        try:
            operation(*args)
        except BrokenPipeError:  # the reader left: stopped quietly in MtcliGroup.invoke
            raise
        except OSError as e:
            e.filename = e.filename or self.name
            raise


class ClosedStream(io.TextIOBase):
    """Stands in for a standard stream the shell closed (`mtcli translate <&-`), where Python
    leaves sys.stdin None and the first use was an AttributeError: reading or writing is an
    OSError naming the stream, which becomes one line as a file's error does."""

    def __init__(self, name: str):
        self.stream_name = name

    def _refuse(self, *args):
        raise OSError(errno.EBADF, "closed (Bad file descriptor)", self.stream_name)

    read = readline = write = fileno = _refuse

    @property
    def buffer(self):
        self._refuse()

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:  # nothing is ever buffered; Python flushes stdout at exit
        pass


class MtcliGroup(click.Group):
    """A click group that loads each command's module only when it runs, and turns every
    error into one stderr line and an exit code (2: the user's to fix, 1: not the user's)."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}  # command name -> "module:attribute"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str):
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            self.add_command(getattr(__import__(module, fromlist=[attr]), attr), name)
        return super().get_command(ctx, name)

    def main(self, *args, **kwargs):
        """Click's own errors (a bad flag value, a missing argument) as one line too."""
        kwargs["standalone_mode"] = False
        for name in ("stdin", "stdout"):
            if getattr(sys, name) is None:
                setattr(sys, name, ClosedStream(name))
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            die("aborted", 130)
        except click.ClickException as e:
            hint = ""
            if isinstance(e, click.UsageError) and e.ctx is not None:
                hint = f" (see '{e.ctx.command_path} -h')"
            die(_escape(e.format_message()) + hint, e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            die(_escape(str(e)), e.exit_code)
        except Interrupted as e:
            console.print(f"[yellow]{_escape(str(e))}[/]", soft_wrap=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one while exiting: ignored
            die("interrupted", 130)
        except BrokenPipeError:
            # the reader went away (e.g. `| head`): stop quietly, as Unix filters do
            sys.stderr.close()
            os._exit(0)
        except OSError as e:
            message, code = _os_error_line(e)
            die(_escape(message), code)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:  # a bug: one line, the traceback only on request
            if os.environ.get("MTCLI_DEBUG"):
                traceback.print_exc()
            die(f"internal error: {type(e).__name__}: {_escape(str(e))} (MTCLI_DEBUG=1 shows where)", 1)  # fmt: skip


def _escape(text: str) -> str:
    """Text shown literally by rich (a path like [x] is not markup)."""
    return text.replace("[", "\\[")


def chosen_model(model: str | None, src: str | None = None, tgt: str | None = None) -> Path | None:
    """The one model a command uses: -m NAME|DIR, else $MTCLI_MODEL, else the installed model
    for --from/--to. None when nothing names one: then the script of each line decides."""
    from mtcli.store import registry

    if model:
        return registry.find(model, "-m")
    if env := os.environ.get("MTCLI_MODEL"):
        return registry.find(env, "$MTCLI_MODEL")
    if src or tgt:
        info = registry.for_direction(src, tgt)
        if info is None:
            wanted = f"{src or '*'}->{tgt or '*'}"
            raise UserError(f"no installed model translates {wanted} (`mtcli models` lists them)")
        return info.path
    return None


def model_for_text(model: str | None, lines: list[str]) -> Path:
    """chosen_model, else the installed model for the language most of `lines` are in."""
    from mtcli.store import registry

    if (path := chosen_model(model)) is not None:
        return path
    votes = [lang for line in lines if (lang := registry.source_language(line))]
    language = max(set(votes), key=votes.count) if votes else "en"
    info = registry.for_direction(language, None)
    if info is None:
        raise UserError(
            f"no installed model translates from {language} (`mtcli models` lists them)"
        )
    return info.path


def check_output_file(path: str | None, option: str, force: bool, reading=None) -> None:
    """An output file that already holds something is the user's: replaced only with --force.
    The file the command reads (`reading`, an open stream) is never one: opening it for
    writing would empty it before a line was read, --force or not."""
    if not path or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    if reading is not None and _same_file(p, reading):
        raise UserError(
            f"{option} {path}: is the input; writing it would erase it before it is read "
            "(write to another file, then move it)"
        )
    if p.exists() and p.stat().st_size > 0 and not force:
        raise UserError(f"{option} {path}: exists; mtcli will not overwrite it (--force to do so)")
    if not p.parent.is_dir():
        raise UserError(f"{option} {path}: no such directory {p.parent}")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"{option} {path}: permission denied")


def _same_file(path: Path, stream) -> bool:
    """Whether `path` is the file behind the open `stream` (a link to it, or stdin redirected
    from it, too)."""
    try:
        opened, there = os.fstat(stream.fileno()), path.stat()
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return False  # no file behind the stream (a pipe's inode never matches), or no file
    return (opened.st_dev, opened.st_ino) == (there.st_dev, there.st_ino)


class Utf8Text(click.ParamType):
    """Text given on the command line: it must be UTF-8 (see textio.invalid_utf8_at)."""

    name = "text"

    def convert(self, value, param, ctx):
        if (at := invalid_utf8_at(value)) is not None:
            self.fail(f"invalid UTF-8 (byte {at + 1})", param, ctx)
        return value


UTF8_TEXT = Utf8Text()


class FiniteRange(click.FloatRange):
    """click's FloatRange, without NaN: every comparison with NaN is false, so FloatRange let
    it through (`serve --batch-wait-ms nan` left every request waiting forever)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail("nan is not a number", param, ctx)
        return number


def decode_options(func):
    """The decoding flags shared by translate, eval and attention (defaults: DecodeConfig)."""
    defaults = DecodeConfig()
    options = [
        click.option(
            "--beam-size",
            "-b",
            type=int,
            default=defaults.beam_size,
            show_default=True,
            help="Beam width; 1 = greedy.",
        ),
        click.option("--greedy", is_flag=True, help="Greedy search (same as --beam-size 1)."),
        click.option(
            "--length-penalty",
            type=float,
            default=defaults.length_penalty,
            show_default=True,
            help="GNMT alpha; 0 = none.",
        ),
        click.option(
            "--max-len-a",
            type=float,
            default=defaults.max_len_a,
            show_default=True,
            help="Max output = a * source tokens + b.",
        ),
        click.option("--max-len-b", type=int, default=defaults.max_len_b, show_default=True),
        click.option(
            "--nbest",
            type=int,
            default=defaults.nbest,
            show_default=True,
            help="Hypotheses kept per line (jsonl shows all).",
        ),
        click.option(
            "--batch-tokens",
            type=int,
            default=defaults.batch_tokens,
            show_default=True,
            help="Padded source tokens x beam per batch.",
        ),
        click.option(
            "--no-repeat-ngram",
            type=int,
            default=0,
            show_default=True,
            help="No n-gram of this size twice in an output (0 = off).",
        ),
        click.option(
            "--device",
            default="auto",
            show_default=True,
            type=click.Choice(["auto", "cpu", "cuda"]),
        ),
        click.option(
            "--threads",
            type=click.IntRange(min=0, max=int(THREADS.high)),
            default=0,
            show_default=True,
            help="CPU threads (0 = all available).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def engine_option(what: str):
    """--engine: mtcli's own decoder, or CTranslate2 on `what` exported for it."""
    return click.option(
        "--engine",
        type=click.Choice(["mtcli", "ctranslate2"]),
        default="mtcli",
        show_default=True,
        help=f"ctranslate2: {what} exported with `mtcli export --format ctranslate2` "
        "(pip install 'mtcli[ct2]').",
    )


def import_torch() -> None:
    """Import torch, then freeze what exists: the collector no longer walks torch's objects.

    They live as long as the process, yet every full collection walked them again while the
    rest of mtcli was imported and the model loaded: 0.3 s of a one-sentence translate's
    start-up here (bench/ct2.py measures it). Commands call this before anything that needs
    torch; the collector stays on for the objects made after.
    """
    import torch  # noqa: F401

    gc.freeze()


def check_models_early(paths: list[Path | None]) -> None:
    """Each model directory's files, checked before torch is imported (see mtcli.store.model_dir):
    a damaged one is one line at once rather than after torch's second of start-up. Loading
    checks them again, with the tensor shapes; None (a model chosen per line) is skipped."""
    from mtcli.store.model_dir import check_model_files

    for path in paths:
        if path is not None:
            check_model_files(path)


def runtime_device(device: str, threads: int):
    """The torch device to decode on; on CPU, torch gets `threads` (0 = all available cores)
    and freed memory is kept for the next step's tensors (see mtcli.device)."""
    from mtcli.device import keep_freed_memory, limit_kernel_caches, pick_device, use_cores

    limit_kernel_caches()  # before torch: oneDNN reads it when it first runs
    import_torch()

    chosen = pick_device(device)
    if chosen.type == "cpu":
        use_cores(threads)
        keep_freed_memory()
    return chosen


def flag(key: str) -> str:
    """The command-line flag of a config field: model.d_model -> --d-model."""
    return "--" + key.removeprefix("model.").replace("_", "-")


def build_decode_config(greedy: bool = False, **flags) -> DecodeConfig:
    """DecodeConfig from the decoding flags, each value checked (named by its flag)."""
    values = {k: v for k, v in flags.items() if v is not None}
    if greedy:
        values.update(beam_size=1, nbest=1)
    layer = Layer(values, lambda key, value: f"{flag(key)} {value}", cls=DecodeConfig)
    return build_from_layers(DecodeConfig, [layer])


# ---------------------------------------------------------------- configs from layers
class Layer:
    """One source of settings (defaults of a checkpoint, a TOML file, the flags), flattened
    to keys like "max_tokens" and "model.d_model", and how to name a key of it in an error."""

    def __init__(
        self,
        values: dict,
        describe: Callable[[str, object], str],
        *,
        cls: type = TrainConfig,
        strict: bool = True,
    ):
        self.values, self.describe = {}, describe
        for key, value in values.items():
            if key == "model" and isinstance(value, dict):
                self.values.update({f"model.{k}": v for k, v in value.items()})
            else:
                self.values[key] = value
        # every value judged by config.py's rules; unknown keys refused (or dropped, for a
        # checkpoint written by another mtcli version)
        for key, value in list(self.values.items()):
            owner, name = (ModelConfig, key[6:]) if key.startswith("model.") else (cls, key)
            if name not in owner.__dataclass_fields__:
                if strict:
                    raise UserError(f"{self.describe(key, value)}: unknown setting")
                del self.values[key]
            elif why := why_not(owner, name, value):
                raise UserError(f"{self.describe(key, value)}: {why}")


def build_from_layers(cls: type, layers: list[Layer]):
    """Later layers win; a check across fields (d_model % n_heads) names the layer that set it."""
    merged: dict = {}
    origin: dict[str, Layer] = {}
    for layer in layers:
        merged.update(layer.values)
        origin.update(dict.fromkeys(layer.values, layer))
    nested: dict = {"model": {}} if cls is TrainConfig else {}
    for key, value in merged.items():
        if key.startswith("model."):
            nested["model"][key[6:]] = value
        else:
            nested[key] = value
    try:
        return from_dict(cls, nested)
    except ConfigError as e:
        who = origin.get(e.key)
        where = who.describe(e.key, e.value) if who else f"{flag(e.key)} {e.value} (the default)"
        raise UserError(f"{where}: {e.why}") from None


def toml_layer(path: str) -> Layer:
    """A TOML file of TrainConfig fields; a [model] table for ModelConfig fields."""
    try:
        data = read_toml(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        raise UserError(f"{path}: cannot read config ({e})") from None
    if "model" in data and not isinstance(data["model"], dict):
        raise UserError(f"{path}: model = {data['model']!r}: must be a table ([model])")
    return Layer(data, lambda key, value: f"{path}: {key} = {value!r}")
