"""Options several commands share: the decoding flags, --engine, and parameter types that
refuse what click lets through (text that is not UTF-8, NaN). Imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import replace

import click

from mtcli.config import GENERATION_FIELDS, LANGUAGE, THREADS, DecodeConfig
from mtcli.data.textio import invalid_utf8_at
from mtcli.settings import Layer, build_from_layers, flag


class Utf8Text(click.ParamType):
    """Text given on the command line: it must be UTF-8 (see textio.invalid_utf8_at)."""

    name = "text"

    def convert(self, value, param, ctx):
        if (at := invalid_utf8_at(value)) is not None:
            self.fail(f"invalid UTF-8 (byte {at + 1})", param, ctx)
        return value


UTF8_TEXT = Utf8Text()


class LanguageCodeType(click.ParamType):
    """A language label, judged by config.LANGUAGE as a TOML or flag value is (en, zh-Hant)."""

    name = "code"

    def convert(self, value, param, ctx):
        if why := LANGUAGE.why_not(value) if value else "must not be empty":
            self.fail(f"{value!r} {why.replace('must be', 'is not')}", param, ctx)
        return value


LANGUAGE_CODE_TYPE = LanguageCodeType()


class FiniteRange(click.FloatRange):
    """click's FloatRange, without NaN: every comparison with NaN is false, so FloatRange let
    it through (`serve --batch-wait-ms nan` left every request waiting forever)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail("nan is not a number", param, ctx)
        return number


def decode_options(func):
    """The decoding flags shared by translate, eval, attention and serve (defaults: DecodeConfig)."""
    d = DecodeConfig()

    def number(name: str, kind, default, help: str | None = None, short: str | None = None):
        names = [name, short] if short else [name]
        return click.option(*names, type=kind, default=default, show_default=True, help=help)

    def model_may_set(name: str, kind, default, help: str, short: str | None = None):
        """A flag whose default is the model's own recommendation when it has one (None here:
        unset, so build_decode_config can tell the model may choose)."""
        names = [name, short] if short else [name]
        shown = f"{help}  [default: {default}, or the model's own]"
        return click.option(*names, type=kind, default=None, help=shown)

    options = [
        model_may_set("--beam-size", int, d.beam_size, "Beam width; 1 = greedy.", short="-b"),
        click.option("--greedy", is_flag=True, help="Greedy search (same as --beam-size 1)."),
        model_may_set("--length-penalty", float, d.length_penalty, "GNMT alpha; 0 = none."),
        number("--max-len-a", float, d.max_len_a, "Max output = a * source tokens + b."),
        number("--max-len-b", int, d.max_len_b),
        number("--nbest", int, d.nbest, "Hypotheses kept per line (jsonl shows all)."),
        number("--batch-tokens", int, d.batch_tokens, "Padded source tokens x beam per batch."),
        number("--no-repeat-ngram", int, 0, "No n-gram of this size twice in an output (0 = off)."),
        click.option(
            "--rerank/--no-rerank",
            default=True,
            show_default=True,
            help="Choose among the beam's first candidates with the reverse model, where the "
            "model has fitted weights (rerank.json).",
        ),
        number("--device", click.Choice(["auto", "cpu", "cuda"]), "auto"),
        number(
            "--threads",
            click.IntRange(min=0, max=int(THREADS.high)),
            0,
            "CPU threads (0 = all available).",
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
        help=f"ctranslate2: {what} exported with `mtcli export --format ctranslate2` or "
        "brought by `mtcli import ctranslate2|argos` (pip install 'mtcli[ct2]').",
    )


def build_decode_config(greedy: bool = False, **flags) -> DecodeConfig:
    """DecodeConfig from the decoding flags, each value checked (named by its flag); what no
    flag set among GENERATION_FIELDS, the model's own generation defaults may set."""
    values = {k: v for k, v in flags.items() if v is not None}
    if greedy:
        values.update(beam_size=1, nbest=1)
    layer = Layer(values, lambda key, value: f"{flag(key)} {value}", cls=DecodeConfig)
    cfg = build_from_layers(DecodeConfig, [layer])
    return replace(cfg, from_model=tuple(k for k in GENERATION_FIELDS if k not in values))
