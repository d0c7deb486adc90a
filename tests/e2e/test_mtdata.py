"""`mtcli data get` through mtdata, offline: a download cache laid out by mtdata's own Cache
(the path and the ._valid flag it gives a finished download) holding a news-commentary file
in its published shape (a gzipped TSV), read by a real `mtcli` process; what it writes is
what `mtcli data prepare --src --tgt` takes. No real download is run here."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO, run_mtcli

pytest.importorskip("mtdata")
pytestmark = pytest.mark.e2e
NAME = "Statmt-news_commentary-16-eng-zho"
PAIRS = [(f"We have {i} cats.", f"我们有{i}只猫。") for i in range(60)]

LAY_OUT = """
import gzip, sys
import mtdata
from mtdata.cache import Cache
from mtdata.data import Dataset
from mtdata.index import DatasetId

entry = Dataset.resolve_entries([DatasetId.parse(sys.argv[1])])[0]
cache = Cache(mtdata.cache_dir)
path = cache.get_local_path(entry.url, filename=entry.filename, fix_missing=False, entry=entry)
path.parent.mkdir(parents=True, exist_ok=True)
path.write_bytes(sys.stdin.buffer.read())
cache.get_flag_file(path).touch()
"""


def _lay_out(name: str, data: bytes, env: dict) -> None:
    lay = subprocess.run([sys.executable, "-c", LAY_OUT, name], input=data, capture_output=True,
                         env={**os.environ, **env}, timeout=300, cwd=REPO)  # fmt: skip
    assert lay.returncode == 0, lay.stderr[-2000:]


def test_a_cached_corpus_lands_where_data_prepare_takes_it(tmp_path):
    env = {"MTDATA": str(tmp_path / "mtdata")}
    _lay_out(NAME, gzip.compress("".join(f"{en}\t{zh}\n" for en, zh in PAIRS).encode()), env)
    out = tmp_path / "nc16"
    proc = run_mtcli("data", "get", NAME, "--out", str(out), "--langpair", "en-zh", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # the report goes to stderr, as every log
    assert f"wrote 60 pairs to {out}/train.eng and {out}/train.zho" in proc.stderr
    record = json.loads((out / "get.json").read_text())
    assert record == {"datasets": [NAME], "src": "train.eng", "tgt": "train.zho", "pairs": 60,
                      "src_lang": "en", "tgt_lang": "zh"}  # fmt: skip
    assert (out / "train.zho").read_text(encoding="utf-8").splitlines() == [zh for _, zh in PAIRS]
    corpus = tmp_path / "corpus"
    prep = run_mtcli("data", "prepare", "--src", str(out / "train.eng"), "--tgt", str(out / "train.zho"),
                     "--src-lang", "en", "--tgt-lang", "zh", "--test-size", "5", "--valid-size", "5",
                     "--out", str(corpus))  # fmt: skip
    assert prep.returncode == 0, prep.stderr
    counts = json.loads((corpus / "manifest.json").read_text())["counts"]
    assert sum(counts.values()) == 60, counts

    # again over its own output: replaced; a folder of the user's: refused, kept
    assert run_mtcli("data", "get", NAME, "--out", str(out), env=env).returncode == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for args, message in (
        ([NAME, "--out", str(mine)], "will not replace it"),
        (
            ["Statmt-news_commentary-15-eng-zho", "--out", str(tmp_path / "x")],
            "offline, it reads only",
        ),
        (["news-commentary", "--out", str(tmp_path / "x")], "not an mtdata parallel dataset id"),
        (["Statmt-news_commentary-99-eng-zho", "--out", str(tmp_path / "x")], "Could not find"),
        ([NAME, "--langpair", "en-de", "--out", str(tmp_path / "x")], "not a en-de dataset"),
    ):
        proc = run_mtcli("data", "get", *args, env=env)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert (mine / "notes.txt").read_text() == "mine" and not (tmp_path / "x").exists()


def test_flores_comes_as_its_archive_and_is_scored_on(tmp_path):
    """FLORES-200 devtest (sacrebleu's catalogue lacks it) as its published archive: mtdata takes
    its two files out of the tarball; mtcli names the languages en and zh, and eval scores on it."""
    env = {"MTDATA": str(tmp_path / "mtdata")}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in (
            ("eng_Latn", [en for en, _ in PAIRS[:20]]),
            ("zho_Hans", [zh for _, zh in PAIRS[:20]]),
        ):
            data = ("\n".join(text) + "\n").encode()
            info = tarfile.TarInfo(f"flores200_dataset/devtest/{name}.devtest")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    flores = "Flores-flores200_devtest-1-eng-zho_Hans"
    _lay_out(flores, buffer.getvalue(), env)
    out = tmp_path / "flores"
    proc = run_mtcli("data", "get", flores, "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "get.json").read_text())
    assert (record["src"], record["tgt"], record["pairs"]) == ("train.eng", "train.zho_Hans", 20)
    assert (record["src_lang"], record["tgt_lang"]) == ("en", "zh")
    ref = str(out / "train.zho_Hans")
    scored = run_mtcli("eval", "--hyp", ref, "--ref", ref, "--tgt-lang", "zh", "--json")
    assert scored.returncode == 0 and json.loads(scored.stdout)["systems"][ref]["BLEU"][
        "score"
    ] == pytest.approx(100.0)
