"""`mtcli export`: checkpoints of one run, averaged, into a compact model directory."""

from __future__ import annotations

from pathlib import Path

import click

from mtcli.cli.console import console
from mtcli.cli.options import LANGUAGE_CODE_TYPE
from mtcli.device import import_torch
from mtcli.errors import UserError


@click.command("export")
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("--out", required=True, help="Model directory to write.")
@click.option(
    "--fp16/--fp32", default=True, show_default=True, help="Store weights in half precision."
)
@click.option(
    "--force", is_flag=True, help="Replace an --out that is not an mtcli model directory."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mtcli", "ctranslate2", "huggingface", "argos"]),
    default="mtcli",
    show_default=True,
    help="ctranslate2: for `translate --engine ctranslate2` (pip install 'mtcli[ct2]'); "
    "huggingface: a MarianMT directory for transformers; argos: an .argosmodel package (LibreTranslate).",
)
@click.option(
    "--src-lang", type=LANGUAGE_CODE_TYPE, help="Relabel the model's source language (e.g. en)."
)
@click.option(
    "--tgt-lang", type=LANGUAGE_CODE_TYPE, help="Relabel the model's target language (e.g. de)."
)
def export_command(checkpoints, out, fp16, force, fmt, src_lang, tgt_lang) -> None:
    """Average one or more checkpoints into a compact model directory without trainer state.

    \b
    --format ctranslate2 converts one model directory to CTranslate2's format, exactly
    (greedy outputs identical to mtcli's).
    --src-lang/--tgt-lang relabel a model trained under wrong labels, without retraining.
    """
    from mtcli.store.registry import find

    languages = {k: v for k, v in (("src", src_lang), ("tgt", tgt_lang)) if v}
    if languages and fmt != "mtcli":
        raise click.UsageError(
            f"--src-lang/--tgt-lang relabel an mtcli model: relabel first (mtcli export M --out M2 "
            f"--tgt-lang ...), then --format {fmt} M2"
        )
    # each a directory, or a shipped model's name
    paths = [find(c, "CHECKPOINT") for c in checkpoints]
    if fmt in ("ctranslate2", "huggingface", "argos"):
        _export_converted(fmt, paths, Path(out), force)
    else:
        _export_mtcli(paths, Path(out), fp16, force, languages)


def _export_converted(fmt: str, paths: list[Path], out: Path, force: bool) -> None:
    if len(paths) > 1:
        raise UserError(
            f"--format {fmt} converts one model; average first: mtcli export A B --out M"
        )
    if fmt == "ctranslate2":
        from mtcli.store.ct2_export import export_ctranslate2

        export_ctranslate2(paths[0], out, force=force)
        console.print(
            f"wrote {out} (CTranslate2; translate with --engine ctranslate2 -m {out})", markup=False
        )
        return
    if fmt == "argos":
        from mtcli.store.argos_export import export_argos

        export_argos(paths[0], out, force=force)
        console.print(
            f"wrote {out} (Argos Translate: argostranslate.package.install_from_path)", markup=False
        )
        return
    from mtcli.store.hf_export import export_huggingface

    export_huggingface(paths[0], out, force=force)
    console.print(
        f"wrote {out} (MarianMT: MarianMTModel.from_pretrained({str(out)!r}))", markup=False
    )


def _export_mtcli(paths: list[Path], out: Path, fp16: bool, force: bool, languages: dict) -> None:
    from mtcli.store.model_dir import check_export_out, check_model_files, read_config

    # before torch: a wrong --out or a damaged checkpoint is one line at once (export_model
    # checks again, with the tensor shapes)
    check_export_out(paths, out, force)
    for path in paths:
        check_model_files(path)
    import_torch()
    import torch

    from mtcli.store.checkpoint import export_model

    saved = export_model(
        paths, out, torch.float16 if fp16 else torch.float32, force=force, languages=languages
    )
    precision = "fp16" if fp16 else "fp32"
    config = read_config(saved)
    console.print(
        f"wrote {out} ({precision}, mean of {len(paths)} checkpoint(s), "
        f"{config['src_lang']}->{config['tgt_lang']})",
        markup=False,
    )
