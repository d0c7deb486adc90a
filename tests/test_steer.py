"""Decoding a user can steer and watch, against independent truth: sampling frequencies vs
softmax, ensembles vs a hand average, prefixes vs greedy, banned repeats vs a scan of the
output, traces vs recomputation by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.decoding.search import beam_search, greedy, sample, sample_next
from mtcli.decoding.steering import StepRules, Tracer
from mtcli.model.transformer import Seq2Seq
from tests.conftest import tiny_config
from tests.test_decode import _src


def _model(seed: int, vocab: int = 24) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(tiny_config(vocab=vocab)).eval()


# ---------------------------------------------------------------- sampling
def test_top_k_one_and_a_tiny_temperature_are_greedy(tiny_model):
    """Sampling with top-k 1, or with temperature 1e-4, gives greedy's tokens for every line."""
    src, mask = _src(tiny_model, [6, 2, 9, 4], seed=1)
    want = [h.tokens for h in greedy(tiny_model, src, mask, max_len_b=8)]
    g = torch.Generator().manual_seed(0)
    for kwargs in ({"top_k": 1}, {"temperature": 1e-4}):
        got = sample(tiny_model, src, mask, n=2, max_len_b=8, generator=g, **kwargs)
        assert [[h.tokens for h in hyps] for hyps in got] == [[w, w] for w in want], kwargs


def test_the_same_seed_draws_the_same_outputs(tiny_model):
    src, mask = _src(tiny_model, [6, 3], seed=2)
    draws = [
        [
            [h.tokens for h in hyps]
            for hyps in sample(
                tiny_model, src, mask, n=4, generator=torch.Generator().manual_seed(s)
            )
        ]  # fmt: skip
        for s in (7, 7, 8)
    ]
    assert draws[0] == draws[1] and draws[0] != draws[2]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.6)]
)
def test_first_step_frequencies_match_the_distribution(tiny_model, temperature, top_k, top_p):
    """10,000 first-step draws: frequencies match softmax(logits / T) restricted to the top k
    or the nucleus of mass p (chi-square below the 0.999 quantile)."""
    src, mask = _src(tiny_model, [5], seed=3)
    memory = tiny_model.encode(src, mask)
    logits = tiny_model.decode(torch.tensor([[BOS_ID]]), memory, mask)[0, -1].double().detach()
    logits[[PAD_ID, BOS_ID]] = -math.inf  # never generated
    # the truth, by hand: scale, keep the k best / the smallest set holding p, renormalise
    probs = (logits.log_softmax(-1) / temperature).softmax(-1)
    allowed = torch.ones_like(probs, dtype=torch.bool)
    if top_k:
        allowed &= probs >= probs.topk(top_k).values[-1]
    if top_p < 1:
        ordered, order = probs.sort(descending=True)
        before = ordered.cumsum(0) - ordered
        allowed[order[before >= top_p]] = False
    expected = torch.where(allowed, probs, 0.0)
    expected /= expected.sum()
    n = 10_000
    log_probs = logits.float().log_softmax(-1).expand(n, -1).clone()
    drawn = sample_next(
        log_probs,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=torch.Generator().manual_seed(1),
    )
    counts = torch.bincount(drawn, minlength=len(probs)).double()
    assert counts[~allowed].sum() == 0  # nothing outside the allowed set, ever
    cells = expected * n >= 5  # the chi-square approximation needs expected counts >= 5
    chi2 = float(((counts[cells] - n * expected[cells]) ** 2 / (n * expected[cells])).sum())
    df = int(cells.sum()) - 1
    # 0.999 quantile of chi-square, Wilson-Hilferty approximation
    z = 3.090
    limit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    print(f"T={temperature} k={top_k} p={top_p}: chi2 {chi2:.1f} on {df} df (limit {limit:.1f})")
    assert chi2 < limit


