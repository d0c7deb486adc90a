"""Corpus reading errors, filtering, and token-bucketed batching (on the real Tatoeba split)."""

from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.data.batches import epoch_batches, load_corpus, make_batches
from mtcli.data.parallel_text import read_corpus, read_parallel
from mtcli.data.textio import MAX_LINE_BYTES, read_chunks, read_lines
from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.errors import UserError
from tests.conftest import TATOEBA, run_mtcli, write_lines


def _error_cases(tmp_path):
    """(arguments of `mtcli train`, text the one-line error must contain) for three mistakes."""
    good = write_lines(tmp_path / "a.en", ["one", "two", "three"])
    short = write_lines(tmp_path / "b.zh", ["一", "二"])
    bad = tmp_path / "bad.zh"
    bad.write_bytes("一\n二\n".encode() + b"\xff\xfe\n")
    missing = tmp_path / "nope.en"
    return [
        (["--src", str(missing), "--tgt", str(short)], f"{missing}: no such file"),
        (["--src", str(good), "--tgt", str(short)], f"{good} has 3 lines but {short} has 2"),
        (["--src", str(good), "--tgt", str(bad)], f"{bad}:3: invalid UTF-8"),
    ]


def test_errors_through_clirunner(tmp_path, enzh_tokenizer):
    """Missing file, line-count mismatch and invalid UTF-8: one line naming file/line, exit 2."""
    for args, expected in _error_cases(tmp_path):
        result = CliRunner().invoke(
            main, ["train", *args, "--tokenizer", str(enzh_tokenizer), "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 2, result.output
        error_lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(error_lines) == 1 and expected in error_lines[0], result.output
        assert "Traceback" not in result.output


@pytest.mark.slow
def test_errors_through_subprocess(tmp_path, enzh_tokenizer):
    """The same three mistakes through the real `mtcli` process: exit 2, one line, no traceback."""
    for args, expected in _error_cases(tmp_path):
        proc = run_mtcli(
            "train", *args, "--tokenizer", str(enzh_tokenizer), "--out", str(tmp_path / "o")
        )
        assert proc.returncode == 2
        assert proc.stdout == ""
        error_lines = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert len(error_lines) == 1 and expected in error_lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


def test_bad_option_value_is_one_line():
    """A bad option value is a usage error naming the option."""
    result = CliRunner().invoke(main, ["translate", "--beam-size", "zero", "x"])
    assert result.exit_code == 2
    assert "--beam-size" in result.output and "Traceback" not in result.output


def test_mismatch_error_counts_both_files(tmp_path):
    """The mismatch error gives each file's full line count, whichever file is longer."""
    a = write_lines(tmp_path / "a", ["1"] * 5)
    b = write_lines(tmp_path / "b", ["1"] * 2)
    with pytest.raises(UserError, match=r"a has 5 lines but .*b has 2"):
        list(read_parallel(a, b))
    with pytest.raises(UserError, match=r"b has 2 lines but .*a has 5"):
        list(read_parallel(b, a))


def test_tsv_and_empty_sides_and_length_filter(tmp_path):
    """TSV input; empty sides are skipped and counted; too long and bad-ratio pairs are dropped."""
    rows = ["a b\tx y", "\tx", "a\t", "a b c d e f g h\tx", "a b\tx y z"]
    path = write_lines(tmp_path / "c.tsv", rows)
    encode = str.split
    corpus = load_corpus(read_corpus(path), encode, encode, max_len=6, max_ratio=3.0)
    s = corpus.stats
    assert (s.read, s.kept, s.empty, s.too_long, s.bad_ratio) == (5, 2, 2, 1, 0)
    corpus = load_corpus(read_corpus(path), encode, encode, max_len=10, max_ratio=2.0)
    assert (corpus.stats.kept, corpus.stats.bad_ratio) == (2, 1)  # 9 source tokens vs 2 target


def test_a_byte_order_mark_is_not_text(tmp_path):
    """A UTF-8 file saved with a BOM (Windows editors) reads as the same lines without it, by
    every reader: corpus pairs, plain lines, streamed chunks; eval scores it as the plain file."""
    lines = ["你好。", "再见。"]
    plain = write_lines(tmp_path / "plain.zh", lines)
    marked = tmp_path / "bom.zh"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    assert list(read_lines(marked)) == lines
    assert [pair[1:] for pair in read_parallel(marked, plain)] == [(t, t) for t in lines]
    with open(marked, "rb") as f:
        assert [line for chunk in read_chunks(f.fileno(), 10) for line in chunk] == lines
    args = ["eval", "--hyp", str(marked), "--ref", str(plain), "--tgt-lang", "zh", "--json"]
    scored = CliRunner().invoke(main, args)
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["systems"][str(marked)]["chrF2"]["score"] == 100.0


def test_a_stream_without_newlines_is_refused_past_a_mebibyte():
    """read_chunks (translate's stdin) stops a line at MAX_LINE_BYTES instead of reading on."""
    read_end, write_end = os.pipe()

    def write() -> None:  # then close: without the cap the reader would just see the end
        os.write(write_end, b"ok\n" + b"a" * (MAX_LINE_BYTES + 1))
        os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    with pytest.raises(UserError, match=r"^stdin:2: a line of more than 1,048,576 bytes"):
        list(read_chunks(read_end, 10))
    writer.join()
    os.close(read_end)


def test_batches_small_hand_example():
    """Every index once, budget respected, seeded order; a pair over the budget is an error."""
    src, tgt = [3, 5, 2, 8, 4, 4, 6], [2, 6, 3, 7, 5, 4, 5]
    batches = make_batches(src, tgt, max_tokens=24, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) <= 24
    assert batches == make_batches(src, tgt, max_tokens=24, seed=1, epoch=0)
    with pytest.raises(UserError, match="max-tokens"):
        make_batches(src, tgt, max_tokens=10, seed=1, epoch=0)


@pytest.fixture(scope="module")
def tatoeba_corpus(tmp_path_factory):
    if not (TATOEBA / "train.en").is_file():
        pytest.skip(f"{TATOEBA} is absent: the batching invariants need the real Tatoeba split")
    tmp = tmp_path_factory.mktemp("tatoeba")
    tok = train_tokenizer(
        TATOEBA / "train.en", TATOEBA / "train.zh", tmp / "tok", TokenizerOptions(vocab_size=4000)
    )
    tok = Tokenizer.load(tmp / "tok")
    return load_corpus(
        read_parallel(TATOEBA / "train.en", TATOEBA / "train.zh"), tok.encode_src, tok.encode_tgt
    )


def test_tatoeba_batching_invariants(tatoeba_corpus):
    """Budget kept, every pair once per epoch, padding < 10% at 4096, same seed -> same batches."""
    corpus = tatoeba_corpus
    max_tokens = 4096
    batches = epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=0)
    padded = real = 0
    for b in batches:
        s_max = max(corpus.src_len(i) for i in b)
        t_max = max(corpus.tgt_len(i) for i in b)
        assert len(b) * (s_max + t_max) <= max_tokens
        padded += len(b) * (s_max + t_max)
        real += sum(corpus.src_len(i) + corpus.tgt_len(i) for i in b)
    assert sorted(i for b in batches for i in b) == list(range(len(corpus)))
    assert 1 - real / padded < 0.10, f"padding {1 - real / padded:.1%}"
    assert batches == epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=0)
    assert batches != epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=1)
    second = epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=1)
    assert sorted(i for b in second for i in b) == list(range(len(corpus)))
