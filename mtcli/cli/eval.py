"""`mtcli eval`: translate-then-score, or score existing output; one system or several."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from mtcli.cli.common import (
    build_decode_config,
    check_models_early,
    decode_options,
    model_for_text,
    runtime_device,
    warn,
)
from mtcli.data.textio import read_lines
from mtcli.training.metrics import (
    BLEU_TOKENIZERS,
    MetricOptions,
    Score,
    bleu_tokenizer_for,
    check_lengths,
    compare_systems,
    confidence,
    score_system,
)


def _read(path: str) -> list[str]:
    return list(read_lines(path))


def _translate_source(model_dir, src: str, device: str, threads: int, cfg) -> tuple[list[str], str]:
    """Translate a source file with a model; also returns the model's target language."""
    check_models_early([model_dir])
    torch_device = runtime_device(device, threads)
    from mtcli.engines.translator import Translator
    from mtcli.store.checkpoint import load_model

    loaded = load_model(model_dir, torch_device)
    translator = Translator(loaded.model, loaded.tokenizer, cfg, device=torch_device, warn=warn)
    return [t.text for t in translator.translate_stream(_read(src))], loaded.tgt_lang


def _table(results: dict[str, list[Score]], n_lines: int) -> Table:
    table = Table(title=f"{n_lines} segments", title_justify="left")
    table.add_column("system")
    first = next(iter(results.values()))
    for s in first:
        table.add_column(s.name, justify="right")
    for name, scores in results.items():
        cells = []
        for s in scores:
            cell = f"{s.score:.2f}"
            if s.ci is not None:
                cell += f" ± {s.ci:.2f}"
            if s.p_value is not None:
                cell += f" (p={s.p_value:.4f}{'*' if s.p_value < 0.05 else ''})"
            cells.append(cell)
        table.add_row(name, *cells)
    return table


@click.command("eval")
@click.option(
    "--ref",
    "-r",
    "refs",
    multiple=True,
    required=True,
    help="Reference file (repeat for several references).",
)
@click.option(
    "--hyp", "hyps", multiple=True, help="Hypothesis file, '-' = stdin (repeat to compare systems)."
)
@click.option("--src", help="Source file to translate with --model and then score.")
@click.option(
    "--model",
    "-m",
    help="Model name or directory (with --src).  [default: by the script of the source]",
)
@click.option("--tgt-lang", help="Target language, for the BLEU tokenizer when no model says it.")
@click.option(
    "--tokenize",
    type=click.Choice(BLEU_TOKENIZERS),
    help="sacrebleu BLEU tokenizer (default: zh for Chinese, else 13a).",
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
@decode_options
def eval_command(
    refs,
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
    **decode,
) -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu), with signatures."""
    if bool(src) == bool(hyps):
        raise click.UsageError("give either --src (to translate with a model) or --hyp files")
    names = [m.strip() for m in metrics.split(",") if m.strip()]
    if bad := [m for m in names if m not in ("bleu", "chrf", "ter")]:
        raise click.BadParameter(f"unknown metric(s) {', '.join(bad)}", param_hint="--metrics")
    if list(hyps).count("-") + list(refs).count("-") > 1:
        raise click.BadParameter("stdin can be read once", param_hint="--hyp/--ref")
    cfg = build_decode_config(**decode) if src else None
    ref_lines = [_read(r) for r in refs]
    if src:
        model_dir = model_for_text(model, _read(src)[:200])
        out, model_lang = _translate_source(model_dir, src, device, threads, cfg)
        systems = [(model or model_dir.name, out)]
        tgt_lang = tgt_lang or model_lang
    else:
        systems = [("stdin" if h == "-" else h, _read(h)) for h in hyps]
    for name, lines in systems:
        check_lengths(lines, ref_lines, name, list(refs))
    opts = MetricOptions(
        tokenize or bleu_tokenizer_for(tgt_lang or ""), chrf_word_order, tuple(names)
    )
    if len(systems) > 1:
        results = compare_systems(systems, ref_lines, opts, n_samples=bootstrap)
    elif with_confidence:
        results = {systems[0][0]: confidence(systems[0][1], ref_lines, opts, n_samples=bootstrap)}
    else:
        results = {systems[0][0]: score_system(systems[0][1], ref_lines, opts)}
    n_lines = len(ref_lines[0])
    if as_json:
        record = {
            "segments": n_lines,
            "tokenize": opts.tokenize,
            "systems": {
                name: {s.name: {k: v for k, v in vars(s).items() if v is not None} for s in scores}
                for name, scores in results.items()
            },
        }
        click.echo(json.dumps(record, ensure_ascii=False))
    else:
        out = Console(highlight=False, soft_wrap=True)
        out.print(_table(results, n_lines))
        for s in next(iter(results.values())):  # signatures in full, one per line, never wrapped
            out.print(f"{s.name}: {s.signature}")
