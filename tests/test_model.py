"""The Transformer against independent arithmetic: attention, positions, masks, save/load."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from copy import deepcopy as copy_module

import pytest
import torch

import mtcli.model.packing as packing_module
from mtcli.config import BOS_ID, EOS_ID
from mtcli.errors import UserError
from mtcli.model.linear import Linear, keep_only_packed_weights, onednn_available
from mtcli.model.transformer import SelfAttention, Seq2Seq, attend, sinusoidal_positions
from mtcli.store.checkpoint import SaveRequest, load_model, save_model
from tests.conftest import tiny_config

X = [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]
W_Q = [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]
W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]
W_V = [[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]


def test_worked_self_attention_example():
    """The seed article's example: Q, K, V as printed; output = softmax(QKᵀ/√3)V in float64."""
    x, wq, wk, wv = (torch.tensor(m, dtype=torch.float64) for m in (X, W_Q, W_K, W_V))
    q, k, v = x @ wq, x @ wk, x @ wv
    assert q.tolist() == [[1, 0, 2], [2, 2, 2], [2, 1, 3]]
    assert k.tolist() == [[0, 1, 1], [4, 4, 0], [2, 3, 1]]
    assert v.tolist() == [[1, 2, 3], [2, 8, 0], [2, 6, 3]]
    # independent truth: the softmax written out element by element
    expected = []
    for qi in q.tolist():
        scores = [
            sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(3) for kj in k.tolist()
        ]
        exps = [math.exp(s) for s in scores]
        weights = [e / sum(exps) for e in exps]
        expected.append(
            [sum(w * vj[c] for w, vj in zip(weights, v.tolist(), strict=True)) for c in range(3)]
        )
    got = attend(q[None, None], k[None, None], v[None, None], None)[0, 0]  # one batch, one head
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
    # row 0 by hand: Q0·Kᵀ = [2, 4, 4], so keys 2 and 3 share the weight equally
    w = [math.exp(2 / math.sqrt(3)), math.exp(4 / math.sqrt(3)), math.exp(4 / math.sqrt(3))]
    assert got[0, 0].item() == pytest.approx((w[0] * 1 + w[1] * 2 + w[2] * 2) / sum(w), abs=1e-12)


def test_self_attention_module_single_head():
    """The module with one head, fused projections set to W_Q/W_K/W_V (padded to D=4), matches softmax(QKᵀ/√K)V·W_O."""
    torch.manual_seed(0)
    attn = SelfAttention(d_model=4, n_heads=1).double().eval()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    w = attn.qkv_proj.weight.detach()
    b = attn.qkv_proj.bias.detach()
    q, k, v = (x @ w[i * 4 : (i + 1) * 4].T + b[i * 4 : (i + 1) * 4] for i in range(3))
    probs = torch.softmax(q @ k.transpose(1, 2) / 2.0, dim=-1)  # √4
    expected = attn.out_proj(probs @ v)
    torch.testing.assert_close(attn(x, None), expected)


