"""`mtcli explain` in the terminal: the Explanation's steps as rich tables, each with a sentence
of what it does and why. Shows the first `dims` dimensions of each vector (all with --full)."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

PRECISION = 3  # decimals shown; --format json gives every number at full precision


def render(e, dims: int) -> Group:
    """The five steps of `e` (an Explanation) as one rich renderable."""
    return Group(
        *pieces_step(e),
        *embedding_step(e, dims),
        *encoder_step(e, dims),
        *decoder_step(e),
        *learned_step(e),
    )


def _heading(title: str, why: str) -> list:
    return [Rule(title, align="left"), Text(why)]


def _vector(values: np.ndarray, dims: int) -> str:
    shown = " ".join(f"{v:+.{PRECISION}f}" for v in values[:dims])
    return shown + (" …" if len(values) > dims else "")


def _vectors(title: str, labels: list[str], columns: dict[str, np.ndarray], dims: int) -> Table:
    """One row per piece, one column per named (S, n) array, its first `dims` values."""
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("piece")
    for name in columns:
        table.add_column(name)
    for i, label in enumerate(labels):
        table.add_row(label, *(_vector(values[i], dims) for values in columns.values()))
    return table


def _matrix(
    title: str, rows: list[str], cols: list[str], values: np.ndarray, sums=False, decimals=PRECISION
) -> Table:
    """A (rows, cols) matrix with labels, and each row's sum where `sums`."""
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("")
    for label in cols:
        table.add_column(label, justify="right")
    if sums:
        table.add_column("row sum", justify="right")
    for label, row in zip(rows, values, strict=True):
        cells = [f"{v:.{decimals}f}" for v in row]
        table.add_row(label, *cells, *([f"{row.sum():.{decimals}f}"] if sums else []))
    return table


def pieces_step(e) -> list:
    table = Table(show_edge=False)
    for name in ("position", "piece", "id"):
        table.add_column(name)
    for i, (piece, id_) in enumerate(zip(e.pieces, e.ids, strict=True)):
        table.add_row(str(i), piece, str(id_))
    why = (
        f"sentencepiece cuts the sentence into pieces of its {e.shape['vocabulary']:,}-piece "
        "vocabulary (▁ marks a word's start); the model never sees letters, only these ids. "
        "</s> ends the sentence."
    )
    return [*_heading("1. Pieces and ids", why), table]


def embedding_step(e, dims: int) -> list:
    m = e.embedding
    d = e.shape["d_model"]
    why = (
        f"Each id picks a row of the embedding table (E, {d} numbers a piece). The row is scaled "
        f"by √{d} = {m['scale']:.3f}, and the position's vector is added: "
        f"PE(pos, 2i) = sin(pos / 10000^(2i/{d})), PE(pos, 2i+1) = cos(pos / 10000^(2i/{d})), "
        "so that the same piece at another place is another vector. x = E[id]·√d + PE(pos)."
    )
    columns = {"E[id]": m["rows"], "·√d": m["scaled"], "PE(pos)": m["positions"], "x": m["sum"]}
    return [*_heading("2. Embedding and position", why), _vectors("", e.pieces, columns, dims)]


def encoder_step(e, dims: int) -> list:
    w, k = e.encoder, e.shape["head_dim"]
    layer, head = w["layer"], w["head"]
    why = (
        f"Encoder layer {layer}, head {head} of {e.shape['heads']}: each piece's x becomes a query "
        f"Q = x·W_Q, a key K = x·W_K and a value V = x·W_V ({k} numbers each for this head). "
        "Q·Kᵀ scores every pair of pieces; dividing by √d_k keeps the scores from growing with "
        "the width; the mask hides padding (one sentence has none); softmax turns each row into "
        "weights that sum to 1; the output is the weighted sum of the values."
    )
    out = [*_heading(f"3. One encoder self-attention head (layer {layer}, head {head})", why)]
    out.append(_vectors("the layer's input x", e.pieces, {"x": w["x"]}, dims))
    out.append(_vectors("", e.pieces, {"Q = x·W_Q": w["q"], "K": w["k"], "V": w["v"]}, dims))
    out.append(_matrix("Q·Kᵀ (rows: queries, columns: keys)", e.pieces, e.pieces, w["products"]))
    out.append(_matrix(f"÷ √d_k = {w['sqrt_dk']:.3f}", e.pieces, e.pieces, w["scaled"]))
    out.append(Text("mask: " + " ".join("1" if m else "0" for m in w["mask"])))
    out.append(_matrix("softmax, row by row", e.pieces, e.pieces, w["probs"], sums=True))
    out.append(_vectors("weights · V", e.pieces, {"head output": w["weighted"]}, dims))
    return out + sublayers_step(e, dims)


