"""`mtcli models pull`: a model from the Hugging Face hub through huggingface_hub's own
snapshot_download, offline, on a cache laid out as huggingface_hub lays it out
(models--ORG--NAME/blobs, snapshots/COMMIT/ linking into them, refs/main), filled with the
shipped model exported as MarianMT; the pulled model is listed and translates as the shipped one."""

from __future__ import annotations

import hashlib
import json
import os
import pickle

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from mtcli.cli import main
from mtcli.errors import UserError
from mtcli.store.hf_export import export_huggingface
from mtcli.store.hf_import import import_huggingface
from mtcli.store.registry import user_models_dir
from tests.conftest import REPO, run_mtcli

pytest.importorskip("huggingface_hub")
SHIPPED = REPO / "models" / "en-zh-tiny"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LINES = ["Why do we work?", "Do you have a pencil?", "I'm a good cook."]


def lay_out_hub_cache(hub: os.PathLike, repo_id: str, folder, commit: str, refs=("main",)) -> None:
    """huggingface_hub's cache layout: each file once under blobs/ (named by its hash), the
    snapshot's files relative links to them, and each ref a file holding the commit."""
    storage = hub / ("models--" + repo_id.replace("/", "--"))
    (storage / "blobs").mkdir(parents=True)
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        blob = hashlib.sha256(data).hexdigest()
        (storage / "blobs" / blob).write_bytes(data)
        (snapshot / path.name).symlink_to(f"../../blobs/{blob}")
    (storage / "refs").mkdir()
    for ref in refs:
        (storage / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    """The shipped en-zh model as a MarianMT directory (mtcli export huggingface)."""
    return export_huggingface(SHIPPED, tmp_path_factory.mktemp("export") / "marian")


def _translate(model: str, env: dict) -> list[str]:
    """The search's translations (--no-rerank: the weights are what is compared; a MarianMT
    directory carries no reranking weights)."""
    args = ["translate", "-m", model, "--no-rerank"]
    result = CliRunner().invoke(main, args, input="\n".join(LINES) + "\n", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_a_pulled_model_comes_from_the_cache_offline_and_translates_as_the_original(
    tmp_path, marian_dir
):
    hf_home, data = tmp_path / "hf", tmp_path / "data"
    lay_out_hub_cache(hf_home / "hub", "someone/opus-mt-en-zh", marian_dir, COMMIT, ("main", "v1"))
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "XDG_DATA_HOME": str(data)}
    done = run_mtcli("models", "pull", "someone/opus-mt-en-zh", "--revision", "v1", env=env)
    assert done.returncode == 0, done.stderr
    assert "installed opus-mt-en-zh" in done.stderr and COMMIT[:12] in done.stderr
    assert done.stdout == ""  # stdout carries results only
    model = data / "mtcli" / "models" / "opus-mt-en-zh"
    config = json.loads((model / "config.json").read_text())
    assert config["imported_from"] == f"hf://someone/opus-mt-en-zh@{COMMIT}"
    assert (config["src_lang"], config["tgt_lang"]) == ("en", "zh")
    assert "pulled_from: someone/opus-mt-en-zh" in (model / "README.md").read_text()
    # listed by name, and the same translations as the model it was exported from
    listed = CliRunner().invoke(main, ["models", "--json"], env={"XDG_DATA_HOME": str(data)})
    names = [json.loads(line)["name"] for line in listed.stdout.splitlines()]
    assert "opus-mt-en-zh" in names and "en-zh-tiny" in names
    pulled = _translate("opus-mt-en-zh", {"XDG_DATA_HOME": str(data)})
    assert pulled == _translate("en-zh-tiny", {}) and all(pulled)
    # pulled again: refused without --force (the model is there), done with it
    again = CliRunner().invoke(main, ["models", "pull", "someone/opus-mt-en-zh"], env=env)
    assert again.exit_code != 0 and "already pulled" in again.output


def test_what_the_cache_lacks_offline_is_one_line(tmp_path, marian_dir):
    hf_home = tmp_path / "hf"
    lay_out_hub_cache(hf_home / "hub", "someone/opus-mt-en-zh", marian_dir, COMMIT)
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "XDG_DATA_HOME": str(tmp_path / "d")}
    for args, message in (
        (["nobody/nothing"], "nobody/nothing: not in the Hugging Face cache"),
        (
            ["someone/opus-mt-en-zh", "--revision", "v9"],
            "at revision v9: not in the Hugging Face cache",
        ),  # noqa: E501
    ):
        done = run_mtcli("models", "pull", *args, env=env)
        assert done.returncode == 2 and message in done.stderr and "HF_HUB_OFFLINE" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "d" / "mtcli" / "models").exists() or not any(
        (tmp_path / "d" / "mtcli" / "models").iterdir()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["not-a-repo"], "not a hub repository id"),
        (["a/../b"], "not a hub repository id"),
        (["a/b", "--name", "../x"], "--name '../x'"),
        (["a/b", "--revision", " "], "--revision: empty"),
    ],
)
def test_a_bad_pull_request_is_refused_before_any_download(tmp_path, args, message):
    result = CliRunner().invoke(main, ["models", "pull", *args], env={"XDG_DATA_HOME": str(tmp_path)})  # fmt: skip
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "mtcli").exists()


