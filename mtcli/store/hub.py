"""`mtcli models pull ORG/NAME`: a model from the Hugging Face hub, through huggingface_hub's own
`snapshot_download` and cache (so HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_ENDPOINT and tokens
from HF_TOKEN or `hf auth login` mean what they mean for every other tool), then imported into
the folder of pulled models (registry.user_models_dir) under its name, where `-m NAME` finds it.

A repository is either a MarianMT one (OPUS-MT as published, or `mtcli export huggingface`'s),
imported by hf_import.py, or an mtcli model directory, copied as it is. Only the files those
need are fetched: not the TensorFlow, Flax or ONNX copies many model repositories also hold.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mtcli import files
from mtcli.data.textio import read_json_object
from mtcli.errors import UserError
from mtcli.store.model_dir import CONFIG_FILE, WEIGHTS_FILE
from mtcli.store.registry import CARD_FILE, describe, read_card, user_models_dir

# ORG/NAME as the hub spells repository ids (huggingface_hub's validator, without its import)
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
TEXT_FILES = [
    "config.json", "tokenizer_config.json", "generation_config.json", "metadata.json",
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", CARD_FILE,
    "tokenizer/*", "*.model", "tokenizer.json", "confidence.json",
]  # fmt: skip
# safetensors first; a repository without it (many OPUS-MT ones) gives its pickle, read as
# tensors only (hf_import._weights)
WEIGHT_FILES = ["model.safetensors", "pytorch_model.bin"]


@dataclass
class PullRequest:
    repo_id: str
    revision: str | None = None
    name: str | None = None  # the model's name here; the repository's name by default
    src_lang: str | None = None  # over what the repository's files say
    tgt_lang: str | None = None
    force: bool = False


def check_pull(req: PullRequest) -> Path:
    """Where the model will be written, once the request is known to be sound (before any
    download): a repository id as the hub spells it, a plain name, a --name not yet taken."""
    if not REPO_ID.fullmatch(req.repo_id) or ".." in req.repo_id:
        raise UserError(
            f"{req.repo_id!r}: not a hub repository id (ORG/NAME: Helsinki-NLP/opus-mt-en-zh)"
        )
    name = req.name or req.repo_id.split("/")[1]
    if not MODEL_NAME.fullmatch(name):
        raise UserError(f"--name {name!r}: letters, digits, '.', '_' and '-' only")
    if req.revision is not None and not req.revision.strip():
        raise UserError("--revision: empty (a branch, a tag or a commit hash)")
    out = user_models_dir() / name
    if out.exists() and not req.force:  # the folder is mtcli's; what is in it may be the user's
        what = "already pulled" if describe(out) else "taken by something not a model"
        raise UserError(f"--name {name}: {what} ({out}); --force replaces it")
    return out


def pull(req: PullRequest, out: Path, progress: bool) -> tuple[Path, str]:
    """Download (or find in the cache) `req`'s repository and write it as the model `out`;
    returns the model directory and the commit it came from."""
    snapshot = _snapshot(req, progress)
    commit = snapshot.name  # snapshots/<commit hash>/
    origin = f"hf://{req.repo_id}@{commit}"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = _config(snapshot)
    langs = {"src_lang": req.src_lang, "tgt_lang": req.tgt_lang}
    if config.get("model_type") == "marian":
        from mtcli.store.hf_import import import_huggingface  # torch: only for this kind

        import_huggingface(
            snapshot, out, force=True, langs=langs, origin=origin, name=req.repo_id.split("/")[1]
        )
    elif "model" in config and (snapshot / WEIGHTS_FILE).is_file():
        _copy_mtcli_dir(snapshot, out, langs, origin)
    else:
        raise UserError(
            f"{req.repo_id}: neither a MarianMT model (config.json model_type 'marian') nor an "
            "mtcli model directory; mtcli cannot run it"
        )
    _write_card(out, snapshot, req.repo_id, commit)
    return out, commit


def _snapshot(req: PullRequest, progress: bool) -> Path:
    """The repository's files in huggingface_hub's cache: the text files and safetensors
    weights, else (none in the repository) its pytorch_model.bin."""
    try:
        import huggingface_hub
        from huggingface_hub import constants, errors
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        raise UserError(
            "mtcli models pull needs huggingface_hub: pip install 'mtcli[hub]'"
        ) from None
    if not progress:  # a pipe or a log: no bars drawn with carriage returns
        disable_progress_bars()
    where = f"{req.repo_id}" + (f" at revision {req.revision}" if req.revision else "")
    try:
        for weights in WEIGHT_FILES:
            path = Path(
                huggingface_hub.snapshot_download(
                    req.repo_id,
                    revision=req.revision,
                    allow_patterns=[*TEXT_FILES, weights],
                    library_name="mtcli",
                )
            )
            if (path / weights).is_file():
                return path
    except errors.RevisionNotFoundError:
        raise UserError(
            f"--revision {req.revision}: {req.repo_id} has no such branch, tag or commit"
        ) from None
    except errors.GatedRepoError:
        raise UserError(
            f"{req.repo_id}: a gated repository; accept its terms on the hub, then log in "
            "(hf auth login, or HF_TOKEN)"
        ) from None
    except errors.RepositoryNotFoundError:
        raise UserError(
            f"{req.repo_id}: no such model on the hub (a private one needs a token: hf auth "
            "login, or HF_TOKEN)"
        ) from None
    except errors.LocalEntryNotFoundError:
        how = (
            "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub could not be reached"
        )
        raise UserError(
            f"{where}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {how}"
        ) from None
    except (errors.HfHubHTTPError, errors.IncompleteSnapshotError, OSError) as e:
        raise UserError(f"{where}: {str(e).splitlines()[0][:200]}") from None
    raise UserError(f"{where}: no weights ({' or '.join(WEIGHT_FILES)}) in the repository")


def _config(snapshot: Path) -> dict:
    return read_json_object(snapshot / CONFIG_FILE, "missing (every model repository has one)")


def _copy_mtcli_dir(snapshot: Path, out: Path, langs: dict, origin: str) -> None:
    """An mtcli model directory from the hub, copied whole (the cache's files are links into
    its blobs: copied as files), checked loadable before it takes `out`'s place."""
    from mtcli.store.checkpoint import check_model_dir

    with files.built_aside(out, CONFIG_FILE) as tmp:
        shutil.copytree(snapshot, tmp, dirs_exist_ok=True)
        config = _config(tmp)
        config |= {k: v for k, v in langs.items() if v} | {"imported_from": origin}
        files.write_json(tmp / CONFIG_FILE, config)
        check_model_dir(tmp)


def _write_card(out: Path, snapshot: Path, repo_id: str, commit: str) -> None:
    """A model card saying where the model came from and what its own card claims: the
    scores are the publisher's, not measured here."""
    theirs = read_card(snapshot)
    lines = ["---", f"pulled_from: {repo_id}", f"revision: {commit}"]
    lines += [f"{key}: {theirs[key]}" for key in ("license", "language") if theirs.get(key)]
    lines += [
        "---",
        "",
        f"# {out.name}",
        "",
        f"Pulled from the Hugging Face hub: https://huggingface.co/{repo_id} (commit {commit}).",
        "Its quality is what its publisher reports there; mtcli has not measured it",
        f"(`mtcli eval -m {out.name} ...` does).",
        "",
    ]
    files.write_file_atomic(out / CARD_FILE, "\n".join(lines).encode("utf-8"))
