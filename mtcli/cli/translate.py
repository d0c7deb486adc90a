"""`mtcli translate`: lines in, translations out, one output line per input line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from dataclasses import replace

import click
from rich.cells import cell_len
from rich.markup import escape
from rich.progress import MofNCompleteColumn, Progress

from mtcli.cli.console import console, warn
from mtcli.cli.documents import check_document_output, translate_file
from mtcli.cli.options import (
    UTF8_TEXT,
    FiniteRange,
    build_decode_config,
    decode_options,
    engine_option,
)
from mtcli.cli.streams import NamedOutput, ReportFile, check_output_file, check_report_file
from mtcli.config import QUANTIZE_CHOICES
from mtcli.data.textio import read_chunks
from mtcli.documents.document import document_format, names_a_file
from mtcli.documents.formats import FORMATS
from mtcli.engines.build import (
    EngineOptions,
    build_translator,
    chosen_model,
    confidence_column,
)
from mtcli.engines.result import report_records, translation_record
from mtcli.engines.routing import chunks


def format_result(t, fmt: str, confidence: bool = False, align: bool = False) -> str:
    """One output line for a Translation. In tsv the columns are the run's, not the line's:
    a confidence and an alignment column wherever the run has them, empty where a line has
    none (a blank line, one passed through), so column 4 means the same on every line."""
    if fmt == "text":
        return t.text
    if fmt == "tsv":
        fields = [t.source, t.text, f"{t.score:.4f}"]
        if confidence:
            fields.append("" if t.confidence is None else f"{t.confidence:.4f}")
        if align:
            fields.append(" ".join(f"{s}-{g}" for s, g in t.alignment or []))
        return "\t".join(fields)
    return json.dumps(translation_record(t), ensure_ascii=False)


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
@click.option(
    "--from", "src_lang", help="Source language: use the installed model from it (e.g. zh)."
)
@click.option(
    "--to",
    "tgt_lang",
    help="Target language: use the installed model into it (e.g. en); with a model "
    "writing several (OPUS-MT's >>cmn_Hant<<), the one it writes.",
)
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
@click.option(
    "--top-p", type=float, help="Sampling: the smallest set of tokens holding this probability."
)
@click.option(
    "--seed", type=int, help="Sampling: the same seed draws the same outputs.  [default: 0]"
)
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
    type=click.Choice(QUANTIZE_CHOICES),
    default=None,
    help="int8: dynamic quantization of the Linear layers (CPU); none: fp32.  "
    "[default: the model's recommendation, else none]",
)
@click.option(
    "--html", is_flag=True, help="Each line is HTML: tags kept around the words they enclosed."
)
@click.option(
    "--align", is_flag=True, help="Add source-target word alignments (tsv: last column; jsonl)."
)
@click.option(
    "--confidence/--no-confidence",
    default=None,
    help="A calibrated confidence per line (jsonl: confidence, flagged; tsv: 4th column); the "
    "flagged lines named on stderr. --no-confidence saves its ~60% of a beam-5 decode.  "
    "[default: on, where the model has fitted weights and a search decodes]",
)
@click.option(
    "--min-confidence",
    type=FiniteRange(0, 1),
    metavar="X",
    help="A line less sure than X is written as its source, after --unsure-marker (implies --confidence).",
)
@click.option(
    "--unsure-marker",
    type=UTF8_TEXT,
    default="[?] ",
    show_default=True,
    help="What --min-confidence puts before a source it writes ('' for none).",
)
@click.option("--quiet", "-q", is_flag=True, help="No warnings on stderr.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    help="Write every line (or document string) to read with care to FILE, as JSON lines: "
    "its number, source, translation, confidence and why.",
)
@click.option(
    "--file-format",
    help="FILE's format: txt srt vtt json po md html docx.  [default: its extension]",
)
@decode_options
def translate_command(
    text,
    models,
    src_lang,
    tgt_lang,
    input_file,
    output_path,
    force,
    fmt,
    prefix,
    sample,
    glossary,
    trace,
    engine,
    quantize,
    html,
    align,
    confidence,
    min_confidence,
    unsure_marker,
    quiet,
    report,
    file_format,
    device,
    threads,
    **decode,
) -> None:
    """Translate TEXT, or stdin line by line (one output line per input line), or a document
    FILE (.txt .srt .vtt .json .po .md .html .docx) into -o OUT, keeping all that is not text.

    \b
    TEXT is a FILE where it is one word that exists, holds a '/', ends in an
    extension (notes.srt, shot.png), or -o names a document: a missing or
    unknown one is an error, never translated. Words with spaces are text
    ("Version 2.0 is out."); pipe one word in to translate it: echo x | mtcli translate

    \b
    Without -m, each line goes to the installed model for its script: Chinese (Han
    characters) to zh->en, other text to en->zh; a line with no letters is left as it is.
    """
    lines_only = fmt != "text" or trace or align or prefix or min_confidence is not None
    document = _document(text, file_format, output_path, lines_only)
    markup = html or bool(document and FORMATS[document].markup)  # its strings are HTML
    sampling = {name: decode[name] for name in ("temperature", "top_k", "top_p", "seed")}
    confidence, asked = _confidence_wanted(confidence, min_confidence, sample, engine)
    _check_combinations(fmt, sample, sampling, trace, align, glossary, html, prefix, asked)
    cfg = build_decode_config(sample=sample, **decode)
    reading = None if text else input_file or sys.stdin
    check_output_file(output_path, "--output", force, reading=reading)
    check_report_file(report, output_path, force, reading)
    engine_flags = (engine, device, threads, quantize, align, trace, glossary, quiet, markup)
    options = _engine_options(*engine_flags, (confidence, asked), (src_lang, tgt_lang))
    paths = _model_paths(models, src_lang, tgt_lang, options.warn)
    translator = build_translator(paths, cfg, options)
    with ReportFile(report) as to_read:
        columns = (confidence_column(paths, options), align)
        writer = ResultWriter(fmt, trace, min_confidence, unsure_marker, to_read, columns)
        where = (document, text, input_file, output_path, prefix, quiet)
        flagged, lines = _translate(translator, cfg, where, options.warn, writer)
    _point_to_a_bigger_model(paths[0], flagged, lines, options.warn)


def _engine_options(
    engine, device, threads, quantize, align, trace, glossary, quiet, markup, wanted, languages
) -> EngineOptions:
    """The engine's options from translate's flags (`wanted`: the confidence and whether it
    was asked for; `languages`: -s and -t)."""
    (confidence, asked), (src_lang, tgt_lang) = wanted, languages
    return EngineOptions(
        engine,
        device,
        threads,
        quantize or "",
        align,
        trace,
        _glossary(glossary),
        _warner(quiet),
        html=markup,
        confidence=confidence,
        confidence_asked=asked,
        target_language=tgt_lang or "",
        pass_target=bool(tgt_lang and not src_lang),
    )


def _model_paths(models, src_lang, tgt_lang, warn) -> list:
    """The models each -m names, else the installed model for -s/-t (None: each line's)."""
    chosen = [chosen_model(m, warn=warn) for m in models]
    return chosen or [chosen_model(None, src_lang, tgt_lang, warn)]


def _translate(translator, cfg, where: tuple, warn, writer: ResultWriter):
    """The document, else TEXT or the input's lines (`where`: the document's format, TEXT, the
    input, -o, --prefix, --quiet), translated; returns the sources flagged and how many lines
    or strings there were."""
    document, text, input_file, output_path, prefix, quiet = where
    if document:
        return translate_file(
            text[0], document, output_path, translator, cfg.chunk_lines, warn, writer.report
        )
    _translate_lines(
        translator, text, input_file, cfg, output_path, writer.fmt, prefix, quiet, warn, writer
    )
    return writer.flagged_sources, writer.lines


def _point_to_a_bigger_model(path, flagged: list[str], lines: int, warn) -> None:
    """Where a shipped model's translations were mostly flagged, the command that gets a
    published model for the pair (the text is not what the shipped models know)."""
    from mtcli.store.registry import bigger_model_hint
    from mtcli.text.language import source_language

    language = (source_language(flagged[0]) if flagged else None) or "en"
    if hint := bigger_model_hint(path, language, len(flagged), lines):
        warn(hint)


def _translate_lines(
    translator, text, input_file, cfg, output_path, fmt, prefix, quiet, warn, writer
):
    """TEXT or the input's lines translated, each written as soon as it is done."""
    lines = _input_lines(text, input_file, cfg.chunk_lines)
    with _output(output_path) as out, _progress(input_file, quiet) as advance:
        for chunk in chunks(lines, cfg.chunk_lines):
            for result in translator.translate_chunk(*_split_inputs(chunk, fmt, prefix)):
                writer.write(out, result)
                advance()
    if summary := writer.summary():
        warn(summary)


class ResultWriter:
    """Writes each result as its line, and notes the lines flagged as unreliable."""

    def __init__(
        self,
        fmt: str,
        trace: bool,
        min_confidence: float | None,
        marker: str,
        report: ReportFile,
        columns: tuple[bool, bool] = (False, False),
    ):
        self.fmt, self.trace, self.min_confidence, self.marker = fmt, trace, min_confidence, marker
        self.report = report
        self.columns = columns  # tsv: (a confidence column, an alignment column) on every line
        self.lines = self.replaced = 0
        self.flagged: list[tuple[int, float | None]] = []  # (line number, its confidence)
        self.flagged_sources: list[str] = []

    def write(self, out, result) -> None:
        self.lines += 1
        if result.flagged:
            self.flagged.append((self.lines, result.confidence))
            self.flagged_sources.append(result.source)
        self.report.add(report_records(result, self.lines, "line"))
        if self._unsure(result):
            self.replaced += 1  # the source, marked, rather than a translation judged unsure
            result = replace(result, text=self.marker + result.source, nbest=[], kept_source=True)
        out.write(format_result(result, self.fmt, *self.columns) + "\n")
        out.flush()  # a pipeline sees each line as soon as it is translated
        if self.trace and self.fmt != "jsonl" and result.trace:
            console.print(render_trace(result), markup=False, soft_wrap=True)

    def _unsure(self, result) -> bool:
        """Whether --min-confidence wants the line's source rather than its translation."""
        wanted, confidence = self.min_confidence, result.confidence
        return wanted is not None and confidence is not None and confidence < wanted

    def summary(self) -> str | None:
        """One line at the end, never one per line: which lines were flagged (or kept)."""
        if self.replaced:
            marker = f"marked {escape(repr(self.marker))}" if self.marker else "unmarked"
            below = f"below --min-confidence {self.min_confidence:g}"
            return f"{self.replaced} of {self.lines} lines {below} were written as their source ({marker})"
        if not self.flagged:
            return None
        if self.lines == 1:
            confidence = self.flagged[0][1]
            sure = f" (confidence {confidence:.2f})" if confidence is not None else ""
            return (
                f"the translation is flagged as unreliable{sure}: a part of the sentence or a "
                "fact in it may be lost or changed; read it against the source"
            )
        n = len(self.flagged)
        numbers = ", ".join(str(line) for line, _ in self.flagged[:FLAGGED_NAMED])
        more = ", ..." if n > FLAGGED_NAMED else ""
        named = f"{'line' if n == 1 else 'lines'} {numbers}{more}"
        every = f"--report {self.report.path} lists" if self.report.path else "--report FILE lists"
        return (
            f"{n} of {self.lines} lines flagged as unreliable ({named}); "
            f"{WHERE_CONFIDENCE[self.fmt]}; {every} each with why"
        )


FLAGGED_NAMED = 10  # the flagged lines a summary names by number; more are only counted
WHERE_CONFIDENCE = {  # where each --format shows a line's confidence, as the summary says
    "text": "--format jsonl gives each line's confidence",
    "tsv": "the 4th column gives each line's confidence",
    "jsonl": "each record's flagged field says which",
}


def _document(text: tuple[str, ...], file_format: str | None, output_path: str | None, lines_only):
    """The format of TEXT where it names a document to translate (checked before anything
    loads), else None."""
    if file_format and len(text) != 1:
        raise click.UsageError("--file-format takes one FILE")
    if len(text) != 1 or not (file_format or names_a_file(text[0], output_path)):
        return None
    document = document_format(text[0], file_format)
    if lines_only:
        raise click.UsageError(
            "a document is written in its own format: not with --format, --trace, --align, "
            "--prefix or --min-confidence"
        )
    check_document_output(text[0], output_path)
    return document


def _confidence_wanted(flag: bool | None, min_confidence, sample: bool, engine: str):
    """(on, asked): --confidence or --min-confidence ask for it; by default it is on wherever it
    can be (mtcli's engine, a search; a model without fitted weights goes without, silently),
    since a translation that lost a clause keeps every number and is caught by nothing else."""
    if flag is False and min_confidence is not None:
        raise click.UsageError(
            "--min-confidence judges by the confidence: not with --no-confidence"
        )
    if flag or min_confidence is not None:
        return True, True
    return flag is None and not sample and engine == "mtcli", False


def _check_combinations(
    fmt, sample, sampling, trace, align, glossary, html, prefix, confidence
) -> None:
    """Flags that cannot go together, refused before anything loads."""
    if confidence and sample:
        raise click.UsageError("--confidence judges a search's output: not with --sample")
    if html and (sample or trace or align or prefix):
        raise click.UsageError(
            "--html places tags by word alignments: not with --sample, --trace, --align or --prefix"
        )
    if align and fmt == "text":
        raise click.BadParameter("--align needs --format tsv or jsonl", param_hint="--align")
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


def _glossary(path: str | None):
    if not path:
        return None
    from mtcli.text.glossary import Glossary

    return Glossary.load(path)


def _warner(quiet: bool):
    return (lambda message: None) if quiet else warn


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
    out = [
        f"trace of: {result.source}",
        "step  beam  fed           score  next tokens (probability)",
    ]
    for step in result.trace:
        for b, beam in enumerate(step["beams"]):
            nexts = "  ".join(f"{piece} {p:.2f}" for _, piece, p in beam["next"])
            # padded by terminal cells, not characters: a Chinese character takes two
            fed = beam["fed"] + " " * max(0, 10 - cell_len(beam["fed"]))
            out.append(f"{step['step']:>4}  {b:>4}  {fed}  {beam['score']:>7.3f}  {nexts}")
        for done in step["finished"]:
            out.append(f"            finished: {done['text']}  (score {done['score']:.3f})")
    return "\n".join(out)


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
