"""Sentencepiece tokenizer: round trips, fixed special ids, joint and separate models."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys

import pytest

from mtcli.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerOptions,
    train_tokenizer,
)
from mtcli.errors import UserError
from tests.conftest import EN_LINES, REPO, TATOEBA, ZH_LINES, write_lines


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


def test_bpe_dropout_at_zero_is_sentencepiece_on_every_tatoeba_line():
    """With p = 0, our BPE merge loop splits all Tatoeba lines exactly as sentencepiece does."""
    tok = Tokenizer.load(REPO / "models" / "en-zh-tiny")
    rng = random.Random(0)
    for name in ("train.en", "train.zh", "test.en", "test.zh"):
        lines = (TATOEBA / name).read_text(encoding="utf-8").splitlines()
        assert tok.sample_src(lines, 0.0, rng) == [tok.encode_src(line) for line in lines], name


def test_bpe_dropout_is_seeded_even_across_processes():
    """The same seed gives the same splits in another process; p > 0 splits finer, and every
    split decodes back to the text."""
    script = (
        "import json, random, sys; from mtcli.data.tokenizer import Tokenizer; "
        "tok = Tokenizer.load('models/en-zh-tiny'); "
        "lines = open(sys.argv[1], encoding='utf-8').read().splitlines()[:300]; "
        "print(json.dumps(tok.sample_src(lines, 0.3, random.Random(7))))"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script, str(TATOEBA / "test.en")],
            capture_output=True, text=True, cwd=REPO, check=True,
        ).stdout
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0] == runs[1]
    tok = Tokenizer.load(REPO / "models" / "en-zh-tiny")
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:300]
    sampled = json.loads(runs[0])
    assert sum(map(len, sampled)) > 1.1 * sum(len(tok.encode_src(line)) for line in lines)
    assert [tok.decode_tgt(ids) for ids in sampled] == lines


def test_a_large_corpus_trains_its_tokenizer_on_a_sample_and_says_so(tmp_path, monkeypatch):
    """Past SAMPLE_PAST sentences sentencepiece is asked for a random sample of that many (and
    the user is told); below it, or with --input-sentence-size above the count, every sentence."""
    import sentencepiece as spm

    from mtcli.data import tokenizer as T
    from tests.conftest import copy_sentences

    asked = []
    real_train = spm.SentencePieceTrainer.train

    def spy(**kwargs):
        asked.append(kwargs.get("input_sentence_size", 0))
        return real_train(**kwargs)

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", spy)
    monkeypatch.setattr(T, "SAMPLE_PAST", 150)
    lines = write_lines(tmp_path / "l.txt", copy_sentences(100, seed=2))
    said = []
    opts = T.TokenizerOptions(vocab_size=40, character_coverage=1.0)
    T.train_tokenizer(lines, lines, tmp_path / "joint", opts, say=said.append)  # 200 sentences
    T.train_tokenizer(
        lines, lines, tmp_path / "sep", dataclasses.replace(opts, joint=False), say=said.append
    )
    T.train_tokenizer(lines, lines, tmp_path / "all", dataclasses.replace(opts, input_sentence_size=500),
                      say=said.append)  # fmt: skip
    assert asked == [150, 0, 0, 0]
    assert said == [
        "tokenizer: 200 sentences; training on a random sample of 150 (--input-sentence-size sets the number)"
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"target_tokens": ">>zh<<"}, '"target_tokens" must be a list'),
        ({"target_tokens": [">>zh<<"], "target_token": ">>de<<"}, '"target_token" must be one of'),
        ({"target_tokens": [">>zh<<"], "target_token": ">>zh<<"}, "has no piece >>zh<<"),
    ],
)
def test_a_hand_edited_target_token_is_one_line(enzh_tokenizer, extra, message):
    """tokenizer.json's language tokens (a multilingual-target model's) are checked on load:
    of the right type, the default among them, each a piece of the source model."""
    meta_file = enzh_tokenizer / "tokenizer.json"
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), **extra}))
    with pytest.raises(UserError, match=message):
        Tokenizer.load(enzh_tokenizer)
