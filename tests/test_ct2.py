"""CTranslate2 on the same weights: an exact export (greedy outputs identical on the first 200
Tatoeba test lines), and `translate --engine ctranslate2`, a path that never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mtcli.config import DecodeConfig
from mtcli.engines.translator import Translator
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, TATOEBA, run_mtcli

pytest.importorskip("ctranslate2")
SHIPPED = REPO / "models" / "en-zh-tiny"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from mtcli.store.ct2_export import export_ctranslate2

    return export_ctranslate2(SHIPPED, tmp_path_factory.mktemp("ct2") / "en-zh-tiny")


def test_greedy_outputs_are_identical_on_200_test_lines(exported):
    """The exported model, through CTranslate2, gives mtcli's greedy output for every line."""
    from mtcli.engines.ct2 import CT2Translator

    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:200]
    cfg = DecodeConfig(beam_size=1)
    loaded = load_model(SHIPPED)
    ours = [t.text for t in Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(lines)]
    theirs = [t.text for t in CT2Translator(exported, cfg, threads=1).translate_chunk(lines)]
    assert theirs == ours


@pytest.mark.parametrize("shape", [{}, {"pre_norm": True, "activation": "gelu"}])
def test_greedy_is_identical_on_an_untrained_model_too(tmp_path, copy_model_dir, copy_lines, shape):
    """Random weights reach every corner the shipped model avoids: outputs that run to each
    line's length limit, <unk> in them, and <pad> or <s> as the likeliest token. CTranslate2
    gave other texts on every line of such a model (its limit was the batch's, it produced
    <pad> and <s>, which mtcli never does, and it printed <unk> as ⁇)."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.engines.ct2 import CT2Translator
    from mtcli.model.transformer import Seq2Seq
    from mtcli.store.checkpoint import SaveRequest, save_model
    from mtcli.store.ct2_export import export_ctranslate2
    from tests.conftest import tiny_config

    vocab = Tokenizer.load(copy_model_dir).src_vocab_size
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab=vocab, **shape))
    save_model(model, tmp_path / "m", SaveRequest(tokenizer_dir=copy_model_dir))
    cfg = DecodeConfig(beam_size=1)
    loaded = load_model(tmp_path / "m")
    ours = Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(copy_lines)
    theirs = CT2Translator(export_ctranslate2(tmp_path / "m", tmp_path / "ct2"), cfg, threads=1)
    assert [t.text for t in theirs.translate_chunk(copy_lines)] == [t.text for t in ours]
    assert max(len(t.text.split()) for t in ours) > 10  # some output ran to its limit


def test_both_engines_turn_the_same_pieces_into_the_same_text(exported):
    """Special pieces are dropped by both (CTranslate2's path printed <unk> as ⁇)."""
    from mtcli.engines.ct2 import CT2Translator

    ct2 = CT2Translator(exported, DecodeConfig(), threads=1)
    tok = load_model(SHIPPED).tokenizer
    pieces = tok.tgt.encode("我们工作。", out_type=str)
    pieces = ["<s>", *pieces[:1], "<unk>", *pieces[1:], "<pad>", "</s>"]
    ids = [tok.tgt.piece_to_id(p) for p in pieces]
    assert ct2._detokenize(pieces) == tok.decode_tgt(ids) == "我们工作。"


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
