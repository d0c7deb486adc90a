"""The command line's stderr console and its one error path: every error becomes one stderr
line and an exit code (2: the user's to fix, 1: not the user's), never a traceback.

rich gives colour only on a TTY and respects NO_COLOR; stdout carries results only.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

import click
from rich.console import Console

from mtcli.cli.streams import ClosedStream
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
            if isinstance(e, click.NoSuchOption):
                _suggest_our_name(e)
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
            die(
                f"internal error: {type(e).__name__}: {_escape(str(e))} (MTCLI_DEBUG=1 shows where)",
                1,
            )


# what other translation tools call an option (LibreTranslate's source/target, argos-translate's
# --from-lang/--to-lang, translate-shell's -s/-t) and mtcli's name for it; click's own guess
# spelled --target as --trace and --lang as --align
OTHER_TOOLS = {
    "--target": "--to",
    "--tgt": "--to",
    "--target-lang": "--to",
    "--tgt-lang": "--to",
    "--to-lang": "--to",
    "--target-language": "--to",
    "--lang": "--to",
    "--source": "--from",
    "--src-lang": "--from",
    "--source-lang": "--from",
    "--from-lang": "--from",
    "--source-language": "--from",
    "--sl": "--from",
    "--tl": "--to",
}


def _suggest_our_name(e: click.NoSuchOption) -> None:
    """Point a name from another tool at mtcli's (--target -> --to), where the command has it."""
    ours = OTHER_TOOLS.get(e.option_name.split("=")[0])
    names = {o for p in e.ctx.command.params for o in p.opts} if e.ctx else set()
    if ours in names:
        other = {"--to": "--from", "--from": "--to"}[ours]
        e.possibilities = [ours, other] if e.option_name == "--lang" else [ours]


def _escape(text: str) -> str:
    """Text shown literally by rich (a path like [x] is not markup)."""
    return text.replace("[", "\\[")
