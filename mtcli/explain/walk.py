"""One sentence through a model, as the tutorials walk it: pieces and ids, embeddings and
positions, one encoder self-attention head worked through, the decoder token by token, and what
the model learned. Every tensor is copied from the model's own forward pass as it runs (forward
hooks on its modules, and the attention record the model already writes); where a step is
plain arithmetic on those (a LayerNorm's mean and variance, the embedding scaled by √D) it is
done here on the copied numbers and said so.

Shapes: S source pieces (its </s> last), T output pieces (</s> last), D d_model, H heads,
K = D / H per head, F feed-forward width, V vocabulary, L layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from mtcli.config import EOS_ID, SPECIAL_IDS, DecodeConfig
from mtcli.data.batches import pad
from mtcli.engines.translator import Translator
from mtcli.errors import UserError
from mtcli.model.kv_cache import AttentionRecord

NEIGHBOURS = 5  # nearest pieces in embedding space shown for each source piece
TOP = 5  # candidates shown at each decoding step
ROLE_SHARE = 0.5  # a head whose attention goes this much to one relative place is named for it
ACTIVATIONS = {  # what the feed-forward layer's activation does, in words
    "relu": "ReLU, max(0, x): negative values become 0",
    "gelu": "GELU, x·Φ(x): a smooth gate that lets small negative values through",
    "swish": "swish, x·sigmoid(x): a smooth gate that lets small negative values through",
}


@dataclass
class Explanation:
    """Everything `mtcli explain` shows, as numpy arrays and plain values (`as_json` for JSON)."""

    model: str
    shape: dict  # d_model, heads, head_dim, layers, d_ff, activation, pre_norm, vocabulary
    source: str
    pieces: list[str]  # (S,) with </s> last
    ids: list[int]  # (S,)
    embedding: dict  # table rows, √D, positions, their sum
    encoder: dict  # one layer and head worked through
    decoder: dict  # the steps of the search
    translation: str
    learned: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        """Every number shown, as JSON values (arrays as nested lists of floats)."""
        return _jsonable(self.__dict__)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.floating | np.integer):
        return value.item()
    return value


def explain(loaded, sentence: str, *, layer: int = 0, head: int = 0, beam: int = 1) -> Explanation:
    """`loaded` (a LoadedModel in fp32, its plain weights) on `sentence`."""
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    cfg = model.cfg
    ids = source_ids(tokenizer, sentence, cfg.max_positions)
    layer, head = (
        _checked_position(layer, cfg.n_enc_layers, "--layer"),
        _checked_position(head, cfg.n_heads, "--head"),
    )
    walk = encoder_walk(model, ids, layer, head)
    result = Translator(
        model, tokenizer, DecodeConfig(beam_size=beam), align=True, trace=True
    ).translate_chunk([sentence])[0]
    pieces = [tokenizer.src.id_to_piece(i) for i in ids]
    return Explanation(
        model=str(loaded.path),
        shape=_shape(cfg),
        source=sentence,
        pieces=pieces,
        ids=ids,
        embedding=walk.pop("embedding"),
        encoder=walk,
        decoder=decoder_steps(result, tokenizer.decode_tgt),
        translation=result.text,
        learned=learned(model, tokenizer, ids, walk["all_probs"], result),
    )


def source_ids(tokenizer, sentence: str, max_positions: int) -> list[int]:
    """The sentence's piece ids with </s>; one line saying why where there are none or too many."""
    ids = tokenizer.encode_src(sentence)
    if not sentence.strip() or not ids:
        raise UserError("SENTENCE is empty: there is nothing to explain")
    if len(ids) + 1 > max_positions:
        raise UserError(
            f"SENTENCE has {len(ids) + 1} pieces with </s>; this model has positions for "
            f"{max_positions} (explain a shorter sentence)"
        )
    return [*ids, EOS_ID]


def _checked_position(index: int, count: int, option: str) -> int:
    """index in [-count, count) as a non-negative index, else one line naming the option."""
    if not -count <= index < count:
        raise UserError(f"{option} {index}: this model has {count} (0 to {count - 1}, or -1)")
    return index % count


def _shape(cfg) -> dict:
    return {
        "d_model": cfg.d_model,
        "heads": cfg.n_heads,
        "head_dim": cfg.d_model // cfg.n_heads,
        "encoder_layers": cfg.n_enc_layers,
        "decoder_layers": cfg.n_dec_layers,
        "d_ff": cfg.d_ff,
        "activation": cfg.activation,
        "activation_formula": ACTIVATIONS.get(cfg.activation, cfg.activation),
        "pre_norm": cfg.pre_norm,
        "vocabulary": cfg.src_vocab_size,
    }


