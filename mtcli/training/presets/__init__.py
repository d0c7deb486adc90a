"""Training settings as TOML files: the recipes of the shipped models and a quick first size.

`mtcli train --preset NAME` takes one's size and schedule for the user's own corpus (the
corpus, validation set and languages a recipe names are left out: they are the user's);
`mtcli train --config FILE` takes a file whole, as `make model` does with these. Stdlib only.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mtcli.errors import UserError

# what a preset brings is a size and a schedule, never data: these keys are dropped
CORPUS_KEYS = ("src", "tgt", "data", "valid_src", "valid_tgt", "tokenizer", "init", "out",
               "src_lang", "tgt_lang")  # fmt: skip


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path
    summary: str  # the first comment line of the file
    settings: dict  # its TOML, less CORPUS_KEYS


def preset_names() -> list[str]:
    return sorted(
        p.name.removesuffix(".toml") for p in _folder().iterdir() if p.name.endswith(".toml")
    )


def load_preset(name: str) -> Preset:
    """The preset `name`, or one line naming those there are."""
    path = _folder() / f"{name}.toml"
    if name not in preset_names():
        raise UserError(f"--preset {name}: no such preset ({', '.join(preset_names())})")
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    summary = _first_sentence(text)
    settings = {k: v for k, v in data.items() if k not in CORPUS_KEYS}
    return Preset(name, path, summary, settings)


def _first_sentence(text: str) -> str:
    """The first sentence of the comment block that opens a preset file."""
    words = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    sentence = " ".join(words).split(". ")[0].split(": ")[0].rstrip(".")
    return sentence if len(sentence) <= 90 else sentence[:89] + "…"


def _folder() -> Path:
    return Path(str(resources.files(__name__)))


def describe_presets() -> list[str]:
    """A line per preset: its name, shape, parameters in the layers, budget and summary."""
    from mtcli.config import ModelConfig, from_dict

    lines = []
    for name in preset_names():
        preset = load_preset(name)
        model = from_dict(ModelConfig, preset.settings.get("model", {}))
        shape = f"d_model {model.d_model}, {model.n_enc_layers}+{model.n_dec_layers} layers, d_ff {model.d_ff}"
        budget = _budget(preset.settings)
        lines.append(
            f"{name:<14} {shape}, {model.layer_parameters() / 1e6:.1f}M in the layers, {budget}: {preset.summary}"
        )
    return lines


def _budget(settings: dict) -> str:
    if minutes := settings.get("max_time"):
        return f"{minutes:g} minutes"
    if steps := settings.get("max_steps"):
        return f"{steps:,} steps"
    return "no budget"
