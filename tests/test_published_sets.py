"""`mtcli eval --test-set NAME --langpair SRC-TGT`: sacrebleu's own test-set machinery, offline,
on a $SACREBLEU cache laid out as sacrebleu lays out a download of wmt20 (raw/ with the tarball
and what it unpacked; sacrebleu itself turns the SGML into lines); the score is sacrebleu's own
corpus BLEU of the shipped model's translations."""

from __future__ import annotations

import json
import tarfile

import pytest
import sacrebleu
from click.testing import CliRunner

from mtcli.cli import main
from tests.conftest import run_mtcli, write_lines

PAIRS = [
    ("Why do we work?", "我们为什么工作？"),
    ("Do you have a pencil?", "你有铅笔吗？"),
    ("I'm a good cook.", "我是个好厨师。"),
    ("This is Tom's car.", "这是汤姆的车。"),
    ("I like to walk in the park.", "我喜欢在公园里散步。"),
    ("Where is the station?", "车站在哪里？"),
    ("She is reading a book.", "她在看书。"),
    ("It is raining today.", "今天下雨。"),
]


def _sgm(setid: str, lang: str, lines: list[str]) -> str:
    """WMT's (pre-2021) SGML: one document, a <seg> per line."""
    segs = "".join(f'<seg id="{i}">{line}</seg>\n' for i, line in enumerate(lines, 1))
    return (
        f'<{setid} setid="newstest2020" srclang="en" trglang="zh">\n'
        f'<doc sysid="ref" docid="d1" genre="news" origlang="en">\n<p>\n{segs}</p>\n</doc>\n'
        f"</{setid}>\n"
    )


@pytest.fixture
def sacrebleu_cache(tmp_path):
    """$SACREBLEU as sacrebleu leaves it after fetching wmt20: raw/wmt20.test.tgz and the
    files it unpacked, under the paths sacrebleu's catalogue names for en-zh."""
    from sacrebleu.dataset import DATASETS

    src_name, ref_name = DATASETS["wmt20"].langpairs["en-zh"]
    raw = tmp_path / "sacrebleu" / "wmt20" / "raw"
    for name, setid, side in ((src_name, "srcset", 0), (ref_name, "refset", 1)):
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_text(_sgm(setid, "en", [p[side] for p in PAIRS]), encoding="utf-8")
    with tarfile.open(raw / "wmt20.test.tgz", "w:gz") as tar:
        tar.add(raw / "sgm", arcname="sgm")
    return tmp_path / "sacrebleu"


def _expected_bleu() -> tuple[float, list[str]]:
    """sacrebleu's corpus BLEU (zh tokenizer) of what `mtcli translate` gives the sources."""
    sources = "".join(s + "\n" for s, _ in PAIRS)
    result = CliRunner().invoke(main, ["translate", "-m", "en-zh-tiny"], input=sources)
    hyps = result.stdout.splitlines()
    assert len(hyps) == len(PAIRS)
    return sacrebleu.corpus_bleu(hyps, [[r for _, r in PAIRS]], tokenize="zh").score, hyps


def test_eval_on_a_sacrebleu_test_set_scores_as_sacrebleu_does(sacrebleu_cache, tmp_path):
    done = run_mtcli(
        "eval", "--test-set", "wmt20", "--langpair", "en-zh", "--json",
        env={"SACREBLEU": str(sacrebleu_cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["segments"] == len(PAIRS) and record["tokenize"] == "zh"
    # sacrebleu made the lines from the SGML itself, where it keeps them
    lines = (sacrebleu_cache / "wmt20" / "wmt20.en-zh.src").read_text(encoding="utf-8")
    assert lines.splitlines() == [s for s, _ in PAIRS]
    expected, hyps = _expected_bleu()
    (system,) = record["systems"].values()
    assert system["BLEU"]["score"] == pytest.approx(expected, abs=0.01)
    assert 0 < expected < 100  # the shipped model gets some right, not all


def test_a_hypothesis_file_is_scored_against_the_test_sets_references(
    sacrebleu_cache, tmp_path, monkeypatch
):
    from sacrebleu.dataset import DATASETS

    wmt20 = DATASETS["wmt20"]  # SACREBLEU is read at import: point this process's copy here
    monkeypatch.setattr(wmt20, "_outdir", str(sacrebleu_cache / "wmt20"))
    monkeypatch.setattr(wmt20, "_rawdir", str(sacrebleu_cache / "wmt20" / "raw"))
    expected, hyps = _expected_bleu()
    hyp = write_lines(tmp_path / "hyp.txt", hyps)
    args = ["eval", "--test-set", "wmt20", "--langpair", "en-zh", "--hyp", str(hyp), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (system,) = json.loads(result.stdout)["systems"].values()
    assert system["BLEU"]["score"] == pytest.approx(expected, abs=0.01)
    short = write_lines(tmp_path / "short.txt", hyps[:-1])  # a line short: named, not scored
    result = CliRunner().invoke(main, [*args[:5], "--hyp", str(short)])
    assert result.exit_code != 0 and "short.txt" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--test-set", "wmt2", "--langpair", "en-zh"],
            "not in sacrebleu's catalogue; did you mean",
        ),
        (["--test-set", "wmt20"], "--test-set wmt20 needs --langpair: one of"),
        (["--test-set", "wmt20", "--langpair", "en-xx"], "--langpair en-xx: wmt20 has"),
        (["--test-set", "wmt20", "--langpair", "en-zh", "--ref", "r.txt"], "no --src or --ref"),
        (
            ["--langpair", "en-zh", "--ref", "r.txt", "--hyp", "h.txt"],
            "--langpair goes with --test-set",
        ),  # noqa: E501
        (["--hyp", "h.txt"], "give --ref files, or --test-set"),
    ],
)
def test_a_bad_test_set_request_is_one_line(args, message):
    result = CliRunner().invoke(main, ["eval", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
