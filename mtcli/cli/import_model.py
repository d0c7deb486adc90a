"""`mtcli import huggingface|ctranslate2|argos`: a model of another toolkit as an mtcli model
directory (MarianMT) or as a model mtcli's CTranslate2 engine runs (CTranslate2, Argos)."""

from __future__ import annotations

import click

from mtcli.cli.console import console
from mtcli.device import import_torch


@click.group("import")
def import_group() -> None:
    """Bring a model from another toolkit into mtcli."""


@import_group.command("huggingface")
@click.argument("directory", type=click.Path())
@click.option("--out", required=True, help="mtcli model directory to write.")
@click.option(
    "--force", is_flag=True, help="Replace an --out that is not an mtcli model directory."
)
@click.option("--from", "src_lang", help="Its source language, where its files do not say.")
@click.option("--to", "tgt_lang", help="Its target language, where its files do not say.")
def huggingface(directory, out, force, src_lang, tgt_lang) -> None:
    """A MarianMT directory (config.json, model.safetensors, source/target.spm, vocab.json)."""
    import_torch()
    from mtcli.store.hf_import import import_huggingface

    langs = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    import_huggingface(directory, out, force=force, langs=langs)
    console.print(f"wrote {out} (mtcli model; translate with -m {out})", markup=False)


def ct2_import_options(f):
    """--out, --force, --source-eos and --max-positions, as both CTranslate2 imports take them."""
    options = [
        click.option(
            "--out",
            required=True,
            help="Directory to write (translate it with --engine ctranslate2).",
        ),
        click.option("--force", is_flag=True, help="Replace an --out that is not mtcli's."),
        click.option(
            "--source-eos/--no-source-eos",
            default=None,
            help="Whether </s> ends the source pieces.  "
            "[default: what the model's config and its converter's convention say]",
        ),
        click.option(
            "--max-positions",
            type=click.IntRange(min=2),
            help="Source pieces the model takes, </s> included.  [default: 512]",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _say_ct2(out: str, marker: dict) -> None:
    eos = "with" if marker["ends_with_eos"] else "without"
    console.print(
        f"wrote {out} ({marker['src_lang']}->{marker['tgt_lang']}, CTranslate2, sources fed "
        f"{eos} </s>; translate with -m {out} --engine ctranslate2)",
        markup=False,
        soft_wrap=True,
    )


@import_group.command("ctranslate2")
@click.argument("directory", type=click.Path())
@ct2_import_options
@click.option("--from", "src_lang", help="Its source language, where its files do not say.")
@click.option("--to", "tgt_lang", help="Its target language, where its files do not say.")
def ctranslate2(directory, out, force, source_eos, max_positions, src_lang, tgt_lang) -> None:
    """A CTranslate2 directory (model.bin, config.json, vocabularies, sentencepiece models)."""
    from mtcli.store.ct2_import import import_ctranslate2

    langs = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    marker = import_ctranslate2(
        directory, out, force=force, langs=langs, source_eos=source_eos, max_positions=max_positions
    )
    _say_ct2(out, marker)


@import_group.command("argos")
@click.argument("package", type=click.Path(dir_okay=False))
@ct2_import_options
def argos(package, out, force, source_eos, max_positions) -> None:
    """An Argos Translate package (FILE.argosmodel, as LibreTranslate installs them)."""
    from mtcli.store.ct2_import import import_argos

    marker = import_argos(
        package, out, force=force, source_eos=source_eos, max_positions=max_positions
    )
    _say_ct2(out, marker)
