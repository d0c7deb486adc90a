"""The wheel: built, installed into a fresh venv, and run from an unrelated folder, it carries
the shipped models and the CJK font of attention plots. In `make e2e` (a build takes seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from mtcli.text.language import source_language
from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def test_a_wheel_carries_its_models(tmp_path):
    """pip wheel -> install into a fresh venv (not editable) -> from an unrelated folder,
    `mtcli translate "Why do we work?"` translates with the model inside the installed package."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True,
    )  # fmt: skip
    wheel = next((tmp_path / "dist").glob("mtcli-*.whl"))
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)], check=True, capture_output=True,
    )  # fmt: skip
    # torch and the other dependencies come from this venv, so nothing is downloaded again;
    # a plain path line adds the folder without running its .pth files (the editable mtcli)
    site = Path(sysconfig.get_paths(vars={"base": str(env_dir)})["purelib"])
    site.joinpath("deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MTCLI_", "PYTHONPATH"))}
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(env_dir / "bin" / "mtcli"), *args], capture_output=True, text=True, cwd=elsewhere,
        env=clean,
    )  # fmt: skip
    proc = run("translate", "Why do we work?")
    assert proc.returncode == 0, proc.stderr
    assert source_language(proc.stdout) == "zh"
    models = {r["name"]: r for r in map(json.loads, run("models", "--json").stdout.splitlines())}
    assert {"en-zh-tiny", "zh-en-tiny", "en-zh-tiny-student"} <= set(models)
    assert all(Path(r["path"]).is_relative_to(env_dir) for r in models.values()), models
    names = zipfile.ZipFile(wheel).namelist()
    assert {
        "mtcli/cli/fonts/cjk-subset.ttf",
        "mtcli/cli/fonts/SOURCE.md",
        "mtcli/training/presets/quick.toml",
    } <= set(names)
    print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB")
