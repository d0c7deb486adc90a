"""`mtcli eval` against sacrebleu's own metric objects."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sacrebleu.metrics import BLEU, CHRF, TER

from mtcli.cli import main
from tests.conftest import run_mtcli, write_lines

HYP_EN = ["The cat is on the mat.", "There is a dog in the garden.", "I like green tea very much."]
REF_EN = ["The cat sat on the mat.", "A dog is in the garden.", "I really like green tea."]
HYP_ZH = ["我们为什么工作？", "猫在垫子上。", "今天下大雨。"]
REF_ZH_1 = ["我们为何工作？", "猫在垫子上睡觉。", "今天下雨。"]
REF_ZH_2 = ["为什么我们要工作？", "那只猫在垫子上。", "今天在下大雨。"]


def _eval_json(*args, input=None) -> dict:
    result = CliRunner().invoke(main, ["eval", "--json", *args], input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_scores_equal_sacrebleu_english(tmp_path):
    """BLEU (13a), chrF2 and TER equal sacrebleu's objects on fixed English strings."""
    hyp, ref = write_lines(tmp_path / "h", HYP_EN), write_lines(tmp_path / "r", REF_EN)
    got = _eval_json("--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "en")["systems"][str(hyp)]
    assert got["BLEU"]["score"] == pytest.approx(
        BLEU(tokenize="13a").corpus_score(HYP_EN, [REF_EN]).score
    )
    assert got["chrF2"]["score"] == pytest.approx(CHRF().corpus_score(HYP_EN, [REF_EN]).score)
    assert got["TER"]["score"] == pytest.approx(TER().corpus_score(HYP_EN, [REF_EN]).score)
    assert "tok:13a" in got["BLEU"]["signature"] and "nrefs:1" in got["BLEU"]["signature"]


def test_scores_equal_sacrebleu_chinese_two_refs(tmp_path):
    """Chinese: the zh tokenizer is chosen from --tgt-lang, two references, chrF++ via word order 2."""
    hyp = write_lines(tmp_path / "h", HYP_ZH)
    r1, r2 = write_lines(tmp_path / "r1", REF_ZH_1), write_lines(tmp_path / "r2", REF_ZH_2)
    got = _eval_json(
        "--hyp",
        str(hyp),
        "--ref",
        str(r1),
        "--ref",
        str(r2),
        "--tgt-lang",
        "zh",
        "--chrf-word-order",
        "2",
    )["systems"][str(hyp)]
    refs = [REF_ZH_1, REF_ZH_2]
    assert got["BLEU"]["score"] == pytest.approx(
        BLEU(tokenize="zh").corpus_score(HYP_ZH, refs).score
    )
    assert got["chrF2++"]["score"] == pytest.approx(
        CHRF(word_order=2).corpus_score(HYP_ZH, refs).score
    )
    assert "tok:zh" in got["BLEU"]["signature"] and "nrefs:2" in got["BLEU"]["signature"]
    assert (
        BLEU(tokenize="zh").corpus_score(HYP_ZH, refs).score
        != BLEU(tokenize="13a").corpus_score(HYP_ZH, refs).score
    )


@pytest.mark.slow
def test_pipeline_form_equals_file_form(tmp_path):
    """`... | mtcli eval --hyp - --ref R` gives the same numbers as `--hyp FILE`, through real processes."""
    hyp, ref = write_lines(tmp_path / "h", HYP_EN), write_lines(tmp_path / "r", REF_EN)
    from_file = run_mtcli("eval", "--json", "--hyp", str(hyp), "--ref", str(ref))
    from_pipe = run_mtcli("eval", "--json", "--hyp", "-", "--ref", str(ref), input=hyp.read_text())
    a, b = json.loads(from_file.stdout), json.loads(from_pipe.stdout)
    assert a["systems"][str(hyp)] == b["systems"]["stdin"]


def test_table_output_has_signatures(tmp_path):
    """Without --json, a table with each score and its signature goes to stdout."""
    hyp, ref = write_lines(tmp_path / "h", HYP_EN), write_lines(tmp_path / "r", REF_EN)
    result = CliRunner().invoke(main, ["eval", "--hyp", str(hyp), "--ref", str(ref)])
    bleu = BLEU().corpus_score(HYP_EN, [REF_EN]).score
    assert f"{bleu:.2f}" in result.stdout and "nrefs:1|case:mixed" in result.stdout


@pytest.mark.parametrize("runner", ["clirunner", "subprocess"])
def test_mismatch_and_empty_errors(tmp_path, runner):
    """Line-count mismatch and empty files: exit 2, one line naming the files, no traceback."""
    hyp = write_lines(tmp_path / "h", HYP_EN)
    short = write_lines(tmp_path / "r", REF_EN[:2])
    empty = tmp_path / "e"
    empty.write_text("")
    cases = [
        (["--hyp", str(hyp), "--ref", str(short)], f"{hyp} has 3 lines but {short} has 2"),
        (["--hyp", str(empty), "--ref", str(short)], f"{empty}: no lines to score (empty file)"),
        (
            ["--hyp", str(hyp), "--ref", str(hyp), "--ref", str(short)],
            f"{hyp} has 3 lines but {short} has 2",
        ),
    ]
    for args, expected in cases:
        if runner == "clirunner":
            result = CliRunner().invoke(main, ["eval", *args])
            code, err = result.exit_code, result.output
        else:
            proc = run_mtcli("eval", *args)
            code, err = proc.returncode, proc.stderr
        assert code == 2
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in err


def test_paired_bootstrap_against_itself_and_another(tmp_path):
    """A system against itself: same scores, p = 1; a worse system gets its own scores and a p-value."""
    hyps = HYP_EN * 10
    refs = REF_EN * 10
    a, b = write_lines(tmp_path / "a", hyps), write_lines(tmp_path / "b", hyps)
    worse = write_lines(tmp_path / "w", ["the"] * len(hyps))
    ref = write_lines(tmp_path / "r", refs)
    out = _eval_json(
        "--hyp",
        str(a),
        "--hyp",
        str(b),
        "--hyp",
        str(worse),
        "--ref",
        str(ref),
        "--bootstrap",
        "200",
        "--metrics",
        "bleu,chrf",
    )["systems"]
    assert out[str(a)]["BLEU"]["score"] == out[str(b)]["BLEU"]["score"]
    assert out[str(b)]["BLEU"]["p_value"] == 1.0 and out[str(b)]["chrF2"]["p_value"] == 1.0
    assert "p_value" not in out[str(a)]["BLEU"]  # the baseline
    assert out[str(worse)]["BLEU"]["score"] == pytest.approx(
        BLEU().corpus_score(["the"] * 30, [refs]).score
    )
    assert out[str(worse)]["BLEU"]["p_value"] < 0.05
    assert out[str(a)]["BLEU"]["ci"] > 0


def test_confidence_interval_single_system(tmp_path):
    """--confidence adds a bootstrap 95% interval to one system's scores."""
    hyp, ref = write_lines(tmp_path / "h", HYP_EN * 5), write_lines(tmp_path / "r", REF_EN * 5)
    got = _eval_json("--hyp", str(hyp), "--ref", str(ref), "--confidence", "--bootstrap", "100")[
        "systems"
    ][str(hyp)]
    assert got["BLEU"]["ci"] > 0 and "bs:100" in got["BLEU"]["signature"]


def test_translate_then_score_with_a_model(tmp_path, copy_model_dir, copy_lines):
    """--src with a model translates first: the copy model scores BLEU 100 against its inputs."""
    src = write_lines(tmp_path / "s", copy_lines[:10])
    got = _eval_json("-m", str(copy_model_dir), "--src", str(src), "--ref", str(src), "--greedy")
    scores = next(iter(got["systems"].values()))
    assert scores["BLEU"]["score"] == pytest.approx(100.0) and got["tokenize"] == "13a"


def test_the_tokenizer_follows_the_references_language(tmp_path):
    """Without --tgt-lang, Chinese references are scored with tok:zh, as sacrebleu's CLI does
    with -l en-zh (it was 13a, which reads Chinese output as BLEU near 0), and stderr says
    why; a --tgt-lang the references contradict, or output in another language, is a warning."""
    hyp, ref = write_lines(tmp_path / "h", HYP_ZH), write_lines(tmp_path / "r", REF_ZH_1)
    result = CliRunner().invoke(main, ["eval", "--json", "--hyp", str(hyp), "--ref", str(ref)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["systems"][str(hyp)]["BLEU"]
    assert "tok:zh" in got["signature"]
    assert got["score"] == pytest.approx(BLEU(trg_lang="zh").corpus_score(HYP_ZH, [REF_ZH_1]).score)
    assert "BLEU tokenizer zh: for zh (the references' language" in result.stderr
    told = CliRunner().invoke(
        main, ["eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "en"]
    )
    assert told.exit_code == 0 and "warning: --tgt-lang is en, but" in told.stderr
    english = write_lines(
        tmp_path / "en",
        ["Why do we work so hard?", "The cat is on the mat.", "It is raining hard today."],
    )
    crossed = CliRunner().invoke(main, ["eval", "--hyp", str(english), "--ref", str(ref)])
    assert crossed.exit_code == 0 and "the scores compare different languages" in crossed.stderr


def test_japanese_without_mecab_is_one_line():
    """sacrebleu's ja-mecab tokenizer needs MeCab: without it, one line says what to install."""
    from mtcli.errors import UserError
    from mtcli.training.metrics import bleu_tokenizer_for, check_tokenizer_installed

    assert bleu_tokenizer_for("ja") == "ja-mecab" and bleu_tokenizer_for("de-CH") == "13a"
    try:
        BLEU(tokenize="ja-mecab")
    except (ImportError, RuntimeError, OSError):
        with pytest.raises(UserError, match="needs mecab-python3"):
            check_tokenizer_installed("ja-mecab")
    else:
        check_tokenizer_installed("ja-mecab")  # installed here: nothing to say
