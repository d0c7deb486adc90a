"""Terminology: constrained beam search against exhaustive search, and a glossary made from the
Tatoeba data whose target terms appear in every translation of a line that has a term."""

from __future__ import annotations

import collections
import itertools
import re

import pytest
import torch

from mtcli.config import EOS_ID, PAD_ID, DecodeConfig
from mtcli.decoding.constraints import Progress, allocate, constrained_beam_search
from mtcli.decoding.stepper import max_output_lengths
from mtcli.engines.translator import Translator
from mtcli.errors import UserError
from mtcli.store.checkpoint import load_model
from mtcli.text.glossary import Glossary, phrase_ids
from tests.conftest import REPO, TATOEBA
from tests.test_decode import _peaked_model, _sequence_score


def test_progress_through_phrases_by_hand():
    """Tokens advance a phrase, a wrong token breaks it off (and may start another), and the
    hypothesis is complete only when every phrase is in."""
    phrases = [[7, 8], [9]]
    p = Progress.start(2)
    assert p.needed(phrases) == [7, 9]
    p = p.after(7, phrases)
    assert (p.phrase, p.pos, p.needed(phrases), p.done(phrases)) == (0, 1, [8], 1)
    broken = p.after(9, phrases)  # not 8: phrase 0 is broken off, and 9 completes phrase 1
    assert broken.met == (False, True) and broken.phrase == -1 and broken.done(phrases) == 1
    p = p.after(8, phrases).after(5, phrases).after(9, phrases)
    assert p.complete and p.done(phrases) == 3


def test_dynamic_beam_allocation():
    """Slots are shared evenly; what a bank cannot fill goes to the fullest-met banks first."""
    assert allocate({0: 10, 1: 10, 2: 10}, k=6, banks=3) == {0: 2, 1: 2, 2: 2}
    assert allocate({0: 10, 1: 1, 2: 10}, k=6, banks=3) == {0: 2, 1: 1, 2: 3}
    assert sum(allocate({0: 3, 2: 1}, k=5, banks=4).values()) == 4  # only 4 candidates exist


@pytest.mark.parametrize("phrase", [[5], [4, 5], [1, 4]])
def test_constrained_beam_equals_exhaustive_search(phrase):
    """Vocab 6: with a beam as wide as the search space, the constrained search returns the
    best-scoring output (by teacher forcing) among all outputs that contain the phrase."""
    choices = [1, 4, 5]
    for seed in range(6):
        model = _peaked_model(seed)
        src = torch.tensor([[4 + seed % 2, 5, 4, EOS_ID]])
        mask = src != PAD_ID
        limit = int(max_output_lengths(mask, 0.0, 1 + len(phrase), model.cfg.max_positions - 1)[0])
        sequences = [
            list(s) for n in range(limit + 1) for s in itertools.product(choices, repeat=n)
            if any(list(s[i : i + len(phrase)]) == phrase for i in range(n))
        ]  # fmt: skip
        scores = {tuple(s): _sequence_score(model, src, mask, s, 1.0) for s in sequences}
        best, best_score = max(scores.items(), key=lambda kv: kv[1])
        hyp = constrained_beam_search(
            model, src, mask, [phrase], beam_size=len(sequences) + 5, max_len_a=0.0, max_len_b=1
        )[0]
        assert tuple(hyp.tokens) == best and hyp.score == pytest.approx(best_score, abs=1e-4)
        narrow = constrained_beam_search(
            model, src, mask, [phrase], beam_size=2, max_len_a=0.0, max_len_b=1
        )
        assert any(narrow[0].tokens[i : i + len(phrase)] == phrase for i in range(len(narrow[0].tokens)))  # fmt: skip


def test_glossary_file_errors(tmp_path):
    bad = tmp_path / "g.tsv"
    bad.write_text("station\t车站\nno tab here\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"g.tsv:2: expected source term TAB target term"):
        Glossary.load(bad)


def test_terms_match_whole_words_and_longest_first(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("train\t火车\ntrain station\t火车站\ncat\t猫\n", encoding="utf-8")
    g = Glossary.load(path)
    assert g.targets_for("Where is the Train Station?") == ["火车站"]
    assert g.targets_for("He trains the catalogue.") == []  # not inside other words
    assert g.targets_for("The cat saw a train.") == ["火车", "猫"]


def _glossary_from_data(n_terms: int) -> list[tuple[str, str]]:
    """English words and the Chinese strings most tied to them in the training pairs (Dice
    coefficient of the lines they occur in): a glossary taken from the data, not written."""
    en = (TATOEBA / "train.en").read_text(encoding="utf-8").splitlines()
    zh = (TATOEBA / "train.zh").read_text(encoding="utf-8").splitlines()
    words = [set(re.findall(r"[a-z]+", line.lower())) for line in en]
    grams = [{line[i : i + n] for n in (2, 3) for i in range(len(line) - n + 1)} for line in zh]
    word_count = collections.Counter(w for ws in words for w in ws if len(w) > 3)
    gram_count = collections.Counter(g for gs in grams for g in gs)
    pairs = collections.Counter(
        (w, g)
        for ws, gs in zip(words, grams, strict=True)
        for w in ws
        if word_count[w] >= 40
        for g in gs
        if gram_count[g] >= 40
    )
    best: dict[str, tuple[float, str]] = {}
    for (w, g), both in pairs.items():
        dice = 2 * both / (word_count[w] + gram_count[g])
        if dice > best.get(w, (0.0, ""))[0] and not re.search(r"[\W\d]", g):
            best[w] = (dice, g)
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    return [(w, g) for w, (dice, g) in ranked[:n_terms] if dice > 0.5]


@pytest.mark.slow
def test_a_glossary_from_the_data_is_always_obeyed(tmp_path):
    """20 terms found in the training data: every test line with a term gets the term's
    target in its translation; lines without terms are byte-identical to plain decoding."""
    terms = _glossary_from_data(20)
    assert len(terms) == 20, terms
    path = tmp_path / "glossary.tsv"
    path.write_text("".join(f"{w}\t{g}\n" for w, g in terms), encoding="utf-8")
    glossary = Glossary.load(path)
    loaded = load_model(REPO / "models" / "en-zh-tiny")
    tok = loaded.tokenizer
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()
    with_terms = [line for line in lines if glossary.targets_for(line)][:80]
    without = [line for line in lines if not glossary.targets_for(line)][:80]
    cfg = DecodeConfig(beam_size=5)
    plain = Translator(loaded.model, tok, cfg)
    constrained = Translator(
        loaded.model, tok, cfg,
        constraints=lambda line: [phrase_ids(tok, t, spaced=False) for t in glossary.targets_for(line)],
    )  # fmt: skip
    out = constrained.translate_chunk(with_terms)
    obeyed = sum(all(t in r.text for t in glossary.targets_for(r.source)) for r in out)
    before = sum(
        all(t in r.text for t in glossary.targets_for(r.source))
        for r in plain.translate_chunk(with_terms)
    )
    print(f"{len(with_terms)} lines with terms: {before} had them unconstrained, {obeyed} constrained")  # fmt: skip
    assert obeyed == len(with_terms)
    assert [r.text for r in constrained.translate_chunk(without)] == [
        r.text for r in plain.translate_chunk(without)
    ]
