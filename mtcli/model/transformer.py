"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Owns attention, the layers and `Seq2Seq`; the state a decoding pass carries between steps
(`KVCache`, `AttentionRecord`) lives in kv_cache.py. Knows nothing about text, files,
tokenizers or the CLI.

Shape legend: B batch, S source len, T target len, D d_model, H heads, K head dim (D / H),
F feed-forward dim, V vocabulary, L layers.
Masks are bool and True means "may attend"; they broadcast to (B, H, T_query, T_key).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtcli.config import PAD_ID, ModelConfig
from mtcli.model.kv_cache import AttentionRecord, BeamRows, KVCache, SourceWatch
from mtcli.model.linear import Linear
from mtcli.model.packing import Packing


class Dropout(nn.Module):
    """Inverted dropout, as nn.Dropout: in training each element is zeroed with probability p
    and the rest are scaled by 1 / (1 - p); in eval it is the identity.

    The mask comes from four 16-bit slices of each random 64-bit integer. torch's CPU
    generator draws one number at a time, and nn.Dropout's one draw per element (bernoulli_)
    was 14% of a bf16 training step here; a quarter of the draws gives the same masks'
    distribution (p exact to 1/65536) from the same seeded generator.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        # an element is zeroed when its uniform 16-bit slice lies below this
        self.threshold = round(p * 65536) - 32768

    def forward(self, x: Tensor) -> Tensor:
        """Any shape -> the same shape."""
        if not self.training or self.p == 0.0:
            return x
        bits = _random_int16(x.numel(), x.device).view(x.shape)  # uniform on [-32768, 32767]
        keep = (bits >= self.threshold).to(x.dtype)  # 0/1 in x's dtype: the fastest product
        return x * keep * (1.0 / (1.0 - self.p))


def _random_int16(n: int, device: torch.device) -> Tensor:
    """n independent uniform int16 values from (n + 3) // 4 uniform int64 draws; (n,)."""
    i64 = torch.iinfo(torch.int64)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(i64.min, i64.max)
    return words.view(torch.int16)[:n]


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)); (P, D)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, D/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def causal_mask(n_query: int, n_key: int, device: torch.device | None = None) -> Tensor:
    """(T_query, T_key) bool: query i (the last n_query of n_key positions) sees keys <= it."""
    offset = n_key - n_query  # earlier positions already in the cache
    q = torch.arange(n_query, device=device)[:, None] + offset
    k = torch.arange(n_key, device=device)[None, :]
    return k <= q


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """softmax over the last axis with masked (False) keys at exactly zero weight."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


def attention_probs(
    q: Tensor, k: Tensor, mask: Tensor | None, record: AttentionRecord | None = None, layer: int = 0
) -> Tensor:
    """softmax(Q Kᵀ / √K) with masked keys at zero weight. q (B,H,Tq,K), k (B,H,Tk,K) -> (B,H,Tq,Tk).
    A `record` that keeps scores gets Q Kᵀ and Q Kᵀ / √K as they were computed."""
    products = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
    scores = products / math.sqrt(q.size(-1))
    if record is not None:
        record.add_scores(layer, products, scores)
    return masked_softmax(scores, mask)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    record: AttentionRecord | None = None,
    layer: int = 0,
) -> Tensor:
    """Scaled dot-product attention. q (B,H,Tq,K), k/v (B,H,Tk,K) -> (B,H,Tq,K)."""
    # one query (a cached decoding step), or short keys in inference: there two small matmuls
    # beat torch's fused CPU kernel (measured, 800 x 4 heads: one query over 10 keys 0.5 vs
    # 0.7 ms; 5 beams' queries over 10 keys 2.0 vs 6.3 ms; 10 over 10, the encoder, 3.9 vs 8.4)
    short = q.size(-2) == 1 or (k.size(-2) <= 64 and not torch.is_grad_enabled())
    written_out = short and dropout_p == 0.0 and q.dtype == torch.float32
    if record is not None or written_out:
        if is_causal:
            mask = causal_mask(q.size(-2), k.size(-2), q.device)
        probs = attention_probs(q, k, mask, record, layer)
        if record is not None:
            record.add(layer, probs)
        return probs @ v
    if q.dtype == torch.bfloat16 and q.device.type == "cpu":
        # torch's CPU flash-attention backward is ~8x slower in bf16 than in fp32 (measured
        # here: 48 vs 6 ms a call); the matmuls around it keep the bf16 speed-up
        with torch.autocast("cpu", enabled=False):  # autocast would cast straight back to bf16
            out = F.scaled_dot_product_attention(
                q.float(),
                k.float(),
                v.float(),
                attn_mask=mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
            )
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
    )


def additive_scores(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Additive attention (Bahdanau et al. 2015), per head: score(q, k) = vᵀ tanh(W_q q + W_k k).

    q (B, H, Tq, K) is already W_q q and k (B, H, Tk, K) already W_k k (the heads' slices of
    the query and key projections); v (H, K) is each head's scoring vector -> (B, H, Tq, Tk).
    Unlike the dot product it needs every (query, key) pair's K features: (B, H, Tq, Tk, K).
    """
    features = torch.tanh(q[:, :, :, None, :] + k[:, :, None, :, :])  # (B, H, Tq, Tk, K)
    return torch.einsum("bhqsk,hk->bhqs", features, v)


