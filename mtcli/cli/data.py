"""`mtcli data prepare` (a known corpus, fetched or local, or any aligned corpus of the user's),
`mtcli data get` (corpora of mtdata's catalogue) and `mtcli data binarize` (a corpus as token
ids, stored once for training)."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import click
from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

from mtcli.cli.console import console, warn
from mtcli.cli.options import FiniteRange
from mtcli.config import THREADS
from mtcli.data.prepare import CORPORA, PrepareOptions, prepare
from mtcli.errors import UserError


@click.group()
def data() -> None:
    """Download and prepare parallel corpora; store them as token ids."""


@contextmanager
def pairs_bar(what: str):
    """A live count of pairs with their rate on a terminal (nothing otherwise); yields the
    callback that moves it: (phase, pairs so far)."""
    started = time.monotonic()
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.fields[phase]} {task.fields[stats]}"),
        console=console,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(what, phase=what, stats="")

        def update(phase: str, pairs: int) -> None:
            rate = pairs / max(time.monotonic() - started, 1e-9)
            bar.update(task, phase=phase, stats=f"{pairs:,} pairs ({rate:,.0f} pairs/s)")

        yield update


def _say_json(manifest: dict, keys: tuple[str, ...]) -> None:
    console.print(json.dumps({k: manifest[k] for k in keys}), soft_wrap=True, markup=False)


@data.command("prepare")
@click.argument("name", required=False, type=click.Choice(sorted(CORPORA)))
@click.option("--out", required=True, help="Folder for train/valid/test files and manifest.json.")
@click.option(
    "--from", "from_dir", help="Folder with NAME's raw files (offline), instead of downloading."
)
@click.option(
    "--src", help="Your corpus instead of NAME: source text, a sentence a line (.gz read)."
)
@click.option("--tgt", help="Your corpus: target text, aligned with --src.")
@click.option("--tsv", help="Your corpus as one source<TAB>target file, instead of --src/--tgt.")
@click.option(
    "--src-lang",
    default="",
    help="Your corpus: source language.  [default: identified from its text]",
)
@click.option(
    "--tgt-lang",
    default="",
    help="Your corpus: target language.  [default: identified from its text]",
)
@click.option(
    "--zh-script",
    type=click.Choice(["simplified", "keep"]),
    default="simplified",
    show_default=True,
)
@click.option(
    "--unicode-form", type=click.Choice(["NFC", "NFKC"]), default="NFC", show_default=True
)
@click.option(
    "--test-size",
    type=click.IntRange(min=0),
    help="Pairs in test (corpora without official splits).  [default: NAME 2000; "
    "your corpus 5% of its pairs, at least 100, at most 2000]",
)
@click.option(
    "--valid-size",
    type=click.IntRange(min=0),
    help="Pairs in valid.  [default: NAME 1000; your corpus 5%, at least 100, at most 1000]",
)
@click.option(
    "--max-chars",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Your corpus: drop pairs with a side longer than this.",
)
@click.option(
    "--max-ratio",
    default=9.0,
    show_default=True,
    type=FiniteRange(min=1.0),
    help="Your corpus: drop pairs whose UTF-8 sizes differ more than this.",
)
@click.option("--seed", default=1234, show_default=True, help="Seed of the train/valid/test split.")
@click.option(
    "--no-verify", is_flag=True, help="Skip the checksum check (a newer release of NAME)."
)
@click.option("--force", is_flag=True, help="Replace an --out that is not a prepared corpus.")
def prepare_command(name, out, src, tgt, tsv, **opts) -> None:
    """Prepare a corpus: normalise, convert script, dedupe, split, write a manifest."""
    inputs = _own_inputs(name, src, tgt, tsv, opts["from_dir"])
    if inputs:
        _prepare_own(*inputs, out, opts)
        return
    manifest = _prepare_known(name, out, _prepare_options(opts))
    _say_splits(manifest, out)


def _prepare_options(opts: dict) -> PrepareOptions:
    """A known corpus's preparation as the flags ask; unset split sizes are the corpus's own."""
    asked = {"n_test": opts["test_size"], "n_valid": opts["valid_size"]}
    sizes = {k: v for k, v in asked.items() if v is not None}
    return PrepareOptions(
        opts["from_dir"],
        opts["zh_script"],
        opts["unicode_form"],
        seed=opts["seed"],
        verify=not opts["no_verify"],
        force=opts["force"],
        **sizes,
    )


def _prepare_known(name: str, out: str, known: PrepareOptions) -> dict:
    """Download (where needed) and prepare a known corpus, a progress bar on a terminal; its
    manifest."""
    with Progress(
        *Progress.get_default_columns(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("download", total=None)
        return prepare(
            name, out, known, lambda done, total: bar.update(task, completed=done, total=total)
        )


def _say_splits(manifest: dict, out: str) -> None:
    """The manifest's counts and drops, then how many pairs each split got, as a share; a
    split that leaves less than TRAIN_SHARE_WARNED to train on is a warning."""
    from mtcli.data.own_corpus import TRAIN_SHARE_WARNED

    _say_json(manifest, ("counts", "dropped"))
    counts = manifest["counts"]
    total = sum(counts.values()) or 1
    shares = ", ".join(f"{split} {n:,} ({n / total:.0%})" for split, n in counts.items())
    console.print(
        f"wrote {out}/{{train,valid,test}}.{{src,tgt}} and manifest.json: {shares}",
        markup=False,
        soft_wrap=True,
    )
    if counts["train"] < TRAIN_SHARE_WARNED * total:
        warn(
            f"only {counts['train'] / total:.0%} of the pairs are left to train on: a smaller "
            "--valid-size / --test-size keeps more"
        )


def _own_inputs(name, src, tgt, tsv, from_dir) -> tuple[str, str] | None:
    """(src, tgt) of the user's corpus (tgt "" for a TSV), or None for a known corpus NAME."""
    if name is None and not (src or tsv):
        raise UserError("give a corpus NAME, or your own corpus with --src and --tgt (or --tsv)")
    if name is not None and (src or tgt or tsv):
        raise UserError(f"{name} or --src/--tgt/--tsv: prepare one corpus at a time")
    if name is not None:
        return None
    if from_dir:
        raise UserError(
            "--from is for a known corpus NAME; your own files are --src/--tgt or --tsv"
        )
    if tsv and (src or tgt):
        raise UserError("--tsv holds both sides: give it without --src/--tgt")
    if src and not tgt:
        raise UserError(f"--src {src} needs --tgt (or give one source<TAB>target file as --tsv)")
    return (tsv, "") if tsv else (src, tgt)