def test_positional_encoding_formula():
    """PE(pos, 2i) = sin(pos/10000^(2i/D)), PE(pos, 2i+1) = cos(same), checked entry by entry."""
    D = 10
    table = sinusoidal_positions(50, D)
    for pos in (0, 1, 7, 49):
        for i in range(D // 2):
            angle = pos / 10000 ** (2 * i / D)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def _batch(model, B=2, S=6, T=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, model.cfg.src_vocab_size, (B, S), generator=g)
    tgt = torch.randint(4, model.cfg.tgt_vocab_size, (B, T), generator=g)
    return src, tgt


@pytest.mark.parametrize("pre_norm", [False, True])
def test_causal_mask_hides_the_future(pre_norm):
    """Changing target token j leaves the outputs at positions < j unchanged (and changes j)."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(pre_norm=pre_norm)).eval()
    src, tgt = _batch(model)
    base = model(src, tgt)
    j = 3
    changed = tgt.clone()
    changed[:, j] = (changed[:, j] + 1 - 4) % (model.cfg.tgt_vocab_size - 4) + 4
    out = model(src, changed)
    torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-6, rtol=0)
    assert not torch.allclose(out[:, j], base[:, j])


def test_padding_changes_nothing_real():
    """Appending pad tokens to source and target leaves every real position's output unchanged."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config()).eval()
    src, tgt = _batch(model)
    mask = src != 0
    memory = model.encode(src, mask)
    logits = model(src, tgt)
    pad_src = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    pad_tgt = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(
        model.encode(pad_src, pad_src != 0)[:, :6], memory, atol=1e-5, rtol=0
    )
    torch.testing.assert_close(model(pad_src, pad_tgt)[:, :5], logits, atol=1e-5, rtol=0)


def test_encoder_skips_padding_in_inference_with_the_same_memory(monkeypatch):
    """In inference the encoder runs its projections and feed-forward on the real tokens alone:
    the memory equals the padded path's at every real position, is zero at the padding, and
    decoding from it gives the same logits."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(pre_norm=True)).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 9, 2, 0, 0, 0], [7, 2, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 7, 0], [1, 8, 9]])
    mask = src != 0
    packed_rows = []
    of = packing_module.Packing.of
    monkeypatch.setattr(
        packing_module.Packing, "of", lambda m: packed_rows.append(int(m.sum())) or of(m)
    )
    memory = model.encode(src, mask)
    assert packed_rows == [11]
    monkeypatch.setattr(packing_module.Packing, "of", lambda m: None)  # the paper's padded path
    padded = model.encode(src, mask)
    # the same up to float rounding: a matmul's rows may round apart at another row count
    torch.testing.assert_close(memory[mask], padded[mask], atol=1e-5, rtol=0)
    assert bool((memory[~mask] == 0).all()) and not bool((padded[~mask] == 0).all())
    torch.testing.assert_close(
        model.decode(tgt, memory, mask), model.decode(tgt, padded, mask), atol=1e-5, rtol=0
    )


def test_tied_and_shared_embeddings():
    """Output projection is the target embedding; source and target share one matrix when joint."""
    model = Seq2Seq(tiny_config())
    assert model.src_embed.weight is model.tgt_embed.weight is model.out_proj.weight
    untied = Seq2Seq(tiny_config(share_embeddings=False, tie_output=False, src_vocab_size=30))
    assert untied.src_embed.weight is not untied.tgt_embed.weight
    assert untied.out_proj.weight.shape == (24, 32)


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"pre_norm": True, "attention": "additive", "n_enc_layers": 3},
        {"share_embeddings": False, "tie_output": False, "d_ff": 40, "n_dec_layers": 4},
    ],
)
def test_layer_parameters_counts_what_the_model_builds(shape):
    """The count the memory check uses (no torch) equals the built model's, embeddings and
    output projection aside."""
    cfg = tiny_config(**shape)
    built = sum(
        p.numel()
        for name, p in Seq2Seq(cfg).named_parameters()
        if not name.startswith(("src_embed.", "tgt_embed.", "out_proj."))
    )
    assert cfg.layer_parameters() == built


def test_save_load_in_fresh_process_gives_identical_logits(tmp_path, enzh_tokenizer):
    """Save, load in a new Python process, and the logits are bit-identical."""
    from mtcli.data.tokenizer import Tokenizer

    vocab = Tokenizer.load(enzh_tokenizer).src_vocab_size
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab=vocab)).eval()
    save_model(
        model,
        tmp_path / "m",
        SaveRequest(tokenizer_dir=enzh_tokenizer, src_lang="en", tgt_lang="zh"),
    )
    src, tgt = _batch(model)
    torch.set_num_threads(1)  # the same thread count on both sides: bit-identical float sums
    expected = model(src, tgt)
    torch.save({"src": src, "tgt": tgt}, tmp_path / "inputs.pt")
    code = (
        "import sys, torch; from mtcli.store.checkpoint import load_model; torch.set_num_threads(1);"
        "m = load_model(sys.argv[1]).model; d = torch.load(sys.argv[2]);"
        "torch.save(m(d['src'], d['tgt']), sys.argv[3])"
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(tmp_path / "m"),
            str(tmp_path / "inputs.pt"),
            str(tmp_path / "out.pt"),
        ],
        check=True,
    )
    assert torch.equal(torch.load(tmp_path / "out.pt"), expected)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model"]["d_model"] == 32 and config["format"] == 1 and config["tgt_lang"] == "zh"


def test_fp16_weights_load_as_fp32(tmp_path, enzh_tokenizer):
    """A model stored in fp16 loads back as fp32 with weights equal to the rounded originals."""
    from mtcli.data.tokenizer import Tokenizer

    vocab = Tokenizer.load(enzh_tokenizer).src_vocab_size
    model = Seq2Seq(tiny_config(vocab=vocab))
    save_model(
        model, tmp_path / "m", SaveRequest(tokenizer_dir=enzh_tokenizer, dtype=torch.float16)
    )
    loaded = load_model(tmp_path / "m").model
    w = loaded.decoder_layers[0].ffn.up.weight
    assert w.dtype == torch.float32
    assert torch.equal(w, model.decoder_layers[0].ffn.up.weight.half().float())


def test_mismatched_tokenizer_is_refused(tmp_path, enzh_tokenizer, enzh_files):
    """A model directory whose tokenizer differs from the recorded one gives a one-line error."""
    from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer

    vocab = Tokenizer.load(enzh_tokenizer).src_vocab_size
    save_model(
        Seq2Seq(tiny_config(vocab=vocab)), tmp_path / "m", SaveRequest(tokenizer_dir=enzh_tokenizer)
    )
    src, tgt = enzh_files
    train_tokenizer(src, tgt, tmp_path / "other", TokenizerOptions(vocab_size=90))
    (tmp_path / "m" / "spm.model").write_bytes((tmp_path / "other" / "spm.model").read_bytes())
    with pytest.raises(UserError, match="does not match"):
        load_model(tmp_path / "m")


def test_interrupted_swap_falls_back_to_the_old_directory(tmp_path, enzh_tokenizer):
    """A save killed between its two renames leaves DIR.old, which loads; a later save cleans up."""
    import os

    from mtcli.data.tokenizer import Tokenizer

    vocab = Tokenizer.load(enzh_tokenizer).src_vocab_size
    model = Seq2Seq(tiny_config(vocab=vocab))
    save_model(model, tmp_path / "m", SaveRequest(tokenizer_dir=enzh_tokenizer))
    os.replace(tmp_path / "m", tmp_path / "m.old")  # the moment after the first rename
    assert load_model(tmp_path / "m").path.name == "m.old"
    save_model(model, tmp_path / "m", SaveRequest(tokenizer_dir=enzh_tokenizer))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("m")) == ["m"]


def test_bf16_autocast_matches_fp32_closely():
    """Under CPU bf16 autocast the logits stay close to fp32 and the backward pass runs."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config())
    src, tgt = _batch(model)
    expected = model(src, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(src, tgt)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, atol=0.1, rtol=0.05)
    got.float().sum().backward()
    assert model.src_embed.weight.grad is not None


def test_export_averages_checkpoints(tmp_path, enzh_tokenizer):
    """export writes the element-wise mean of checkpoints (fp16), and refuses mixed shapes."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.store.checkpoint import export_model

    vocab = Tokenizer.load(enzh_tokenizer).src_vocab_size
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(Seq2Seq(tiny_config(vocab=vocab)))
        save_model(
            models[-1],
            tmp_path / f"c{seed}",
            SaveRequest(tokenizer_dir=enzh_tokenizer, extra={"step": seed}),
        )
    export_model([tmp_path / "c1", tmp_path / "c2"], tmp_path / "avg")
    got = load_model(tmp_path / "avg").model.decoder_layers[1].ffn.down.weight
    mean = (
        models[0].decoder_layers[1].ffn.down.weight + models[1].decoder_layers[1].ffn.down.weight
    ) / 2
    torch.testing.assert_close(got, mean.half().float())
    save_model(
        Seq2Seq(tiny_config(vocab=vocab, d_ff=48)),
        tmp_path / "c3",
        SaveRequest(tokenizer_dir=enzh_tokenizer),
    )
    with pytest.raises(UserError, match="model config differs"):
        export_model([tmp_path / "c1", tmp_path / "c3"], tmp_path / "bad")


@torch.no_grad()
def test_additive_score_of_one_head_by_hand():
    """One head's additive score equals vᵀ tanh(W_q q + W_k k) written out with loops."""
    from mtcli.model.transformer import CrossAttention, additive_scores

    torch.manual_seed(0)
    att = CrossAttention(d_model=4, n_heads=2, additive=True)
    x, memory = torch.randn(1, 2, 4), torch.randn(1, 3, 4)  # 2 queries, 3 keys
    q = att.split(att.q_proj(x))  # (1, 2, 2, 2)
    k = att.split(att.kv_proj(memory).chunk(2, dim=-1)[0])  # (1, 2, 3, 2)
    scores = additive_scores(q, k, att.score_v)  # (1, H, 2, 3)
    head = 1
    Wq, bq = att.q_proj.weight[2:4], att.q_proj.bias[2:4]  # head 1's rows of W_q
    Wk, bk = att.kv_proj.weight[2:4], att.kv_proj.bias[2:4]  # head 1's rows of W_k
    v = att.score_v[head]
    for i in range(2):
        for j in range(3):
            hidden = [
                math.tanh(sum(Wq[r, c] * x[0, i, c] for c in range(4)) + bq[r]
                          + sum(Wk[r, c] * memory[0, j, c] for c in range(4)) + bk[r])
                for r in range(2)
            ]  # fmt: skip
            by_hand = sum(float(v[r]) * float(hidden[r]) for r in range(2))
            assert float(scores[0, head, i, j]) == pytest.approx(by_hand, abs=1e-5)


def test_additive_attention_cached_equals_recompute_and_masks_padding():
    """With additive cross-attention: cached decoding equals recomputation, and padded source
    positions get exactly zero attention."""
    from mtcli.config import BOS_ID
    from mtcli.decoding.search import beam_search
    from mtcli.model.kv_cache import AttentionRecord

    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(attention="additive")).eval()
    src = torch.tensor([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3]])
    mask = src != 0
    memory = model.encode(src, mask)
    tgt = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, 10]])
    cache = model.new_cache(8, AttentionRecord())
    for t in range(tgt.size(1)):
        step = model.decode(tgt[:, t : t + 1], memory, mask, cache)[:, -1]
        full = model.decode(tgt[:, : t + 1], memory, mask)[:, -1]
        torch.testing.assert_close(step, full, atol=1e-5, rtol=0)
    probs = cache.record.layers[0][0]  # (B, H, 1, S)
    assert torch.all(probs[0, :, :, 4:] == 0)
    hyps = beam_search(model, src, mask, beam_size=3, with_attention=True, max_len_b=4)
    assert hyps[0][0].attention.cross.shape[-1] == 4  # traced over the real source tokens