class _Heads(nn.Module):
    """Shared helpers: split D into H heads of K and merge them back."""

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.attention_dropout = attention_dropout
        self.out_proj = Linear(d_model, d_model)

    def split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, K)

    def merge(self, x: Tensor, packing: Packing | None = None) -> Tensor:
        """(B, H, T, K) -> (B, T, D), or with `packing` its real positions (N, D)."""
        B, _, T, _ = x.shape
        merged = x.transpose(1, 2).reshape(B, T, -1)  # (B, T, D)
        return self.out_proj(merged if packing is None else packing.pack(merged))

    @property
    def dropout_p(self) -> float:
        return self.attention_dropout if self.training else 0.0


class SelfAttention(_Heads):
    """Multi-head self-attention with one fused Q/K/V projection (one GEMM instead of three)."""

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float = 0.0):
        super().__init__(d_model, n_heads, attention_dropout)
        self.qkv_proj = Linear(d_model, 3 * d_model)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        *,
        causal: bool = False,
        cache: KVCache | None = None,
        layer: int = 0,
        record: AttentionRecord | None = None,
        packing: Packing | None = None,
    ) -> Tensor:
        """x (B, T, D), mask broadcastable to (B, H, T, T) -> (B, T, D). With `packing`, x
        and the output hold only the real positions, (N, D): the projections skip the padding."""
        q, k, v = self.split_qkv(x, packing)  # each (B, H, T, K)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, H, past + T, K)
            record = cache.self_record
            if causal and q.size(2) == 1:
                causal = False  # one new token may see every cached position
        use_causal_kernel = causal and mask is None and q.size(2) == k.size(2)
        if causal and not use_causal_kernel:
            step_mask = causal_mask(q.size(2), k.size(2), x.device)  # (Tq, Tk)
            mask = step_mask if mask is None else mask & step_mask
        out = attend(
            q,
            k,
            v,
            mask,
            is_causal=use_causal_kernel,
            dropout_p=self.dropout_p,
            record=record,
            layer=layer,
        )  # (B, H, T, K)
        return self.merge(out, packing)

    def split_qkv(self, x: Tensor, packing: Packing | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, D), or its real positions (N, D) with `packing` -> q, k, v (B, H, T, K)."""
        qkv = self.qkv_proj(x)  # (B, T, 3D) or (N, 3D)
        if packing is not None:
            qkv = packing.unpack(qkv)  # (B, T, 3D), zeros at the padding (masked as keys)
        q, k, v = qkv.chunk(3, dim=-1)  # each (B, T, D)
        return self.split(q), self.split(k), self.split(v)


class CrossAttention(_Heads):
    """Encoder-decoder attention: queries from the decoder, keys/values from the encoder output.

    Scores are the paper's scaled dot product, or with `additive` the older additive form
    vᵀ tanh(W_q q + W_k k) (see additive_scores); either way the cache keeps W_k k and W_v v
    of the source once per sentence.
    """

    def __init__(
        self, d_model: int, n_heads: int, attention_dropout: float = 0.0, additive: bool = False
    ):
        super().__init__(d_model, n_heads, attention_dropout)
        self.q_proj = Linear(d_model, d_model)
        self.kv_proj = Linear(d_model, 2 * d_model)
        self.score_v = nn.Parameter(torch.empty(n_heads, d_model // n_heads)) if additive else None
        if additive:
            nn.init.normal_(self.score_v, std=(d_model // n_heads) ** -0.5)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, record, layer: int) -> Tensor:
        """q (B, H, Tq, K), k/v (B, H, S, K) -> (B, H, Tq, K) by dot-product or additive scores."""
        if self.score_v is None:
            return attend(q, k, v, mask, dropout_p=self.dropout_p, record=record, layer=layer)
        probs = masked_softmax(additive_scores(q, k, self.score_v), mask)  # (B, H, Tq, S)
        if record is not None:
            record.add(layer, probs)
        return F.dropout(probs, self.dropout_p, self.training) @ v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        mask: Tensor,
        *,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """x (N, T, D), memory (B, S, D) or None if cached, mask (N, 1, 1, S) -> (N, T, D).

        N = g * B: beam search keeps the g beams of a sentence in adjacent rows, and they
        all attend to the same source. Its K/V are kept once per sentence, not per beam: the
        g rows become g queries of one row (measured: 0.3 vs 0.9 ms a call at 133 x 5 rows),
        and finished sentences leaving the batch copy 1/g as much.
        """
        q = self.split(self.q_proj(x))  # (N, H, T, K)
        k, v = self._source_keys_values(memory, cache, layer)  # (B, H, S, K)
        g = q.size(0) // k.size(0)
        record = _wanting(cache.record if cache is not None else None, layer)
        watch = _wanting(cache.watch if cache is not None else None, layer)
        beam_rows = cache.beam_rows if cache is not None else None
        if beam_rows is not None:  # only live beams have rows: grouped with the others empty
            return self.merge(self._attend_live_beams(q, k, v, mask, beam_rows, layer, watch))
        if record is not None:  # attention traces are per decoder row: one copy per row
            if g > 1:
                k, v = k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)
            out = self._attend(q, k, v, mask, record, layer)
            if watch is not None:
                watch.add(layer, record.layers[layer][-1])
                watch.take(1)
            return self.merge(out)
        grouped = self._attend(_beams_as_queries(q, g), k, v, mask[::g], watch, layer)
        if watch is not None:
            watch.take(g)
        return self.merge(_queries_as_beams(grouped, g))  # (N, T, D)

    def _attend_live_beams(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        rows: BeamRows,
        layer: int,
        watch: SourceWatch | None,
    ) -> Tensor:
        """q (N, H, T, K) of the live beams' rows, k/v (B, H, S, K) -> (N, H, T, K).

        The rows go back to their beams' places among B * g (a finished beam's place gets a
        zero query, whose output is dropped), so each sentence is one row of g queries."""
        g = rows.group
        placed = q.new_zeros(k.size(0) * g, *q.shape[1:]).index_copy_(0, rows.slots, q)
        grouped = self._attend(
            _beams_as_queries(placed, g), k, v, mask[rows.first_rows], watch, layer
        )
        if watch is not None:
            watch.take(g, rows.slots)
        return _queries_as_beams(grouped, g).index_select(0, rows.slots)

    def _source_keys_values(
        self, memory: Tensor | None, cache: KVCache | None, layer: int
    ) -> tuple[Tensor, Tensor]:
        """K/V of the encoder output (B, H, S, K): computed once, kept in the cache if any."""
        if cache is not None and cache.cross_k[layer] is not None:
            return cache.cross_k[layer], cache.cross_v[layer]
        k, v = (self.split(t) for t in self.kv_proj(memory).chunk(2, dim=-1))  # (B, H, S, K)
        if cache is not None:
            # kept contiguous: on the head-split view the attention kernel copied both again
            # at every step
            k, v = k.contiguous(), v.contiguous()
            cache.cross_k[layer], cache.cross_v[layer] = k, v
        return k, v


@contextlib.contextmanager
def _fills_skipped():
    """Modules built inside leave their weights as allocated: torch.nn.init's fills, which
    every Linear, Embedding and LayerNorm calls from its constructor, do nothing."""
    names = ("kaiming_uniform_", "uniform_", "normal_", "xavier_uniform_", "zeros_", "ones_")
    saved = {name: getattr(nn.init, name) for name in names}
    try:
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fill in saved.items():
            setattr(nn.init, name, fill)


def _wanting(record, layer: int):
    """`record` (an AttentionRecord or a SourceWatch) where it wants `layer`'s attention."""
    return record if record is not None and record.wants(layer) else None


