"""Model directories: check, save and load atomically, verify the tokenizer, average checkpoints.

A model directory is self-describing:
  config.json          model config, tokenizer files and their sha256, languages, version, format
  model.safetensors    weights (fp32, or fp16 for shipped models; always loaded as fp32)
  tokenizer.json, *.model   the sentencepiece tokenizer it was trained with
  trainer_state.pt     optional: optimizer, schedule, data position, RNG (weights_only load)
Loading never executes code from the directory, and every file is checked before the model is
built (all that needs no model in model_dir.py, without torch; the tensor shapes here), so a
damaged directory is one line naming the file. Knows nothing about training loops.
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
from mtcli.config import ModelConfig, to_dict
from mtcli.data.placeholders import is_tag_piece
from mtcli.data.tokenizer import Tokenizer
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.model_dir import (
    CONFIG_FILE,
    FLOAT_DTYPES,
    FORMAT,
    STATE_FILE,
    WEIGHTS_FILE,
    check_export_out,
    check_model_files,
    read_config,
    resolve_dir,
)


@dataclass
class LoadedModel:
    """Everything `load_model` rebuilds from a directory."""

    model: Seq2Seq
    tokenizer: Tokenizer
    config: dict  # the whole config.json
    path: Path

    @property
    def src_lang(self) -> str:
        return self.config.get("src_lang", "")

    @property
    def tgt_lang(self) -> str:
        return self.config.get("tgt_lang", "")

    @property
    def placeholders(self) -> list[str]:
        """The placeholder pieces this model was trained to carry (its config's training run had
        the placeholder pipeline on, over a tokenizer that holds them): span pieces when it ran
        with --placeholders, tag pieces when it ran with --tags; none for any other model."""
        train = self.config.get("train") or {}
        if not isinstance(train, dict):
            return []
        spans = _rate(train.get("placeholders")) > 0
        tags = _rate(train.get("tags")) > 0
        return [p for p in self.tokenizer.placeholders if (tags if is_tag_piece(p) else spans)]


def _rate(value) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


@dataclass
class SaveRequest:
    """What goes into a model directory besides the weights."""

    tokenizer_dir: Path
    src_lang: str = ""
    tgt_lang: str = ""
    extra: dict = field(default_factory=dict)  # step, validation scores, train config
    trainer_state: dict | None = None
    dtype: torch.dtype = torch.float32


def _aliases(cfg: ModelConfig) -> set[str]:
    """Tied weights are one tensor under several names; they are stored under the first."""
    names = {"tgt_embed.weight"} if cfg.share_embeddings else set()
    if cfg.tie_output:
        names.add("out_proj.weight")
    return names


def _unique_tensors(model: Seq2Seq, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """State dict without aliases (tied embeddings are stored once), cast to `dtype`."""
    aliases = _aliases(model.cfg)
    return {
        name: tensor.detach()
        .to("cpu", dtype if tensor.is_floating_point() else tensor.dtype)
        .contiguous()
        for name, tensor in model.state_dict().items()
        if name not in aliases
    }


def write_model_dir(model: Seq2Seq, tmp: Path, request: SaveRequest) -> None:
    """Fill the empty directory `tmp` with everything a model directory holds."""
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
        "tokenizer": {name: files.sha256_of(tmp / name) for name in tok_files},
        **request.extra,
    }
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    if request.trainer_state is not None:
        torch.save(request.trainer_state, tmp / STATE_FILE)
    for item in tmp.iterdir():
        files.shareable(item)  # safetensors writes 0600


def save_model(model: Seq2Seq, path: str | Path, request: SaveRequest) -> Path:
    """Write a complete model directory beside `path`, fsync it, then swap it in."""
    path = Path(path)
    tmp = files.temp_dir_beside(path)
    try:
        write_model_dir(model, tmp, request)
        files.replace_dir(tmp, path, CONFIG_FILE)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


# ---------------------------------------------------------------- checks before loading
def check_weights(weights: Path, header: dict[str, dict], model: Seq2Seq) -> None:
    """Every tensor the model's config implies is in the file's header, with its shape and a
    float dtype.

    (The model is built before this check, as load_model needs it anyway; building it under
    torch.device("meta") instead would import torch._dynamo: over a second of start-up.)
    """
    expected = {
        name: list(t.shape)
        for name, t in model.state_dict().items()
        if name not in _aliases(model.cfg)
    }
    if missing := sorted(set(expected) - set(header)):
        raise UserError(f"{weights}: no tensor {missing[0]} ({len(missing)} missing)")
    if extra := sorted(set(header) - set(expected)):
        raise UserError(f"{weights}: unexpected tensor {extra[0]} for this {CONFIG_FILE}")
    for name, shape in expected.items():
        if header[name]["shape"] != shape:
            raise UserError(
                f"{weights}: {name} has shape {tuple(header[name]['shape'])} but "
                f"{CONFIG_FILE} implies {tuple(shape)}"
            )
        if header[name].get("dtype") not in FLOAT_DTYPES:
            raise UserError(f"{weights}: {name} has dtype {header[name].get('dtype')}")


def check_model_dir(path: str | Path) -> tuple[Path, dict, Seq2Seq, Tokenizer]:
    """Everything `load_model` needs, each file checked (the model built, its weights not yet
    loaded); raises UserError naming a bad file."""
    checked = check_model_files(path)  # all that needs no model (model_dir.py)
    model = Seq2Seq(checked.model_cfg, initialise=False)  # every weight is loaded next
    check_weights(checked.path / WEIGHTS_FILE, checked.header, model)
    return checked.path, checked.config, model, checked.tokenizer


def load_model(path: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild model and tokenizer from a directory with no other input (weights as fp32)."""
    path, config, model, tokenizer = check_model_dir(path)
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except Exception as e:  # safetensors raises its own error type for damaged data
        raise UserError(f"{path / WEIGHTS_FILE}: unreadable ({e})") from None
    tensors = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    model.load_state_dict(tensors, strict=False)  # names and shapes were checked above
    model.to(device).eval()
    return LoadedModel(model, tokenizer, config, path)


