"""A calibrated confidence for every line: the fit against closed forms and exhaustive counts, the
signals against an uncached recomputation and hand examples, the shipped models' weights on
good and corrupted pairs, and every interface (jsonl, tsv, text, --min-confidence, eval, server)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fastapi.testclient import TestClient

from mtcli.cli import main
from mtcli.config import BOS_ID, EOS_ID, DecodeConfig
from mtcli.data.batches import pad, padding_mask
from mtcli.decoding.search import beam_search, greedy
from mtcli.engines.calibration import CONFIDENCE_FILE, Calibration, fit_logistic, roc_auc, spearman
from mtcli.engines.confidence import (
    coverage,
    estimator_for,
    forced_pass,
    in_language,
    repeated_bigrams,
)
from mtcli.engines.result import Translation
from mtcli.engines.translator import Translator
from mtcli.store.checkpoint import load_model
from mtcli.text.layer import TextLayer
from tests.conftest import REPO, write_lines

EN_ZH, ZH_EN = REPO / "models" / "en-zh-tiny", REPO / "models" / "zh-en-tiny"
GOOD = "Do you have a pencil?"  # a Tatoeba-like line the shipped model translates right
FAR = (
    "The city council voted on Tuesday to postpone the budget hearing until the audit is complete."
)


# ---------------------------------------------------------------- the fit and its measures
def test_the_unpenalised_fit_is_the_closed_form_maximum_likelihood():
    """Two groups: x=0 is good half the time, x=1 three times in four, so the likelihood is
    highest at bias logit(1/2) = 0 and weight logit(3/4) - 0 = ln 3."""
    x = np.array([[0.0], [0.0], [1.0], [1.0], [1.0], [1.0]])
    y = np.array([0, 1, 0, 1, 1, 1], dtype=float)
    coef, bias = fit_logistic(x, y, l2=0.0)
    assert bias == pytest.approx(0.0, abs=1e-7) and coef[0] == pytest.approx(math.log(3), abs=1e-7)


def test_the_penalised_fit_minimises_its_objective():
    """At the fitted weights the penalised loss has a zero gradient (by finite differences)
    and every small step away from them raises it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (rng.random(200) < 1 / (1 + np.exp(-(x @ [1.5, -2.0, 0.3] + 0.4)))).astype(float)
    l2 = 2.0

    def loss(theta):
        z = theta[0] + x @ theta[1:]
        return float(np.sum(np.logaddexp(0, z) - y * z) + l2 / 2 * np.sum(theta[1:] ** 2))

    coef, bias = fit_logistic(x, y, l2=l2)
    best = np.concatenate([[bias], coef])
    for i in range(4):
        step = np.zeros(4)
        step[i] = 1e-5
        assert (loss(best + step) - loss(best - step)) / 2e-5 == pytest.approx(0.0, abs=1e-4)
        assert loss(best + 100 * step) > loss(best) and loss(best - 100 * step) > loss(best)


def test_auc_and_spearman_against_exhaustive_counts():
    """AUC: the share of (positive, negative) pairs ranked right, ties counting half; Spearman:
    Pearson's correlation of ranks, ties at their average rank, ranked here by counting."""
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 6, size=40).astype(float)  # many ties
    positive = rng.random(40) < 0.4
    pairs = list(itertools.product(scores[positive], scores[~positive]))
    expected = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert roc_auc(scores, positive) == pytest.approx(expected)

    other = scores + rng.normal(size=40)

    def ranks(v):  # 1 + the values below + half of the others equal to it
        return np.array([1 + np.sum(v < a) + (np.sum(v == a) - 1) / 2 for a in v])

    assert spearman(scores, other) == pytest.approx(np.corrcoef(ranks(scores), ranks(other))[0, 1])


def test_weights_that_do_not_read_as_weights_give_no_confidence(tmp_path):
    """Missing, not JSON, NaN, a string for a number, lengths that disagree, a zero scale:
    no weights (the model translates without a confidence); what is saved loads back."""
    assert Calibration.load(tmp_path) is None
    good = Calibration(["a", "b"], [0.0, 1.0], [1.0, 2.0], [0.5, -0.5], 0.1, 0.3, {"k": 1.0})
    good.save(tmp_path)
    assert Calibration.load(tmp_path) == good
    raw = json.loads((tmp_path / CONFIDENCE_FILE).read_text())
    nan, text, short, zero = (
        {"coef": [float("nan"), 1.0]},
        {"coef": ["1", 1.0]},
        {"mean": [0.0]},
        {"scale": [0.0, 1.0]},
    )
    for broken in (nan, text, short, zero, {"bias": None}):
        (tmp_path / CONFIDENCE_FILE).write_text(json.dumps({**raw, **broken}))
        assert Calibration.load(tmp_path) is None, broken
    (tmp_path / CONFIDENCE_FILE).write_text("{not json")
    assert Calibration.load(tmp_path) is None


