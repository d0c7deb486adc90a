"""Settings in layers: the defaults, what a checkpoint recorded, a TOML file, the flags. Each
layer's values are judged by config.py's rules as they are read, and a mistake names the layer
that set it (a flag, a file and key, a checkpoint's config.json). Later layers win.
"""

from __future__ import annotations

from collections.abc import Callable

from mtcli.config import ConfigError, ModelConfig, TrainConfig, from_dict, read_toml, why_not
from mtcli.errors import UserError


def flag(key: str) -> str:
    """The command-line flag of a config field: model.d_model -> --d-model."""
    return "--" + key.removeprefix("model.").replace("_", "-")


class Layer:
    """One source of settings (defaults of a checkpoint, a TOML file, the flags), flattened
    to keys like "max_tokens" and "model.d_model", and how to name a key of it in an error."""

    def __init__(
        self,
        values: dict,
        describe: Callable[[str, object], str],
        *,
        cls: type = TrainConfig,
        strict: bool = True,
    ):
        self.values, self.describe = {}, describe
        for key, value in values.items():
            if key == "model" and isinstance(value, dict):
                self.values.update({f"model.{k}": v for k, v in value.items()})
            else:
                self.values[key] = value
        # every value judged by config.py's rules; unknown keys refused (or dropped, for a
        # checkpoint written by another mtcli version)
        for key, value in list(self.values.items()):
            owner, name = (ModelConfig, key[6:]) if key.startswith("model.") else (cls, key)
            if name not in owner.__dataclass_fields__:
                if strict:
                    raise UserError(f"{self.describe(key, value)}: unknown setting")
                del self.values[key]
            elif why := why_not(owner, name, value):
                raise UserError(f"{self.describe(key, value)}: {why}")


def build_from_layers(cls: type, layers: list[Layer]):
    """Later layers win; a check across fields (d_model % n_heads) names the layer that set it."""
    merged: dict = {}
    origin: dict[str, Layer] = {}
    for layer in layers:
        merged.update(layer.values)
        origin.update(dict.fromkeys(layer.values, layer))
    nested: dict = {"model": {}} if cls is TrainConfig else {}
    for key, value in merged.items():
        if key.startswith("model."):
            nested["model"][key[6:]] = value
        else:
            nested[key] = value
    try:
        return from_dict(cls, nested)
    except ConfigError as e:
        who = origin.get(e.key)
        where = who.describe(e.key, e.value) if who else f"{flag(e.key)} {e.value} (the default)"
        raise UserError(f"{where}: {e.why}") from None


def toml_layer(path: str) -> Layer:
    """A TOML file of TrainConfig fields; a [model] table for ModelConfig fields."""
    try:
        data = read_toml(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        raise UserError(f"{path}: cannot read config ({e})") from None
    if "model" in data and not isinstance(data["model"], dict):
        raise UserError(f"{path}: model = {data['model']!r}: must be a table ([model])")
    return Layer(data, lambda key, value: f"{path}: {key} = {value!r}")