def test_dropout_zeroes_with_probability_p_independently_and_scales_the_rest():
    """mtcli's Dropout (four mask decisions per random 64-bit draw) behaves as the definition:
    over 10^6 elements the zeroed share is p within 5 standard deviations, neighbours (which
    share a draw) are zeroed together with probability p² (independent), the kept elements are
    scaled by exactly 1/(1-p), the gradient is the same mask times the scale, the same seed
    draws the same mask, and eval mode (or p = 0) is the identity."""
    from mtcli.model.transformer import Dropout

    n, p = 1_000_000, 0.1
    drop = Dropout(p).train()
    torch.manual_seed(3)
    x = torch.ones(n, requires_grad=True)
    y = drop(x)
    zero = y == 0
    sd = math.sqrt(p * (1 - p) / n)
    assert abs(zero.float().mean().item() - p) < 5 * sd
    both = (zero[:-1] & zero[1:]).float().mean().item()
    assert abs(both - p * p) < 5 * math.sqrt(p * p * (1 - p * p) / n)
    assert torch.all(y[~zero] == torch.tensor(1 / (1 - p), dtype=torch.float32))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(sum)/dx = mask * scale = y for x = 1
    torch.manual_seed(3)
    assert torch.equal(drop(torch.ones(n)), y.detach())
    x = torch.randn(3, 5)
    assert drop.eval()(x) is x and Dropout(0.0).train()(x) is x


