"""A model directory's files, read and checked without torch: config.json, the tokenizer files,
the safetensors header.

checkpoint.py builds the model, checks each tensor's shape against it and loads the weights;
everything before that is here, so a command checks a model directory before it imports torch
and a damaged one is one line at once rather than after torch's second of start-up.
Never reads tensor data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mtcli import files
from mtcli.config import (
    GENERATION_FIELDS,
    QUANTIZE_CHOICES,
    ConfigError,
    DecodeConfig,
    ModelConfig,
    build,
    why_not,
)
from mtcli.data.textio import read_json_object
from mtcli.data.tokenizer import Tokenizer
from mtcli.errors import UserError

FORMAT = 1
CONFIG_FILE, WEIGHTS_FILE, STATE_FILE = "config.json", "model.safetensors", "trainer_state.pt"
FLOAT_DTYPES = {"F32", "F16", "BF16"}


@dataclass
class ModelFiles:
    """A model directory whose files passed every check that needs no model."""

    path: Path
    config: dict  # the whole config.json
    model_cfg: ModelConfig
    tokenizer: Tokenizer
    header: dict[str, dict]  # safetensors: tensor name -> dtype, shape, data_offsets


def resolve_dir(path: str | Path) -> Path:
    """The model directory to read (see files.resolve_dir)."""
    return files.resolve_dir(path, CONFIG_FILE)


def read_config(path: str | Path) -> dict:
    """config.json of a model directory, checked: an object, a known format, a valid model."""
    path = resolve_dir(path)
    cfg_path = path / CONFIG_FILE
    if not path.is_dir():
        raise UserError(f"{path}: no such model directory")
    if not cfg_path.is_file():
        raise UserError(f"{path}: not a model directory (no {CONFIG_FILE}){_models_inside(path)}")
    config = read_json_object(cfg_path)
    fmt = config.get("format", 0)
    if not isinstance(fmt, int) or isinstance(fmt, bool):
        raise UserError(f"{cfg_path}: format must be an integer, not {fmt!r}")
    if fmt > FORMAT:
        raise UserError(f"{cfg_path}: format {fmt} is newer than this mtcli reads ({FORMAT})")
    model_config(config, cfg_path)  # the model table must be valid before anything uses it
    generation_defaults(config, cfg_path)
    return config


def best_in_run(path: str | Path) -> Path | None:
    """The model a training run's folder `path` (one that is not a model itself) stands for:
    OUT/model, the one the run ended with, else OUT/best; None otherwise. What -m OUT means."""
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        return None
    for name in ("model", "best"):
        if (path / name / CONFIG_FILE).is_file():
            return path / name
    return None


def _models_inside(path: Path) -> str:
    """A training run's folder holds its models one level down: name them (best first)."""
    names = ("model", "best", "last")
    inside = [path / name for name in names if (path / name / CONFIG_FILE).is_file()]
    steps = sorted(path.glob("step-*/" + CONFIG_FILE), key=lambda p: _step_number(p.parent.name))
    inside += [p.parent for p in steps[-1:]]
    if not inside:
        return ""
    return "; a training run: use " + " or ".join(str(p) for p in inside)


def _step_number(name: str) -> int:
    digits = name.removeprefix("step-")
    return int(digits) if digits.isdigit() else -1


def generation_defaults(config: dict, cfg_path: Path | str = CONFIG_FILE) -> dict:
    """The decoding settings a model recommends for itself ("generation": beam size, length
    penalty, each checked by DecodeConfig's rules; quantize: none or int8); {} when it
    recommends none."""
    generation = config.get("generation", {})
    if not isinstance(generation, dict):
        raise UserError(f"{cfg_path}: generation = {generation!r}: must be an object")
    for key, value in generation.items():
        if key == "quantize":
            if value not in QUANTIZE_CHOICES:
                choices = ", ".join(QUANTIZE_CHOICES)
                raise UserError(
                    f"{cfg_path}: generation.quantize = {value!r}: must be one of {choices}"
                )
            continue
        if key not in GENERATION_FIELDS:
            known = ", ".join((*GENERATION_FIELDS, "quantize"))
            raise UserError(f"{cfg_path}: generation.{key}: unknown setting (known: {known})")
        if why := why_not(DecodeConfig, key, value):
            raise UserError(f"{cfg_path}: generation.{key} = {value!r}: {why}")
    return generation


def quantization(asked: str, generation: dict) -> str:
    """What a model's Linear layers run in: `asked` (none or int8), else ("") what its checked
    generation defaults recommend, else none."""
    return asked or generation.get("quantize", "none")


def model_config(config: dict, cfg_path: Path) -> ModelConfig:
    """The ModelConfig recorded in config.json; a bad value names the file and the key."""
    try:
        return build(ModelConfig, config.get("model"), lambda key: "model." + key)
    except ConfigError as e:
        raise UserError(f"{cfg_path}: {e}") from None


def read_safetensors_header(path: Path) -> dict[str, dict]:
    """Tensor name -> {dtype, shape, data_offsets} from a safetensors file, without loading it.

    The format: 8 bytes little-endian header length, a JSON header, then the tensor bytes;
    a truncated file is caught by offsets that run past its end.
    """
    if not path.is_file():
        raise UserError(f"{path}: missing")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= size - 8:
            raise UserError(f"{path}: not a safetensors file (bad header length)")
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{path}: not a safetensors file (unreadable header)") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: not a safetensors file (header is not an object)")
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, entry in header.items():
        try:
            begin, end = entry["data_offsets"]
            ok = 0 <= begin <= end <= data_size and isinstance(entry["shape"], list)
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise UserError(f"{path}: tensor {name} runs past the end of the file (truncated?)")
    return header


def check_tokenizer(path: Path, config: dict, tokenizer: Tokenizer, model_cfg: ModelConfig) -> None:
    """Refuse a directory whose tokenizer files or vocabulary differ from what the model was built on."""
    recorded = config.get("tokenizer", {})
    if not isinstance(recorded, dict):
        raise UserError(f"{path / CONFIG_FILE}: tokenizer must be a table of file hashes")
    for name, digest in recorded.items():
        if not (path / name).is_file() or files.sha256_of(path / name) != digest:
            raise UserError(
                f"{path / name}: tokenizer file does not match the one recorded in {CONFIG_FILE}"
            )
    sizes = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    if sizes != (model_cfg.src_vocab_size, model_cfg.tgt_vocab_size):
        raise UserError(
            f"{path}: tokenizer vocabulary {sizes} does not match the model's "
            f"({model_cfg.src_vocab_size}, {model_cfg.tgt_vocab_size})"
        )


def check_model_files(path: str | Path) -> ModelFiles:
    """Every file of a model directory checked as far as it can be without building the model;
    raises UserError naming the first bad file."""
    path = resolve_dir(path)
    if (path / "model.bin").is_file() and (path / "mtcli.json").is_file():
        raise UserError(f"{path}: a CTranslate2 model; translate it with --engine ctranslate2")
    config = read_config(path)
    model_cfg = model_config(config, path / CONFIG_FILE)
    tokenizer = Tokenizer.load(path)
    check_tokenizer(path, config, tokenizer, model_cfg)
    header = read_safetensors_header(path / WEIGHTS_FILE)
    return ModelFiles(path, config, model_cfg, tokenizer, header)


def check_export_out(checkpoints: list[Path], out: Path, force: bool) -> None:
    """--out may not be an input or hold one, and may replace only an mtcli model directory."""
    files.check_replaceable(out, "model", "--out", force, reads=checkpoints)
