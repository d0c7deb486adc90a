"""Shared pieces of the command line: the stderr console, error handling, common options.

Owns the stderr console (rich: colour only on a TTY, NO_COLOR respected) and the progress
bars, and maps errors to one-line messages and exit codes. stdout carries results only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import torch
from rich.console import Console

from mtcli.config import (
    DecodeConfig,
    ModelConfig,
    TrainConfig,
    from_dict,
    read_toml,
    to_dict,
    unknown_keys,
)
from mtcli.device import pick_device, use_cores
from mtcli.errors import Interrupted, UserError

SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "models" / "en-zh-tiny"
console = Console(stderr=True, highlight=False)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/] {message}")


def die(message: str, code: int = 2):
    console.print(f"[red]Error:[/] {message}", soft_wrap=True)
    sys.exit(code)


class MtcliGroup(click.Group):
    """A click group that turns UserError and Interrupted into one stderr line and an exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            die(str(e), e.exit_code)
        except Interrupted as e:
            console.print(f"[yellow]{e}[/]", soft_wrap=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            die("interrupted", 130)
        except BrokenPipeError:
            # the reader went away (e.g. `| head`): stop quietly, as Unix filters do
            sys.stderr.close()
            os._exit(0)


def default_model_dir(model: str | None) -> Path:
    """-m, else $MTCLI_MODEL, else the shipped model."""
    chosen = model or os.environ.get("MTCLI_MODEL") or SHIPPED_MODEL
    path = Path(chosen)
    if not path.exists():
        origin = (
            "-m" if model else "$MTCLI_MODEL" if os.environ.get("MTCLI_MODEL") else "shipped model"
        )
        raise UserError(f"{path}: no such model directory ({origin})")
    return path


DEFAULTS = DecodeConfig()  # one source of truth for the flags' defaults


def decode_options(func):
    """The decoding flags shared by translate, eval and attention."""
    options = [
        click.option(
            "--beam-size",
            "-b",
            default=DEFAULTS.beam_size,
            show_default=True,
            help="Beam width; 1 = greedy.",
        ),
        click.option("--greedy", is_flag=True, help="Greedy search (same as --beam-size 1)."),
        click.option(
            "--length-penalty",
            default=DEFAULTS.length_penalty,
            show_default=True,
            help="GNMT alpha; 0 = none.",
        ),
        click.option(
            "--max-len-a",
            default=DEFAULTS.max_len_a,
            show_default=True,
            help="Max output = a * source tokens + b.",
        ),
        click.option("--max-len-b", default=DEFAULTS.max_len_b, show_default=True),
        click.option(
            "--nbest",
            default=DEFAULTS.nbest,
            show_default=True,
            help="Hypotheses kept per line (jsonl shows all).",
        ),
        click.option(
            "--batch-tokens",
            default=DEFAULTS.batch_tokens,
            show_default=True,
            help="Padded source tokens x beam per batch.",
        ),
        click.option(
            "--device",
            default="auto",
            show_default=True,
            type=click.Choice(["auto", "cpu", "cuda"]),
        ),
        click.option(
            "--threads", default=0, show_default=True, help="CPU threads (0 = all available)."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def runtime_device(device: str, threads: int) -> torch.device:
    """The device to decode on; on CPU, torch gets `threads` (0 = all available cores)."""
    chosen = pick_device(device)
    if chosen.type == "cpu":
        use_cores(threads)
    return chosen


def build_decode_config(
    beam_size, greedy, length_penalty, max_len_a, max_len_b, nbest, batch_tokens
) -> DecodeConfig:
    try:
        return DecodeConfig(
            beam_size=1 if greedy else beam_size,
            length_penalty=length_penalty,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            nbest=1 if greedy else nbest,
            batch_tokens=batch_tokens,
        )
    except ValueError as e:
        raise UserError(f"bad decoding option: {e}") from None


def train_config_from(
    config_path: str | None, overrides: dict, base: dict | None = None
) -> TrainConfig:
    """Defaults < `base` (a resumed run's config) < TOML file < flags. Unknown TOML keys are an error."""
    data: dict = dict(base or {})
    if config_path:
        try:
            data = read_toml(config_path)
        except (OSError, ValueError) as e:
            raise UserError(f"{config_path}: cannot read config ({e})") from None
        bad = unknown_keys(TrainConfig, data)
        if bad:
            raise UserError(f"{config_path}: unknown setting(s): {', '.join(bad)}")
    model = dict(data.get("model", {}))
    for key, value in overrides.items():
        if value is None:
            continue
        if key.startswith("model."):
            model[key[len("model.") :]] = value
        else:
            data[key] = value
    data["model"] = model
    try:
        return from_dict(TrainConfig, {**data, "model": from_dict_model(model)})
    except (TypeError, ValueError) as e:
        raise UserError(f"bad training option: {e}") from None


def from_dict_model(model: dict) -> ModelConfig:
    return from_dict(ModelConfig, model)


def echo_config(cfg) -> None:
    console.print(f"[dim]config: {json.dumps(to_dict(cfg), ensure_ascii=False)}[/]", soft_wrap=True)
