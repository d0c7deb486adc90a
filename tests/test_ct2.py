"""CTranslate2 on the same weights: an exact export (greedy outputs identical on the first 200
Tatoeba test lines), and `translate --engine ctranslate2`, a path that never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mtcli.checkpoint import load_model
from mtcli.config import DecodeConfig
from mtcli.translate import Translator
from tests.conftest import REPO, TATOEBA, run_mtcli

pytest.importorskip("ctranslate2")
SHIPPED = REPO / "models" / "en-zh-tiny"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from mtcli.ct2_export import export_ctranslate2

    return export_ctranslate2(SHIPPED, tmp_path_factory.mktemp("ct2") / "en-zh-tiny")


def test_greedy_outputs_are_identical_on_200_test_lines(exported):
    """The exported model, through CTranslate2, gives mtcli's greedy output for every line."""
    from mtcli.ct2_engine import CT2Translator

    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:200]
    cfg = DecodeConfig(beam_size=1)
    loaded = load_model(SHIPPED)
    ours = [t.text for t in Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(lines)]
    theirs = [t.text for t in CT2Translator(exported, cfg, threads=1).translate_chunk(lines)]
    assert theirs == ours


def test_the_ctranslate2_path_imports_no_torch(exported):
    """`mtcli translate --engine ctranslate2` translates without ever importing torch."""
    script = (
        "import sys\nfrom mtcli.cli import main\n"
        f"try: main(['translate', '--engine', 'ctranslate2', '--greedy', '-m', {str(exported)!r}, 'Why do we work?'])\n"
        "except SystemExit: pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    loaded = load_model(SHIPPED)
    ours = Translator(loaded.model, loaded.tokenizer, DecodeConfig(beam_size=1))
    assert proc.stdout.strip() == ours.translate_chunk(["Why do we work?"])[0].text
    assert proc.stderr.strip() == "False", proc.stderr


def test_what_ctranslate2_cannot_do_is_one_line(exported, tmp_path):
    """Flags CTranslate2 cannot honour, a directory that is not an export, and two models to
    convert at once: each one line, exit 2."""
    cases = [
        (
            ["translate", "--engine", "ctranslate2", "-m", str(exported), "--trace", "x"],
            "cannot do --trace",
        ),  # fmt: skip
        (
            ["translate", "--engine", "ctranslate2", "-m", str(SHIPPED), "x"],
            "not a CTranslate2 export",
        ),  # fmt: skip
        (
            [
                "export",
                "--format",
                "ctranslate2",
                str(SHIPPED),
                str(SHIPPED),
                "--out",
                str(tmp_path / "x"),
            ],
            "converts one model",
        ),  # fmt: skip
    ]
    for args, message in cases:
        proc = run_mtcli(*args)
        assert (
            proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1
        ), proc.stderr
