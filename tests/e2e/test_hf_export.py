"""`mtcli export --format huggingface`: a MarianMT directory that transformers loads alone, whose
greedy outputs and per-token log-probabilities are mtcli's (transformers is a test-only extra)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import EOS_ID
from mtcli.data.batches import pad, padding_mask
from mtcli.decoding.search import greedy
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, TATOEBA, tiny_config

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.e2e  # a heavy extra: in `make e2e`, as .ci/run runs it

SHIPPED = REPO / "models" / "en-zh-tiny"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "en-zh-marian"
    result = CliRunner().invoke(
        main, ["export", "--format", "huggingface", str(SHIPPED), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_the_directory_loads_alone_with_every_weight(exported):
    """from_pretrained finds every weight it expects and nothing else; the files the issue names."""
    model, info = transformers.MarianMTModel.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json", "README.md",
            "tokenizer_config.json", "generation_config.json"} <= names  # fmt: skip
    assert model.config.decoder_start_token_id == 2 and not model.final_logits_bias.any()
    # the stored position table is the one MarianMT computes itself (sines first): a tool that
    # rebuilds it (transformers does for a missing table) gets the same model. Unpermuted, the
    # interleaved table would differ by up to 2.
    for stack in (model.model.encoder, model.model.decoder):
        rebuilt = stack.embed_positions.create_weight()
        torch.testing.assert_close(stack.embed_positions.weight, rebuilt, atol=2e-6, rtol=0)


def test_greedy_outputs_and_log_probs_are_mtcli_s(exported):
    """The first 200 Tatoeba test lines: transformers' greedy generate gives mtcli's greedy ids
    (>= 198 of 200), and on mtcli's outputs forced as targets every log-probability agrees to 1e-4."""
    if not (TATOEBA / "test.en").is_file():
        pytest.skip(f"{TATOEBA} is absent")
    lines = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:200]
    loaded = load_model(SHIPPED)
    ours_model, tok = loaded.model.eval(), loaded.tokenizer
    theirs = transformers.MarianMTModel.from_pretrained(exported).eval()
    hf_tok = transformers.MarianTokenizer.from_pretrained(exported)
    same, worst = 0, 0.0
    for start in range(0, len(lines), 50):
        chunk = lines[start : start + 50]
        src = pad([tok.encode_src(line) + [EOS_ID] for line in chunk])
        mask = padding_mask(src)
        ours = [h.tokens for h in greedy(ours_model, src, mask)]
        batch = hf_tok(chunk, return_tensors="pt", padding=True)
        assert torch.equal(batch["input_ids"], src)  # MarianTokenizer reads the text as mtcli does
        limit = int((1.5 * mask.sum(1).max() + 10).floor()) + 1
        with torch.inference_mode():
            generated = theirs.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit)
        theirs_ids = [[i for i in row.tolist()[1:] if i not in (0, EOS_ID)] for row in generated]
        same += sum(a == b for a, b in zip(ours, theirs_ids, strict=True))
        worst = max(worst, _log_prob_gap(ours_model, theirs, src, mask, ours))
    assert same >= 198, f"{same} of 200 greedy outputs identical"
    assert worst < 1e-4, f"largest log-probability difference {worst:.2e}"


def _log_prob_gap(ours_model, theirs, src, mask, outputs) -> float:
    """max |log p_mtcli - log p_marian| over every vocabulary entry at every forced target position."""
    tgt_in = pad([[2] + o for o in outputs])  # BOS + the output; EOS predicted last
    real = padding_mask(pad([o + [EOS_ID] for o in outputs]))
    with torch.inference_mode():
        a = torch.log_softmax(ours_model(src, tgt_in), -1)
        b = torch.log_softmax(
            theirs(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt_in).logits, -1
        )
    return float((a - b).abs()[real].max())


def test_what_marian_cannot_express_is_refused_in_one_line(tmp_path):
    """A pre-norm model (MarianMT has no final stack LayerNorm) is refused, and --out stays absent."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.model.transformer import Seq2Seq
    from mtcli.store.checkpoint import SaveRequest, write_model_dir

    vocab = Tokenizer.load(SHIPPED).src_vocab_size  # 6,042 since its placeholder pieces
    model = Seq2Seq(tiny_config(vocab=vocab, pre_norm=True, max_positions=256))
    (tmp_path / "pre").mkdir()
    write_model_dir(
        model, tmp_path / "pre", SaveRequest(tokenizer_dir=SHIPPED, src_lang="en", tgt_lang="zh")
    )
    result = CliRunner().invoke(main, ["export", "--format", "huggingface", str(tmp_path / "pre"), "--out",
                                       str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2 and "a pre-norm model; MarianMT is post-norm" in result.output
    assert result.output.count("\n") == 1 and not (tmp_path / "out").exists()
    assert json.loads((tmp_path / "pre" / "config.json").read_text())  # the input untouched
