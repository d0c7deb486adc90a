"""An mtcli model as an Argos Translate package (`mtcli export --format argos`): the zip that
`argostranslate.package.install_from_path` installs, and so what LibreTranslate serves.

The package is one folder: metadata.json (codes, names, versions), model/ (the CTranslate2
export of ct2_export.py), sentencepiece.model, README.md. Argos passes the source pieces without
`</s>`, which mtcli's model was trained to end with, so the package's CTranslate2 config asks
CTranslate2 to add it (`add_source_eos`); mtcli's own engine adds it itself and reads exports
without that flag. Sentence splitting is Argos's own (it fetches its MiniSBD model on first use).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from mtcli import __version__, files
from mtcli.data.language_codes import LANGUAGE_NAMES
from mtcli.data.tokenizer import read_meta
from mtcli.errors import UserError
from mtcli.store.ct2_export import export_ctranslate2
from mtcli.store.model_dir import read_config

PACKAGE_VERSION = "1.0"
ARGOS_VERSION = (
    "1.9"  # the package layout this follows (metadata.json, model/, sentencepiece.model)
)


def check_argos_out(out: Path, force: bool) -> None:
    """--out is a .argosmodel file; an existing one is replaced only with --force."""
    if out.suffix != ".argosmodel":
        raise UserError(f"--out {out}: an Argos package is a file ending in .argosmodel")
    if out.exists() and not force:
        raise UserError(f"--out {out} exists; --force to replace it")
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; an Argos package is a file")


def metadata(src: str, tgt: str) -> dict:
    names = {code: LANGUAGE_NAMES.get(code, code) for code in (src, tgt)}
    return {
        "package_version": PACKAGE_VERSION,
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "from_code": src,
        "from_name": names[src],
        "to_code": tgt,
        "to_name": names[tgt],
        "languages": [{"code": src, "name": names[src]}, {"code": tgt, "name": names[tgt]}],
        "mtcli_version": __version__,
    }


def export_argos(model_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write `model_dir` as an Argos package at `out` (a zip written aside, renamed into place)."""
    model_dir, out = Path(model_dir), Path(out)
    check_argos_out(out, force)
    meta = read_meta(model_dir)
    if not meta["joint"]:
        raise UserError(
            f"{model_dir}: separate source/target sentencepiece models; an Argos package has one"
        )
    # everything temporary lives in one folder beside --out, which a later run removes if a
    # kill left it (clean_leftovers)
    files.clean_leftovers(out.parent, "metadata.json", out.name.__eq__)
    work = files.temp_dir_beside(out)
    try:
        folder = work / f"translate-{_codes(model_dir)}-{PACKAGE_VERSION.replace('.', '_')}"
        folder.mkdir()
        export_ctranslate2(model_dir, folder / "model")
        config = json.loads((folder / "model" / "config.json").read_text())
        files.write_json(folder / "model" / "config.json", {**config, "add_source_eos": True})
        shutil.copyfile(model_dir / meta["src_model"], folder / "sentencepiece.model")
        marker = json.loads((folder / "model" / "mtcli.json").read_text())
        files.write_json(folder / "metadata.json", metadata(marker["src_lang"], marker["tgt_lang"]))
        (folder / "README.md").write_text(_readme(model_dir, marker), encoding="utf-8")
        _zip(folder, work / "package.zip", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _codes(model_dir: Path) -> str:
    config = read_config(model_dir)
    return f"{config.get('src_lang', 'src')}_{config.get('tgt_lang', 'tgt')}"


def _zip(folder: Path, part: Path, out: Path) -> None:
    """The folder as a zip at `part`, fsynced, then renamed to `out` (a kill leaves no half zip)."""
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            z.write(path, path.relative_to(folder.parent))
    files.fsync_path(part)
    os.replace(part, out)
    files.fsync_path(out.parent)


def _readme(model_dir: Path, marker: dict) -> str:
    return (
        f"# {model_dir.name}: {marker['src_lang']} → {marker['tgt_lang']}\n\n"
        f"A Transformer trained with mtcli {__version__}, converted to CTranslate2 exactly "
        "(greedy outputs identical to mtcli's own engine). Argos adds its own sentence splitting;\n"
        "LibreTranslate serves it once installed (argostranslate.package.install_from_path on this\n"
        "file, which unpacks it into ARGOS_PACKAGES_DIR).\n"
    )
