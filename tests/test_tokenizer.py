"""Sentencepiece tokenizer: round trips, fixed special ids, joint and separate models."""

from __future__ import annotations

import pytest

from mtcli.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerOptions,
    train_tokenizer,
)
from tests.conftest import EN_LINES, ZH_LINES


@pytest.mark.parametrize("joint", [True, False])
def test_round_trip_english_and_chinese(tmp_path, enzh_files, joint):
    """Encoding then decoding gives back the original English and Chinese lines."""
    src, tgt = enzh_files
    tok = train_tokenizer(
        src,
        tgt,
        tmp_path / "t",
        TokenizerOptions(vocab_size=100, joint=joint, character_coverage=1.0),
    )
    assert tok.joint is joint
    for en, zh in zip(EN_LINES[:8], ZH_LINES[:8], strict=True):
        assert tok.src.decode(tok.encode_src(en)) == en
        assert tok.decode_tgt(tok.encode_tgt(zh)) == zh


@pytest.mark.parametrize("joint", [True, False])
def test_special_ids_are_fixed(tmp_path, enzh_files, joint):
    """pad=0, unk=1, bos=2, eos=3 on both sides, after a reload from disk."""
    src, tgt = enzh_files
    train_tokenizer(src, tgt, tmp_path / "t", TokenizerOptions(vocab_size=100, joint=joint))
    tok = Tokenizer.load(tmp_path / "t")
    for sp in (tok.src, tok.tgt):
        assert (
            (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
            == (0, 1, 2, 3)
        )
        assert sp.id_to_piece(UNK_ID) == "<unk>"


def test_joint_shares_one_model_and_separate_does_not(tmp_path, enzh_files):
    """Joint: one file and one vocabulary; separate: an English-only source vocabulary."""
    src, tgt = enzh_files
    joint = train_tokenizer(src, tgt, tmp_path / "j", TokenizerOptions(vocab_size=100))
    sep = train_tokenizer(src, tgt, tmp_path / "s", TokenizerOptions(vocab_size=60, joint=False))
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == ["spm.model", "tokenizer.json"]
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "src.model",
        "tgt.model",
        "tokenizer.json",
    ]
    assert joint.src is joint.tgt
    # the separate source model never saw Chinese: a Chinese character is unknown to it
    assert UNK_ID in sep.encode_src("猫")
    assert UNK_ID not in joint.encode_src("猫")


def test_encode_decode_filters(tmp_path, enzh_tokenizer):
    """`tokenizer encode --ids | tokenizer decode --ids` gives back the input, line for line."""
    from tests.conftest import run_mtcli

    text = "I love you.\n\n我爱你。\n"
    enc = run_mtcli("tokenizer", "encode", "-t", str(enzh_tokenizer), "--ids", input=text)
    assert enc.returncode == 0, enc.stderr
    assert len(enc.stdout.splitlines()) == 3
    dec = run_mtcli("tokenizer", "decode", "-t", str(enzh_tokenizer), "--ids", input=enc.stdout)
    assert dec.stdout == text