# ---------------------------------------------------------------- the signals
def test_the_forced_pass_scores_what_an_uncached_forward_scores(tiny_model):
    """Batched with padding and a cache, each pair's log-probabilities are those of the plain
    teacher-forced forward on that pair alone; its cross-attention rows sum to 1."""
    src = [[5, 6, 7, 8, 9], [4], [10, 11, 12]]
    out = [[13, 14], [15, 16, 17, 18, 19, 20], []]
    scored = forced_pass(tiny_model, src, out, "cpu")
    for (lp, received), s, o in zip(scored, src, out, strict=True):
        with torch.no_grad():
            logits = tiny_model(torch.tensor([s + [EOS_ID]]), torch.tensor([[BOS_ID] + o]))
        expected = torch.log_softmax(logits[0], -1)[range(len(o) + 1), o + [EOS_ID]]
        assert np.allclose(lp, expected.numpy(), atol=1e-5)
        # each of the T = len(o) + 1 output positions gives out attention 1 over S positions
        assert received.shape == (len(s) + 1,)
        assert received.sum() == pytest.approx(len(o) + 1, abs=1e-4)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("with_attention", [False, True])
def test_the_search_reads_what_a_forced_pass_of_its_output_computes(
    tiny_model, beam, with_attention
):
    """Every hypothesis's Reading (its tokens' log-probabilities, the attention each source
    token received) is what a teacher-forced pass over its tokens computes, while sentences
    leave the batch and finished beams drop their rows (or, recording attention, keep them);
    and asking for it changes no output."""
    torch.manual_seed(3)
    src_lists = [torch.randint(4, 24, (n,)).tolist() for n in (2, 9, 5, 1, 7, 3)]
    src = pad([s + [EOS_ID] for s in src_lists])
    mask = padding_mask(src)
    decode = dict(max_len_b=8, with_attention=with_attention)
    if beam == 1:
        read = [[h] for h in greedy(tiny_model, src, mask, with_reading=True, **decode)]
        plain = [[h] for h in greedy(tiny_model, src, mask, **decode)]
    else:
        read = beam_search(
            tiny_model, src, mask, beam_size=beam, nbest=3, with_reading=True, **decode
        )
        plain = beam_search(tiny_model, src, mask, beam_size=beam, nbest=3, **decode)
    assert [[h.tokens for h in hs] for hs in read] == [[h.tokens for h in hs] for hs in plain]
    assert len({len(hs[0].tokens) for hs in read}) > 2  # outputs end at different steps
    pairs = [(s, h) for s, hs in zip(src_lists, read, strict=True) for h in hs]
    forced = forced_pass(tiny_model, [s for s, _ in pairs], [h.tokens for _, h in pairs], "cpu")
    for (_, h), (logprobs, received) in zip(pairs, forced, strict=True):
        assert np.allclose(h.reading.logprobs, logprobs, atol=1e-4)
        assert np.allclose(h.reading.received, received, atol=1e-4)
        assert len(h.reading.attended) == len(h.tokens) + 1
        if with_attention:  # the recorded trace's last layer, each step's most attended
            most = h.attention.cross[-1].mean(dim=0).argmax(dim=1).tolist()
            assert h.reading.attended == most


def test_the_confidence_of_a_search_read_output_is_that_of_a_forced_pass(estimators, monkeypatch):
    """The shipped model's translations, scored from what the search read, get the confidences
    a second pass gives them: only the reverse model runs a pass over every line, the forward
    model over the lines written in other pieces than the tokenizer's ("We are late." comes out
    as 迟到 了, not 迟到了) and those changed since (a number put right)."""
    from mtcli.engines import confidence

    est = estimators["en-zh"]
    translator = Translator(
        est.forward.model, est.forward.tokenizer, DecodeConfig(beam_size=5), reading=True
    )
    sources = [GOOD, FAR, "I have 3 cats and 2 dogs.", "Where is the station?", "We are late."]
    results = translator.translate_chunk(sources)
    readings = [r.reading for r in results]
    outputs = [r.text for r in results]
    passes = []
    real_pass = confidence.forced_pass
    monkeypatch.setattr(
        confidence,
        "forced_pass",
        lambda model, src, *a: passes.append((model, len(src))) or real_pass(model, src, *a),
    )
    read = est(sources, outputs, readings)
    assert passes == [(est.forward.model, 1), (est.reverse.model, 5)]
    passes.clear()
    assert read == pytest.approx(est(sources, outputs), abs=1e-4)
    assert passes == [(est.forward.model, 5), (est.reverse.model, 5)]
    passes.clear()
    changed = outputs[:2] + [outputs[2] + "5", *outputs[3:]]
    assert est(sources, changed, readings) == pytest.approx(est(sources, changed), abs=1e-4)
    assert passes[0] == (est.forward.model, 2)