def test_linear_inference_path_matches_float64_and_follows_weight_changes():
    """In inference the Linear runs through oneDNN on a packed copy of its weight: the result
    equals x Wᵀ + b in float64 for any batch shape, and a changed weight is re-packed."""
    torch.manual_seed(0)
    layer = Linear(96, 128)  # oneDNN from 86 rows on (MIN_ONEDNN_MACS), torch's own below
    for shape in [(1, 96), (5, 96), (3, 7, 96), (99, 96), (257, 96), (3, 40, 96)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            got = layer(x)
        expected = (x.double() @ layer.weight.double().T + layer.bias.double()).float()
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    x = torch.randn(90, 96)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2.0)  # as an optimizer step or load_state_dict would, in place
        after = layer(x)
    torch.testing.assert_close(after - layer.bias, 2 * (before - layer.bias), atol=1e-5, rtol=1e-5)
    # the path under test is the one taken
    assert layer._uses_onednn(x, x.numel() // 96) == onednn_available()


@pytest.mark.skipif(not onednn_available(), reason="oneDNN's packed weights: x86 only")
def test_packed_only_linear_matches_float64_at_any_row_count_and_frees_the_plain_weight():
    """A Linear kept only in oneDNN's layout pads its rows to ROW_MULTIPLE: for row counts
    below, at and past a multiple (1 to 33, and batched shapes) it still equals x Wᵀ + b in
    float64 on the original weight, whose data is gone (a meta tensor of the same shape)."""
    torch.manual_seed(3)
    layer = Linear(96, 128)
    weight, bias = layer.weight.detach().clone().double(), layer.bias.detach().double()
    assert layer.keep_only_packed()
    assert layer.weight.is_meta and layer.weight.shape == (128, 96)
    shapes = [(rows, 96) for rows in (1, 5, 15, 16, 17, 31, 32, 33)] + [(3, 7, 96), (2, 40, 96)]
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            got = layer(x)
        expected = (x.double() @ weight.T + bias).float()
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    copy = copy_module(layer)  # a copied layer decodes alike (it shares the packed weight)
    x = torch.randn(9, 96)
    with torch.no_grad():
        torch.testing.assert_close(copy(x), layer(x))


@pytest.mark.skipif(not onednn_available(), reason="oneDNN's packed weights: x86 only")
def test_keep_only_packed_weights_keeps_tied_weights_and_the_model_decodes_alike(tiny_model):
    """Every Linear weight that nothing else holds is freed; the output projection, tied to the
    target embedding, stays; the model's log-probabilities equal those of its untouched copy."""
    model = tiny_model.eval()
    reference = copy_module(model)
    torch.manual_seed(4)
    src = torch.randint(4, model.cfg.src_vocab_size, (3, 9))
    tgt = torch.randint(4, model.cfg.tgt_vocab_size, (3, 6))
    freed = keep_only_packed_weights(model)
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert freed == len(linears) - 1  # all but the tied output projection
    assert not model.out_proj.weight.is_meta and model.out_proj.weight is model.tgt_embed.weight
    assert all(m.weight.is_meta for m in linears if m is not model.out_proj)
    with torch.no_grad():
        got, expected = model(src, tgt), reference(src, tgt)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bf16", [False, True])
def test_validation_between_fused_adam_steps_sees_the_new_weights(bf16):
    """Fused Adam updates weights in place without bumping their version, so a packed copy
    made for one validation must not survive the next training step, fp32 or bf16 autocast."""
    torch.manual_seed(2)
    layer = Linear(96, 128)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.randn(90, 96)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = layer(x).float().square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias, atol=1e-5, rtol=1e-5)  # fmt: skip


