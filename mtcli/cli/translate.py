"""`mtcli translate`: lines in, translations out, one output line per input line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import click
from rich.progress import MofNCompleteColumn, Progress

from mtcli.cli.common import (
    build_decode_config,
    check_output_file,
    chosen_model,
    console,
    decode_options,
    runtime_device,
    warn,
)
from mtcli.textio import read_chunks


def format_result(t, fmt: str) -> str:
    """One output line for a translate.Translation."""
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
    if t.passthrough:
        record["passthrough"] = True  # no model translates this line: it is left as it was
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
    name = "stdin" if source is sys.stdin else getattr(source, "name", "stdin")
    return read_chunks(fd, chunk_lines, name)


@click.command("translate")
@click.argument("text", nargs=-1)
@click.option(
    "--model",
    "-m",
    help="Model name (`mtcli models`) or directory.  [default: by the script of each line]",
)
@click.option("--from", "src_lang", help="Source language: use the installed model from it (e.g. zh).")  # fmt: skip
@click.option("--to", "tgt_lang", help="Target language: use the installed model into it (e.g. en).")  # fmt: skip
@click.option(
    "--input",
    "-i",
    "input_file",
    type=click.File("r", encoding="utf-8"),
    help="Read lines from FILE ('-' = stdin).",
)
@click.option("--output", "-o", "output_path", default="-", help="Write to FILE ('-' = stdout).")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
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
@click.option("--align", is_flag=True, help="Add source-target word alignments (tsv: 4th column; jsonl).")  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="No warnings on stderr.")
@decode_options
def translate_command(
    text, model, src_lang, tgt_lang, input_file, output_path, force, fmt, quantize, align, quiet,
    device, threads, **decode,
) -> None:  # fmt: skip
    """Translate TEXT, or stdin line by line (one output line per input line).

    \b
    Without -m, each line goes to the installed model for its script: Chinese (Han
    characters) to zh->en, other text to en->zh; a line with no letters is left as it is.
    """
    if align and fmt == "text":
        raise click.BadParameter("--align needs --format tsv or jsonl", param_hint="--align")
    cfg = build_decode_config(**decode)
    check_output_file(output_path, "--output", force)
    model_dir = chosen_model(model, src_lang, tgt_lang)
    from mtcli.registry import for_direction, source_language  # after the checks: torch below
    from mtcli.translate import Router

    device = runtime_device(device, threads)
    say = (lambda m: None) if quiet else warn

    def translator(path):
        return _load_translator(path, cfg, device, quantize, align, say)

    if model_dir is not None:
        engine = translator(model_dir)
    else:
        engine = Router(
            source_language,
            lambda language: translator(info.path) if (info := for_direction(language, None)) else None,
            cfg.chunk_lines,
            say,
        )  # fmt: skip
    results = engine.translate_stream(_input_lines(text, input_file, cfg.chunk_lines))
    with _output(output_path) as out, _progress(input_file, quiet) as advance:
        for result in results:
            out.write(format_result(result, fmt) + "\n")
            out.flush()  # a pipeline sees each line as soon as it is translated
            advance()


def _load_translator(path, cfg, device, quantize: str, align: bool, warn_once):
    """A Translator for the model directory `path`."""
    from mtcli.checkpoint import load_model
    from mtcli.translate import Translator, quantize_int8

    loaded = load_model(path, device)
    net = quantize_int8(loaded.model) if quantize == "int8" else loaded.model
    return Translator(net, loaded.tokenizer, cfg, device=device, warn=warn_once, align=align)


@contextlib.contextmanager
def _output(path: str):
    if path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as f:
        yield f


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