def test_the_reverse_model_loads_when_the_first_sentence_is_scored():
    from mtcli.engines.confidence import _reverse_model

    _reverse_model.cache_clear()
    est = estimator_for(load_model(EN_ZH), "cpu")
    assert _reverse_model.cache_info().currsize == 0
    assert est([GOOD], ["你有铅笔吗？"])[0] >= est.threshold
    assert _reverse_model.cache_info().currsize == 1


def test_coverage_repeats_and_language_by_hand():
    # two source tokens and EOS; the first receives 0.5 + 0.5, the second 0.5 (capped at 1 each)
    assert coverage(np.array([1.0, 0.5, 0.5])) == pytest.approx(0.75)
    assert coverage(np.array([2.0, 0.0])) == pytest.approx(1.0)
    # a b a b a b: bigrams ab ba ab ba ab, two of five distinct
    assert repeated_bigrams(list("ababab")) == pytest.approx(0.6)
    assert repeated_bigrams(list("abcdef")) == 0.0 and repeated_bigrams(["a"]) == 0.0
    assert in_language("我爱你。", "zh") == 1.0 and in_language("I love you.", "zh") == 0.0
    assert in_language("我爱Python", "zh") == pytest.approx(2 / 8)
    assert in_language("｟url1｠很好", "zh") == 1.0  # a placeholder piece says nothing of it
    assert in_language("This is an English sentence.", "en") == 1.0
    assert in_language("我们今天去公园。", "en") == 0.0 and in_language("123", "en") == 1.0


# ---------------------------------------------------------------- the shipped models' weights
@pytest.fixture(scope="module")
def estimators():
    return {
        d: estimator_for(load_model(path), "cpu")
        for d, path in (("en-zh", EN_ZH), ("zh-en", ZH_EN))
    }


def test_the_shipped_models_trust_good_pairs_and_flag_corrupted_ones(estimators):
    """Each direction: a right translation above its threshold; the same pair with another
    line's translation, the output cut short, a phrase repeated, a sentence dropped, below it."""
    cases = {
        "en-zh": ("Do you have a pencil?", "你有铅笔吗？", "我喜欢在公园里散步。", "你有", "你有你有你有你有铅笔吗？",
                  "Do you have a pencil? I live in Boston."),
        "zh-en": ("这是汤姆的车。", "This is Tom's car.", "I like to walk in the park.", "This is", "This is is is is Tom's car.",  # noqa: E501
                  "这是汤姆的车。我住在波士顿，每天坐公共汽车上班。"),
    }  # fmt: skip
    for direction, (src, right, other, cut, repeated, longer) in cases.items():
        est = estimators[direction]
        good, *bad = est([src, src, src, src, longer], [right, other, cut, repeated, right])
        assert good >= est.threshold, (direction, good)
        assert all(c < est.threshold for c in bad), (direction, bad, est.threshold)
        assert min(bad) >= 0.0 and good <= 1.0


# ---------------------------------------------------------------- the text layer
class _Inner:
    """A translator that writes what it is told to for each sentence."""

    constrains = False

    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs

    def translate_chunk(self, lines, prefixes=None, keep=None):
        return [Translation(line, self.outputs.get(line, ""), -0.1) for line in lines]


class _Judge:
    """An estimator whose confidence for each output is given, recording what it was asked."""

    threshold = 0.5

    def __init__(self, confidences: dict[str, float]):
        self.confidences, self.seen = confidences, []

    def __call__(self, sources, outputs, readings):
        self.seen += list(zip(sources, outputs, strict=True))
        return [self.confidences[o] for o in outputs]


