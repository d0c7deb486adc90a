"""`mtcli translate` and `mtcli export`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import click
import torch
from rich.progress import MofNCompleteColumn, Progress

from mtcli.checkpoint import export_model, load_model
from mtcli.cli.common import (
    build_decode_config,
    console,
    decode_options,
    default_model_dir,
    runtime_device,
    warn,
)
from mtcli.translate import Translation, Translator, quantize_int8, read_chunks


def format_result(t: Translation, fmt: str) -> str:
    if fmt == "text":
        return t.text
    if fmt == "tsv":
        line = f"{t.source}\t{t.text}\t{t.score:.4f}"
        if t.alignment is not None:
            line += "\t" + " ".join(f"{s}-{g}" for s, g in t.alignment)
        return line
    record = {
        "source": t.source,
        "translation": t.text,
        "score": round(t.score, 4),
        "nbest": [{"translation": s, "score": round(sc, 4)} for s, sc in t.nbest],
    }
    if t.alignment is not None:
        record["alignment"] = [list(pair) for pair in t.alignment]
    return json.dumps(record, ensure_ascii=False)


def _input_lines(text: tuple[str, ...], input_file, chunk_lines: int):
    """TEXT as one line; else chunks read straight from the file descriptor (streams early)."""
    if text:
        return [" ".join(text)]
    source = input_file or sys.stdin
    if source is sys.stdin and sys.stdin.isatty():
        console.print("[dim]reading lines from stdin (Ctrl-D to end)[/]")
    try:
        fd = source.fileno()
    except (OSError, AttributeError, io.UnsupportedOperation):
        return source  # an in-memory stream (tests): plain lines
    return read_chunks(fd, chunk_lines, getattr(source, "name", "stdin"))


@click.command("translate")
@click.argument("text", nargs=-1)
@click.option(
    "--model", "-m", help="Model directory.  [default: $MTCLI_MODEL, then the shipped model]"
)
@click.option(
    "--input",
    "-i",
    "input_file",
    type=click.File("r", encoding="utf-8"),
    help="Read lines from FILE ('-' = stdin).",
)
@click.option(
    "--output",
    "-o",
    "output_file",
    type=click.File("w", encoding="utf-8", lazy=True),
    default="-",
    help="Write to FILE.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "tsv", "jsonl"]),
    default="text",
    show_default=True,
)
@click.option(
    "--quantize",
    type=click.Choice(["none", "int8"]),
    default="none",
    show_default=True,
    help="int8: dynamic quantization of the Linear layers (CPU).",
)
@click.option(
    "--align", is_flag=True, help="Add source-target word alignments (tsv: 4th column; jsonl)."
)
@click.option("--quiet", "-q", is_flag=True, help="No warnings on stderr.")
@decode_options
def translate_command(
    text, model, input_file, output_file, fmt, quantize, align, quiet, device, threads, **decode
) -> None:
    """Translate TEXT, or stdin line by line (one output line per input line)."""
    if align and fmt == "text":
        raise click.BadParameter("--align needs --format tsv or jsonl", param_hint="--align")
    cfg = build_decode_config(**decode)
    device = runtime_device(device, threads)
    loaded = load_model(default_model_dir(model), device)
    net = loaded.model
    if quantize == "int8":
        net = quantize_int8(net)
    translator = Translator(
        net,
        loaded.tokenizer,
        cfg,
        device=device,
        warn=(lambda m: None) if quiet else warn,
        align=align,
    )
    results = translator.translate_stream(_input_lines(text, input_file, cfg.chunk_lines))
    with _progress(input_file, quiet) as advance:
        for result in results:
            output_file.write(format_result(result, fmt) + "\n")
            output_file.flush()
            advance()


@contextlib.contextmanager
def _progress(input_file, quiet: bool):
    """A line-count progress bar, only for a named input file and a terminal on stderr."""
    name = getattr(input_file, "name", "-")
    if (
        quiet
        or not console.is_terminal
        or input_file is None
        or name in ("-", "<stdin>")
        or not os.path.isfile(name)
    ):
        yield lambda: None
        return
    with open(name, "rb") as f:
        total = sum(1 for _ in f)
    with Progress(
        *Progress.get_default_columns(), MofNCompleteColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task("translate", total=total)
        yield lambda: bar.advance(task)


@click.command("export")
@click.argument(
    "checkpoints", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False)
)
@click.option("--out", required=True, help="Model directory to write.")
@click.option(
    "--fp16/--fp32", default=True, show_default=True, help="Store weights in half precision."
)
def export_command(checkpoints, out, fp16) -> None:
    """Average one or more checkpoints into a compact model directory without trainer state."""
    export_model(
        [Path(c) for c in checkpoints], Path(out), torch.float16 if fp16 else torch.float32
    )
    precision = "fp16" if fp16 else "fp32"
    console.print(f"wrote {out} ({precision}, mean of {len(checkpoints)} checkpoint(s))")