# ---------------------------------------------------------------- the encoder
class Taps:
    """Forward hooks that copy what modules took in or gave out, by name, until closed."""

    def __init__(self) -> None:
        self.seen: dict[str, np.ndarray] = {}
        self._handles: list = []

    def output(self, name: str, module: nn.Module) -> None:
        # copied at once: ReLU works in place on the up-projection's output right after
        self._handles.append(
            module.register_forward_hook(lambda m, args, out: self._keep(name, out))
        )

    def input(self, name: str, module: nn.Module) -> None:
        self._handles.append(
            module.register_forward_hook(lambda m, args, out: self._keep(name, args[0]))
        )

    def _keep(self, name: str, tensor: torch.Tensor) -> None:
        rows = tensor.detach().float().cpu().numpy().copy()
        self.seen[name] = rows.reshape(-1, rows.shape[-1])  # (S, features): one sentence

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def tap_encoder(model, taps: Taps, layer: int) -> None:
    """Hooks on the embedding and on every part of encoder layer `layer`."""
    block = model.encoder_layers[layer]
    taps.output("table_rows", model.src_embed)
    taps.input("embedded", model.embed_dropout)  # scaled rows + positions (dropout: off)
    taps.input("x", block)
    taps.output("qkv", block.self_attn.qkv_proj)
    taps.input("heads_concatenated", block.self_attn.out_proj)
    taps.output("projected", block.self_attn.out_proj)
    taps.input("norm1_in", block.norms[0])
    taps.output("norm1_out", block.norms[0])
    taps.output("ffn_up", block.ffn.up)
    taps.output("ffn_activated", block.ffn.act)
    taps.output("ffn_down", block.ffn.down)
    taps.input("norm2_in", block.norms[1])
    taps.output("norm2_out", block.norms[1])
    taps.output("layer_out", block)


@torch.inference_mode()
def encoder_walk(model, ids: list[int], layer: int, head: int) -> dict:
    """Encode `ids` once with hooks on layer `layer`; its head `head` worked through."""
    taps, record = Taps(), AttentionRecord(scores={})
    tap_encoder(model, taps, layer)
    try:
        src = pad([ids])  # (1, S)
        model.encode(src, src != 0, record=record)
    finally:
        taps.close()
    seen = taps.seen
    return {
        "embedding": embedding_step(model, seen, len(ids)),
        "layer": layer,
        "head": head,
        **attention_step(seen, record, model.cfg, layer, head),
        **sublayer_steps(model, seen, layer),
        "all_probs": np.stack(
            [record.layers[i][0][0].float().numpy() for i in range(model.cfg.n_enc_layers)]
        ),  # (L, H, S, S)
    }


def embedding_step(model, seen: dict, length: int) -> dict:
    """The table's rows, the scale √D, the model's own sinusoidal positions, and their sum."""
    scale = math.sqrt(model.cfg.d_model)
    return {
        "rows": seen["table_rows"],  # (S, D) as looked up
        "scale": scale,
        "scaled": seen["table_rows"] * scale,  # (S, D): the arithmetic the model does next
        "positions": model.positions[:length].numpy().copy(),  # (S, D): the model's buffer
        "sum": seen["embedded"],  # (S, D) as the model computed it
    }


def attention_step(seen: dict, record: AttentionRecord, cfg, layer: int, head: int) -> dict:
    """Q, K, V of one head (its slice of the fused projection), its scores before and after
    the scaling, the mask, the softmax and the weighted sum of V (that head's columns of the
    concatenation the output projection reads)."""
    d, k = cfg.d_model, cfg.d_model // cfg.n_heads
    columns = slice(head * k, (head + 1) * k)
    q, key, v = (seen["qkv"][:, i * d : (i + 1) * d][:, columns] for i in range(3))
    products, scaled = record.scores[layer][0]  # each (1, H, S, S)
    probs = record.layers[layer][0][0]  # (H, S, S)
    return {
        "q": q,
        "k": key,
        "v": v,
        "products": products[0, head].numpy(),  # (S, S) Q·Kᵀ
        "sqrt_dk": math.sqrt(k),
        "scaled": scaled[0, head].numpy(),  # (S, S) Q·Kᵀ / √K
        "mask": np.ones(len(q), dtype=bool),  # one sentence has no padding to hide
        "probs": probs[head].numpy(),  # (S, S), each row sums to 1
        "weighted": seen["heads_concatenated"][:, columns],  # (S, K) probs · V
        "all_heads": probs.numpy(),  # (H, S, S)
    }


def sublayer_steps(model, seen: dict, layer: int) -> dict:
    """The heads concatenated and projected, residual and LayerNorm, the feed-forward layer."""
    block = model.encoder_layers[layer]
    return {
        "x": seen["x"],
        "heads_concatenated": seen["heads_concatenated"],
        "projected": seen["projected"],
        "norm1": layer_norm_step(block.norms[0], seen["norm1_in"], seen["norm1_out"]),
        "ffn_up": seen["ffn_up"],
        "ffn_activated": seen["ffn_activated"],
        "ffn_down": seen["ffn_down"],
        "norm2": layer_norm_step(block.norms[1], seen["norm2_in"], seen["norm2_out"]),
        "out": seen["layer_out"],
    }