def test_a_line_is_as_sure_as_its_least_sure_sentence_and_a_wrong_or_lost_number_flags_it():
    outputs = {
        "I am hungry.": "我饿了。",
        "Let us eat.": "我们吃吧。",
        "I have two cats.": "我有3只猫。",
        "Call 911 now.": "现在打电话。",
    }
    judge = _Judge({"我饿了。": 0.9, "我们吃吧。": 0.4, "我有3只猫。": 0.95, "现在打电话。": 0.9})
    layer = TextLayer(
        _Inner(outputs), src_lang="en", tgt_lang="zh", can_write=lambda s: True, count_tokens=len,
        max_tokens=100, confidence=judge,
    )  # fmt: skip
    lines = ["I am hungry. Let us eat.", "I have two cats.", "", "Call 911 now."]
    two, number, blank, lost = layer.translate_chunk(lines)
    assert judge.seen == [
        (s, outputs[s])
        for s in ("I am hungry.", "Let us eat.", "I have two cats.", "Call 911 now.")
    ]
    assert (two.confidence, two.sentence_confidences, two.flagged) == (0.4, [0.9, 0.4], True)
    # 3 is in no source: sure as the model is, the line is flagged (confidence under the threshold)
    assert number.invented_numbers == ["3"] and number.flagged and number.confidence == 0.25
    assert (blank.confidence, blank.flagged) == (1.0, False)
    # 911 fell out and stayed out (this engine cannot decode again under constraints): flagged
    assert "911" not in lost.text and (lost.confidence, lost.flagged) == (0.25, True)


def test_a_long_line_is_translated_and_judged_a_group_of_sentences_at_a_time(monkeypatch):
    """A line of many sentences goes through the translator and the estimator GROUP sentences
    at a time (so what they hold is bounded by the group, not the line), and comes out as it
    does in one piece; the readings spent by the estimator are dropped."""
    from mtcli.text import layer as layer_module

    sentences = [f"I have {n} cats." for n in range(1, 8)]
    outputs = {s: f"我有{n}只猫。" for n, s in enumerate(sentences, start=1)}

    class Counting(_Inner):
        calls: list[int] = []

        def translate_chunk(self, lines, prefixes=None, keep=None):
            self.calls.append(len(lines))
            done = super().translate_chunk(lines, prefixes, keep)
            for t in done:
                t.reading = "read"
            return done

    def translate(group: int):
        monkeypatch.setattr(layer_module, "GROUP", group)
        judge = _Judge({o: 0.9 for o in outputs.values()})
        inner = Counting(outputs)
        inner.calls = []
        layer = TextLayer(
            inner, src_lang="en", tgt_lang="zh", can_write=lambda s: True, count_tokens=len,
            max_tokens=100, confidence=judge,
        )  # fmt: skip
        return layer.translate_chunk([" ".join(sentences)])[0], inner.calls, judge.seen

    whole, whole_calls, whole_seen = translate(1024)
    grouped, calls, seen = translate(3)
    assert whole_calls == [7] and calls == [3, 3, 1]
    assert grouped.text == whole.text == "".join(outputs.values()) and seen == whole_seen
    assert grouped.sentence_confidences == [0.9] * 7 and grouped.reading is None


# ---------------------------------------------------------------- the command line
def _translate(*args: str, lines=(GOOD, FAR)):
    result = CliRunner().invoke(
        main, ["translate", "-m", "en-zh-tiny", *args], input="\n".join(lines) + "\n"
    )
    assert result.exit_code == 0, result.output
    return result


def test_jsonl_tsv_and_text_say_how_sure_each_line_is():
    records = [
        json.loads(line)
        for line in _translate("--confidence", "--format", "jsonl").stdout.splitlines()
    ]
    assert [r["flagged"] for r in records] == [False, True]
    assert all(0.0 <= r["confidence"] <= 1.0 for r in records)
    tsv = _translate("--confidence", "--format", "tsv").stdout.splitlines()
    assert [float(line.split("\t")[3]) for line in tsv] == [r["confidence"] for r in records]
    text = _translate("--confidence")
    assert text.stdout.splitlines() == [r["translation"] for r in records]
    assert text.stderr.count("flagged") == 1
    assert (
        "1 of 2 lines flagged as unreliable (line 2); --format jsonl gives each line's confidence"
        in text.stderr
    )


