"""`mtcli translate`: lines in, translations out, one output line per input line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import click
from rich.cells import cell_len
from rich.progress import MofNCompleteColumn, Progress

from mtcli.cli.common import (
    UTF8_TEXT,
    NamedOutput,
    build_decode_config,
    check_models_early,
    check_output_file,
    chosen_model,
    console,
    decode_options,
    engine_option,
    runtime_device,
    warn,
)
from mtcli.data.textio import read_chunks
from mtcli.errors import UserError


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
    if t.trace is not None:
        record["trace"] = t.trace
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
@click.argument("text", nargs=-1, type=UTF8_TEXT)
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    help="Model name (`mtcli models`) or directory; repeat for an ensemble.  [default: by the script of each line]",
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
    help="tsv input: source, then anything, then a prefix in the third column.",
)
@click.option(
    "--prefix",
    type=UTF8_TEXT,
    help="Every translation starts with this text; the model finishes it.",
)
@click.option(
    "--sample", is_flag=True, help="Draw each token instead of searching (--nbest draws per line)."
)
@click.option("--temperature", type=float, help="Sampling: softmax(logits / T).  [default: 1.0]")
@click.option("--top-k", type=int, help="Sampling: the k most probable tokens only (0 = all).")
@click.option("--top-p", type=float, help="Sampling: the smallest set of tokens holding this probability.")  # fmt: skip
@click.option("--seed", type=int, help="Sampling: the same seed draws the same outputs.  [default: 0]")  # fmt: skip
@click.option(
    "--glossary",
    type=click.Path(dir_okay=False),
    help="TSV: source term TAB target term; each term in a line appears in its translation.",
)
@click.option(
    "--trace", is_flag=True, help="Show every step of the search on stderr (jsonl: in the JSON)."
)
@engine_option("a model")
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
    text, models, src_lang, tgt_lang, input_file, output_path, force, fmt, prefix, sample,
    temperature, top_k, top_p, seed, glossary, trace, engine, quantize, align, quiet, device,
    threads, **decode,
) -> None:  # fmt: skip
    """Translate TEXT, or stdin line by line (one output line per input line).

    \b
    Without -m, each line goes to the installed model for its script: Chinese (Han
    characters) to zh->en, other text to en->zh; a line with no letters is left as it is.
    """
    if align and fmt == "text":
        raise click.BadParameter("--align needs --format tsv or jsonl", param_hint="--align")
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    if not sample and any(v is not None for v in sampling.values()):
        raise click.UsageError("--temperature, --top-k, --top-p and --seed need --sample")
    if trace and sample:
        raise click.UsageError("--trace shows a search; it does not trace --sample")
    if align and sample:
        raise click.UsageError("--align reads a search's attention; it does not align --sample")
    if glossary and (sample or trace or align):
        raise click.UsageError(
            "--glossary decodes with constrained beam search: not with --sample, --trace or --align"
        )
    cfg = build_decode_config(sample=sample, **sampling, **decode)
    check_output_file(
        output_path, "--output", force, reading=None if text else input_file or sys.stdin
    )
    terms = None
    if glossary:
        from mtcli.data.glossary import Glossary

        terms = Glossary.load(glossary)
    paths = [chosen_model(m) for m in models] or [chosen_model(None, src_lang, tgt_lang)]
    from mtcli.data.language import source_language
    from mtcli.engines.routing import Router, chunks
    from mtcli.store.registry import for_direction

    say = (lambda m: None) if quiet else warn
    if engine == "ctranslate2":  # neither torch nor mtcli's decoder is imported on this path
        translator = _ct2_translator(paths, cfg, device, threads, quantize, glossary, trace, align, say)  # fmt: skip
    else:
        check_models_early(paths)
        device = runtime_device(device, threads)

        def load(paths):
            return _load_translator(paths, cfg, device, quantize, align, trace, terms, say)

        def for_language(language):
            info = for_direction(language, None)
            return load([info.path]) if info else None

        translator = (
            load(paths)
            if paths[0] is not None
            else Router(source_language, for_language, cfg.chunk_lines, say)
        )
    lines = _input_lines(text, input_file, cfg.chunk_lines)
    with _output(output_path) as out, _progress(input_file, quiet) as advance:
        for chunk in chunks(lines, cfg.chunk_lines):
            sources, prefixes = _split_inputs(chunk, fmt, prefix)
            for result in translator.translate_chunk(sources, prefixes):
                out.write(format_result(result, fmt) + "\n")
                out.flush()  # a pipeline sees each line as soon as it is translated
                if trace and fmt != "jsonl" and result.trace:
                    console.print(render_trace(result), markup=False, soft_wrap=True)
                advance()


def _split_inputs(chunk: list[str], fmt: str, prefix: str | None):
    """Source lines and their prefixes: --prefix for all, or a tsv line's third column."""
    if fmt != "tsv":
        return chunk, ([prefix] * len(chunk) if prefix else None)
    columns = [line.split("\t") for line in chunk]
    prefixes = [c[2] if len(c) > 2 and c[2] else prefix for c in columns]
    return [c[0] for c in columns], (prefixes if any(prefixes) else None)