def test_a_pytorch_model_bin_is_read_as_tensors_and_a_pickle_that_runs_code_is_refused(
    tmp_path, marian_dir
):
    """Repositories without model.safetensors (many OPUS-MT ones) have pytorch_model.bin:
    read with weights_only, so a pickle that would run code is an error, not a run."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for path in marian_dir.iterdir():
        if path.name != "model.safetensors":
            (folder / path.name).write_bytes(path.read_bytes())
    torch.save(load_file(str(marian_dir / "model.safetensors")), folder / "pytorch_model.bin")
    out = import_huggingface(folder, tmp_path / "from-bin")
    assert _translate(str(out), {}) == _translate("en-zh-tiny", {})

    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"x": RunsCode()}))
    with pytest.raises(UserError, match="pytorch_model.bin: unreadable"):
        import_huggingface(folder, tmp_path / "evil")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "evil").exists()


def test_the_pulled_models_folder_follows_xdg_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert user_models_dir() == tmp_path / "mtcli" / "models"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_models_dir() == tmp_path / "home" / ".local" / "share" / "mtcli" / "models"


def test_a_models_languages_come_from_its_files_or_its_name_and_are_never_guessed(
    tmp_path, marian_dir
):
    """tokenizer_config.json's codes (ISO 639-3 ones made two-letter), else metadata.json's,
    else an OPUS-MT name; none of them: one line asking for --from/--to (it was en->zh)."""
    from mtcli.store.hf_import import languages

    folder = tmp_path / "bare"
    assert languages(folder, {"source_lang": "eng", "target_lang": "zho"}, "x", {}) == {
        "src_lang": "en", "tgt_lang": "zh"}  # fmt: skip
    assert languages(folder, {}, "opus-mt-de-fr", {"tgt_lang": "es"}) == {
        "src_lang": "de", "tgt_lang": "es"}  # fmt: skip
    folder.mkdir()
    (folder / "metadata.json").write_text('{"src_alpha2": "ja", "tgt_alpha2": "ko"}')
    assert languages(folder, {}, "x", {}) == {"src_lang": "ja", "tgt_lang": "ko"}
    (folder / "metadata.json").unlink()
    with pytest.raises(UserError, match="which language the model writes; --to gives it"):
        languages(folder, {"source_lang": "en"}, "my-model", {})
    for path in marian_dir.iterdir():
        if path.name != "tokenizer_config.json":
            (folder / path.name).write_bytes(path.read_bytes())
    with pytest.raises(UserError, match="--from gives it"):
        import_huggingface(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
