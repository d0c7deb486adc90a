"""int8 Linear layers with one scale per input row (mtcli.model.int8): every Linear swapped,
the arithmetic checked against numpy, and a row's result the same bits in any batch (torch.ao's
dynamic int8, one scale per batch, is shown to fail that check)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from mtcli.config import DecodeConfig
from mtcli.engines.build import EngineOptions, build_translator
from mtcli.engines.translator import quantize_int8
from mtcli.model.int8 import EXACT_IN_FLOAT, Int8Linear, integer_product


def _numpy_int8_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The layer's arithmetic written out: symmetric int8, the weight per output channel, the
    input per row, the product in exact integers, then both scales and the bias."""
    w_scale = np.abs(w).max(axis=1) / 127
    qw = np.round(w / w_scale[:, None]).astype(np.int64)
    x_scale = np.abs(x).max(axis=1, keepdims=True) / 127
    qx = np.round(x / x_scale).astype(np.int64)
    return (qx @ qw.T) * x_scale * w_scale + b


def _layer(out_features: int, in_features: int, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features)


@pytest.mark.parametrize("path", ["onednn", "fallback"])
def test_the_layer_computes_what_numpy_computes(path):
    """Rows of very different sizes (one 1,000x the others), a 3-d input, both the oneDNN
    product and the portable one: numpy's result to 1e-5 of the output's range."""
    linear = _layer(48, 40)
    layer = Int8Linear.from_linear(linear)
    if path == "fallback":
        layer._packed = None
    torch.manual_seed(1)
    x = torch.randn(2, 9, 40)
    x[0, 3] *= 1000
    with torch.no_grad():
        got = layer(x).numpy()
    expected = _numpy_int8_linear(
        x.reshape(-1, 40).double().numpy(),
        linear.weight.detach().double().numpy(),
        linear.bias.detach().double().numpy(),
    ).reshape(2, 9, 48)
    assert got.shape == expected.shape
    scale = np.abs(expected).max(axis=-1, keepdims=True)
    assert np.abs(got - expected).max(axis=-1, keepdims=True).max() <= 1e-5 * scale.max()
    assert (np.abs(got - expected) <= 1e-5 * scale).all()


def test_a_row_gives_the_same_bits_alone_and_in_any_batch():
    """Each row alone, and beside rows 100x larger: the same output bits. torch.ao's dynamic
    int8 Linear, whose one scale follows the batch's largest value, changes the small rows."""
    linear = _layer(64, 32)
    ours = Int8Linear.from_linear(linear)
    torch.manual_seed(2)
    rows = torch.randn(5, 32)
    loud = torch.randn(3, 32) * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8
        )[0]
    with torch.no_grad():
        alone = torch.cat([ours(rows[i : i + 1]) for i in range(5)])
        assert torch.equal(ours(rows), alone)
        assert torch.equal(ours(torch.cat([loud, rows]))[3:], alone)
        assert not torch.equal(theirs(torch.cat([loud, rows]))[3:], theirs(rows))


def test_the_integer_product_is_exact_on_every_path():
    """int8 · int8 in int32, exactly, where float32 sums could round (K past 1,040) too."""
    torch.manual_seed(3)
    for k in (8, 256, EXACT_IN_FLOAT + 200):
        a = torch.randint(-127, 128, (7, k), dtype=torch.int8)
        b = torch.full((k, 5), 127, dtype=torch.int8)
        b[:, 1:] = torch.randint(-127, 128, (k, 4), dtype=torch.int8)
        expected = a.long() @ b.long()
        assert torch.equal(integer_product(a, b).long(), expected)


def test_every_linear_layer_becomes_int8_and_the_embedding_stays(tiny_model):
    """No float Linear is left; the output projection, tied to the target embedding, got its
    own int8 copy while the embedding the decoder reads stays fp32 and unchanged."""
    linears = [name for name, m in tiny_model.named_modules() if isinstance(m, torch.nn.Linear)]
    embedding = tiny_model.tgt_embed.weight.detach().clone()
    quantize_int8(tiny_model)
    kinds = {name: type(m) for name, m in tiny_model.named_modules() if name in linears}
    assert kinds == dict.fromkeys(linears, Int8Linear) and "out_proj" in kinds
    assert not any(isinstance(m, torch.nn.Linear) for m in tiny_model.modules())
    assert torch.equal(tiny_model.tgt_embed.weight, embedding)


def test_a_sentence_translates_and_scores_alike_alone_and_among_others(copy_model_dir, copy_lines):
    """At int8, each line's beam-3 n-best (texts and scores) is the same alone as in a batch of
    32, and not fp32's (so int8 really ran)."""
    cfg = DecodeConfig(beam_size=3, nbest=3)
    options = EngineOptions(device="cpu", text_layer=False, quantize="int8")
    int8 = build_translator([copy_model_dir], cfg, options)
    fp32 = build_translator([copy_model_dir], cfg, EngineOptions(device="cpu", text_layer=False))
    together = int8.translate_chunk(copy_lines)
    for line, among in zip(copy_lines[:6], together, strict=False):
        (alone,) = int8.translate_chunk([line])
        assert [t for t, _ in alone.nbest] == [t for t, _ in among.nbest]
        assert [s for _, s in alone.nbest] == pytest.approx([s for _, s in among.nbest], abs=1e-6)
    scores = [s for t in together for _, s in t.nbest]
    assert scores != [s for t in fp32.translate_chunk(copy_lines) for _, s in t.nbest]
