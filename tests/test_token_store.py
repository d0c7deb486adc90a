"""Token stores: ids stored once and memory-mapped (checked against the tokenizer line by line),
their dtype, their key (a changed corpus, tokenizer or filter is noticed), a kill mid-write,
corrupt files, and training on a store equal to training on the text."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.data.parallel_text import read_corpus
from mtcli.data.token_store import (
    BinarizeRequest,
    FileArray,
    Filters,
    encode_pairs,
    ensure_store,
    open_store,
    read_manifest,
)
from mtcli.data.tokenizer import Tokenizer
from mtcli.errors import UserError
from tests.conftest import REPO, TATOEBA, copy_tokenizer, copy_train_config, write_lines
from tests.test_data import WordTokenizer

SHIPPED_TOKENIZER = REPO / "models" / "en-zh-tiny"


@pytest.fixture
def small_corpus(tmp_path):
    """600 Tatoeba pairs with an empty side and an over-long pair mixed in."""
    if not (TATOEBA / "train.en").is_file():
        pytest.skip(f"{TATOEBA} is absent")
    lines = read_corpus(TATOEBA / "train.en", TATOEBA / "train.zh")
    pairs = [pair[1:] for pair in itertools.islice(lines, 600)]
    pairs[10] = ("", pairs[10][1])
    pairs[20] = (" ".join(["word"] * 300), pairs[20][1])
    src = write_lines(tmp_path / "c.en", [s for s, _ in pairs])
    tgt = write_lines(tmp_path / "c.zh", [t for _, t in pairs])
    return src, tgt, pairs


def test_stored_ids_are_the_tokenizers_ids_line_by_line(tmp_path, small_corpus):
    """Every stored pair is what sentencepiece gives for its line alone; filtered pairs are gone
    and counted; uint16 ids for a 6k vocabulary, uint8 lengths; text kept with --keep-text."""
    src, tgt, pairs = small_corpus
    request = BinarizeRequest(
        str(src), str(tgt), SHIPPED_TOKENIZER, tmp_path / "st", Filters(), keep_text=True
    )
    manifest, what = ensure_store(request)
    store = open_store(tmp_path / "st")
    tok = Tokenizer.load(SHIPPED_TOKENIZER)
    kept = [(s, t) for s, t in pairs if s and len(tok.encode_src(s)) <= 128]
    assert what == "new" and len(store) == len(kept) == 598 == manifest["pairs"]
    assert (store.stats.empty, store.stats.too_long) == (1, 1)
    assert store.src.ids.dtype == np.uint16 and store.src.lengths.dtype == np.uint8
    assert isinstance(store.src.lengths, np.memmap) and isinstance(store.src.ids, FileArray)
    for i, (s, t) in enumerate(kept):
        assert store.src.pair(i).tolist() == tok.encode_src(s)
        assert store.tgt.pair(i).tolist() == tok.encode_tgt(t)
        assert store.src.pair_text(i) == s and store.tgt.pair_text(i) == t
    in_memory = encode_pairs(read_corpus(src, tgt), tok, Filters())
    assert np.array_equal(in_memory.src.ids, store.src.ids[:])
    assert np.array_equal(in_memory.tgt.offsets, store.tgt.offsets[:])
    assert np.array_equal(in_memory.tgt.lengths, store.tgt.lengths)


def test_a_vocabulary_past_65536_is_stored_as_uint32():
    """Ids above 65,535 keep their value (uint32), and a smaller vocabulary gets uint16."""
    words = WordTokenizer()
    words.src_vocab_size = words.tgt_vocab_size = 70_000
    words.ids = {"big": 69_999}
    store = encode_pairs(iter([(1, "big a", "big")]), words, Filters())
    assert store.src.ids.dtype == np.uint32 and store.src.pair(0).tolist() == [69_999, 4 + 1]


def test_a_changed_corpus_tokenizer_or_filter_is_noticed(tmp_path, small_corpus):
    """The same inputs reuse the store; another corpus text, tokenizer or filter rebuilds it."""
    src, tgt, _ = small_corpus
    request = BinarizeRequest(str(src), str(tgt), SHIPPED_TOKENIZER, tmp_path / "st")
    assert ensure_store(request)[1] == "new"
    assert ensure_store(request)[1] == "current"
    with open(src, "a") as f, open(tgt, "a") as g:
        f.write("One more line.\n")
        g.write("再来一行。\n")
    made, what = ensure_store(request)
    assert what == "changed" and made["pairs"] == 599
    other = copy_tokenizer(tmp_path)
    assert ensure_store(dataclasses.replace(request, tokenizer_dir=other))[1] == "changed"
    assert (
        ensure_store(dataclasses.replace(request, tokenizer_dir=other, filters=Filters(max_len=5)))[
            1
        ]
        == "changed"
    )
    assert len(open_store(tmp_path / "st")) < 599


@pytest.mark.slow
def test_a_killed_binarize_leaves_the_old_store_or_none(tmp_path):
    """SIGKILL at a random moment of `mtcli data binarize`: --out is absent or a whole store that
    opens; the next run cleans what the kill left and builds a whole store."""
    if not (TATOEBA / "train.en").is_file():
        pytest.skip(f"{TATOEBA} is absent")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for side in ("en", "zh"):  # 8 x Tatoeba: ~1.5 s of binarizing, long enough to be cut
        (corpus / side).write_bytes((TATOEBA / f"train.{side}").read_bytes() * 8)
    args = [sys.executable, "-m", "mtcli", "data", "binarize", "--src", str(corpus / "en"), "--tgt", str(corpus / "zh"),
            "--tokenizer", str(SHIPPED_TOKENIZER), "--out", str(tmp_path / "st")]  # fmt: skip
    rng, cut = random.Random(0), 0
    for _ in range(3):
        proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        cut += any(".tmp-" in p.name for p in tmp_path.iterdir())
        if read_manifest(tmp_path / "st") is not None:
            assert len(open_store(tmp_path / "st")) == 8 * 25_447  # whole
    assert cut  # at least one kill came mid-write
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "st"]  # no temporary left
    assert len(open_store(tmp_path / "st")) == read_manifest(tmp_path / "st")["pairs"] == 8 * 25_447


def test_a_damaged_store_is_one_line(tmp_path, small_corpus):
    """A truncated ids file, a missing index, a folder that is no store: each is one line."""
    src, tgt, _ = small_corpus
    ensure_store(BinarizeRequest(str(src), str(tgt), SHIPPED_TOKENIZER, tmp_path / "st"))
    ids = tmp_path / "st" / "src.ids"
    ids.write_bytes(ids.read_bytes()[:-2])
    with pytest.raises(UserError, match=r"src\.ids: .* bytes, expected .*; binarize it again"):
        open_store(tmp_path / "st")
    manifest = json.loads((tmp_path / "st" / "manifest.json").read_text())
    manifest["key"]["filters"]["max_len"] = "128"  # hand-edited into a string
    (tmp_path / "st" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        UserError, match=r"manifest\.json: key\.filters\.max_len is missing or not int"
    ):
        open_store(tmp_path / "st")
    result = CliRunner().invoke(
        main, ["train", "--data", str(tmp_path / "st"), "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and "key.filters.max_len is missing or not int" in result.output
    assert (
        ensure_store(BinarizeRequest(str(src), str(tgt), SHIPPED_TOKENIZER, tmp_path / "st"))[1]
        == "changed"
    )
    (tmp_path / "st" / "tgt.offsets").unlink()
    with pytest.raises(UserError, match="not a token store"):
        open_store(tmp_path)
    result = CliRunner().invoke(
        main, ["train", "--data", str(tmp_path), "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and "not a token store" in result.output


def test_binarize_command_and_train_on_the_store(tmp_path):
    """`mtcli data binarize` then `train --data` gives the losses of `train --src/--tgt` (the
    run's own OUT/data): the same ids; --data refuses what it cannot honour in one line."""
    from mtcli.training.loop import train

    tok = copy_tokenizer(tmp_path)
    cfg = copy_train_config(tmp_path, tok, max_steps=4, valid_src="", valid_tgt="")
    args = ["data", "binarize", "--src", cfg.src, "--tgt", cfg.tgt, "--tokenizer", str(tok), "--max-len", "32",
            "--out", str(tmp_path / "st")]  # fmt: skip
    made = CliRunner().invoke(main, args)
    assert made.exit_code == 0, made.output
    again = " ".join(CliRunner().invoke(main, args).output.split())  # unwrapped
    assert again.startswith(f"{tmp_path / 'st'} is up to date")
    on_text = train(cfg)
    on_store = train(dataclasses.replace(cfg, src="", tgt="", tokenizer="", data=str(tmp_path / "st"),
                                         out=str(tmp_path / "run2")))  # fmt: skip
    assert on_store.losses == on_text.losses
    refusals = {
        ("--src", cfg.src): "exclude each other",
        ("--max-len", "20"): "binarized with --max-len 32",
        ("--bpe-dropout", "0.1"): "binarize with --keep-text",
        ("--tokenizer", str(SHIPPED_TOKENIZER)): "binarized with another tokenizer",
    }
    for extra, message in refusals.items():
        result = CliRunner().invoke(
            main, ["train", "--data", str(tmp_path / "st"), "--out", str(tmp_path / "r3"), *extra]
        )
        assert result.exit_code == 2 and message in result.output, result.output
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("mine")
    result = CliRunner().invoke(main, [*args[:-1], str(user_dir)])
    assert result.exit_code != 0 and (user_dir / "notes.txt").read_text() == "mine"
