"""Greedy and beam search against independent truth: recomputation, exhaustive search."""

from __future__ import annotations

import itertools

import pytest
import torch

import mtcli.decoding.search as search_module
import mtcli.decoding.stepper as stepper_module
from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.decoding.search import beam_search, greedy, length_penalty
from mtcli.decoding.stepper import Stepper
from mtcli.decoding.top_k import block_size, top_k
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, TATOEBA, tiny_config


def _src(model, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = [
        torch.randint(4, model.cfg.src_vocab_size, (n,), generator=g).tolist() + [EOS_ID]
        for n in lengths
    ]
    width = max(map(len, rows))
    src = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    return src, src != PAD_ID


def test_cached_decoding_equals_full_recompute(tiny_model):
    """Logits from one-token steps through the KV cache equal recomputing the whole prefix, padded batch."""
    model = tiny_model
    src, mask = _src(model, [7, 3, 5])
    memory = model.encode(src, mask)
    g = torch.Generator().manual_seed(3)
    tgt = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, 24, (3, 9), generator=g)], dim=1)
    cache = model.new_cache(16)
    for t in range(tgt.size(1)):
        step_logits = model.decode(tgt[:, t : t + 1], memory, mask, cache)[:, -1]
        full_logits = model.decode(tgt[:, : t + 1], memory, mask)[:, -1]
        torch.testing.assert_close(step_logits, full_logits, atol=1e-5, rtol=0)


def test_cache_reorder_follows_back_pointers(tiny_model):
    """After reorder(idx), row i continues exactly as old row idx[i] would have."""
    model = tiny_model
    src, mask = _src(model, [5, 5])
    src, mask = src[[0, 0, 1, 1]], mask[[0, 0, 1, 1]]
    memory = model.encode(src, mask)
    tgt = torch.tensor([[BOS_ID, 5], [BOS_ID, 6], [BOS_ID, 7], [BOS_ID, 8]])
    cache = model.new_cache(8)
    model.decode(tgt, memory, mask, cache)
    cache.reorder(torch.tensor([1, 1, 3, 2]))
    nxt = torch.tensor([[9], [10], [11], [12]])
    got = model.decode(nxt, memory, mask, cache)[:, -1]
    expected = model.decode(torch.cat([tgt[[1, 1, 3, 2]], nxt], dim=1), memory, mask)[:, -1]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_cache_grows_past_its_first_positions_while_beams_reorder(tiny_model):
    """20 steps (the buffers grow from 2 positions to 3, 5, 8, 12, 18 and 24) with a reorder
    after each: every step's logits equal recomputing the followed prefix in full."""
    model = tiny_model
    src, mask = _src(model, [6, 4])
    src, mask = src[[0, 0, 1, 1]], mask[[0, 0, 1, 1]]  # two beams per sentence
    memory = model.encode(src, mask)
    g = torch.Generator().manual_seed(11)
    cache = model.new_cache(24)
    prefix = torch.full((4, 1), BOS_ID)
    for _ in range(20):
        got = model.decode(prefix[:, -1:], memory, mask, cache)[:, -1]
        torch.testing.assert_close(
            got, model.decode(prefix, memory, mask)[:, -1], atol=1e-5, rtol=0
        )
        back = torch.tensor([0, 0, 2, 2]) + torch.randint(
            0, 2, (4,), generator=g
        )  # within sentence
        cache.reorder(back)
        prefix = torch.cat([prefix[back], torch.randint(4, 24, (4, 1), generator=g)], dim=1)
    assert cache.capacity == 24  # grown 6 times, to the most it may hold


def test_cache_select_widens_reorders_and_drops_rows(tiny_model):
    """select() widens one row per sentence into beams (sharing its source K/V), and drops
    and reorders rows in one go."""
    model = tiny_model
    src, mask = _src(model, [5, 3])
    memory = model.encode(src, mask)
    cache = model.new_cache(8)
    model.decode(torch.full((2, 1), BOS_ID), memory, mask, cache)  # one row per sentence
    widen = torch.tensor([0, 0, 0, 1, 1, 1])
    cache.select(widen)
    step1 = torch.tensor([[5], [6], [7], [8], [9], [10]])
    model.decode(step1, None, mask[widen], cache)  # the cache holds the cross K/V now
    keep = torch.tensor([5, 3])  # sentence 0 leaves; sentence 1's rows swap places
    cache.select(keep, torch.tensor([1]))
    step2 = torch.tensor([[11], [12]])
    got = model.decode(step2, None, mask[widen][keep], cache)[:, -1]
    prefix = torch.cat([torch.full((6, 1), BOS_ID), step1], dim=1)[keep]  # (2, 2)
    expected = model.decode(
        torch.cat([prefix, step2], dim=1), memory[widen][keep], mask[widen][keep]
    )[:, -1]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_beam_of_one_is_greedy(tiny_model):
    """Beam size 1 returns exactly greedy's tokens and score."""
    src, mask = _src(tiny_model, [6, 2, 9, 4], seed=5)
    for alpha in (0.0, 1.0):
        g = greedy(tiny_model, src, mask, alpha=alpha, max_len_b=8)
        b = beam_search(tiny_model, src, mask, beam_size=1, alpha=alpha, max_len_b=8)
        for gh, bh in zip(g, b, strict=True):
            assert bh[0].tokens == gh.tokens
            assert bh[0].score == pytest.approx(
                gh.score, abs=1e-5
            )  # batch shapes differ: float rounding only