def _prepare_own(src: str, tgt: str, out: str, opts: dict) -> None:
    from mtcli.data.own_corpus import OwnCorpusOptions, prepare_own
    from mtcli.text.corpus_languages import languages_of_corpus

    asked = {"src": opts["src_lang"], "tgt": opts["tgt_lang"]}
    languages, note = languages_of_corpus(src, tgt or None, asked)
    own = OwnCorpusOptions(
        languages["src"],
        languages["tgt"],
        opts["zh_script"],
        opts["unicode_form"],
        opts["test_size"],
        opts["valid_size"],
        opts["seed"],
        opts["max_chars"],
        opts["max_ratio"],
        opts["force"],
    )
    with pairs_bar("clean") as progress:
        manifest = prepare_own(src, tgt, out, own, progress)
    console.print(note, soft_wrap=True, markup=False)
    _say_splits(manifest, out)


@data.command("get")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option(
    "--out", required=True, help="Folder for the corpus (train.LANG files, as mtdata writes them)."
)
@click.option(
    "--langpair",
    metavar="SRC-TGT",
    help="Which side is the source (en-zh).  [default: the first NAME's order]",
)
@click.option("--force", is_flag=True, help="Replace an --out that is not one `data get` wrote.")
def get_command(names, out, langpair, force) -> None:
    """Fetch parallel corpora by their mtdata ids (`mtdata list -l eng-zho` lists them)."""
    from mtcli.data.mtdata_get import get_corpus

    record = get_corpus(list(names), out, langpair, force)
    src, tgt = (f"{out}/{record[side]}" for side in ("src", "tgt"))
    console.print(
        f"wrote {record['pairs']:,} pairs to {src} and {tgt}", markup=False, soft_wrap=True
    )
    console.print(
        f"next: mtcli data prepare --src {src} --tgt {tgt} --src-lang {record['src_lang']} "
        f"--tgt-lang {record['tgt_lang']} --out CORPUS (to train on it), or mtcli eval --src {src} "
        f"--ref {tgt} (a test set such as FLORES: to score on it)",
        markup=False,
        soft_wrap=True,
    )


@data.command("binarize")
@click.option(
    "--src",
    required=True,
    help="Source text (.gz read), or a source<TAB>target file without --tgt.",
)
@click.option("--tgt", help="Target text, aligned with --src.")
@click.option(
    "--tokenizer", required=True, help="Tokenizer (or model) directory whose ids to store."
)
@click.option(
    "--out", required=True, help="The token store's folder (give it to `mtcli train --data`)."
)
@click.option(
    "--max-len",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Drop pairs with more tokens on a side.",
)
@click.option(
    "--max-ratio",
    default=9.0,
    show_default=True,
    type=FiniteRange(min=1.0),
    help="Drop pairs whose token counts differ more than this.",
)
@click.option("--keep-text", is_flag=True, help="Store the text too (needed by --bpe-dropout).")
@click.option(
    "--threads",
    default=0,
    show_default=True,
    type=click.IntRange(min=0, max=int(THREADS.high)),
    help="Encoding threads (0 = all cores).",
)
@click.option("--force", is_flag=True, help="Replace an --out that is not a token store.")
def binarize_command(
    src, tgt, tokenizer, out, max_len, max_ratio, keep_text, threads, force
) -> None:
    """Store a corpus as token ids once, for training (`mtcli train --data OUT`)."""
    from mtcli.data.token_store import BinarizeRequest, Filters, check_binarize, ensure_store
    from mtcli.device import available_cpus

    request = BinarizeRequest(
        src,
        tgt or "",
        Path(tokenizer),
        Path(out),
        Filters(max_len, max_ratio),
        keep_text,
        threads or available_cpus(),
    )
    check_binarize(request, force)
    with pairs_bar("binarize") as progress:
        manifest, what = ensure_store(request, lambda n: progress("binarize", n))
    if what == "current":
        console.print(f"{out} is up to date: the same corpus, tokenizer and filters", markup=False)
    _say_json(manifest, ("pairs", "stats", "tokens", "seconds"))