def sublayers_step(e, dims: int) -> list:
    w, s = e.encoder, e.shape
    n1, n2 = w["norm1"], w["norm2"]
    why = (
        f"The {s['heads']} heads' outputs side by side make {s['d_model']} numbers again, and "
        "one more projection (W_O) mixes them. The residual adds the layer's input back, so a "
        "layer only has to learn a change; LayerNorm then centres each piece's vector (subtract "
        "its mean, divide by √(variance + ε)) and applies a learned gain and bias. The "
        f"feed-forward layer widens each piece to {s['d_ff']} numbers, applies "
        f"{s['activation_formula']}, and narrows it back; residual and LayerNorm again."
    )
    if s["pre_norm"]:
        why += " (This model is pre-norm: LayerNorm comes before each sublayer, not after.)"
    zeros = float((w["ffn_activated"] == 0).mean())
    gate = f"{zeros:.0%} of the {s['d_ff']} widened numbers are 0 after {s['activation']}."
    return [
        Text(why),
        _vectors("", e.pieces, {"heads concatenated": w["heads_concatenated"]}, dims),
        _vectors("", e.pieces, {"·W_O": w["projected"], "x + ·W_O": n1["input"]}, dims),
        _stats_table("LayerNorm", e.pieces, n1, dims),
        _vectors(
            "feed-forward",
            e.pieces,
            {"up": w["ffn_up"], s["activation"]: w["ffn_activated"], "down": w["ffn_down"]},
            dims,
        ),
        Text(gate),
        _stats_table("residual + LayerNorm: the layer's output", e.pieces, n2, dims),
    ]


def _stats_table(title: str, pieces: list[str], norm: dict, dims: int) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False)
    for name in ("piece", "mean", "variance", "output"):
        table.add_column(name)
    for i, piece in enumerate(pieces):
        mean, var = norm["mean"][i], norm["variance"][i]
        table.add_row(piece, f"{mean:+.4f}", f"{var:.4f}", _vector(norm["output"][i], dims))
    return table


def decoder_step(e) -> list:
    d = e.decoder
    why = (
        "The decoder writes one piece at a time and feeds each back in. The causal mask lets "
        "step t see only the pieces fed so far (a cache keeps their keys and values, so a step "
        "costs one piece). Cross-attention reads the encoder's output: 'reads' lists the source "
        "pieces the last layer's heads weigh most. The output layer scores every piece of the "
        "vocabulary; the search keeps the best (with --beam, the best few hypotheses)."
    )
    mask = d["causal_mask"].astype(float)
    fed = ["<s>", *d["output_pieces"][:-1]]
    return [
        *_heading("4. The decoder, token by token", why),
        _matrix("causal mask (1: step t may see that fed piece)", fed, fed, mask, decimals=0),
        _steps_table(e),
        Text(f"→ {e.translation}"),
    ]


def _steps_table(e) -> Table:
    """A row per step and kept hypothesis: what was fed, what it reads, what it may write next."""
    d = e.decoder
    beams = max(len(step["rows"]) for step in d["steps"]) > 1
    table = Table(show_edge=False)
    columns = ["step", "fed", "reads (cross-attention)", "candidates", "chosen"]
    for name in ["step", "hypothesis (score)", *columns[1:4]] if beams else columns:
        table.add_column(name)
    chosen = d["output_pieces"]
    for step in d["steps"]:
        t = step["step"]
        reads = _top_reads(d["cross"][t], e.pieces) if t < len(chosen) else ""
        for b, row in enumerate(step["rows"]):
            nexts = "  ".join(f"{piece} {p:.2f}" for _, piece, p in row["next"])
            first = str(t) if b == 0 else ""
            if beams:
                kept = f"{row['hypothesis']} ({row['score']:.2f})"
                table.add_row(first, kept, row["fed"], reads if b == 0 else "", nexts)
            else:
                pick = chosen[t] if t < len(chosen) else ""
                table.add_row(first, row["fed"], reads, nexts, pick)
    return table


def _top_reads(row: np.ndarray, pieces: list[str], n: int = 3) -> str:
    best = np.argsort(-row)[:n]
    return "  ".join(f"{pieces[j]} {row[j]:.2f}" for j in best)


def learned_step(e) -> list:
    why = (
        "Pieces the model uses alike end up with embeddings that point the same way (cosine "
        "similarity). Heads specialise: some look at the previous piece, some at the piece "
        "itself, cross-attention heads at the source piece being translated."
    )
    near = Table(title="nearest pieces in embedding space", title_justify="left", show_edge=False)
    near.add_column("piece")
    near.add_column("nearest (cosine)")
    for n in e.learned["neighbours"]:
        near.add_row(n["piece"], "  ".join(f"{p} {c:.2f}" for p, c in n["nearest"]))
    heads = Table(title="what each head attends to here", title_justify="left", show_edge=False)
    for name in ("attention", "layer", "head", "mostly", "shares"):
        heads.add_column(name)
    for h in e.learned["heads"]:
        shares = "  ".join(f"{k} {v:.2f}" for k, v in h["shares"].items() if v)
        heads.add_row(h["kind"], str(h["layer"]), str(h["head"]), h["role"], shares)
    return [*_heading("5. What the model learned", why), near, heads]