def test_confidence_is_on_by_default_and_off_when_told():
    """Unasked, every line gets the same confidence as with --confidence; --no-confidence
    computes none, so nothing is flagged by it."""
    asked = _translate("--confidence", "--format", "jsonl").stdout
    assert _translate("--format", "jsonl").stdout == asked
    assert "flagged as unreliable" in _translate().stderr
    off = _translate("--no-confidence", "--format", "jsonl")
    assert "confidence" not in off.stdout and "flagged" not in off.stderr
    assert [json.loads(x)["translation"] for x in off.stdout.splitlines()] == [
        json.loads(x)["translation"] for x in asked.splitlines()
    ]
    draw = _translate("--sample", "--format", "jsonl")  # a draw is not judged, and no error says so
    assert "confidence" not in draw.stdout and not draw.stderr
    refused = CliRunner().invoke(
        main, ["translate", "--no-confidence", "--min-confidence", "0.3", "Hi."]
    )
    assert refused.exit_code == 2 and "--no-confidence" in refused.stderr and not refused.stdout


# The lines the before-stop check reads (issue 47's note): the first three lose or change a fact
# while every number is kept (8:15 left/leaves, "costs" and "the tour takes" dropped, "before"
# written as "on"), the two Chinese lines are translated right.
EVERYDAY = [
    "We are late. The bus left at 8:15.",
    "The ticket costs $25.50 and the tour takes 3 hours.",
    "Write to anna@example.org before 2025-06-30.",
    "我们明天见。别忘了带伞。",
    "这台电脑售价4999元。",
]


def test_a_plain_translate_names_the_lines_that_lost_a_fact():
    """No flag asked: the lines that lost a clause are named on stderr, the right ones are not;
    stdout keeps one translation per line, every number in it."""
    result = CliRunner().invoke(main, ["translate"], input="\n".join(EVERYDAY) + "\n")
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert len(out) == 5 and all(
        n in out[i] for i, n in [(0, "8:15"), (1, "$25.50"), (2, "2025-06-30")]
    )
    assert "3 of 5 lines flagged as unreliable (lines 1, 2, 3)" in result.stderr, result.stderr
    one = CliRunner().invoke(main, ["translate", EVERYDAY[1]])
    assert one.exit_code == 0 and "$25.50" in one.stdout
    assert "the translation is flagged as unreliable (confidence 0.0" in one.stderr, one.stderr
    sure = CliRunner().invoke(main, ["translate", EVERYDAY[4]])
    assert sure.exit_code == 0 and "4999" in sure.stdout and "flagged" not in sure.stderr


def test_min_confidence_writes_unsure_lines_as_their_source_and_says_so():
    first, second = _translate(
        "--min-confidence", "0.3", "--unsure-marker", "?? "
    ).stdout.splitlines()
    assert first != GOOD and second == "?? " + FAR
    bare = _translate("--min-confidence", "0.3", "--unsure-marker", "")
    assert bare.stdout.splitlines()[1] == FAR
    assert (
        "1 of 2 lines below --min-confidence 0.3 were written as their source (unmarked)"
        in bare.stderr
    )
    record = json.loads(
        _translate("--min-confidence", "0.3", "--format", "jsonl").stdout.splitlines()[1]
    )
    assert record["kept_source"] and record["translation"] == "[?] " + FAR and record["flagged"]


@pytest.mark.parametrize("value", ["nan", "-0.1", "1.5", "high"])
def test_a_bad_min_confidence_is_one_line(value):
    result = CliRunner().invoke(
        main, ["translate", "-m", "en-zh-tiny", "--min-confidence", value, "Hi."]
    )
    assert (
        result.exit_code == 2
        and "--min-confidence" in result.stderr
        and "Traceback" not in result.output
    )
    assert not result.stdout


def test_confidence_judges_a_search_not_a_draw():
    result = CliRunner().invoke(
        main, ["translate", "-m", "en-zh-tiny", "--confidence", "--sample", "Hi."]
    )
    assert result.exit_code == 2 and "--confidence" in result.stderr


def test_a_model_without_fitted_weights_says_so_once_and_translates(copy_model_dir):
    """Asked for, a confidence the model cannot give is one warning; by default, none."""
    for asked in (["--confidence"], []):
        result = CliRunner().invoke(
            main,
            ["translate", "-m", str(copy_model_dir), *asked, "--format", "jsonl"],
            input="abc\ncab\n",
        )
        assert result.exit_code == 0, result.output
        assert result.stderr.count("no confidence") == len(asked)
        assert all("confidence" not in json.loads(line) for line in result.stdout.splitlines())


