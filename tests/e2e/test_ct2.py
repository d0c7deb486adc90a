"""CTranslate2 on the same weights: an exact export (greedy outputs identical on the first 200
Tatoeba test lines), and `translate --engine ctranslate2`, a path that never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mtcli.config import DecodeConfig
from mtcli.engines.translator import Translator
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, TATOEBA, run_mtcli

pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.e2e  # a heavy extra: in `make e2e`, as .ci/run runs it
SHIPPED = REPO / "models" / "en-zh-tiny"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from mtcli.store.ct2_export import export_ctranslate2

    return export_ctranslate2(SHIPPED, tmp_path_factory.mktemp("ct2") / "en-zh-tiny")


def test_greedy_outputs_are_identical_on_200_test_lines(exported):
    """The exported model, through CTranslate2, gives mtcli's greedy output for every line."""
    from mtcli.engines.ct2 import CT2Translator

    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:200]
    cfg = DecodeConfig(beam_size=1)
    loaded = load_model(SHIPPED)
    ours = [t.text for t in Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(lines)]
    theirs = [t.text for t in CT2Translator(exported, cfg, threads=1).translate_chunk(lines)]
    assert theirs == ours


@pytest.mark.parametrize("shape", [{}, {"pre_norm": True, "activation": "gelu"}])
def test_greedy_is_identical_on_an_untrained_model_too(tmp_path, copy_model_dir, copy_lines, shape):
    """Random weights reach every corner the shipped model avoids: outputs that run to each
    line's length limit, <unk> in them, and <pad> or <s> as the likeliest token. CTranslate2
    gave other texts on every line of such a model (its limit was the batch's, it produced
    <pad> and <s>, which mtcli never does, and it printed <unk> as ⁇)."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.engines.ct2 import CT2Translator
    from mtcli.model.transformer import Seq2Seq
    from mtcli.store.checkpoint import SaveRequest, save_model
    from mtcli.store.ct2_export import export_ctranslate2
    from tests.conftest import tiny_config

    vocab = Tokenizer.load(copy_model_dir).src_vocab_size
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab=vocab, **shape))
    save_model(model, tmp_path / "m", SaveRequest(tokenizer_dir=copy_model_dir))
    cfg = DecodeConfig(beam_size=1)
    loaded = load_model(tmp_path / "m")
    ours = Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(copy_lines)
    theirs = CT2Translator(export_ctranslate2(tmp_path / "m", tmp_path / "ct2"), cfg, threads=1)
    assert [t.text for t in theirs.translate_chunk(copy_lines)] == [t.text for t in ours]
    assert max(len(t.text.split()) for t in ours) > 10  # some output ran to its limit


def test_both_engines_turn_the_same_pieces_into_the_same_text(exported):
    """Special pieces are dropped by both (CTranslate2's path printed <unk> as ⁇)."""
    from mtcli.engines.ct2 import CT2Translator

    ct2 = CT2Translator(exported, DecodeConfig(), threads=1)
    tok = load_model(SHIPPED).tokenizer
    pieces = tok.tgt.encode("我们工作。", out_type=str)
    pieces = ["<s>", *pieces[:1], "<unk>", *pieces[1:], "<pad>", "</s>"]
    ids = [tok.tgt.piece_to_id(p) for p in pieces]
    assert ct2._detokenize(pieces) == tok.decode_tgt(ids) == "我们工作。"


def test_the_ctranslate2_path_imports_no_torch(exported):
    """`mtcli translate --engine ctranslate2` translates without ever importing torch."""
    script = (
        "import sys\nfrom mtcli.cli import main\n"
        f"try: main(['translate', '--engine', 'ctranslate2', '--greedy', '-m', {str(exported)!r}, 'Why do we work?'])\n"
        "except SystemExit: pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    loaded = load_model(SHIPPED)
    ours = Translator(loaded.model, loaded.tokenizer, DecodeConfig(beam_size=1))
    assert proc.stdout.strip() == ours.translate_chunk(["Why do we work?"])[0].text
    assert proc.stderr.strip() == "False", proc.stderr


def test_what_ctranslate2_cannot_do_is_one_line(exported, tmp_path):
    """Flags CTranslate2 cannot honour, a directory that is not an export, and two models to
    convert at once: each one line, exit 2."""
    cases = [
        (
            ["translate", "--engine", "ctranslate2", "-m", str(exported), "--trace", "x"],
            "cannot do --trace",
        ),  # fmt: skip
        (
            ["translate", "--engine", "ctranslate2", "-m", str(SHIPPED), "x"],
            "not a CTranslate2 model of mtcli's",
        ),  # fmt: skip
        (
            [
                "export",
                "--format",
                "ctranslate2",
                str(SHIPPED),
                str(SHIPPED),
                "--out",
                str(tmp_path / "x"),
            ],
            "converts one model",
        ),  # fmt: skip
    ]
    if _gpus() == 0:  # this machine: CUDA asked for and not there is one line, not a fallback
        cases.append((["translate", "--engine", "ctranslate2", "-m", str(exported), "--device", "cuda", "x"],
                      "--device cuda: CTranslate2 sees no CUDA device"))  # fmt: skip
        cases.append((["serve", "--engine", "ctranslate2", "-m", str(exported), "--device", "cuda", "--port", "1"],
                      "--device cuda: CTranslate2 sees no CUDA device"))  # fmt: skip
    for args, message in cases:
        proc = run_mtcli(*args)
        assert (
            proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1
        ), proc.stderr


def _gpus() -> int:
    import ctranslate2

    return ctranslate2.get_cuda_device_count()


# ---------------------------------------------------------------- beyond greedy
@pytest.fixture(scope="module")
def engines(exported):
    """(mtcli's translator, CTranslate2's) for a DecodeConfig, and the first 100 test lines."""
    from mtcli.engines.ct2 import CT2Translator

    loaded = load_model(SHIPPED)
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:100]

    def make(cfg: DecodeConfig):
        return Translator(loaded.model, loaded.tokenizer, cfg), CT2Translator(
            exported, cfg, threads=2
        )

    return make, lines


def _agreement(engines, cfg: DecodeConfig, prefixes=None) -> tuple[int, list, list]:
    make, lines = engines
    ours, theirs = make(cfg)
    a = ours.translate_chunk(lines, prefixes) if prefixes else ours.translate_chunk(lines)
    b = theirs.translate_chunk(lines, prefixes) if prefixes else theirs.translate_chunk(lines)
    return sum(x.text == y.text for x, y in zip(a, b, strict=True)), a, b


def test_beam_search_agrees_exactly_where_the_scores_agree(engines):
    """Beam 5 without a length penalty (both rank by summed log-probability): every line the
    same, with the same score. With the default penalty the formulas differ (mtcli: GNMT's
    ((5 + n) / 6)^a, CTranslate2: n^a), and so do some lines (measured: 187 of 200)."""
    same, ours, theirs = _agreement(engines, DecodeConfig(beam_size=5, length_penalty=0.0))
    assert same == 100
    assert [t.score for t in theirs] == pytest.approx([t.score for t in ours], abs=1e-3)
    same, _, _ = _agreement(engines, DecodeConfig(beam_size=5))
    assert same >= 90


def test_nbest_prefix_and_no_repeat_agree(engines):
    """n-best 3 (no penalty): the best entry is the same on every line, the whole list on most
    (measured 145 of 200: which finished hypotheses a beam keeps before it stops differs);
    a prefix and --no-repeat-ngram 2 give the same outputs, beam or greedy."""
    _, ours, theirs = _agreement(engines, DecodeConfig(beam_size=5, nbest=3, length_penalty=0.0))
    assert all(a.nbest[0][0] == b.nbest[0][0] for a, b in zip(ours, theirs, strict=True))
    assert (
        sum(
            [x for x, _ in a.nbest] == [x for x, _ in b.nbest]
            for a, b in zip(ours, theirs, strict=True)
        )
        >= 60
    )
    for cfg in (DecodeConfig(beam_size=1), DecodeConfig(beam_size=5, length_penalty=0.0)):
        same, ours, _ = _agreement(engines, cfg, prefixes=["我"] * 100)
        assert same == 100 and all(t.text.startswith("我") for t in ours)
        cfg = DecodeConfig(beam_size=cfg.beam_size, no_repeat_ngram=2, length_penalty=0.0)
        assert _agreement(engines, cfg)[0] == 100


def test_int8_and_sampling(engines, exported):
    """int8: each engine quantizes its own way; greedy outputs still agree on most lines
    (measured 194 of 200). Sampling: the same seed draws the same outputs again on each engine;
    across engines the random generators differ, so draws are compared with nothing."""
    from mtcli.engines.build import EngineOptions, build_translator
    from mtcli.engines.ct2 import CT2Translator

    _, lines = engines
    cfg = DecodeConfig(beam_size=1)
    ours = build_translator(
        [SHIPPED], cfg, EngineOptions(quantize="int8", text_layer=False, threads=2)
    )
    theirs = CT2Translator(exported, cfg, threads=2, quantize="int8")
    a, b = ours.translate_chunk(lines), theirs.translate_chunk(lines)
    assert sum(x.text == y.text for x, y in zip(a, b, strict=True)) >= 92
    drawn = DecodeConfig(sample=True, nbest=2, seed=7, temperature=1.5)
    first = [t.nbest for t in CT2Translator(exported, drawn, threads=1).translate_chunk(lines[:20])]
    again = [t.nbest for t in CT2Translator(exported, drawn, threads=1).translate_chunk(lines[:20])]
    assert first == again and any(len({x for x, _ in n}) > 1 for n in first)


def test_a_hypothesis_cut_at_its_line_s_limit_has_the_score_of_what_is_kept(
    tmp_path, copy_model_dir, copy_lines
):
    """An untrained model runs to each line's own limit; CTranslate2 gets the batch's longest
    limit, so the short lines' outputs are cut: their score is then what is kept's, ended by
    </s> (mtcli's own greedy score, to fp32 rounding), not the longer hypothesis's."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.engines.ct2 import CT2Translator
    from mtcli.model.transformer import Seq2Seq
    from mtcli.store.checkpoint import SaveRequest, save_model
    from mtcli.store.ct2_export import export_ctranslate2
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab=Tokenizer.load(copy_model_dir).src_vocab_size))
    save_model(model, tmp_path / "m", SaveRequest(tokenizer_dir=copy_model_dir))
    cfg = DecodeConfig(beam_size=1, length_penalty=0.0)
    loaded = load_model(tmp_path / "m")
    ours = Translator(loaded.model, loaded.tokenizer, cfg).translate_chunk(copy_lines)
    theirs = CT2Translator(
        export_ctranslate2(tmp_path / "m", tmp_path / "ct2"), cfg, threads=1
    ).translate_chunk(copy_lines)
    assert [t.text for t in theirs] == [t.text for t in ours]
    assert [t.score for t in theirs] == pytest.approx([t.score for t in ours], abs=1e-3)


def test_the_batch_budget_counts_what_batch_tokens_counts():
    """--batch-tokens is padded source tokens x rows per line; CTranslate2's token batches count
    padded source tokens, so it gets the budget divided by the beam (or the draws)."""
    assert DecodeConfig(beam_size=5, batch_tokens=8000).source_tokens_per_batch == 1600
    assert DecodeConfig(sample=True, nbest=4, batch_tokens=8000).source_tokens_per_batch == 2000
    assert DecodeConfig(beam_size=1, batch_tokens=8000).source_tokens_per_batch == 8000


@pytest.mark.skipif(not _gpus(), reason="needs a GPU that CTranslate2 sees")
def test_device_cuda_translates_on_the_gpu(exported):
    """--device cuda puts CTranslate2 on the GPU, and greedy outputs stay mtcli's."""
    from mtcli.engines.ct2 import CT2Translator

    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:50]
    gpu = CT2Translator(exported, DecodeConfig(beam_size=1), device="cuda")
    cpu = CT2Translator(exported, DecodeConfig(beam_size=1), threads=2, device="cpu")
    assert gpu.device == "cuda" and gpu.translator.device == "cuda"
    assert (
        sum(
            a.text == b.text
            for a, b in zip(gpu.translate_chunk(lines), cpu.translate_chunk(lines), strict=True)
        )
        >= 48
    )