def _sequence_score(model, src, mask, tokens, alpha):
    """Teacher-forced log-probability of tokens + EOS (PAD and BOS never generated), normalised."""
    full = [BOS_ID, *tokens, EOS_ID]
    memory = model.encode(src, mask)
    logits = model.decode(torch.tensor([full[:-1]]), memory, mask)[0].log_softmax(-1)
    raw = sum(logits[i, full[i + 1]].item() for i in range(len(full) - 1))
    return raw / length_penalty(len(tokens) + 1, alpha)


def _peaked_model(seed: int) -> Seq2Seq:
    """A random vocab-6 model with a scaled-up output layer, so greedy choices can go wrong."""
    torch.manual_seed(seed)
    model = Seq2Seq(
        tiny_config(vocab=6, d_model=16, d_ff=32, share_embeddings=False, tie_output=False)
    ).eval()
    with torch.no_grad():
        model.out_proj.weight.mul_(4.0)
    return model


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_equals_exhaustive_search(alpha):
    """Vocab 6 (4 specials), max length 4: a wide beam finds the exhaustive optimum; a narrow one never beats it."""
    max_tokens = 3  # + forced EOS = length 4; tokens are UNK, 4, 5 (PAD/BOS never produced)
    choices = [1, 4, 5]
    sequences = [
        list(s) for n in range(max_tokens + 1) for s in itertools.product(choices, repeat=n)
    ]
    kwargs = dict(alpha=alpha, max_len_a=0.0, max_len_b=max_tokens)
    greedy_was_wrong = 0
    for seed in range(12):
        model = _peaked_model(seed)
        src = torch.tensor([[4 + seed % 2, 5, 4, EOS_ID]])
        mask = src != PAD_ID
        scores = {tuple(s): _sequence_score(model, src, mask, s, alpha) for s in sequences}
        best_seq, best_score = max(scores.items(), key=lambda kv: kv[1])
        wide = beam_search(model, src, mask, beam_size=len(sequences), **kwargs)[0][0]
        assert tuple(wide.tokens) == best_seq
        assert wide.score == pytest.approx(best_score, abs=1e-4)
        for k in (1, 2, 3):
            narrow = beam_search(model, src, mask, beam_size=k, **kwargs)[0][0]
            assert narrow.score <= best_score + 1e-4
            assert narrow.score == pytest.approx(scores[tuple(narrow.tokens)], abs=1e-4)
            greedy_was_wrong += k == 1 and narrow.score < best_score - 1e-4
    assert greedy_was_wrong > 0  # the search problem is not trivial: greedy misses sometimes


def test_padded_batch_equals_each_sentence_alone(tiny_model):
    """Decoding sentences together (padded) gives the same results as one at a time."""
    lengths = [8, 2, 5]
    src, mask = _src(tiny_model, lengths, seed=9)
    together = beam_search(tiny_model, src, mask, beam_size=3, nbest=2)
    together_g = greedy(tiny_model, src, mask)
    for i, n in enumerate(lengths):
        alone_src = src[i : i + 1, : n + 1]
        alone = beam_search(tiny_model, alone_src, alone_src != PAD_ID, beam_size=3, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in together[i]], abs=1e-5)
        assert greedy(tiny_model, alone_src, alone_src != PAD_ID)[0].tokens == together_g[i].tokens
        # finished sentences leave greedy's batch: each score is still its own, teacher-forced
        score = _sequence_score(
            tiny_model, alone_src, alone_src != PAD_ID, together_g[i].tokens, 1.0
        )
        assert together_g[i].score == pytest.approx(score, abs=1e-4)