def test_linear_training_path_gradients_match_float64():
    """With autograd the forward and both backward matmuls run through oneDNN: output and the
    gradients of x, W and b equal float64 autograd through x Wᵀ + b."""
    torch.manual_seed(1)
    layer = Linear(96, 128)
    x = torch.randn(3, 30, 96, requires_grad=True)
    upstream = torch.randn(3, 30, 128)
    (layer(x) * upstream).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, layer.weight, layer.bias))
    ((x64 @ w64.T + b64) * upstream.double()).sum().backward()
    for got, expected in (
        (x.grad, x64.grad),
        (layer.weight.grad, w64.grad),
        (layer.bias.grad, b64.grad),
    ):
        torch.testing.assert_close(got, expected.float(), atol=1e-4, rtol=1e-5)
    assert layer._uses_onednn(x, x.numel() // 96) == onednn_available()


def test_a_model_built_to_be_loaded_draws_no_random_fills_and_leaves_torch_init_alone():
    """initialise=False draws nothing from the generator (its fills are skipped), ties the
    output projection as the initialised model does, and, loaded, computes the same; torch's
    init functions work again afterwards."""
    cfg = tiny_config()
    torch.manual_seed(0)
    made = Seq2Seq(cfg).eval()
    before = torch.random.get_rng_state()
    loaded = Seq2Seq(cfg, initialise=False)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert loaded.out_proj.weight is loaded.tgt_embed.weight
    loaded.load_state_dict(made.state_dict())
    src, tgt = torch.tensor([[5, 6, 7, EOS_ID]]), torch.tensor([[BOS_ID, 8, 9]])
    with torch.no_grad():
        assert torch.equal(loaded.eval()(src, tgt), made(src, tgt))
    filled = torch.zeros(4)
    torch.nn.init.normal_(filled)
    assert filled.abs().sum() > 0
