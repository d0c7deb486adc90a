"""Inputs are checked before a command imports torch: a mistake is one line at once, not after
torch's second of start-up (model directories: model_dir.py; training inputs: run_checks.py)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mtcli.store.model_dir import check_model_files
from tests.conftest import REPO

# the real command line in a fresh process, which says at exit whether torch was imported
PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules))
sys.argv = ["mtcli", *sys.argv[1:]]
runpy.run_module("mtcli", run_name="__main__")
"""


def _run(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def damaged(tmp_path, copy_model_dir) -> Path:
    """A copy of a good model whose weights file has a broken header."""
    d = tmp_path / "model"
    shutil.copytree(copy_model_dir, d)
    weights = d / "model.safetensors"
    weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])
    return d


def test_a_good_directory_passes_with_its_parts(copy_model_dir):
    checked = check_model_files(copy_model_dir)
    recorded = json.loads((copy_model_dir / "config.json").read_text())["model"]
    assert checked.model_cfg.d_model == recorded["d_model"]
    assert "src_embed.weight" in checked.header and checked.tokenizer.src_vocab_size > 0


def test_the_probe_sees_torch_when_a_model_loads(copy_model_dir, copy_lines):
    """The control: the same probe on a good model reports torch imported."""
    code, out, _ = _run("translate", "-m", str(copy_model_dir), copy_lines[0])
    assert code == 0 and out.splitlines()[-1] == "torch imported: True"


@pytest.mark.parametrize(
    "command",
    [
        ["translate", "-m", "{model}", "x"],
        ["eval", "-m", "{model}", "--src", "{src}", "--ref", "{src}"],
        ["attention", "-m", "{model}", "x"],
        ["export", "{model}", "--out", "{tmp}/out"],
        ["train", "--src", "{src}", "--tgt", "{src}", "--init", "{model}", "--out", "{tmp}/run"],
    ],
    ids=lambda c: c[0],
)
def test_a_damaged_model_is_refused_before_torch(damaged, tmp_path, command):
    src = tmp_path / "a.txt"
    src.write_text("a b\n")
    if command[0] == "train":  # --init reads config.json first: break that
        (damaged / "config.json").write_text("[1, 2]")
    args = [a.format(model=damaged, src=src, tmp=tmp_path) for a in command]
    code, out, err = _run(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(damaged) in err and ("safetensors" in err or "config.json" in err), err
    assert out.splitlines()[-1] == "torch imported: False"


def test_export_over_a_user_folder_is_refused_before_torch(copy_model_dir, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    code, out, err = _run("export", str(copy_model_dir), "--out", str(mine))
    assert code == 2 and "not an mtcli model" in err, err
    assert out.splitlines()[-1] == "torch imported: False"
    assert (mine / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("out is a file", "is a file; a training run needs a directory"),
        ("out is a user folder", "a directory that is not an mtcli training run"),
        ("misaligned corpus", "has 2 lines but"),
        ("init with another shape", "it cannot be trained as"),
    ],
)
def test_training_inputs_are_refused_before_torch(copy_model_dir, tmp_path, case, expected):
    src, tgt = tmp_path / "a.en", tmp_path / "a.zh"
    src.write_text("a b\nc d\n")
    tgt.write_text("一\n二\n")
    args = ["train", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "run")]
    if case == "out is a file":
        args[-1] = str(src / "run")
    elif case == "out is a user folder":
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "thesis.tex").write_text("mine\n")
    elif case == "misaligned corpus":
        tgt.write_text("一\n")
    else:
        args += [
            "--init",
            str(copy_model_dir),
            "--max-len",
            "32",
            "--d-model",
            "8",
            "--n-heads",
            "2",
        ]
    code, out, err = _run(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert out.splitlines()[-1] == "torch imported: False"


def test_a_port_in_use_is_refused_before_torch_and_the_models(copy_model_dir):
    """Another program listens on the port: one line naming it, exit 2, torch never imported.
    (Left to uvicorn, the bind failed while the models loaded in the background, and the
    process aborted: 3 lines, exit 134.)"""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = _run("serve", "-m", str(copy_model_dir), "--port", str(port))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--port {port}: cannot listen there (Address already in use)" in err, err
    assert out.splitlines()[-1] == "torch imported: False"