def test_nbest_distinct_and_sorted(tiny_model):
    """n-best lists hold K distinct hypotheses, best first."""
    src, mask = _src(tiny_model, [5, 7], seed=2)
    for hyps in beam_search(tiny_model, src, mask, beam_size=5, nbest=4):
        assert len(hyps) == 4
        assert len({tuple(h.tokens) for h in hyps}) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_search_with_and_without_cache_agree(tiny_model):
    """Greedy and beam search give the same outputs through the cache and by full recomputation."""
    src, mask = _src(tiny_model, [6, 3, 8], seed=4)
    assert [h.tokens for h in greedy(tiny_model, src, mask)] == [
        h.tokens for h in greedy(tiny_model, src, mask, use_cache=False)
    ]
    cached = beam_search(tiny_model, src, mask, beam_size=4, nbest=3)
    uncached = beam_search(tiny_model, src, mask, beam_size=4, nbest=3, use_cache=False)
    for a, b in zip(cached, uncached, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_dropping_finished_beams_rows_changes_no_result(monkeypatch):
    """Beam search decodes only live beams once some have finished or can no longer enter the
    n-best (the shipped model on real sentences, where beams end at different steps); its
    n-best lists and scores are those of the search that keeps a row for every beam and ends
    none early, cached and uncached."""
    loaded = load_model(REPO / "models" / "en-zh-tiny")
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:40]
    ids = [loaded.tokenizer.encode_src(line) for line in lines]
    width = max(map(len, ids))
    src = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in ids])
    mask = src != PAD_ID
    placed = []
    place_beams = Stepper.place_beams
    spy = lambda self, rows: placed.append(rows) or place_beams(self, rows)  # noqa: E731
    monkeypatch.setattr(Stepper, "place_beams", spy)
    for use_cache in (True, False):
        placed.clear()
        dropped = beam_search(loaded.model, src, mask, beam_size=5, nbest=5, use_cache=use_cache)
        assert any(rows is not None for rows in placed)  # some steps decoded fewer rows
        with monkeypatch.context() as keep:
            keep.setattr(search_module._Rows, "DROP_FINISHED", False)
            placed.clear()
            kept = beam_search(loaded.model, src, mask, beam_size=5, nbest=5, use_cache=use_cache)
            assert all(rows is None for rows in placed)
        for a, b in zip(dropped, kept, strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)


@pytest.mark.parametrize("vocab", [24, 2400])  # 2400: wide enough for top_k's block maxima
def test_fused_candidates_equal_topk_of_the_whole_table(vocab, monkeypatch):
    """Stepper.candidates, a few rows at a time (2 here, so rows split across chunks), gives
    topk of the (N, V) table __call__ builds: the same tokens and log-probabilities, PAD and
    BOS never chosen at a finite log-probability, and only EOS (at its own log-probability) on
    the rows made to end."""
    monkeypatch.setattr(stepper_module, "ROW_CHUNK", 2)
    torch.manual_seed(0)
    tiny_model = Seq2Seq(tiny_config(vocab)).eval()
    assert (block_size(vocab, 3) is not None) == (vocab == 2400)
    src, mask = _src(tiny_model, [6, 3, 8, 4, 5], seed=7)
    fused = Stepper(tiny_model, src, mask, 12, use_cache=True)
    table = Stepper(tiny_model, src, mask, 12, use_cache=True)
    tokens = torch.zeros(5, 0, dtype=torch.long)
    eos_only = torch.tensor([False, True, False, False, True])
    for _ in range(4):
        values, ids = fused.candidates(tokens, 3, eos_only)
        log_probs = table(tokens)
        expected = log_probs.topk(3, dim=-1)
        assert torch.equal(ids[~eos_only], expected.indices[~eos_only])
        torch.testing.assert_close(values[~eos_only], expected.values[~eos_only], atol=1e-6, rtol=0)  # fmt: skip
        assert not bool((((ids == PAD_ID) | (ids == BOS_ID)) & torch.isfinite(values)).any())
        assert ids[eos_only, 0].tolist() == [EOS_ID, EOS_ID]
        torch.testing.assert_close(values[eos_only, 0], log_probs[eos_only, EOS_ID], atol=1e-6, rtol=0)  # fmt: skip
        assert bool(torch.isinf(values[eos_only, 1:]).all())
        tokens = torch.cat([tokens, expected.indices[:, :1]], dim=1)


@pytest.mark.parametrize("width", [6000, 2400, 1031])  # 1031 is prime: torch's own topk
@pytest.mark.parametrize("k", [1, 5])
def test_top_k_by_block_maxima_equals_torch_topk(width, k):
    """top_k gives torch.topk's values, largest first, at columns that hold them (distinct in
    each row), on rows with many ties, -inf columns, and rows where only one entry is finite."""
    g = torch.Generator().manual_seed(width + k)
    x = (torch.randn(9, width, generator=g) * 2).round() / 2  # few distinct values: ties
    x[:, [PAD_ID, BOS_ID]] = float("-inf")
    x[3] = float("-inf")
    x[3, EOS_ID] = -0.5  # a row made to end: EOS alone is finite
    x[5, 700 % width] = 9.0  # one clear winner
    values, columns = top_k(x, k)
    assert torch.equal(values, x.topk(k, dim=-1).values)
    assert torch.equal(x.gather(1, columns), values)
    assert all(len(set(row)) == k for row in columns.tolist())
    assert columns[3, 0] == EOS_ID and columns[5, 0] == 700 % width
    assert (block_size(width, k) is None) == (width == 1031)
