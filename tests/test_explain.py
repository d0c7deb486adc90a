"""`mtcli explain` (issue 66): every number it shows recomputed from model.safetensors with
numpy alone (embedding lookup, positions from the formula, the projections, softmax,
LayerNorm, the feed-forward layer), its decoder steps against `mtcli translate`, the page
self-contained, and bad input as one line with exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import load_file

from mtcli.cli import main
from mtcli.explain.walk import explain
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO

MODEL = REPO / "models" / "en-zh-tiny"
SENTENCE = "Why do we work?"
TOLERANCE = 1e-5  # relative to each array's largest value


@pytest.fixture(scope="module")
def walked():
    return explain(load_model(MODEL), SENTENCE, layer=1, head=2)


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in load_file(str(MODEL / "model.safetensors")).items()}


def _close(got, expected) -> None:
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape
    scale = max(np.abs(expected).max(), 1.0)
    assert np.abs(got - expected).max() <= TOLERANCE * scale, np.abs(got - expected).max()


def _positions(n: int, d: int) -> np.ndarray:
    """The paper's sinusoids, written out: sin on even dimensions, cos on odd ones."""
    table = np.zeros((n, d))
    for pos in range(n):
        for i in range(0, d, 2):
            angle = pos / 10000 ** (i / d)
            table[pos, i], table[pos, i + 1] = np.sin(angle), np.cos(angle)
    return table