# ---------------------------------------------------------------- ensembles
def test_a_model_ensembled_with_itself_is_the_model(tiny_model):
    src, mask = _src(tiny_model, [6, 2, 9], seed=4)
    alone = beam_search(tiny_model, src, mask, beam_size=3, nbest=2)
    twice = beam_search([tiny_model, tiny_model], src, mask, beam_size=3, nbest=2)
    for a, b in zip(alone, twice, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


@torch.no_grad()
def test_an_ensemble_averages_log_probabilities_at_step_one():
    """Two different models: the traced first-step probabilities are exp of the mean of
    their log-softmaxes, computed by hand."""
    a, b = _model(1), _model(2)
    src, mask = _src(a, [5], seed=5)
    by_hand = []
    for m in (a, b):
        lp = m.decode(torch.tensor([[BOS_ID]]), m.encode(src, mask), mask)[0, -1].log_softmax(-1)
        by_hand.append(lp)
    mean = (by_hand[0] + by_hand[1]) / 2
    mean[[PAD_ID, BOS_ID]] = -math.inf
    tracer = Tracer(top=5)
    greedy([a, b], src, mask, tracer=tracer, max_len_b=3)
    want_p, want_ids = mean.exp().topk(5)
    got = tracer.steps[0].rows[0].top
    assert [t for t, _ in got] == want_ids.tolist()
    assert [p for _, p in got] == pytest.approx(want_p.tolist(), abs=1e-6)


# ---------------------------------------------------------------- prefixes
def test_a_prefix_starts_the_output_and_a_greedy_prefix_changes_nothing(tiny_model):
    """A forced prefix begins every output; forcing greedy's own first tokens leaves the rest
    exactly as greedy continues it."""
    src, mask = _src(tiny_model, [6, 4], seed=6)
    plain = greedy(tiny_model, src, mask, max_len_b=10)
    own = [h.tokens[:2] for h in plain]
    rules = StepRules(prefixes=torch.tensor(own))
    forced = greedy(tiny_model, src, mask, max_len_b=10, rules=rules)
    assert [h.tokens for h in forced] == [h.tokens for h in plain]
    odd = torch.tensor([[7, 8, 9], [10, PAD_ID, PAD_ID]])  # the second one only fixes one token
    for search in (greedy, lambda *a, **k: [h[0] for h in beam_search(*a, beam_size=4, **k)]):
        out = search(tiny_model, src, mask, max_len_b=10, rules=StepRules(prefixes=odd))
        assert out[0].tokens[:3] == [7, 8, 9] and out[1].tokens[:1] == [10]


def test_prefix_from_the_command_line(copy_model_dir, copy_lines):
    """--prefix and a tsv third column: each translation starts with its prefix."""
    line = copy_lines[0]
    start = line.split()[0]
    result = CliRunner().invoke(
        main, ["translate", "-m", str(copy_model_dir), "--prefix", "j", line]
    )
    assert result.exit_code == 0 and result.stdout.startswith("j")
    result = CliRunner().invoke(
        main, ["translate", "-m", str(copy_model_dir), "--format", "tsv"],
        input=f"{line}\tignored\t{start}\n{line}\n",
    )  # fmt: skip
    first, second = (row.split("\t") for row in result.stdout.splitlines())
    assert first[1].startswith(start) and second[1] == line


# ---------------------------------------------------------------- repeats
def _ngrams(tokens: list[int], n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_no_repeat_ngram_leaves_no_ngram_twice():
    """A model that loops: without the rule outputs repeat bigrams; with it none does, in
    greedy, beam and sampling alike."""
    model = _model(3, vocab=8)
    with torch.no_grad():
        model.out_proj.weight.mul_(5.0)  # peaked, so it loops
    src, mask = _src(model, [4, 6, 5, 3], seed=7)
    plain = greedy(model, src, mask, max_len_a=0, max_len_b=20)
    assert any(len(set(_ngrams(h.tokens, 2))) < len(_ngrams(h.tokens, 2)) for h in plain)
    rules = StepRules(no_repeat_ngram=2)
    outs = [h.tokens for h in greedy(model, src, mask, max_len_a=0, max_len_b=20, rules=rules)]
    outs += [
        h[0].tokens
        for h in beam_search(model, src, mask, beam_size=3, max_len_a=0, max_len_b=20, rules=rules)
    ]
    outs += [
        h.tokens
        for hs in sample(
            model,
            src,
            mask,
            n=3,
            max_len_a=0,
            max_len_b=20,
            rules=rules,
            generator=torch.Generator().manual_seed(0),
        )
        for h in hs
    ]
    for tokens in outs:
        grams = _ngrams(tokens, 2)
        assert len(set(grams)) == len(grams), tokens


# ---------------------------------------------------------------- traces
@torch.no_grad()
def test_a_trace_is_reproduced_by_feeding_tokens_by_hand(tiny_model):
    """Every traced beam row: feeding its prefix through the model one token at a time, with
    no cache, gives the traced top probabilities; the finished hypotheses are the n-best."""
    src, mask = _src(tiny_model, [6], seed=8)
    tracer = Tracer(top=4)
    hyps = beam_search(tiny_model, src, mask, beam_size=3, nbest=3, max_len_b=6, tracer=tracer)[0]
    memory = tiny_model.encode(src, mask)
    checked = 0
    for step in tracer.steps:
        for row in step.rows:
            fed = torch.tensor([[BOS_ID, *row.prefix]])
            lp = tiny_model.decode(fed, memory, mask)[0, -1].log_softmax(-1)
            lp[[PAD_ID, BOS_ID]] = -math.inf
            assert len(row.prefix) == step.step
            for token, p in row.top:
                if token != EOS_ID:  # EOS may be forced at the length limit
                    assert p == pytest.approx(math.exp(lp[token]), abs=1e-5)
                    checked += 1
    assert checked > 20
    finished = {tuple(t) for s in tracer.steps for _, t, _ in s.finished}
    assert {tuple(h.tokens) for h in hyps} <= finished


def test_trace_on_the_command_line(copy_model_dir, copy_lines):
    """--trace prints a table on stderr (stdout keeps only the translation); jsonl carries it."""
    runner = CliRunner()
    line = copy_lines[0]
    result = runner.invoke(main, ["translate", "-m", str(copy_model_dir), "--trace", line])
    assert result.exit_code == 0 and result.stdout == line + "\n"
    assert "finished:" in result.stderr and "<s>" in result.stderr
    result = runner.invoke(
        main, ["translate", "-m", str(copy_model_dir), "--trace", "--format", "jsonl", line]
    )
    import json

    trace = json.loads(result.stdout)["trace"]
    assert trace[0]["beams"][0]["fed"] == "<s>" and trace[-1]["finished"]


def test_no_repeat_ngram_from_the_command_line(copy_model_dir, copy_lines):
    """--no-repeat-ngram 1 on the copy model: a line with a repeated letter is copied with the
    repeat avoided (no word twice), others stay exact copies."""
    repeating = [line for line in copy_lines if len(set(line.split())) < len(line.split())]
    assert repeating
    result = CliRunner().invoke(
        main, ["translate", "-m", str(copy_model_dir), "--no-repeat-ngram", "1"],
        input="\n".join(repeating) + "\n",
    )  # fmt: skip
    for out in result.stdout.splitlines():
        assert len(set(out.split())) == len(out.split()), out


def test_trace_columns_line_up_with_chinese_tokens():
    """Chinese characters take two terminal columns: the score column starts at the same column
    on every row, whatever script the fed token is in (padding counted by hand: <s> takes 3
    cells, ▁为什么 7, 工作 4; the fed column is 10 cells wide)."""
    from mtcli.cli.translate import render_trace

    beams = [{"fed": fed, "score": -1.0, "next": []} for fed in ("<s>", "▁为什么", "工作")]
    result = SimpleNamespace(source="x", trace=[{"step": 0, "beams": beams, "finished": []}])
    rows = render_trace(result).splitlines()[2:]
    pads = {"<s>": 7, "▁为什么": 3, "工作": 6}
    expected = [f"   0  {b:>4}  {fed}{' ' * pads[fed]}   -1.000  " for b, fed in enumerate(pads)]
    assert rows == expected
