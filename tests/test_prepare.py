"""`mtcli data prepare`: download over HTTP (local server), checksums, normalisation, splits."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import json
import threading
import zipfile

import pytest

from mtcli.data import prepare as P
from mtcli.errors import UserError
from tests.conftest import TATOEBA

ROWS = [
    ("Go.", "走。", "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"),
    ("Go!", "走吧！", "CC-BY 2.0 (France) Attribution: tatoeba.org #3 (a) & #4 (b)"),
    ("go", "去。", "CC-BY 2.0 (France) Attribution: tatoeba.org #5 (a) & #6 (b)"),
    ("We   talk.", "我們說話。", "CC-BY 2.0 (France) Attribution: tatoeba.org #7 (a) & #8 (b)"),
    ("We talk.", "我们说话。", "CC-BY 2.0 (France) Attribution: tatoeba.org #9 (a) & #10 (b)"),
] + [
    (
        f"Sentence number {i}.",
        f"第{i}句。",
        f"CC-BY 2.0 (France) Attribution: tatoeba.org #{i} (c) & #{i} (d)",
    )
    for i in range(40)
]


def _archive() -> tuple[bytes, bytes]:
    text = "".join("\t".join(r) + "\n" for r in ROWS).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("cmn.txt", text)
        z.writestr("_about.txt", "about")
    return buf.getvalue(), text


class _Server:
    """A local HTTP server with Range support, serving one payload at /cmn-eng.zip."""

    def __init__(self, payload: bytes):
        self.payload, self.requests = payload, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.headers.get("Range"))
                body, status = outer.payload, 200
                if rng := self.headers.get("Range"):
                    start = int(rng.removeprefix("bytes=").rstrip("-"))
                    body, status = outer.payload[start:], 206
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cmn-eng.zip"
        # a short poll: shutdown() waits for the next one (0.5 s by default, at every teardown)
        poll = {"poll_interval": 0.02}
        threading.Thread(target=self.httpd.serve_forever, kwargs=poll, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(monkeypatch):
    """Point the tatoeba spec at a local server holding a small archive made here."""
    zipped, text = _archive()
    server = _Server(zipped)
    spec = dataclasses.replace(
        P.TATOEBA, files=(P.RawFile("cmn-eng.zip", server.url, hashlib.sha256(zipped).hexdigest()),)
    )
    monkeypatch.setitem(P.CORPORA, "tatoeba-en-zh", spec)
    monkeypatch.setattr(P, "TATOEBA_TEXT_SHA256", hashlib.sha256(text).hexdigest())
    yield server
    server.close()


def test_download_prepare_end_to_end(tmp_path, served, download_cache):
    """Downloads over HTTP into the cache, verifies, converts to Simplified, splits, writes the manifest."""
    opts = P.PrepareOptions(n_test=4, n_valid=4)
    manifest = P.prepare("tatoeba-en-zh", tmp_path / "out", opts)
    out = tmp_path / "out"
    cached = download_cache / "downloads" / "tatoeba-en-zh"
    assert (cached / "cmn-eng.zip").is_file() and not list(cached.glob("*.part"))
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        *(f"{s}.{e}" for s in ("test", "train", "valid") for e in ("attr", "src", "tgt")),
    ]
    assert manifest["dropped"] == {"duplicate": 1}  # "We talk." twice once 們/說 become 们/说
    assert sum(manifest["counts"].values()) == len(ROWS) - 1
    all_tgt = "".join((out / f"{s}.tgt").read_text() for s in ("train", "valid", "test"))
    assert "們" not in all_tgt and "我们说话。" in all_tgt
    attr = (out / "train.attr").read_text().splitlines()
    assert len(attr) == manifest["counts"]["train"] and attr[0].startswith("tatoeba.org #")
    assert json.loads((out / "manifest.json").read_text())["license"] == "CC BY 2.0 FR"


def test_resumes_a_partial_download(tmp_path, served):
    """A leftover .part file is continued with a Range request, and the result verifies."""
    dest = tmp_path / "cmn-eng.zip"
    (tmp_path / "cmn-eng.zip.part").write_bytes(served.payload[:100])
    P.download(served.url, dest, hashlib.sha256(served.payload).hexdigest())
    assert served.requests == ["bytes=100-"]
    assert dest.read_bytes() == served.payload


def test_corrupt_download_fails_cleanly(tmp_path, served):
    """A checksum mismatch is a one-line error and leaves no partial or prepared files."""
    served.payload = served.payload[:-10] + b"corrupted!"
    with pytest.raises(UserError, match="checksum mismatch"):
        P.prepare("tatoeba-en-zh", tmp_path / "out", P.PrepareOptions())
    leftovers = [p.name for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert leftovers == []


def test_unreachable_server_is_one_line(tmp_path):
    """A refused connection ends, after the retries, in a clear error naming the URL."""
    with pytest.raises(UserError, match="download failed after 2 tries"):
        P.download("http://127.0.0.1:9/none.zip", tmp_path / "x", "", retries=2, timeout=2)


def test_normalisation_rules():
    """NFC and whitespace collapsing; NFKC folds full-width forms only when asked."""
    assert P.normalize_text("  We \t  talk.\u00a0 ") == "We talk."
    assert P.normalize_text("Cafe\u0301") == "Café"
    assert P.normalize_text("你好？") == "你好？"
    assert P.normalize_text("你好？", "NFKC") == "你好?"
    assert P.english_key("Go!") == P.english_key("go") == P.english_key("GO.") == "go"
    assert P.to_simplified(["這個說們"]) == ["这个说们"]


def test_split_keeps_source_groups_together():
    """Pairs sharing an English key (case, final punctuation) land in one split; sizes reached."""
    pairs = P.Pairs()
    for i in range(30):
        pairs.add(f"Sentence {i}.", f"句{i}")
        if i % 3 == 0:
            pairs.add(f"sentence {i}!", f"另{i}")
    splits = P.split_by_source(pairs, n_test=5, n_valid=5, seed=1)
    keys = {name: {P.english_key(s) for s in p.src} for name, p in splits.items()}
    assert (
        not keys["train"] & keys["test"]
        and not keys["train"] & keys["valid"]
        and not keys["valid"] & keys["test"]
    )
    assert len(splits["test"]) >= 5 and len(splits["valid"]) >= 5
    assert sum(map(len, splits.values())) == len(pairs)
    again = P.split_by_source(pairs, n_test=5, n_valid=5, seed=1)
    assert again["test"].src == splits["test"].src


def test_prepare_real_tatoeba_offline(tmp_path):
    """--from the shared raw copy: 2,000 test / 1,000 valid pairs, Simplified, no source overlap."""
    raw = TATOEBA / "raw"
    if not (raw / "cmn.txt.gz").is_file():
        pytest.skip(f"{raw} is absent")
    manifest = P.prepare("tatoeba-en-zh", tmp_path, P.PrepareOptions(from_dir=str(raw)))
    assert manifest["raw_sha256"]["cmn.txt"] == P.TATOEBA_TEXT_SHA256
    assert manifest["counts"]["test"] >= 2000 and manifest["counts"]["valid"] >= 1000
    train_keys = {P.english_key(s) for s in (tmp_path / "train.src").read_text().splitlines()}
    test_keys = {P.english_key(s) for s in (tmp_path / "test.src").read_text().splitlines()}
    assert not train_keys & test_keys
    assert not set("們這說個") & set((tmp_path / "test.tgt").read_text())


def test_prepare_real_multi30k_offline(tmp_path):
    """Multi30k keeps its official splits (29,000 / 1,014 / 1,000 minus 3 duplicate train pairs)."""
    raw = TATOEBA.parent / "multi30k-en-de" / "raw"
    if not (raw / "train.en.gz").is_file():
        pytest.skip(f"{raw} is absent")
    manifest = P.prepare("multi30k-en-de", tmp_path, P.PrepareOptions(from_dir=str(raw)))
    assert manifest["counts"] == {"train": 28997, "valid": 1014, "test": 1000}
    assert manifest["dropped"] == {"duplicate": 3}
    assert (tmp_path / "test.tgt").read_text().splitlines()[
        0
    ] == "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."


def test_local_copy_with_a_different_checksum_is_refused(tmp_path):
    """--from a file that is not the recorded release is an error unless verification is off."""
    import gzip

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "cmn.txt.gz").write_bytes(
        gzip.compress(b"Hi.\t\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82\tattr\n")
    )
    with pytest.raises(UserError, match="differs from the recorded release"):
        P.prepare("tatoeba-en-zh", tmp_path / "out", P.PrepareOptions(from_dir=str(raw)))
    manifest = P.prepare(
        "tatoeba-en-zh",
        tmp_path / "out",
        P.PrepareOptions(from_dir=str(raw), verify=False, n_test=0, n_valid=0),
    )
    assert manifest["counts"]["train"] == 1


# ---------------------------------------------------------------- your own corpus
def _own_rows() -> list[tuple[str, str]]:
    """Pairs with what preparation must handle: duplicates, empty sides, traditional script,
    extra spaces, an over-long side, a misaligned-looking ratio, one key in several cases."""
    rows = [(f"Sentence number {i}.", f"第{i}句。") for i in range(300)]
    rows += [("Sentence number 5.", "第5句。"), ("We   talk.", "我們說話。"), ("We talk.", "我们说话。"),
             ("we talk!", "我们谈谈。"), ("", "空"), ("Empty", " "), ("x" * 1001, "长"),
             ("A long English sentence that is in no way a translation of that.", "是")]  # fmt: skip
    return rows


def test_own_corpus_is_cleaned_deduplicated_and_split_by_source(tmp_path):
    """`data prepare --src --tgt` (gzipped) keeps what the in-memory Tatoeba cleaner keeps (its
    own implementation), drops empty, too long and bad-ratio pairs, counts every drop, and puts
    every source key in one split only; --tsv gives the same files."""
    import gzip

    from click.testing import CliRunner

    from mtcli.cli import main

    rows = _own_rows()
    for name, side in (("a.en.gz", 0), ("a.zh.gz", 1)):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.writelines(r[side] + "\n" for r in rows)
    (tmp_path / "a.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    args = ["data", "prepare", "--test-size", "20", "--valid-size", "10"]
    one = CliRunner().invoke(main, [*args, "--src", str(tmp_path / "a.en.gz"), "--tgt", str(tmp_path / "a.zh.gz"),
                                    "--out", str(tmp_path / "own")])  # fmt: skip
    assert one.exit_code == 0, one.output
    manifest = json.loads((tmp_path / "own" / "manifest.json").read_text())
    assert manifest["dropped"] == {"empty": 2, "too_long": 1, "bad_ratio": 1, "duplicate": 2}
    got = {split: list(zip(*(((tmp_path / "own" / f"{split}.{s}").read_text().splitlines()) for s in ("src", "tgt")),
                           strict=True)) for split in ("train", "valid", "test")}  # fmt: skip
    assert {k: len(v) for k, v in got.items()} == manifest["counts"]
    expected = P.clean_pairs(P.Pairs([s for s, _ in rows], [t for _, t in rows], [""] * len(rows)), form="NFC",
                             simplify=True, dedupe=True, dropped={})  # fmt: skip
    kept = [
        (s, t)
        for s, t in zip(expected.src, expected.tgt, strict=True)
        if len(s) <= 1000 and "no way" not in s
    ]
    assert sorted(p for pairs in got.values() for p in pairs) == sorted(kept)
    keys = {split: {P.english_key(s) for s, _ in pairs} for split, pairs in got.items()}
    assert (
        not keys["train"] & keys["test"]
        and not keys["train"] & keys["valid"]
        and not keys["valid"] & keys["test"]
    )
    assert 20 <= manifest["counts"]["test"] <= 22 and 10 <= manifest["counts"]["valid"] <= 12
    tsv = CliRunner().invoke(
        main, [*args, "--tsv", str(tmp_path / "a.tsv"), "--out", str(tmp_path / "own2")]
    )
    assert tsv.exit_code == 0, tsv.output
    for name in ("train.src", "train.tgt", "test.src", "valid.tgt"):
        assert (tmp_path / "own2" / name).read_bytes() == (tmp_path / "own" / name).read_bytes()


def test_own_corpus_mistakes_are_one_line_and_write_nothing(tmp_path):
    """Misaligned files name both counts (found while streaming); NAME with --src, --src without
    --tgt, and a held-out size that leaves no training pairs are refused; --out stays absent."""
    from click.testing import CliRunner

    from mtcli.cli import main

    en = tmp_path / "a.en"
    en.write_text("one\ntwo\nthree\n")
    zh = tmp_path / "a.zh"
    zh.write_text("一\n二\n")
    out = ["--out", str(tmp_path / "out")]
    cases = {
        ("--src", str(en), "--tgt", str(zh)): f"{en} has 3 lines but {zh} has 2",
        ("tatoeba-en-zh", "--src", str(en), "--tgt", str(zh)): "one corpus at a time",
        ("--src", str(en)): "needs --tgt",
        (
            "--src",
            str(en),
            "--tgt",
            str(en),
            "--test-size",
            "2",
            "--valid-size",
            "1",
        ): "leave no training pairs",
        (): "give a corpus NAME",
    }
    for args, message in cases.items():
        result = CliRunner().invoke(main, ["data", "prepare", *args, *out])
        assert result.exit_code != 0 and message in result.output, (args, result.output)
        assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.en", "a.zh"]


def test_held_out_sizes_scale_with_the_corpus():
    """5% each, at least 100 where the corpus has 1,000 pairs, at most 2,000 (test) and 1,000
    (valid); a size asked for is kept."""
    from mtcli.data.own_corpus import held_out_sizes

    assert held_out_sizes(5_000, None, None) == (250, 250)
    assert held_out_sizes(1_200, None, None) == (100, 100)
    assert held_out_sizes(400, None, None) == (20, 20)
    assert held_out_sizes(30_000, None, None) == (1_500, 1_000)
    assert held_out_sizes(10_000_000, None, None) == (2_000, 1_000)
    assert held_out_sizes(5_000, 7, None) == (7, 250)


def test_a_small_own_corpus_keeps_most_pairs_and_says_each_splits_share(tmp_path):
    """5,000 pairs kept only 2,000 to train on (fixed sizes 2,000 + 1,000), silently: now 90%
    are kept, the summary gives each split's count and share, and sizes that leave less than
    80% to train on are a warning."""
    from click.testing import CliRunner

    from mtcli.cli import main

    en, zh = tmp_path / "c.en", tmp_path / "c.zh"
    en.write_text("".join(f"Sentence number {i} is here.\n" for i in range(5000)))
    zh.write_text("".join(f"这是第{i}句。\n" for i in range(5000)))
    args = ["data", "prepare", "--src", str(en), "--tgt", str(zh)]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "train 4,500 (90%), valid 250 (5%), test 250 (5%)" in result.output
    assert "warning" not in result.output
    fixed = ["--valid-size", "1000", "--test-size", "2000", "--out", str(tmp_path / "b")]
    result = CliRunner().invoke(main, [*args, *fixed])
    assert "train 2,000 (40%)" in result.output
    assert "warning: only 40% of the pairs are left to train on" in result.output


def test_train_finds_the_validation_files_of_a_prepared_split(tmp_path):
    """`train --src data/mine/train.src` trained without the valid files `data prepare` wrote
    beside it: now they are its validation set (said at the start); a --valid-src given wins,
    and files that are not a prepared folder's train files find nothing."""
    from mtcli.cli.train import _found_validation, settings_layers
    from mtcli.config import TrainConfig
    from mtcli.settings import build_from_layers

    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("train.src", "train.tgt", "valid.src", "valid.tgt"):
        (mine / name).write_text("x\n")
    (mine / "manifest.json").write_text("{}")

    def config(**flags):
        flags = {"out": str(tmp_path / "run"), **flags}
        base, requested = settings_layers(None, flags, None, False)
        return build_from_layers(TrainConfig, base + requested), base

    cfg, base = config(src=str(mine / "train.src"), tgt=str(mine / "train.tgt"))
    assert (cfg.valid_src, cfg.valid_tgt) == (str(mine / "valid.src"), str(mine / "valid.tgt"))
    assert "found beside --src" in _found_validation(cfg, base)
    swapped, _ = config(src=str(mine / "train.tgt"), tgt=str(mine / "train.src"))
    assert (swapped.valid_src, swapped.valid_tgt) == (
        str(mine / "valid.tgt"),
        str(mine / "valid.src"),
    )
    given, base = config(
        src=str(mine / "train.src"),
        tgt=str(mine / "train.tgt"),
        valid_src="v.src",
        valid_tgt="v.tgt",
    )
    assert given.valid_src == "v.src" and _found_validation(given, base) is None
    (mine / "manifest.json").unlink()
    alone, _ = config(src=str(mine / "train.src"), tgt=str(mine / "train.tgt"))
    assert alone.valid_src == ""