def _layer_norm(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * gain + bias


def _softmax(scores):
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _encoder_layer(x, w: dict, prefix: str, heads: int) -> dict:
    """One post-norm encoder layer in numpy: every intermediate, heads as (H, S, K)."""
    s, d = x.shape
    k = d // heads
    qkv = x @ w[f"{prefix}.self_attn.qkv_proj.weight"].T + w[f"{prefix}.self_attn.qkv_proj.bias"]
    q, key, v = (
        qkv[:, i * d : (i + 1) * d].reshape(s, heads, k).transpose(1, 0, 2) for i in range(3)
    )
    products = q @ key.transpose(0, 2, 1)  # (H, S, S)
    probs = _softmax(products / np.sqrt(k))
    concat = (probs @ v).transpose(1, 0, 2).reshape(s, d)
    projected = (
        concat @ w[f"{prefix}.self_attn.out_proj.weight"].T + w[f"{prefix}.self_attn.out_proj.bias"]
    )
    norm1 = _layer_norm(x + projected, w[f"{prefix}.norms.0.weight"], w[f"{prefix}.norms.0.bias"])
    up = norm1 @ w[f"{prefix}.ffn.up.weight"].T + w[f"{prefix}.ffn.up.bias"]
    down = np.maximum(up, 0) @ w[f"{prefix}.ffn.down.weight"].T + w[f"{prefix}.ffn.down.bias"]
    out = _layer_norm(norm1 + down, w[f"{prefix}.norms.1.weight"], w[f"{prefix}.norms.1.bias"])
    return {
        "q": q,
        "k": key,
        "v": v,
        "products": products,
        "probs": probs,
        "concat": concat,
        "projected": projected,
        "norm1": norm1,
        "up": up,
        "down": down,
        "out": out,
    }


def test_every_number_shown_is_numpys_from_the_weights_file(walked, weights):
    """Embedding rows, √D, positions, their sum; layer 0 computed to get layer 1's input; then
    layer 1, head 2's Q, K, V, Q·Kᵀ, ÷√d_k, softmax (rows sum to 1), weighted sum, the heads
    concatenated and projected, residual and LayerNorm (mean, variance, output), the
    feed-forward layer: each to 1e-5 of its scale."""
    e, heads, h = walked, walked.shape["heads"], 2
    rows = weights["src_embed.weight"][e.ids]
    positions = _positions(len(e.ids), e.shape["d_model"])
    _close(e.embedding["rows"], rows)
    _close(e.embedding["positions"], positions)
    x = rows * np.sqrt(e.shape["d_model"]) + positions
    _close(e.embedding["sum"], x)
    x = _encoder_layer(x, weights, "encoder_layers.0", heads)["out"]
    _close(e.encoder["x"], x)
    ours = _encoder_layer(x, weights, "encoder_layers.1", heads)
    w = e.encoder
    for name in ("q", "k", "v", "products", "probs"):
        _close(w[name], ours[name][h])
    _close(w["scaled"], ours["products"][h] / np.sqrt(e.shape["head_dim"]))
    _close(np.asarray(w["probs"]).sum(-1), np.ones(len(e.ids)))
    _close(w["all_heads"], ours["probs"])
    k = e.shape["head_dim"]
    _close(w["weighted"], ours["concat"][:, h * k : (h + 1) * k])
    _close(w["heads_concatenated"], ours["concat"])
    _close(w["projected"], ours["projected"])
    _close(w["norm1"]["input"], x + ours["projected"])
    _close(w["norm1"]["mean"], (x + ours["projected"]).mean(-1))
    _close(w["norm1"]["variance"], (x + ours["projected"]).var(-1))
    _close(w["norm1"]["output"], ours["norm1"])
    _close(w["ffn_up"], ours["up"])
    _close(w["ffn_activated"], np.maximum(ours["up"], 0))
    _close(w["ffn_down"], ours["down"])
    _close(w["norm2"]["output"], ours["out"])
    _close(w["out"], ours["out"])


def test_nearest_pieces_are_numpys_cosine_neighbours(walked, weights):
    table = weights["src_embed.weight"]
    unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    first = walked.learned["neighbours"][0]
    similarity = unit @ unit[walked.ids[0]]
    similarity[[walked.ids[0], 0, 1, 2, 3]] = -2
    best = np.argsort(-similarity)[:5]
    _close([c for _, c in first["nearest"]], similarity[best])


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _json(*args: str) -> dict:
    result = _cli("explain", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("beam", [1, 5])
def test_the_decoder_steps_give_what_translate_gives(beam):
    """The walk's translation is the search's, `mtcli translate --no-rerank`'s at the same beam
    (the walk shows the search, not the reranking after it); greedy, each step's best
    candidate is the piece chosen there, and the pieces fed back are <s> and the output's."""
    for sentence in (SENTENCE, "The weather is nice today.", "I like to read books."):
        walked = _json(sentence, "-m", str(MODEL), "-b", str(beam))
        translated = _cli(
            "translate",
            "-q",
            "-m",
            str(MODEL),
            "-b",
            str(beam),
            "--no-confidence",
            "--no-rerank",
            sentence,
        )
        assert translated.exit_code == 0, translated.output
        assert walked["translation"] == translated.stdout.strip()
        mask = np.asarray(walked["decoder"]["causal_mask"])
        assert (mask == np.tril(np.ones_like(mask))).all()
        if beam == 1:
            steps, output = walked["decoder"]["steps"], walked["decoder"]["output_pieces"]
            assert [s["rows"][0]["next"][0][1] for s in steps] == output
            assert [s["rows"][0]["fed"] for s in steps] == ["<s>", *output[:-1]]
        else:
            assert max(len(s["rows"]) for s in walked["decoder"]["steps"]) == beam


def test_the_page_is_one_self_contained_file(tmp_path):
    """--html writes one page holding every section and the translation, nothing fetched;
    an existing file is not replaced without --force."""
    page = tmp_path / "walk.html"
    result = _cli("explain", SENTENCE, "-m", str(MODEL), "--html", str(page), "--format", "json")
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    translation = json.loads(result.stdout)["translation"]
    assert translation in text and "<script" not in text and "src=" not in text
    for heading in (
        "1. Pieces and ids",
        "2. Embedding and position",
        "3. Encoder layer 0",
        "4. The decoder",
        "5. What the model learned",
    ):
        assert heading in text
    again = _cli("explain", SENTENCE, "-m", str(MODEL), "--html", str(page))
    assert again.exit_code == 2 and "--force" in again.output


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"\0")
    (ct2 / "config.json").write_text("{}")
    cases = {
        "CTranslate2 model": ["explain", SENTENCE, "-m", str(ct2)],
        "empty": ["explain", "  ", "-m", str(MODEL)],
        "positions for 256": ["explain", "word " * 300, "-m", str(MODEL)],
        "--layer 7": ["explain", SENTENCE, "-m", str(MODEL), "--layer", "7"],
        "--head 4": ["explain", SENTENCE, "-m", str(MODEL), "--head", "4"],
    }
    for expected, args in cases.items():
        result = _cli(*args)
        assert result.exit_code == 2, (expected, result.output)
        assert expected in result.output and len(result.output.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_the_terminal_view_shows_each_step():
    result = _cli("explain", SENTENCE, "-m", str(MODEL), "--dims", "3")
    assert result.exit_code == 0, result.output
    for heading in (
        "1. Pieces and ids",
        "2. Embedding and position",
        "3. One encoder",
        "4. The decoder",
        "5. What the model learned",
        "row sum",
    ):
        assert heading in result.stdout
    assert walked_translation() in result.stdout
    beams = _cli("explain", SENTENCE, "-m", str(MODEL), "-b", "3")
    assert beams.exit_code == 0 and "hypothesis (score)" in beams.stdout, beams.output


def walked_translation() -> str:
    return _json(SENTENCE, "-m", str(MODEL))["translation"]


@pytest.fixture(scope="module")
def served():
    """A server over the shipped en-zh-tiny (loaded to decode, as `mtcli serve` loads it)."""
    from fastapi.testclient import TestClient

    from mtcli.engines.loading import ready_to_decode
    from mtcli.serving.app import Models, ServeConfig, create_app, mtcli_served
    from tests.conftest import wait_ready

    def load():
        return [mtcli_served("en-zh-tiny", ready_to_decode(load_model(MODEL)), "cpu")]

    app = create_app(Models(load), ServeConfig(max_chars=200, api_key="s3cret"))
    with TestClient(app) as client:
        assert wait_ready(client)
        yield client


def test_the_server_gives_the_same_walk_through_as_a_page(served):
    """/explain answers the sentence's page, the CLI's numbers in it (the first piece's first
    embedding value as the CLI prints it), by pair or by the sentence's language."""
    walked = explain(load_model(MODEL), SENTENCE)
    for query in ({"source": "en", "target": "zh"}, {}, {"model": "en-zh-tiny"}):
        r = served.get("/explain", params={"q": SENTENCE, "api_key": "s3cret", **query})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/html")
        assert walked.translation in r.text and "5. What the model learned" in r.text
        assert f"{walked.embedding['rows'][0][0]:+.3f}" in r.text


def test_the_server_refuses_what_it_cannot_explain(served):
    cases = [
        ({"q": SENTENCE}, 403),  # no key
        ({"q": " ", "api_key": "s3cret"}, 400),
        ({"q": "x" * 201, "api_key": "s3cret"}, 413),
        ({"q": SENTENCE, "model": "nope", "api_key": "s3cret"}, 400),
        ({"q": SENTENCE, "source": "fr", "api_key": "s3cret"}, 400),
    ]
    for params, status in cases:
        r = served.get("/explain", params=params)
        assert r.status_code == status, (params, r.text)
        assert r.json()["error"]
