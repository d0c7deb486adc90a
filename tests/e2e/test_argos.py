"""`mtcli export --format argos`: a package Argos Translate installs (into a temporary
ARGOS_PACKAGES_DIR) and translates with as mtcli's CTranslate2 engine does under Argos's own
settings. In `make e2e`: argostranslate brings spacy, stanza and onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import DecodeConfig
from tests.conftest import REPO, TATOEBA

pytestmark = pytest.mark.e2e
SHIPPED = REPO / "models" / "en-zh-tiny"

# Argos in a process of its own (its settings are read at import), with a sentence splitter
# that keeps each line whole: its MiniSBD model would be downloaded, and each test line is a
# sentence; the rest is Argos's own path (package install, tokenizer, CTranslate2 call).
ARGOS = """
import json, os, sys
import argostranslate.package as package
import argostranslate.sbd as sbd
import argostranslate.translate as translate

class OneSentence(sbd.ISentenceBoundaryDetectionModel):
    def __init__(self, pkg):
        pass
    def split_sentences(self, text):
        return [text]

translate.MiniSBDSentencizer = translate.StanzaSentencizer = OneSentence
package.install_from_path(sys.argv[1])
lines = json.loads(sys.stdin.read())
print(json.dumps([translate.translate(line, "en", "zh") for line in lines], ensure_ascii=False))
"""


def argos_translate(package, lines: list[str], tmp_path) -> list[str]:
    """`lines` translated en -> zh by Argos itself, with `package` installed in a folder of its own."""
    packages = tmp_path / "argos-packages"
    env = {**os.environ, "HOME": str(tmp_path), "ARGOS_PACKAGES_DIR": str(packages),
           "ARGOS_COMPUTE_TYPE": "float32", "ARGOS_DEBUG": "0"}  # fmt: skip
    packages.mkdir()
    proc = subprocess.run([sys.executable, "-c", ARGOS, str(package)], input=json.dumps(lines),
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_package_installs_and_translates_as_mtcli_s_ctranslate2_engine(tmp_path):
    """50 Tatoeba test lines through argostranslate.translate.translate (beam 4, length penalty
    0.2, float32) equal mtcli's --engine ctranslate2 with those settings, line for line."""
    pytest.importorskip("argostranslate")
    from mtcli.engines.ct2 import CT2Translator
    from mtcli.store.ct2_export import export_ctranslate2

    package = tmp_path / "en_zh.argosmodel"
    result = CliRunner().invoke(
        main, ["export", "--format", "argos", str(SHIPPED), "--out", str(package)]
    )
    assert result.exit_code == 0, result.output
    names = zipfile.ZipFile(package).namelist()
    assert {"translate-en_zh-1_0/metadata.json", "translate-en_zh-1_0/sentencepiece.model",
            "translate-en_zh-1_0/model/model.bin", "translate-en_zh-1_0/README.md"} <= set(names)  # fmt: skip
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:50]
    argos = argos_translate(package, lines, tmp_path)
    ct2 = export_ctranslate2(SHIPPED, tmp_path / "ct2")
    ours = CT2Translator(
        ct2, DecodeConfig(beam_size=4, length_penalty=0.2), threads=2
    ).translate_chunk(lines)
    assert argos == [t.text for t in ours]


def test_a_package_is_never_written_over_a_file_of_the_user_s(tmp_path):
    """An existing --out is refused without --force, and --out must end in .argosmodel."""
    mine = tmp_path / "mine.argosmodel"
    mine.write_text("mine")
    for out, message in (
        (mine, "exists; --force to replace it"),
        (tmp_path / "x.zip", "ending in .argosmodel"),
    ):
        result = CliRunner().invoke(
            main, ["export", "--format", "argos", str(SHIPPED), "--out", str(out)]
        )
        assert result.exit_code == 2 and message in result.output
    assert mine.read_text() == "mine"