def _beams_as_queries(q: Tensor, g: int) -> Tensor:
    """(B*g, H, T, K) -> (B, H, g*T, K): the g adjacent rows of a sentence as one row's queries."""
    N, H, T, K = q.shape
    return q.reshape(N // g, g, H, T, K).transpose(1, 2).reshape(N // g, H, g * T, K)


def _queries_as_beams(out: Tensor, g: int) -> Tensor:
    """(B, H, g*T, K) -> (B*g, H, T, K), the inverse of _beams_as_queries."""
    B, H, GT, K = out.shape
    return out.reshape(B, H, g, GT // g, K).transpose(1, 2).reshape(B * g, H, GT // g, K)


class FeedForward(nn.Module):
    """Position-wise Linear(D, F) -> activation -> Linear(F, D)."""

    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float):
        super().__init__()
        self.up, self.down = Linear(d_model, d_ff), Linear(d_ff, d_model)
        # ReLU in place on the up-projection's output: one (rows, d_ff) table less at every
        # layer (its backward needs only its output, which autograd keeps)
        acts = {"relu": lambda: nn.ReLU(inplace=True), "gelu": nn.GELU, "swish": nn.SiLU}
        self.act = acts[activation]()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.down(self.dropout(self.act(self.up(x))))


class _Sublayers(nn.Module):
    """Residual + LayerNorm around each sublayer: post-norm (paper) or pre-norm."""

    def __init__(self, d_model: int, n_sublayers: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_sublayers))
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def residual(self, i: int, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norms[i](x)))
        return self.norms[i](x + self.dropout(sublayer(x)))


