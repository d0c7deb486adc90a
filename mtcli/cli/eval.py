"""`mtcli eval`: translate-then-score, or score existing output; one system or several."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from mtcli.cli.console import console, warn
from mtcli.cli.options import build_decode_config, decode_options, engine_option
from mtcli.data.published_sets import published_set
from mtcli.data.textio import read_lines
from mtcli.engines.build import EngineOptions, build_translator, chosen_model, model_for_text
from mtcli.engines.calibration import Calibration
from mtcli.engines.routing import stream
from mtcli.training.metrics import (
    BLEU_TOKENIZERS,
    MetricOptions,
    Score,
    check_lengths,
    check_tokenizer_installed,
    choose_bleu_tokenizer,
    compare_systems,
    confidence,
    score_system,
)


def _read(path: str) -> list[str]:
    return list(read_lines(path))


def _systems(
    src, hyps, model, how: dict, decode: dict, direction=None
) -> tuple[list, str | None, dict]:
    """(name, lines) of each system to score: the --hyp files, or --src translated by the model
    (also returning the model's target language, and its translations' mean confidence and
    share flagged where the model has fitted weights)."""
    if not src:
        return [("stdin" if h == "-" else h, _read(h)) for h in hyps], None, {}
    cfg = build_decode_config(**decode)
    sources = _read(src)
    # a test set's pair: -m's model, else the one installed for it; else by the lines' language
    chosen = chosen_model(model, *direction, warn=warn) if direction else None
    model_dir = chosen or model_for_text(model, sources[:200], warn)
    judged = Calibration.load(model_dir) is not None  # its own confidence, beside BLEU
    options = EngineOptions(**how, warn=warn, confidence=judged)
    translator = build_translator([model_dir], cfg, options)
    done = list(stream(translator.translate_chunk, sources, cfg.chunk_lines))
    name = model or model_dir.name
    return [(name, [t.text for t in done])], translator.tgt_lang, {name: _judged(done)}


def _metric_names(metrics: str) -> list[str]:
    names = [m.strip() for m in metrics.split(",") if m.strip()]
    if bad := [m for m in names if m not in ("bleu", "chrf", "ter")]:
        raise click.BadParameter(f"unknown metric(s) {', '.join(bad)}", param_hint="--metrics")
    return names


def _inputs(test_set_name, langpair, refs, src, hyps, tgt_lang) -> tuple:
    """(refs, src, tgt_lang, direction): as given, or a sacrebleu test set's files in place of
    --ref and --src (direction: its pair, which then chooses the model; None otherwise)."""
    if not test_set_name:
        if langpair:
            raise click.UsageError("--langpair goes with --test-set")
        if not refs:
            raise click.UsageError("give --ref files, or --test-set")
        return refs, src, tgt_lang, None
    if refs or src:
        raise click.UsageError("--test-set gives the source and the references: no --src or --ref")
    published = published_set(test_set_name, langpair)
    refs, tgt_lang = [str(p) for p in published.references], tgt_lang or published.tgt_lang
    if hyps:
        return refs, None, tgt_lang, None
    return refs, str(published.source), tgt_lang, (published.src_lang, published.tgt_lang)


def _judged(done: list) -> dict | None:
    """The mean confidence of translated lines and the share of them flagged."""
    values = [t.confidence for t in done if t.confidence is not None]
    if not values:
        return None
    flagged = sum(t.flagged for t in done if t.confidence is not None)
    return {"mean": round(sum(values) / len(values), 4), "flagged": round(flagged / len(values), 4)}


def _scores(systems, ref_lines, opts, with_confidence: bool, bootstrap: int) -> dict:
    """Each system's scores: compared with one another when there are several, with bootstrap
    intervals when asked for one."""
    if len(systems) > 1:
        return compare_systems(systems, ref_lines, opts, n_samples=bootstrap)
    name, lines = systems[0]
    if with_confidence:
        return {name: confidence(lines, ref_lines, opts, n_samples=bootstrap)}
    return {name: score_system(lines, ref_lines, opts)}


def _print(results: dict, n_lines: int, tokenize: str, as_json: bool, judged: dict) -> None:
    """A table and the signatures, or one JSON object, on stdout; the model's mean confidence
    beside its scores where it has one."""
    judged = {name: j for name, j in judged.items() if j}
    if as_json:
        record = {
            "segments": n_lines,
            "tokenize": tokenize,
            "systems": {
                name: {s.name: {k: v for k, v in vars(s).items() if v is not None} for s in scores}
                for name, scores in results.items()
            },
        }
        for name, j in judged.items():
            record["systems"][name]["confidence"] = j
        click.echo(json.dumps(record, ensure_ascii=False))
        return
    out = Console(highlight=False, soft_wrap=True)
    out.print(_table(results, n_lines, judged))
    for s in next(iter(results.values())):  # signatures in full, one per line, never wrapped
        out.print(f"{s.name}: {s.signature}")


def _table(results: dict[str, list[Score]], n_lines: int, judged: dict) -> Table:
    table = Table(title=f"{n_lines} segments", title_justify="left")
    table.add_column("system")
    first = next(iter(results.values()))
    for s in first:
        table.add_column(s.name, justify="right")
    if judged:
        table.add_column("confidence (flagged)", justify="right")
    for name, scores in results.items():
        cells = []
        for s in scores:
            cell = f"{s.score:.2f}"
            if s.ci is not None:
                cell += f" ± {s.ci:.2f}"
            if s.p_value is not None:
                cell += f" (p={s.p_value:.4f}{'*' if s.p_value < 0.05 else ''})"
            cells.append(cell)
        if judged:
            j = judged.get(name)
            cells.append(f"{j['mean']:.2f} ({j['flagged']:.0%})" if j else "")
        table.add_row(name, *cells)
    return table


@click.command("eval")
@click.option(
    "--ref",
    "-r",
    "refs",
    multiple=True,
    help="Reference file (repeat for several references); or --test-set.",
)
@click.option(
    "--test-set",
    "test_set_name",
    metavar="NAME",
    help="A test set from sacrebleu's catalogue (wmt20, wmt22, ...): its source and references, "
    "downloaded once into $SACREBLEU; with --hyp, scores it, else translates its source.",
)
@click.option("--langpair", metavar="SRC-TGT", help="The --test-set's language pair (en-zh).")
@click.option(
    "--hyp", "hyps", multiple=True, help="Hypothesis file, '-' = stdin (repeat to compare systems)."
)
@click.option("--src", help="Source file to translate with --model and then score.")
@click.option(
    "--model",
    "-m",
    help="Model name or directory (with --src).  [default: by the script of the source]",
)
@click.option(
    "--tgt-lang",
    help="Target language, for the BLEU tokenizer.  [default: the model's, else the references']",
)
@click.option(
    "--tokenize",
    type=click.Choice(BLEU_TOKENIZERS),
    help="sacrebleu BLEU tokenizer.  [default: sacrebleu's for the target language: zh, ja-mecab, ko-mecab, else 13a]",
)
@click.option(
    "--chrf-word-order", default=0, show_default=True, type=click.IntRange(0, 2), help="2 = chrF++."
)
@click.option(
    "--metrics",
    default="bleu,chrf,ter",
    show_default=True,
    help="Comma-separated: bleu, chrf, ter.",
)
@click.option(
    "--confidence", "with_confidence", is_flag=True, help="Bootstrap 95% intervals for one system."
)
@click.option(
    "--bootstrap",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Bootstrap resamples.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object on stdout instead of a table."
)
@engine_option("the model")
@decode_options
def eval_command(
    refs,
    test_set_name,
    langpair,
    hyps,
    src,
    model,
    tgt_lang,
    tokenize,
    chrf_word_order,
    metrics,
    with_confidence,
    bootstrap,
    as_json,
    device,
    threads,
    engine,
    **decode,
) -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu), with signatures."""
    refs, src, tgt_lang, direction = _inputs(test_set_name, langpair, refs, src, hyps, tgt_lang)
    if bool(src) == bool(hyps):
        raise click.UsageError("give either --src (to translate with a model) or --hyp files")
    names = _metric_names(metrics)
    if list(hyps).count("-") + list(refs).count("-") > 1:
        raise click.BadParameter("stdin can be read once", param_hint="--hyp/--ref")
    if src:
        build_decode_config(**decode)  # a bad decoding flag is one line before any file is read
    ref_lines = [_read(r) for r in refs]
    how = {"device": device, "threads": threads, "engine": engine}
    systems, model_lang, judged = _systems(src, hyps, model, how, decode, direction)
    for name, lines in systems:
        check_lengths(lines, ref_lines, name, list(refs))
    choice = choose_bleu_tokenizer(
        dict(zip(refs, ref_lines, strict=True)), dict(systems), tgt_lang or "", model_lang or ""
    )
    for message in choice.warnings:
        warn(message)
    if not tokenize and "bleu" in names:
        check_tokenizer_installed(choice.tokenize)
    opts = MetricOptions(tokenize or choice.tokenize, chrf_word_order, tuple(names))
    results = _scores(systems, ref_lines, opts, with_confidence, bootstrap)
    _print(results, len(ref_lines[0]), opts.tokenize, as_json, judged)
    if not tokenize and "bleu" in names:  # after the scores: stdout may be gone, and says so
        console.print(choice.line(), soft_wrap=True, markup=False)
