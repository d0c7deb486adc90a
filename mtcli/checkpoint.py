"""Model directories: save and load atomically, verify the tokenizer, average checkpoints.

A model directory is self-describing:
  config.json          model config, tokenizer files and their sha256, languages, version, format
  model.safetensors    weights (fp32, or fp16 for shipped models; always loaded as fp32)
  tokenizer.json, *.model   the sentencepiece tokenizer it was trained with
  trainer_state.pt     optional: optimizer, schedule, data position, RNG (weights_only load)
Loading never executes code from the directory. Knows nothing about training loops.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from mtcli import __version__, files
from mtcli.config import ModelConfig, from_dict, to_dict
from mtcli.errors import UserError
from mtcli.model import Seq2Seq
from mtcli.tokenizer import Tokenizer, file_sha256

FORMAT = 1
CONFIG_FILE, WEIGHTS_FILE, STATE_FILE = "config.json", "model.safetensors", "trainer_state.pt"


@dataclass
class LoadedModel:
    """Everything `load_model` rebuilds from a directory."""

    model: Seq2Seq
    tokenizer: Tokenizer
    config: dict  # the whole config.json
    path: Path

    @property
    def tgt_lang(self) -> str:
        return self.config.get("tgt_lang", "")


@dataclass
class SaveRequest:
    """What goes into a model directory besides the weights."""

    tokenizer_dir: Path
    src_lang: str = ""
    tgt_lang: str = ""
    extra: dict = field(default_factory=dict)  # step, validation scores, train config
    trainer_state: dict | None = None
    dtype: torch.dtype = torch.float32


def _unique_tensors(model: Seq2Seq, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """State dict without aliases (tied embeddings are stored once), cast to `dtype`."""
    seen: set[int] = set()
    tensors = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = (
            tensor.detach()
            .to("cpu", dtype if tensor.is_floating_point() else tensor.dtype)
            .contiguous()
        )
    return tensors


def resolve_dir(path: str | Path) -> Path:
    """The model directory to read (see files.resolve_dir)."""
    return files.resolve_dir(path, CONFIG_FILE)


def save_model(model: Seq2Seq, path: str | Path, request: SaveRequest) -> Path:
    """Write a complete model directory to a temp dir beside `path`, then swap it in."""
    path = Path(path)
    tmp = files.temp_dir_beside(path)
    try:
        tok_files = Tokenizer.model_files(request.tokenizer_dir)
        for name in tok_files:
            shutil.copyfile(Path(request.tokenizer_dir) / name, tmp / name)
        save_file(_unique_tensors(model, request.dtype), str(tmp / WEIGHTS_FILE))
        config = {
            "format": FORMAT,
            "mtcli_version": __version__,
            "model": to_dict(model.cfg),
            "src_lang": request.src_lang,
            "tgt_lang": request.tgt_lang,
            "tokenizer": {name: file_sha256(tmp / name) for name in tok_files},
            **request.extra,
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        if request.trainer_state is not None:
            torch.save(request.trainer_state, tmp / STATE_FILE)
        files.replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_config(path: str | Path) -> dict:
    path = resolve_dir(path)
    cfg_path = path / CONFIG_FILE
    if not cfg_path.is_file():
        raise UserError(f"{path}: not a model directory (no {CONFIG_FILE})")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_path}: invalid JSON ({e})") from None
    if config.get("format", 0) > FORMAT:
        raise UserError(
            f"{cfg_path}: format {config['format']} is newer than this mtcli reads ({FORMAT})"
        )
    return config


def _check_tokenizer(
    path: Path, config: dict, tokenizer: Tokenizer, model_cfg: ModelConfig
) -> None:
    """Refuse a directory whose tokenizer files or vocabulary differ from what the model was built on."""
    for name, digest in config.get("tokenizer", {}).items():
        if not (path / name).is_file() or file_sha256(path / name) != digest:
            raise UserError(
                f"{path / name}: tokenizer file does not match the one recorded in {CONFIG_FILE}"
            )
    sizes = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    if sizes != (model_cfg.src_vocab_size, model_cfg.tgt_vocab_size):
        raise UserError(
            f"{path}: tokenizer vocabulary {sizes} does not match the model's "
            f"({model_cfg.src_vocab_size}, {model_cfg.tgt_vocab_size})"
        )


def load_model(path: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild model and tokenizer from a directory with no other input (weights as fp32)."""
    path = resolve_dir(path)
    config = read_config(path)
    model_cfg = from_dict(ModelConfig, config["model"])
    tokenizer = Tokenizer.load(path)
    _check_tokenizer(path, config, tokenizer, model_cfg)
    model = Seq2Seq(model_cfg)
    tensors = {
        k: v.float() if v.is_floating_point() else v
        for k, v in load_file(str(path / WEIGHTS_FILE)).items()
    }
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    # tied weights are stored once, under their first name
    aliases = {"tgt_embed.weight"} if model_cfg.share_embeddings else set()
    if model_cfg.tie_output:
        aliases.add("out_proj.weight")
    if unexpected or set(missing) - aliases:
        raise UserError(
            f"{path / WEIGHTS_FILE}: weights do not fit the config (missing {missing}, unexpected {unexpected})"
        )
    model.to(device).eval()
    return LoadedModel(model, tokenizer, config, path)


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Optimizer, schedule, data position and RNG states; plain tensors and containers only."""
    state_path = resolve_dir(path) / STATE_FILE
    if not state_path.is_file():
        raise UserError(f"{path}: no {STATE_FILE} to resume from")
    return torch.load(state_path, map_location="cpu", weights_only=True)


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights of several checkpoints of one run."""
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        for name, tensor in load_file(str(resolve_dir(p) / WEIGHTS_FILE)).items():
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (t / len(paths)).float() for name, t in total.items()}


def export_model(checkpoints: list[Path], out: Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write the element-wise mean of checkpoints of one run as a model directory, no trainer state."""
    loaded = load_model(checkpoints[0])
    for other in checkpoints[1:]:
        if read_config(other)["model"] != loaded.config["model"]:
            raise UserError(
                f"{other}: model config differs from {checkpoints[0]}; only one run's checkpoints average"
            )
    if len(checkpoints) > 1:
        loaded.model.load_state_dict(average_weights(checkpoints), strict=False)
    kept = ("train", "step", "valid") if len(checkpoints) == 1 else ("train",)
    extra = {k: v for k, v in loaded.config.items() if k in kept}
    if len(checkpoints) > 1:
        extra["step"] = max(read_config(c).get("step", 0) for c in checkpoints)
        extra["averaged_from"] = [f"step {read_config(c).get('step')}" for c in checkpoints]
    request = SaveRequest(
        tokenizer_dir=loaded.path, src_lang=loaded.config.get("src_lang", ""), tgt_lang=loaded.tgt_lang,
        extra=extra, dtype=dtype,
    )  # fmt: skip
    return save_model(loaded.model, out, request)
