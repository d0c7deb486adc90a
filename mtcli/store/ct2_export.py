"""Export a model directory to CTranslate2's format, exactly: the same weights, positions,
vocabulary and special tokens, so CTranslate2's greedy search gives mtcli's outputs.

What differs between the two, and how the export bridges it:
- mtcli's sinusoid table interleaves sin and cos (the paper's PE(pos, 2i), PE(pos, 2i+1));
  CTranslate2's built-in table puts all sines before all cosines. The export writes mtcli's
  table as the model's position encodings, so CTranslate2 uses it instead of its own.
- mtcli's source ends with EOS and its output starts from BOS: CTranslate2 is given the
  source pieces plus </s> (see engines/ct2.py) and starts the target with <s>.
- One embedding matrix serves source, target and the output projection: it is written three
  times (CTranslate2 has no tying across them).
- Beam search scores: mtcli divides by GNMT's ((5 + n) / 6) ** alpha, CTranslate2 by n ** alpha,
  so beam outputs can differ where the length penalty decides; greedy search is identical.
Requires the optional ctranslate2 package (pip install 'mtcli[ct2]').
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mtcli import files
from mtcli.data.tokenizer import Tokenizer
from mtcli.errors import UserError
from mtcli.store.checkpoint import load_model
from mtcli.store.model_dir import generation_defaults

MARKER = "mtcli.json"  # what mtcli adds to a CTranslate2 directory: its tokenizer and languages


def _linear(spec, layer) -> None:
    spec.weight = layer.weight.detach().float().numpy()
    if layer.bias is not None:
        spec.bias = layer.bias.detach().float().numpy()


def _norm(spec, norm) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def build_spec(model):
    """A CTranslate2 TransformerSpec holding the weights of an mtcli Seq2Seq."""
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    if cfg.attention != "dot":
        raise UserError("CTranslate2 has no additive attention: only --attention dot models export")
    activation = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "swish": common_spec.Activation.SWISH,
    }
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_enc_layers, cfg.n_dec_layers),
        cfg.n_heads,
        pre_norm=cfg.pre_norm,
        activation=activation[cfg.activation],
    )
    positions = model.positions.detach().float().numpy()  # (P, D), sin/cos interleaved
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = model.src_embed.weight.detach().float().numpy()
    dec.embeddings.weight = model.tgt_embed.weight.detach().float().numpy()
    enc.position_encodings.encodings = positions
    dec.position_encodings.encodings = positions
    _linear(dec.projection, model.out_proj)
    if cfg.pre_norm:
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(enc.layer, model.encoder_layers, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)  # fused q, k, v
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _linear(layer_spec.ffn.linear_0, layer.ffn.up)
        _linear(layer_spec.ffn.linear_1, layer.ffn.down)
        _norm(layer_spec.ffn.layer_norm, layer.norms[1])
    for layer_spec, layer in zip(dec.layer, model.decoder_layers, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)  # fused k, v
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
        _norm(layer_spec.attention.layer_norm, layer.norms[1])
        _linear(layer_spec.ffn.linear_0, layer.ffn.up)
        _linear(layer_spec.ffn.linear_1, layer.ffn.down)
        _norm(layer_spec.ffn.layer_norm, layer.norms[2])
    return spec


def export_ctranslate2(model_dir: Path, out: Path, *, force: bool = False) -> Path:
    """Write `model_dir` as a CTranslate2 model directory at `out` (atomically), with the
    sentencepiece files and languages mtcli needs to translate with it."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UserError(
            "--format ctranslate2 needs ctranslate2: pip install 'mtcli[ct2]'"
        ) from None
    files.check_replaceable(out, "ct2", "--out", force, reads=[model_dir])
    loaded = load_model(model_dir)
    spec = build_spec(loaded.model)
    tok = loaded.tokenizer
    spec.register_source_vocabulary([tok.src.id_to_piece(i) for i in range(tok.src_vocab_size)])
    spec.register_target_vocabulary([tok.tgt.id_to_piece(i) for i in range(tok.tgt_vocab_size)])
    spec.validate()
    with files.built_aside(out, MARKER) as tmp:
        spec.save(str(tmp))
        for name in Tokenizer.model_files(loaded.path):
            shutil.copyfile(loaded.path / name, tmp / name)
        marker = {
            "src_lang": loaded.src_lang,
            "tgt_lang": loaded.tgt_lang,
            "max_positions": loaded.model.cfg.max_positions,
            "exported_from": str(model_dir),
            "generation": generation_defaults(loaded.config),
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out