def load_ensemble(paths: list[Path], device: str | torch.device = "cpu") -> list[LoadedModel]:
    """Several models to decode as one: they must share the tokenizer (the same files), since
    their log-probabilities are averaged over one vocabulary."""
    loaded = [load_model(p, device) for p in paths]
    first = loaded[0]
    for other in loaded[1:]:
        if other.config.get("tokenizer") != first.config.get("tokenizer"):
            raise UserError(
                f"-m {other.path} has another tokenizer than -m {first.path}; an ensemble needs one"
            )
    return loaded


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Optimizer, schedule, data position and RNG states; plain tensors and containers only."""
    state_path = resolve_dir(path) / STATE_FILE
    if not state_path.is_file():
        raise UserError(f"{path}: no {STATE_FILE} to resume from")
    try:
        state = torch.load(state_path, map_location="cpu", weights_only=True)
    except Exception as e:  # a damaged pickle or zip raises many types
        raise UserError(f"{state_path}: unreadable ({type(e).__name__})") from None
    if not isinstance(state, dict) or "step" not in state or "optimizer" not in state:
        raise UserError(f"{state_path}: not a trainer state")
    return state


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights of several checkpoints of one run."""
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        for name, tensor in load_file(str(resolve_dir(p) / WEIGHTS_FILE)).items():
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (t / len(paths)).float() for name, t in total.items()}


def export_model(
    checkpoints: list[Path],
    out: Path,
    dtype: torch.dtype = torch.float16,
    *,
    force: bool = False,
    generation: dict | None = None,
    languages: dict[str, str] | None = None,
) -> Path:
    """Write the element-wise mean of checkpoints of one run as a model directory, no trainer
    state; `generation`: the decoding settings it recommends (else those it had, if any);
    `languages`: new labels ("src"/"tgt" -> code) for a model trained under wrong ones."""
    check_export_out(checkpoints, out, force)
    loaded = load_model(checkpoints[0])
    for other in checkpoints[1:]:
        if read_config(other)["model"] != loaded.config["model"]:
            raise UserError(
                f"{other}: model config differs from {checkpoints[0]}; only one run's checkpoints average"
            )
        check_model_dir(other)
    if len(checkpoints) > 1:
        loaded.model.load_state_dict(average_weights(checkpoints), strict=False)
    kept = ("train", "step", "valid") if len(checkpoints) == 1 else ("train",)
    extra = {k: v for k, v in loaded.config.items() if k in (*kept, "generation")}
    if generation is not None:
        extra["generation"] = generation
    if len(checkpoints) > 1:
        extra["step"] = max(read_config(c).get("step", 0) for c in checkpoints)
        extra["averaged_from"] = [f"step {read_config(c).get('step')}" for c in checkpoints]
    labels = {"src": loaded.src_lang, "tgt": loaded.tgt_lang, **(languages or {})}
    if languages and isinstance(extra.get("train"), dict):  # the record says what it is now
        extra["train"] = {**extra["train"], **{f"{k}_lang": v for k, v in languages.items()}}
    request = SaveRequest(
        tokenizer_dir=loaded.path,
        src_lang=labels["src"],
        tgt_lang=labels["tgt"],
        extra=extra,
        dtype=dtype,
    )
    files.clean_leftovers(out.parent, CONFIG_FILE, out.name.__eq__)
    return save_model(loaded.model, out, request)