def render_trace(result) -> str:
    """The steps of a search as a plain table: per step and beam, the token fed back into the
    decoder, the beam's score, and the most probable next tokens; then what finished."""
    out = [f"trace of: {result.source}", "step  beam  fed           score  next tokens (probability)"]  # fmt: skip
    for step in result.trace:
        for b, beam in enumerate(step["beams"]):
            nexts = "  ".join(f"{piece} {p:.2f}" for _, piece, p in beam["next"])
            # padded by terminal cells, not characters: a Chinese character takes two
            fed = beam["fed"] + " " * max(0, 10 - cell_len(beam["fed"]))
            out.append(f"{step['step']:>4}  {b:>4}  {fed}  {beam['score']:>7.3f}  {nexts}")
        for done in step["finished"]:
            out.append(f"            finished: {done['text']}  (score {done['score']:.3f})")
    return "\n".join(out)


def _ct2_translator(paths, cfg, device, threads, quantize, glossary, trace, align, say):
    """CTranslate2's translator for one exported model; what it cannot do is one line."""
    from mtcli.engines.ct2 import CT2Translator

    unsupported = {
        "--glossary": glossary,
        "--trace": trace,
        "--align": align,
        "an ensemble (-m twice)": len(paths) > 1,
        "--device cuda": device == "cuda",
    }
    if wanted := [name for name, asked in unsupported.items() if asked]:
        raise UserError(f"--engine ctranslate2 cannot do {', '.join(wanted)}")
    if paths[0] is None:
        raise UserError(
            "--engine ctranslate2 needs -m DIR (a model exported with `mtcli export --format ctranslate2`)"
        )
    return CT2Translator(paths[0], cfg, threads=threads, quantize=quantize, warn=say)


def _load_translator(paths, cfg, device, quantize: str, align: bool, trace: bool, terms, warn_once):  # fmt: skip
    """A Translator for one model directory, or an ensemble of several."""
    from mtcli.data.glossary import phrase_ids
    from mtcli.engines.translator import Translator, quantize_int8
    from mtcli.store.checkpoint import load_ensemble

    loaded = load_ensemble(paths, device)
    nets = [quantize_int8(m.model) if quantize == "int8" else m.model for m in loaded]
    tokenizer, constraints = loaded[0].tokenizer, None
    if terms is not None:
        spaced = loaded[0].tgt_lang not in ("zh", "ja")  # a term starts a word only with spaces
        constraints = lambda line: [phrase_ids(tokenizer, t, spaced) for t in terms.targets_for(line)]  # noqa: E731  # fmt: skip
    return Translator(
        nets, tokenizer, cfg, device=device, warn=warn_once, align=align, trace=trace,
        constraints=constraints,
    )  # fmt: skip


@contextlib.contextmanager
def _output(path: str):
    if path == "-":
        yield NamedOutput(sys.stdout, "stdout")
        return
    with open(path, "w", encoding="utf-8") as f:
        out = NamedOutput(f, path)
        try:
            yield out
        finally:
            out.close()  # before `with` closes it unnamed: its last write can fail there


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
