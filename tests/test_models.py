"""Installed models: the registry, -m NAME, the script of a line choosing the model, lines
no model translates, streaming through a pipe, and a wheel that carries its models."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.engines.result import Translation
from mtcli.engines.routing import Router
from mtcli.store import registry
from mtcli.store.checkpoint import load_model
from mtcli.text.language import source_language
from tests.conftest import REPO

SHIPPED = REPO / "models"


@pytest.mark.parametrize(
    ("line", "language"),
    [
        ("Why do we work?", "en"),
        ("我们为什么工作？", "zh"),
        ("我爱Python", "zh"),  # 2 Han characters, 1 Latin word
        ("I love 北京 and Paris", "en"),  # 2 Han characters, 4 Latin words
        ("Ça va très bien.", "fr"),  # three Latin words or more: py3langid's call
        ("Hi.", "en"),  # shorter: English (py3langid cannot tell short lines apart)
        ("Wo ist der Bahnhof?", "de"),
        ("Где находится вокзал?", "ru"),
        ("역이 어디에 있어요?", "ko"),
        ("京都に行きたいです。", "ja"),  # kana: Japanese, whatever its kanji
        ("请访问 https://example.com 。", "zh"),  # the URL's Latin says nothing
        ("🙂🙂 !!", None),
        ("12345 + 678", None),
        ("", None),
    ],
)
def test_source_language_by_hand(line, language):
    """Han characters that outnumber Latin words make a line Chinese (kana: Japanese; Hangul:
    Korean); Latin lines of three words or more are py3langid's; no letters at all: None."""
    assert source_language(line) == language


class _Tagging:
    """A stand-in translator that marks which model a line went to."""

    def __init__(self, tag: str):
        self.tag, self.calls = tag, 0

    def translate_chunk(self, lines: list[str], prefixes=None) -> list[Translation]:
        self.calls += 1
        return [Translation(line, f"{self.tag}:{line}", -1.0) for line in lines]


def test_router_keeps_order_and_passes_untranslatable_lines_through():
    """Mixed lines: each to the translator of its language, in input order, one out per one in;
    emoji-only lines and lines of a language without a model come back unchanged."""
    en, zh, warnings = _Tagging("en"), _Tagging("zh"), []
    translators = {"en": en, "zh": zh, "xx": None}
    router = Router(
        lambda line: {"a": "en", "b": "zh", "x": "xx"}.get(line[:1]),
        translators.get,
        chunk_lines=100,
        warn=warnings.append,
    )
    lines = ["a1", "b1", "🙂", "", "a2", "x1", "b2", "x2"]
    out = router.translate_chunk(lines)
    assert [t.text for t in out] == ["en:a1", "zh:b1", "🙂", "", "en:a2", "x1", "zh:b2", "x2"]
    assert [t.passthrough for t in out] == [False, False, True, False, False, True, False, True]
    assert (en.calls, zh.calls) == (1, 1)  # one batch per language, not one per line
    assert len(warnings) == 1  # said once, not once per line


def test_models_lists_shipped_and_model_path(tmp_path, copy_model_dir, copy_lines, monkeypatch):
    """`mtcli models` shows the shipped models and those on $MTCLI_MODEL_PATH; -m NAME finds
    one there; a name on the path comes before a shipped one."""
    folder = tmp_path / "mine"
    shutil.copytree(copy_model_dir, folder / "letters")
    shutil.copytree(copy_model_dir, folder / "en-zh-tiny")  # shadows the shipped one
    monkeypatch.setenv("MTCLI_MODEL_PATH", f"{tmp_path / 'nowhere'}{os.pathsep}{folder}")
    result = CliRunner().invoke(main, ["models", "--json"])
    records = {r["name"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert {"letters", "en-zh-tiny", "zh-en-tiny"} <= set(records)
    assert records["en-zh-tiny"]["path"] == str(folder / "en-zh-tiny")
    assert records["zh-en-tiny"]["direction"] == "zh->en"
    assert float(records["zh-en-tiny"]["card"]["test_bleu"]) > 0
    parameters = load_model(copy_model_dir).model.parameters()
    assert records["letters"]["parameters"] == sum(p.numel() for p in parameters)
    assert registry.find("letters") == folder / "letters"
    line = copy_lines[0]  # the copy model copies its training lines
    result = CliRunner().invoke(main, ["translate", "-m", "letters", line])
    assert result.exit_code == 0 and result.stdout == line + "\n"


def test_a_damaged_installed_model_is_listed_with_a_warning(tmp_path, copy_model_dir, monkeypatch):
    """One model with a broken weights header does not hide the others: it is listed as
    damaged, one warning names its file, and the exit code is 0."""
    shutil.copytree(copy_model_dir, tmp_path / "broken")
    weights = tmp_path / "broken" / "model.safetensors"
    weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])
    monkeypatch.setenv("MTCLI_MODEL_PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["models", "--json"])
    records = {r["name"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert result.exit_code == 0 and records["broken"]["parameters"] is None
    assert records["en-zh-tiny"]["parameters"] > 0
    assert (
        result.stderr.strip() == f"Warning: {weights}: not a safetensors file (bad header length)"
    )
    table = CliRunner().invoke(main, ["models"])
    assert table.exit_code == 0 and "damaged" in table.stdout


@pytest.mark.slow
def test_shipped_models_translate_both_directions_by_script():
    """No -m: English becomes Chinese, Chinese becomes English, emoji stays, order is kept."""
    lines = ["Why do we work?", "我们为什么工作？", "🙂🙂", "Where is the station?"]
    proc = subprocess.run(
        [sys.executable, "-m", "mtcli", "translate"], input="\n".join(lines) + "\n",
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "MTCLI_MODEL": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert len(out) == 4 and out[2] == "🙂🙂"
    assert source_language(out[0]) == "zh" and source_language(out[3]) == "zh"
    assert source_language(out[1]) == "en" and "work" in out[1].lower()


@pytest.mark.slow
def test_a_pipe_is_translated_line_by_line_as_it_arrives(copy_model_dir, copy_lines):
    """Each line written into the pipe comes out before the next one is written (the reader
    never waits for more input); the seconds each took are printed for the record."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtcli", "translate", "-m", str(copy_model_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    latencies = []
    try:
        for line in copy_lines[:4]:
            time.sleep(0.3)  # a slow producer: nothing else is waiting in the pipe
            start = time.monotonic()
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, f"no output for {line!r} within 60 s: the filter waited for more input"
            assert proc.stdout.readline() == line + "\n"
            latencies.append(time.monotonic() - start)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    print(
        "seconds from writing a line to reading its translation:", [round(t, 3) for t in latencies]
    )
    assert proc.returncode == 0


def test_a_training_run_folder_points_to_its_models(tmp_path, copy_model_dir):
    """-m runs/mine of a run without a best checkpoint (no validation) names its last and its
    newest step (with one, best is used: test_first_hour)."""
    from click.testing import CliRunner

    from mtcli.cli import main

    run = tmp_path / "mine"
    for name in ("last", "step-2", "step-10"):
        shutil.copytree(copy_model_dir, run / name)
    result = CliRunner().invoke(main, ["translate", "-m", str(run), "a b"])
    assert result.exit_code == 2
    assert (
        f"{run}: not a model directory (no config.json); a training run: use {run}/last or {run}/step-10"
        in result.output
    )