class EncoderLayer(_Sublayers):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, 2, cfg.dropout, cfg.pre_norm)
        self.self_attn = SelfAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.activation_dropout)

    def forward(
        self,
        x: Tensor,
        src_mask: Tensor,
        *,
        layer: int,
        record: AttentionRecord | None,
        packing: Packing | None = None,
    ) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D); with `packing`, x and the output are
        the real positions alone, (N, D)."""
        x = self.residual(
            0, x, lambda h: self.self_attn(h, src_mask, layer=layer, record=record, packing=packing)
        )
        return self.residual(1, x, self.ffn)


class DecoderLayer(_Sublayers):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, 3, cfg.dropout, cfg.pre_norm)
        self.self_attn = SelfAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = CrossAttention(
            cfg.d_model, cfg.n_heads, cfg.attention_dropout, additive=cfg.attention == "additive"
        )
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.activation_dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        src_mask: Tensor,
        *,
        layer: int,
        cache: KVCache | None,
    ) -> Tensor:
        """x (B, T, D), memory (B, S, D), src_mask (B, 1, 1, S) -> (B, T, D)."""
        x = self.residual(
            0, x, lambda h: self.self_attn(h, None, causal=True, cache=cache, layer=layer)
        )
        x = self.residual(
            1, x, lambda h: self.cross_attn(h, memory, src_mask, cache=cache, layer=layer)
        )
        return self.residual(2, x, self.ffn)


class Seq2Seq(nn.Module):
    """Encoder-decoder Transformer with three public methods: encode, decode, forward."""

    def __init__(self, cfg: ModelConfig, initialise: bool = True):
        """`initialise=False`: the weights are left as allocated, for a model whose every
        weight is loaded next (checkpoint.py checks that the file has them all): the random
        fills took 0.06 s of each model a one-line `translate` loads (two, with the
        confidence's reverse model)."""
        super().__init__()
        if initialise:
            self._build(cfg)
            self._init_weights()
        else:
            with _fills_skipped():
                self._build(cfg)
        if cfg.tie_output:
            # one Parameter in two places: a Linear (not F.linear on the embedding) so that
            # int8 quantization, which swaps nn.Linear modules, reaches the largest matmul too
            self.out_proj.weight = self.tgt_embed.weight

    def _build(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        D = cfg.d_model
        self.src_embed = nn.Embedding(cfg.src_vocab_size, D, padding_idx=PAD_ID)
        self.tgt_embed = (
            self.src_embed
            if cfg.share_embeddings
            else nn.Embedding(cfg.tgt_vocab_size, D, padding_idx=PAD_ID)
        )
        # not saved: rebuilt from the formula, so checkpoints stay small and exact
        self.register_buffer(
            "positions", sinusoidal_positions(cfg.max_positions, D), persistent=False
        )
        self.embed_dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec_layers))
        # pre-norm leaves the residual stream un-normalised, so each stack ends with a LayerNorm
        self.encoder_norm = nn.LayerNorm(D) if cfg.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(D) if cfg.pre_norm else nn.Identity()
        self.out_proj = Linear(D, cfg.tgt_vocab_size, bias=cfg.output_bias)

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        # N(0, D^-1/2): after the sqrt(D) scaling the embeddings have unit variance,
        # and as the tied output projection they give logits of sensible size
        for embed in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(embed.weight, std=self.cfg.d_model**-0.5)
            with torch.no_grad():
                embed.weight[PAD_ID].zero_()

    def _embed(self, ids: Tensor, table: nn.Embedding, offset: int = 0) -> Tensor:
        """ids (B, L) -> (B, L, D): scaled embeddings plus positions offset..offset+L."""
        L = ids.size(1)
        if offset + L > self.cfg.max_positions:
            raise ValueError(
                f"sequence of {offset + L} tokens exceeds max_positions {self.cfg.max_positions}"
            )
        x = table(ids) * math.sqrt(self.cfg.d_model) + self.positions[offset : offset + L]
        return self.embed_dropout(x)

    def encode(
        self, src_ids: Tensor, src_mask: Tensor, *, record: AttentionRecord | None = None
    ) -> Tensor:
        """src_ids (B, S), src_mask (B, S) -> memory (B, S, D).

        The fast path, in inference: every step but attention runs on the real tokens alone
        (N, D), and the memory has zeros at the padding, which cross-attention masks (the
        paper's path, kept in training, runs every layer on the padded (B, S, D)).
        """
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S): every query may see the real keys
        x = self._embed(src_ids, self.src_embed)  # (B, S, D)
        packing = Packing.of(src_mask) if not self.training else None
        if packing is not None:
            x = packing.pack(x)  # (N, D)
        for layer, block in enumerate(self.encoder_layers):
            x = block(x, mask, layer=layer, record=record, packing=packing)
        x = self.encoder_norm(x)
        return x if packing is None else packing.unpack(x)  # (B, S, D)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        src_mask: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """tgt_ids (B, T), memory (B, S, D), src_mask (B, S) -> logits (B, T, V)."""
        return self.out_proj(self.decode_states(tgt_ids, memory, src_mask, cache))  # (B, T, V)

    def decode_states(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        src_mask: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """tgt_ids (B, T), memory (B, S, D), src_mask (B, S) -> the decoder's last states
        (B, T, D), before the output projection (which a search may apply a few rows at a time).

        With a cache, tgt_ids holds only the new token(s) after `cache.length` earlier ones,
        and memory may be None once the cache holds the cross-attention keys/values.
        Target padding needs no mask: pads sit at the end, so the causal mask already hides
        them from every real position.
        """
        offset = cache.length if cache is not None else 0
        x = self._embed(tgt_ids, self.tgt_embed, offset)
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer, block in enumerate(self.decoder_layers):
            x = block(x, memory, mask, layer=layer, cache=cache)
        if cache is not None:
            cache.length += tgt_ids.size(1)
        return self.decoder_norm(x)  # (B, T, D)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing: src_ids (B, S), tgt_ids (B, T) -> logits (B, T, V)."""
        src_mask = src_ids != PAD_ID
        return self.decode(tgt_ids, self.encode(src_ids, src_mask), src_mask)

    def new_cache(self, max_len: int, record: AttentionRecord | None = None) -> KVCache:
        """An empty cache for decoding up to `max_len` target positions."""
        return KVCache(len(self.decoder_layers), min(max_len, self.cfg.max_positions), record)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
