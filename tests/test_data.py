"""Corpus reading errors, filtering, and token-bucketed batching (on the real Tatoeba split)."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.data.batches import epoch_batches, make_batches
from mtcli.data.parallel_text import read_corpus, read_parallel
from mtcli.data.textio import MAX_LINE_BYTES, read_chunks, read_lines
from mtcli.data.token_store import Filters, encode_pairs
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
    words = WordTokenizer()
    corpus = encode_pairs(read_corpus(path), words, Filters(max_len=6, max_ratio=3.0))
    s = corpus.stats
    assert (s.read, s.kept, s.empty, s.too_long, s.bad_ratio) == (5, 2, 2, 1, 0)
    assert [corpus.src.pair_text(i) for i in range(2)] == ["a b", "a b"]
    assert corpus.tgt.pair(1).tolist() == [words.id("x"), words.id("y"), words.id("z")]
    corpus = encode_pairs(read_corpus(path), words, Filters(max_len=10, max_ratio=2.0))
    assert (corpus.stats.kept, corpus.stats.bad_ratio) == (2, 1)  # 9 source tokens vs 2 target


class WordTokenizer:
    """A stand-in tokenizer: one id per space-separated word (ids from 4 up, in order of first use)."""

    src_vocab_size = tgt_vocab_size = 100

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.src = self.tgt = self

    def id(self, word: str) -> int:
        return self.ids.setdefault(word, 4 + len(self.ids))

    def encode(self, texts: list[str], num_threads: int = 1) -> list[list[int]]:
        return [[self.id(w) for w in t.split()] for t in texts]


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


def as_lists(batches) -> list[list[int]]:
    return [b.tolist() for b in batches]


def test_batches_small_hand_example():
    """Every index once, budget respected, seeded order; a pair over the budget is an error."""
    src, tgt = [3, 5, 2, 8, 4, 4, 6], [2, 6, 3, 7, 5, 4, 5]
    batches = as_lists(make_batches(src, tgt, max_tokens=24, seed=1, epoch=0))
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) <= 24
    assert batches == as_lists(make_batches(src, tgt, max_tokens=24, seed=1, epoch=0))
    with pytest.raises(UserError, match="max-tokens"):
        make_batches(src, tgt, max_tokens=10, seed=1, epoch=0)


def test_batches_are_filled_greedily_in_length_order():
    """In one pool, batches follow the (source, target) length order, and each is as full as the
    budget allows: the next pair in that order would not have fit (checked by plain Python)."""
    g = np.random.default_rng(5)
    src, tgt = g.integers(2, 30, 500).tolist(), g.integers(2, 30, 500).tolist()
    made = make_batches(src, tgt, max_tokens=200, seed=2, epoch=0, pool_batches=10_000)
    in_order = [made.order[made.starts[b] : made.starts[b + 1]].tolist() for b in range(len(made))]
    flat = [i for b in in_order for i in b]
    assert [(src[i], tgt[i]) for i in flat] == sorted((src[i], tgt[i]) for i in flat)
    for b, nxt in zip(in_order, in_order[1:], strict=False):
        cost = lambda idx: len(idx) * (max(src[i] for i in idx) + max(tgt[i] for i in idx))  # noqa: E731
        assert cost(b) <= 200 < cost(b + nxt[:1])
    assert sorted(flat) == list(range(500))


def test_ranks_share_an_epoch_in_strides():
    """Rank r takes batches r, r + world, ... (equal counts): step k of two ranks is the pair of
    batches a single process with --accum 2 trains on at its step k."""
    made = make_batches([3] * 40, [3] * 40, max_tokens=12, seed=0, epoch=0)  # 2 pairs a batch
    whole = as_lists(made)
    ranks = [as_lists(made.share(r, 2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(whole) // 2
    assert [ranks[0][k] + ranks[1][k] for k in range(10)] == [
        whole[2 * k] + whole[2 * k + 1] for k in range(10)
    ]


@pytest.fixture(scope="module")
def tatoeba_corpus(tmp_path_factory):
    if not (TATOEBA / "train.en").is_file():
        pytest.skip(f"{TATOEBA} is absent: the batching invariants need the real Tatoeba split")
    tmp = tmp_path_factory.mktemp("tatoeba")
    tok = train_tokenizer(
        TATOEBA / "train.en", TATOEBA / "train.zh", tmp / "tok", TokenizerOptions(vocab_size=4000)
    )
    tok = Tokenizer.load(tmp / "tok")
    return encode_pairs(read_parallel(TATOEBA / "train.en", TATOEBA / "train.zh"), tok, Filters())


def test_tatoeba_batching_invariants(tatoeba_corpus):
    """Budget kept, every pair once per epoch, padding < 10% at 4096, same seed -> same batches."""
    corpus = tatoeba_corpus
    max_tokens = 4096
    batches = as_lists(epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=0))
    src_len = [len(corpus.src.pair(i)) + 1 for i in range(len(corpus))]  # + EOS
    tgt_len = [len(corpus.tgt.pair(i)) + 1 for i in range(len(corpus))]  # + BOS / EOS
    padded = real = 0
    for b in batches:
        s_max = max(src_len[i] for i in b)
        t_max = max(tgt_len[i] for i in b)
        assert len(b) * (s_max + t_max) <= max_tokens
        padded += len(b) * (s_max + t_max)
        real += sum(src_len[i] + tgt_len[i] for i in b)
    assert sorted(i for b in batches for i in b) == list(range(len(corpus)))
    assert 1 - real / padded < 0.10, f"padding {1 - real / padded:.1%}"
    assert batches == as_lists(epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=0))
    assert batches != as_lists(epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=1))
    second = as_lists(epoch_batches(corpus, max_tokens=max_tokens, seed=3, epoch=1))
    assert sorted(i for b in second for i in b) == list(range(len(corpus)))
