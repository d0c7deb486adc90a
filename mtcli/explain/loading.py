"""The model `mtcli explain` walks through: mtcli's own engine, fp32, its plain weights."""

from __future__ import annotations

from pathlib import Path

from mtcli.errors import UserError
from mtcli.store.checkpoint import load_model
from mtcli.store.model_dir import WEIGHTS_FILE


def explainable_model(path: Path):
    """The LoadedModel at `path`; one line where only CTranslate2 can read it (its weights are
    in CTranslate2's own file, whose arithmetic mtcli cannot show)."""
    path = Path(path)
    if (path / "model.bin").is_file() and not (path / WEIGHTS_FILE).is_file():
        raise UserError(
            f"-m {path}: a CTranslate2 model; explain shows mtcli's own engine at work "
            f"(-m a directory with {WEIGHTS_FILE}: a shipped, trained or imported model)"
        )
    return load_model(path)
