"""Noisy-channel reranking (issue 65): the candidate chosen is the argmax of the fitted formula,
recomputed here from a plain teacher-forced forward of the reverse model; the confidence takes
the chosen candidate's reverse scores from the reranker's pass and equals a fresh pass's; the
flag, a model without weights and damaged weights behave as a user expects."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from click.testing import CliRunner

import mtcli.engines.confidence as confidence
from mtcli.cli import main
from mtcli.config import BOS_ID, EOS_ID, DecodeConfig
from mtcli.data.batches import pad
from mtcli.engines.build import EngineOptions, build_translator
from mtcli.engines.rerank import RerankWeights
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, TATOEBA

MODELS = REPO / "models"
LINES = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:60]


def _reverse_mean_logprob(reverse, source: str, candidate: str) -> float:
    """mean log P(source | candidate) from the reverse model's whole-sequence forward."""
    tok = reverse.tokenizer
    src = pad([tok.encode_src(candidate) + [EOS_ID]])
    gold = tok.encode_tgt(source) + [EOS_ID]
    with torch.inference_mode():
        logits = reverse.model(src, pad([[BOS_ID] + gold[:-1]]))  # (1, T, V)
    lp = torch.log_softmax(logits.double(), -1)[0, torch.arange(len(gold)), torch.tensor(gold)]
    return float(lp.clamp(min=confidence.FLOOR).mean())


def test_the_choice_is_the_fitted_formulas_argmax():
    """Each line's translation with reranking is the candidate (of the search's first k) that
    maximises score + a * reverse + b * log length ratio, all recomputed here; and reranking
    changes some lines' choice, or it would be doing nothing."""
    weights = RerankWeights.load(MODELS / "en-zh-tiny")
    k = weights.candidates
    plain = build_translator(
        [MODELS / "en-zh-tiny"],
        DecodeConfig(beam_size=5, nbest=k, rerank=False),
        EngineOptions(device="cpu", text_layer=False),
    )
    reranked = build_translator(
        [MODELS / "en-zh-tiny"], DecodeConfig(), EngineOptions(device="cpu", text_layer=False)
    )
    reverse = load_model(MODELS / "zh-en-tiny")
    changed = 0
    for line, searched, chosen in zip(
        LINES, plain.translate_chunk(LINES), reranked.translate_chunk(LINES), strict=True
    ):
        totals = [
            score
            + weights.length * math.log((len(text) + 1) / (len(line) + 1))
            + weights.reverse * _reverse_mean_logprob(reverse, line, text)
            for text, score in searched.nbest
        ]
        best = max(range(len(totals)), key=totals.__getitem__)
        assert chosen.text == searched.nbest[best][0], line
        changed += best != 0
    assert changed >= 3


def test_the_confidence_takes_the_rerankers_reverse_pass(monkeypatch):
    """With reranking on, the estimator runs no reverse pass of its own, and its confidences
    equal those of an estimator that reads every output back itself (to 1e-6)."""
    lines = [line for line in LINES if not any(c.isdigit() for c in line)]  # no spans: as read
    options = EngineOptions(device="cpu", confidence=True)
    reranked = build_translator([MODELS / "en-zh-tiny"], DecodeConfig(), options)
    own_passes = []
    original = confidence.reverse_pass

    def counting(*args):
        own_passes.append(len(args[1]))
        return original(*args)

    monkeypatch.setattr(confidence, "reverse_pass", counting)
    results = reranked.translate_chunk(lines)
    assert own_passes == []  # the reranker read the chosen outputs back; nothing read twice
    fresh = confidence.estimator_for(load_model(MODELS / "en-zh-tiny"), "cpu")
    expected = fresh(lines, [r.text for r in results])
    assert len(own_passes) == 1  # the fresh estimator does read them back itself
    assert [r.confidence for r in results] == pytest.approx(expected, abs=1e-6)


def _translate(*args: str) -> list[str]:
    result = CliRunner().invoke(main, ["translate", "-q", "--no-confidence", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_no_rerank_and_a_model_without_weights_give_the_searchs_first_choice(tmp_path):
    """--no-rerank is the search's first choice; so is the same model copied without its
    rerank.json; with it, some lines differ."""
    src = tmp_path / "src.en"
    src.write_text("\n".join(LINES[:30]) + "\n", encoding="utf-8")
    bare = tmp_path / "bare"
    shutil.copytree(MODELS / "en-zh-tiny", bare)
    (bare / "rerank.json").unlink()
    searched = _translate("-m", "en-zh-tiny", "--no-rerank", "-i", str(src))
    assert _translate("-m", str(bare), "-i", str(src)) == searched
    assert _translate("-m", "en-zh-tiny", "-i", str(src)) != searched


def test_damaged_weights_are_one_line_naming_the_file(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(MODELS / "en-zh-tiny", model)
    for damaged in (
        "{",
        json.dumps({"reverse": "a", "length": 1, "candidates": 2}),
        json.dumps({"reverse": 1, "length": 1, "candidates": 1}),
    ):
        (model / "rerank.json").write_text(damaged)
        result = CliRunner().invoke(main, ["translate", "-m", str(model), "Hello."])
        assert result.exit_code == 2, result.output
        assert "rerank.json" in result.output and len(result.output.strip().splitlines()) == 1


def test_the_server_reranks_as_translate_does():
    """/v1/translate on the shipped en-zh-tiny gives `mtcli translate`'s reranked lines."""
    from fastapi.testclient import TestClient

    from mtcli.engines.loading import ready_to_decode
    from mtcli.serving.app import Models, ServeConfig, create_app, mtcli_served
    from tests.conftest import wait_ready

    def load():
        return [
            mtcli_served("en-zh-tiny", ready_to_decode(load_model(MODELS / "en-zh-tiny")), "cpu")
        ]

    lines = LINES[:20]
    with TestClient(create_app(Models(load), ServeConfig())) as client:
        assert wait_ready(client)
        r = client.post("/v1/translate", json={"lines": lines, "source": "en", "target": "zh"})
        assert r.status_code == 200, r.text
        served = [t["translation"] for t in r.json()["translations"]]
    result = CliRunner().invoke(
        main, ["translate", "-q", "-m", "en-zh-tiny"], input="\n".join(lines) + "\n"
    )
    assert served == result.stdout.splitlines()
    src = "\n".join(lines)
    plain = CliRunner().invoke(
        main, ["translate", "-q", "-m", "en-zh-tiny", "--no-rerank"], input=src
    )
    assert served != plain.stdout.splitlines()  # reranking changed some of these lines