def test_eval_prints_the_mean_confidence_beside_bleu(tmp_path):
    """The mean of the lines' confidences as translate gives them, and the share flagged."""
    lines = [GOOD, FAR, "I'm a good cook.", "Where is the station?"]
    src = write_lines(tmp_path / "src.en", lines)
    ref = write_lines(
        tmp_path / "ref.zh",
        ["你有铅笔吗？", "市议会周二投票推迟预算听证会。", "我是个好厨师。", "车站在哪里？"],
    )
    result = CliRunner().invoke(
        main, ["eval", "--src", str(src), "-r", str(ref), "-m", "en-zh-tiny", "--json"]
    )
    assert result.exit_code == 0, result.output
    judged = json.loads(result.stdout)["systems"]["en-zh-tiny"]["confidence"]
    records = [
        json.loads(x)
        for x in _translate("--confidence", "--format", "jsonl", lines=lines).stdout.splitlines()
    ]
    assert judged["mean"] == pytest.approx(sum(r["confidence"] for r in records) / 4, abs=1e-4)
    assert judged["flagged"] == sum(r["flagged"] for r in records) / 4
    table = CliRunner().invoke(
        main, ["eval", "--src", str(src), "-r", str(ref), "-m", "en-zh-tiny"]
    )
    assert "confidence (flagged)" in table.stdout and f"{judged['mean']:.2f}" in table.stdout


def test_a_whole_html_document_names_its_flagged_blocks_not_its_start(tmp_path):
    """An HTML file is one string to the text layer: the warning quotes the blocks flagged (the
    three that lost a fact) and counts them, not the file's first characters."""
    paragraphs = "".join(f"<p>{line}</p>\n" for line in [*EVERYDAY[:3], "Good morning."])
    src = tmp_path / "trip.html"
    src.write_text(f"<!DOCTYPE html>\n<html><body>\n{paragraphs}</body></html>\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["translate", str(src), "-o", str(tmp_path / "zh.html")])
    assert result.exit_code == 0, result.output
    warning = next(line for line in result.stderr.splitlines() if "flagged" in line)
    assert warning.startswith("warning: 3 strings flagged as unreliable"), warning
    assert all(repr(line) in warning for line in EVERYDAY[:3])
    assert "Good morning" not in warning and "DOCTYPE" not in warning


# ---------------------------------------------------------------- the server
def test_the_server_gives_confidence_in_v1_when_asked_and_in_libretranslate_replies():
    from mtcli.engines.loading import ready_to_decode
    from mtcli.serving.app import Models, ServeConfig, create_app, mtcli_served
    from tests.conftest import wait_ready

    models = Models(lambda: [mtcli_served("en-zh-tiny", ready_to_decode(load_model(EN_ZH)), "cpu")])
    with TestClient(create_app(models, ServeConfig())) as c:
        assert wait_ready(c)  # the model loads in the background (slower beside other tests)
        asked = c.post(
            "/v1/translate", json={"lines": [GOOD, FAR], "source": "en", "confidence": True}
        ).json()
        assert [t["flagged"] for t in asked["translations"]] == [False, True]
        plain = c.post("/v1/translate", json={"lines": [GOOD], "source": "en"}).json()
        assert "confidence" not in plain["translations"][0]
        one = c.post("/translate", json={"q": FAR, "source": "en", "target": "zh"}).json()
        assert one["confidence"] == pytest.approx(asked["translations"][1]["confidence"], abs=1e-4)
        both = c.post("/translate", json={"q": [GOOD, FAR], "source": "en", "target": "zh"}).json()
        assert len(both["confidence"]) == 2 and both["confidence"][0] > both["confidence"][1]
        # source auto: an item already in the target language passes through, with no confidence
        # (a KeyError and a 500 before, when the first item had one and a later item had none)
        mixed = {"q": [GOOD, "我们为什么工作？"], "source": "auto", "target": "zh"}
        body = c.post("/translate", json=mixed).json()
        assert body["translatedText"][1] == "我们为什么工作？"
        assert body["confidence"][0] > 0 and body["confidence"][1] is None
        # a document's answer reports each flagged string, as translate --report writes it
        txt = f"{GOOD}\n\n{FAR}\n".encode()
        form = {"source": "en", "target": "zh"}
        done = c.post("/translate_file", data=form, files={"file": ("a.txt", txt)}).json()
        assert done["flagged"] == 1 and [r["string"] for r in done["report"]] == [2]
        assert done["report"][0]["source"] == FAR and done["report"][0]["why"]
