"""`mtcli explain --html`: the walk-through as one self-contained HTML page (no script, no
fetched file): the numbers in tables, attention as heatmaps (each cell shaded by its weight).
`serve`'s /explain returns the same page."""

from __future__ import annotations

import functools
import html
from pathlib import Path

import numpy as np

from mtcli.files import write_file_atomic

DIMS = 8  # dimensions of each vector in the tables (the JSON has all)

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; color: #222 }
h1 { font-size: 1.5rem } h2 { font-size: 1.2rem; margin-top: 2.2rem; border-bottom: 1px solid #ccc }
p.why { max-width: 52rem }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: 13px }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; font-variant-numeric: tabular-nums }
th { background: #f4f4f4 } td.label, th.label { text-align: left; font-weight: 600 }
caption { text-align: left; font-weight: 600; padding: 2px 0 }
"""


def page_for(model_dir: Path, sentence: str) -> str:
    """The page of `sentence` through the model at `model_dir` (kept loaded for the next)."""
    from mtcli.explain.walk import explain

    return page(explain(_explainable(str(model_dir)), sentence))


@functools.lru_cache(maxsize=2)
def _explainable(model_dir: str):
    from mtcli.explain.loading import explainable_model

    return explainable_model(Path(model_dir))


def write_page(e, path: str | Path) -> None:
    """Write `e` (an Explanation) as a page at `path` (atomically: a kill leaves none half done)."""
    write_file_atomic(path, page(e).encode("utf-8"))


def page(e) -> str:
    """The whole page for `e`."""
    title = f"How {Path(e.model).name} translates: {e.source}"
    body = "\n".join(
        [
            f"<h1>{_t(title)}</h1>",
            f"<p>Translation: <strong>{_t(e.translation)}</strong></p>",
            *pieces_section(e),
            *embedding_section(e),
            *encoder_section(e),
            *decoder_section(e),
            *learned_section(e),
        ]
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_t(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _t(text) -> str:
    return html.escape(str(text))


def _number(v: float) -> str:
    return f"{v:+.3f}"


def _table(caption: str, head: list[str], rows: list[list[str]], labels: int = 1) -> str:
    """rows of already escaped cells; the first `labels` cells of a row are labels."""
    out = [f"<table><caption>{_t(caption)}</caption><tr>"]
    out += [f"<th{' class=label' if i < labels else ''}>{_t(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr>")
    for row in rows:
        cells = [f"<td{' class=label' if i < labels else ''}>{c}</td>" for i, c in enumerate(row)]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def _vectors(caption: str, pieces: list[str], values: np.ndarray) -> str:
    """(S, n) as a table: a row per piece, its first DIMS values."""
    n = min(DIMS, values.shape[1])
    head = ["piece", *(f"[{j}]" for j in range(n))] + (["…"] if values.shape[1] > n else [])
    rows = [
        [_t(p), *(_number(v) for v in values[i, :n])] + ([""] if values.shape[1] > n else [])
        for i, p in enumerate(pieces)
    ]
    return _table(caption, head, rows)


def heatmap(caption: str, rows: list[str], cols: list[str], weights: np.ndarray) -> str:
    """(rows, cols) weights in [0, 1], each cell shaded by its weight and its value written."""
    body = []
    for label, row in zip(rows, weights, strict=True):
        cells = "".join(
            f'<td style="background:rgba(31,119,180,{w:.3f});color:{"#fff" if w > 0.55 else "#222"}">'
            f"{w:.2f}</td>"
            for w in row
        )
        body.append(f"<tr><td class=label>{_t(label)}</td>{cells}</tr>")
    head = "".join(f"<th>{_t(c)}</th>" for c in cols)
    return f"<table><caption>{_t(caption)}</caption><tr><th></th>{head}</tr>{''.join(body)}</table>"


def _matrix(caption: str, pieces: list[str], values: np.ndarray) -> str:
    rows = [[_t(p), *(f"{v:.3f}" for v in values[i])] for i, p in enumerate(pieces)]
    return _table(caption, ["", *pieces], rows)


def pieces_section(e) -> list[str]:
    rows = [[str(i), _t(p), str(i_)] for i, (p, i_) in enumerate(zip(e.pieces, e.ids, strict=True))]
    return [
        "<h2>1. Pieces and ids</h2>",
        f"<p class=why>sentencepiece cuts the sentence into pieces of its {e.shape['vocabulary']:,}-piece "
        "vocabulary (▁ marks a word's start); the model sees only the ids. &lt;/s&gt; ends the sentence.</p>",
        _table("", ["position", "piece", "id"], rows, labels=2),
    ]


def embedding_section(e) -> list[str]:
    m, d = e.embedding, e.shape["d_model"]
    return [
        "<h2>2. Embedding and position</h2>",
        f"<p class=why>Each id picks a row of the embedding table E ({d} numbers). It is scaled "
        f"by √{d} = {m['scale']:.3f} and the position's vector is added: PE(pos, 2i) = "
        f"sin(pos / 10000<sup>2i/{d}</sup>), PE(pos, 2i+1) = cos(pos / 10000<sup>2i/{d}</sup>). "
        "x = E[id]·√d + PE(pos).</p>",
        _vectors("E[id]", e.pieces, m["rows"]),
        _vectors("E[id]·√d", e.pieces, m["scaled"]),
        _vectors("PE(pos)", e.pieces, m["positions"]),
        _vectors("x = E[id]·√d + PE(pos)", e.pieces, m["sum"]),
    ]


def encoder_section(e) -> list[str]:
    w, p = e.encoder, e.pieces
    return [
        f"<h2>3. Encoder layer {w['layer']}, head {w['head']}, worked through</h2>",
        "<p class=why>Each piece's x becomes a query Q = x·W<sub>Q</sub>, a key K = x·W<sub>K</sub> "
        f"and a value V = x·W<sub>V</sub> ({e.shape['head_dim']} numbers each for this head). Q·Kᵀ "
        "scores every pair; ÷ √d<sub>k</sub> keeps the scores from growing with the width; the "
        "mask hides padding (one sentence has none); softmax makes each row weights that sum to "
        "1; the head's output is the weighted sum of V.</p>",
        _vectors("the layer's input x", p, w["x"]),
        _vectors("Q = x·W_Q", p, w["q"]),
        _vectors("K = x·W_K", p, w["k"]),
        _vectors("V = x·W_V", p, w["v"]),
        _matrix("Q·Kᵀ (rows: queries, columns: keys)", p, w["products"]),
        _matrix(f"÷ √d_k = {w['sqrt_dk']:.3f}", p, w["scaled"]),
        heatmap("softmax, row by row (each row sums to 1)", p, p, w["probs"]),
        _vectors("weights · V: the head's output", p, w["weighted"]),
        *(heatmap(f"head {h}", p, p, probs) for h, probs in enumerate(w["all_heads"])),
        "<p class=why>The heads side by side, projected by W<sub>O</sub>; the residual adds the "
        "input back; LayerNorm subtracts each row's mean and divides by √(variance + ε), then "
        "a learned gain and bias; the feed-forward layer widens, applies "
        f"{_t(e.shape['activation_formula'])}, narrows; residual and LayerNorm again.</p>",
        _vectors("heads concatenated", p, w["heads_concatenated"]),
        _vectors("·W_O", p, w["projected"]),
        _vectors("x + ·W_O", p, w["norm1"]["input"]),
        _norm_stats("LayerNorm: each row's mean and variance", p, w["norm1"]),
        _vectors("LayerNorm's output", p, w["norm1"]["output"]),
        _vectors("feed-forward up", p, w["ffn_up"]),
        _vectors(f"after {e.shape['activation']}", p, w["ffn_activated"]),
        _vectors("feed-forward down", p, w["ffn_down"]),
        _vectors("residual + LayerNorm: the layer's output", p, w["norm2"]["output"]),
    ]


def _norm_stats(caption: str, pieces: list[str], norm: dict) -> str:
    rows = [
        [_t(p), f"{norm['mean'][i]:+.4f}", f"{norm['variance'][i]:.4f}"]
        for i, p in enumerate(pieces)
    ]
    return _table(caption, ["piece", "mean", "variance"], rows)


def decoder_section(e) -> list[str]:
    d = e.decoder
    rows = []
    for step in d["steps"]:
        for b, row in enumerate(step["rows"]):
            nexts = "  ".join(f"{_t(piece)} {p:.2f}" for _, piece, p in row["next"])
            kept = [_t(row["hypothesis"]), _t(row["fed"]), f"{row['score']:.3f}", nexts]
            rows.append([str(step["step"]), str(b), *kept])
    return [
        "<h2>4. The decoder, token by token</h2>",
        "<p class=why>One piece at a time, each fed back in; the causal mask lets a step see only "
        "earlier pieces. The tables: what each step of the chosen output read of the source "
        "(cross-attention, last layer, mean of heads) and of its own earlier pieces; then each "
        "step's rows (beams), the piece fed back, the score so far and the top candidates.</p>",
        heatmap(
            "cross-attention: output pieces (rows) read source pieces",
            d["output_pieces"],
            e.pieces,
            d["cross"],
        ),
        heatmap(
            "self-attention under the causal mask (0 above the diagonal)",
            d["output_pieces"],
            d["output_pieces"],
            d["self"],
        ),
        _table(
            "the search",
            ["step", "beam", "hypothesis", "fed", "score", "candidates"],
            rows,
            labels=4,
        ),
    ]


def learned_section(e) -> list[str]:
    near = [
        [_t(n["piece"]), "  ".join(f"{_t(p)} {c:.2f}" for p, c in n["nearest"])]
        for n in e.learned["neighbours"]
    ]
    heads = [
        [
            _t(h["kind"]),
            str(h["layer"]),
            str(h["head"]),
            _t(h["role"]),
            "  ".join(f"{_t(k)} {v:.2f}" for k, v in h["shares"].items() if v),
        ]
        for h in e.learned["heads"]
    ]
    return [
        "<h2>5. What the model learned</h2>",
        "<p class=why>Pieces used alike have embeddings that point the same way (cosine "
        "similarity); heads specialise: the previous piece, the piece itself, the source piece "
        "being translated.</p>",
        _table("nearest pieces in embedding space", ["piece", "nearest (cosine)"], near),
        _table(
            "what each head attends to here",
            ["attention", "layer", "head", "mostly", "shares"],
            heads,
            labels=4,
        ),
    ]
