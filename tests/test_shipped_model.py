"""The shipped English->Chinese model: loads with no flags, translates into Simplified Chinese."""

from __future__ import annotations

import json

from tests.conftest import REPO, run_mtcli

SHIPPED = REPO / "models" / "en-zh-tiny"


def test_shipped_model_directory_is_complete_and_small():
    """fp16 weights, the tokenizer and a model card; at most 25 MB in all."""
    names = {p.name for p in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "spm.model", "tokenizer.json", "README.md"} <= names
    assert "trainer_state.pt" not in names
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) <= 25 * 1024 * 1024
    config = json.loads((SHIPPED / "config.json").read_text())
    assert (config["src_lang"], config["tgt_lang"]) == ("en", "zh")


def test_translate_without_flags_gives_simplified_chinese():
    """`mtcli translate "Why do we work?"` uses the shipped model and prints Simplified Chinese."""
    proc = run_mtcli("translate", "Why do we work?", env={"MTCLI_MODEL": ""})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.strip()
    assert out and all("\u4e00" <= ch <= "\u9fff" or ch in "？。，！" for ch in out), out
    assert not set(out) & set("們這說個為麼"), out  # no Traditional-only characters