def layer_norm_step(norm: nn.LayerNorm, x: np.ndarray, out: np.ndarray) -> dict:
    """A LayerNorm's input (S, D), each row's mean and variance (the statistics it normalises
    by, computed here from the copied input), its gain and bias, and its output as computed."""
    return {
        "input": x,
        "mean": x.mean(axis=-1),
        "variance": x.var(axis=-1),
        "eps": norm.eps,
        "gain": norm.weight.detach().numpy().copy(),
        "bias": norm.bias.detach().numpy().copy(),
        "output": out,
    }


# ---------------------------------------------------------------- the decoder
def decoder_steps(result, detokenize: Callable[[list[int]], str]) -> dict:
    """The search step by step, from its own trace and attention record: at each step the
    rows kept (with beam 1, the one row): the piece fed back, the score so far and the top
    candidates; for the chosen output, what each step read of the source (the last layer's
    cross-attention, mean of heads) and of its own earlier pieces (the causal self-attention)."""
    maps = result.attention
    cross = maps.trace.cross[-1].mean(dim=0).numpy()  # (T, S)
    own = maps.trace.decoder[-1].mean(dim=0).numpy()  # (T, T), zero above the diagonal
    return {
        "output_pieces": maps.target,  # (T,) with </s> last
        "cross": cross,
        "self": own,
        "causal_mask": np.tril(np.ones((len(maps.target), len(maps.target)), dtype=bool)),
        "steps": [
            {
                "step": s["step"],
                "rows": [{**row, "hypothesis": detokenize(row["prefix"])} for row in s["beams"]],
                "finished": s["finished"],
            }
            for s in result.trace
        ],
    }


# ---------------------------------------------------------------- what the model learned
def learned(model, tokenizer, ids: list[int], encoder_probs, result) -> dict:
    """Nearest pieces in embedding space, and what each head attends to on this sentence."""
    maps = result.attention
    return {
        "neighbours": neighbours(model, ids, tokenizer.src.id_to_piece),
        "heads": [
            *head_roles("encoder", encoder_probs),
            *head_roles("decoder", maps.trace.decoder.numpy()),
            *cross_head_roles(maps.trace.cross.numpy()),
        ],
    }


def neighbours(model, ids: list[int], piece: Callable[[int], str]) -> list[dict]:
    """For each source piece but </s>: the NEIGHBOURS pieces whose embeddings point the most
    the same way (cosine similarity over the model's embedding table; special pieces left out)."""
    table = model.src_embed.weight.detach().float()
    unit = table / table.norm(dim=-1, keepdim=True).clamp(min=1e-12)  # (V, D)
    found = []
    for i in ids[:-1]:
        similarity = unit @ unit[i]  # (V,)
        similarity[[i, *SPECIAL_IDS]] = -2.0
        best = similarity.topk(NEIGHBOURS)
        nearest = [[piece(int(j)), float(c)] for c, j in zip(*best, strict=True)]
        found.append({"piece": piece(i), "nearest": nearest})
    return found


def head_roles(kind: str, probs: np.ndarray) -> list[dict]:
    """probs (L, H, T, T): each head's mean attention to the previous piece, the same piece,
    the next one and the last (</s>); named for the one that takes ROLE_SHARE or more."""
    roles = []
    n = probs.shape[-1]
    for layer, heads in enumerate(probs):
        for h, p in enumerate(heads):
            shares = {
                "previous piece": _diagonal_mean(p, -1),
                "same piece": _diagonal_mean(p, 0),
                "next piece": _diagonal_mean(p, 1) if kind == "encoder" else 0.0,
                "</s>": float(p[:, n - 1].mean()) if kind == "encoder" else 0.0,
            }
            roles.append(_role(kind, layer, h, shares))
    return roles


def cross_head_roles(probs: np.ndarray) -> list[dict]:
    """probs (L, H, T, S): each cross-attention head's share of steps whose most attended source
    piece is the one the last layer's heads together attend to most (what `--align` reads)."""
    aligned = probs[-1].mean(axis=0).argmax(axis=-1)  # (T,)
    roles = []
    for layer, heads in enumerate(probs):
        for h, p in enumerate(heads):
            shares = {"aligned source piece": float((p.argmax(axis=-1) == aligned).mean())}
            roles.append(_role("cross", layer, h, shares))
    return roles


def _diagonal_mean(p: np.ndarray, offset: int) -> float:
    diagonal = np.diagonal(p, offset=offset)
    return float(diagonal.mean()) if diagonal.size else 0.0


def _role(kind: str, layer: int, head: int, shares: dict[str, float]) -> dict:
    top = max(shares, key=shares.get)
    role = top if shares[top] >= ROLE_SHARE else "spread"
    rounded = {name: round(share, 4) for name, share in shares.items()}
    return {"kind": kind, "layer": layer, "head": head, "role": role, "shares": rounded}
