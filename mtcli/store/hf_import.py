"""A Hugging Face MarianMT directory as an mtcli model directory (`mtcli import huggingface`),
the inverse of hf_export.py: the same weights under mtcli's names, features back in mtcli's
interleaved order, and a tokenizer directory made of the directory's sentencepiece models.
Reads config.json, model.safetensors and the tokenizer files; never imports transformers.

What MarianMT has and mtcli's model lacks is mapped where it is small, refused in one line
naming the field otherwise:
- separate source/target vocabularies and sentencepiece models: mtcli's separate tokenizer and
  unshared embeddings (`share_encoder_decoder_embeddings: false`);
- swish: mtcli's `swish` activation;
- a decoder that starts from another token (OPUS-MT's start from `<pad>`): that token's
  embedding row becomes mtcli's `<s>` input row, the one mtcli's decoder starts from (mtcli never
  feeds `<s>` elsewhere), and the output layer is untied so every output row stays Marian's
  (the log-probabilities then agree with Marian's exactly, their normalisation included);
- refused: a nonzero `final_logits_bias` (mtcli's output layer has no bias), `normalize_embedding`,
  unscaled embeddings, encoder and decoder of other widths, and a vocabulary whose ids are not
  its sentencepiece models' own ids with pad 0, unk 1, s 2, /s 3 (mtcli reads ids from the
  sentencepiece model; OPUS-MT's number `</s>` 0 and `<pad>` last, which would need the
  vocabulary renumbered).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
from safetensors.torch import load_file

from mtcli import files
from mtcli.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import SaveRequest, save_model
from mtcli.store.hf_export import marian_order

SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: missing (a MarianMT directory has it)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def model_config(config: dict, where: Path) -> ModelConfig:
    """mtcli's shape for a MarianConfig, or one line naming the field it cannot take."""

    def need(ok: bool, field: str, why: str) -> None:
        if not ok:
            raise UserError(f"{where}: {field} = {config.get(field)!r}: {why}")

    need(config.get("model_type") == "marian", "model_type", "not a MarianMT model")
    need(
        config.get("scale_embedding") is True,
        "scale_embedding",
        "mtcli scales embeddings by sqrt(d_model)",
    )
    need(
        not config.get("normalize_embedding"),
        "normalize_embedding",
        "mtcli has no LayerNorm on embeddings",
    )
    need(
        config.get("activation_function") in ACTIVATIONS,
        "activation_function",
        "mtcli has relu, gelu and swish",
    )
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        need(
            config.get(enc) == config.get(dec),
            dec,
            f"differs from {enc}; mtcli's stacks have one shape",
        )
    need(config.get("d_model", 1) % 2 == 0, "d_model", "an odd width has another sinusoidal table")
    vocab = config["vocab_size"]
    shared = config.get("share_encoder_decoder_embeddings", True)
    return ModelConfig(
        src_vocab_size=vocab, tgt_vocab_size=config.get("decoder_vocab_size") or vocab,
        d_model=config["d_model"], n_heads=config["encoder_attention_heads"],
        n_enc_layers=config["encoder_layers"], n_dec_layers=config["decoder_layers"],
        d_ff=config["encoder_ffn_dim"], dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0),
        activation_dropout=config.get("activation_dropout", 0.0),
        max_positions=config["max_position_embeddings"], activation=ACTIVATIONS[config["activation_function"]],
        pre_norm=False, share_embeddings=bool(shared), tie_output=bool(config.get("tie_word_embeddings", True)),
    )  # fmt: skip


def check_vocabulary(vocab: dict, sp: spm.SentencePieceProcessor, where: str) -> None:
    """vocab.json must number the pieces as the sentencepiece model does, with mtcli's specials."""
    for i, piece in SPECIALS.items():
        if sp.id_to_piece(i) != piece:
            raise UserError(
                f"{where}: id {i} is {sp.id_to_piece(i)!r}, mtcli's special ids are <pad> 0, <unk> 1, <s> 2, </s> 3 "
                "(renumbering a vocabulary is not supported)"
            )
    for i in range(sp.get_piece_size()):
        if vocab.get(sp.id_to_piece(i)) != i:
            piece = sp.id_to_piece(i)
            raise UserError(
                f"{where}: piece {piece!r} is id {i} there but {vocab.get(piece)!r} in vocab.json"
            )


def mtcli_state_dict(weights: dict, cfg: ModelConfig, start_id: int) -> dict[str, torch.Tensor]:
    """MarianMT's tensors under mtcli's names, features back in mtcli's interleaved order."""
    back = torch.argsort(marian_order(cfg.d_model))  # mtcli feature i is Marian's back[i]
    w = {k: v.float() for k, v in weights.items()}
    get = lambda name: w[name] if name in w else w["model.shared.weight"]  # noqa: E731 (tied: stored once)
    out = {"src_embed.weight": get("model.encoder.embed_tokens.weight")[:, back],
           "tgt_embed.weight": get("model.decoder.embed_tokens.weight")[:, back].clone()}  # fmt: skip
    out["tgt_embed.weight"][BOS_ID] = get("model.decoder.embed_tokens.weight")[start_id, back]
    if cfg.share_embeddings:  # one matrix in mtcli too (the source never holds <s>)
        out["src_embed.weight"] = out["tgt_embed.weight"]
    # untied where the start row moved (see import_huggingface): the output keeps Marian's rows
    lm_head = w.get("lm_head.weight", get("model.decoder.embed_tokens.weight"))
    out["out_proj.weight"] = out["tgt_embed.weight"] if cfg.tie_output else lm_head[:, back]
    for i in range(cfg.n_enc_layers):
        out |= _layer(w, f"model.encoder.layers.{i}", f"encoder_layers.{i}", back, cross=False)
    for i in range(cfg.n_dec_layers):
        out |= _layer(w, f"model.decoder.layers.{i}", f"decoder_layers.{i}", back, cross=True)
    return out


def _layer(w: dict, theirs: str, mine: str, back: torch.Tensor, *, cross: bool) -> dict:
    out = {}
    attn = [("self_attn", "self_attn")] + ([("encoder_attn", "cross_attn")] if cross else [])
    for their, my in attn:
        p = f"{theirs}.{their}"
        q, k, v = (w[f"{p}.{n}_proj.weight"][:, back] for n in "qkv")
        qb, kb, vb = (w[f"{p}.{n}_proj.bias"] for n in "qkv")
        if my == "self_attn":
            out[f"{mine}.self_attn.qkv_proj.weight"], out[f"{mine}.self_attn.qkv_proj.bias"] = (
                torch.cat([q, k, v]),
                torch.cat([qb, kb, vb]),
            )
        else:
            out[f"{mine}.cross_attn.q_proj.weight"], out[f"{mine}.cross_attn.q_proj.bias"] = q, qb
            out[f"{mine}.cross_attn.kv_proj.weight"], out[f"{mine}.cross_attn.kv_proj.bias"] = (
                torch.cat([k, v]),
                torch.cat([kb, vb]),
            )
        out[f"{mine}.{my}.out_proj.weight"] = w[f"{p}.out_proj.weight"][back]
        out[f"{mine}.{my}.out_proj.bias"] = w[f"{p}.out_proj.bias"][back]
    norms = (
        ["self_attn_layer_norm"]
        + (["encoder_attn_layer_norm"] if cross else [])
        + ["final_layer_norm"]
    )
    for j, norm in enumerate(norms):
        out[f"{mine}.norms.{j}.weight"], out[f"{mine}.norms.{j}.bias"] = (
            w[f"{theirs}.{norm}.{t}"][back] for t in ("weight", "bias")
        )
    out[f"{mine}.ffn.up.weight"], out[f"{mine}.ffn.up.bias"] = (
        w[f"{theirs}.fc1.weight"][:, back],
        w[f"{theirs}.fc1.bias"],
    )
    out[f"{mine}.ffn.down.weight"], out[f"{mine}.ffn.down.bias"] = (
        w[f"{theirs}.fc2.weight"][back],
        w[f"{theirs}.fc2.bias"][back],
    )
    return out  # fmt: skip


def _tokenizer_dir(src: Path, out: Path) -> None:
    """mtcli's tokenizer directory of the MarianMT's sentencepiece models (joint when they are one)."""
    source, target = (src / "source.spm").read_bytes(), (src / "target.spm").read_bytes()
    out.mkdir()
    if source == target:
        (out / "spm.model").write_bytes(source)
        meta = {"joint": True, "src_model": "spm.model", "tgt_model": "spm.model"}
    else:
        (out / "src.model").write_bytes(source)
        (out / "tgt.model").write_bytes(target)
        meta = {"joint": False, "src_model": "src.model", "tgt_model": "tgt.model"}
    files.write_json(out / "tokenizer.json", meta)


def import_huggingface(src: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write the MarianMT directory `src` as an mtcli model directory at `out`."""
    src, out = Path(src), Path(out)
    files.check_replaceable(out, "model", "--out", force, reads=[src])
    config = _read_json(src / "config.json")
    cfg = model_config(config, src / "config.json")
    tokenizer = (
        _read_json(src / "tokenizer_config.json")
        if (src / "tokenizer_config.json").is_file()
        else {}
    )
    vocabs = {
        "source.spm": "vocab.json",
        "target.spm": "target_vocab.json" if tokenizer.get("separate_vocabs") else "vocab.json",
    }
    for spm_file, vocab_file in vocabs.items():
        sp = spm.SentencePieceProcessor(model_file=str(src / spm_file))
        check_vocabulary(_read_json(src / vocab_file), sp, f"{src / spm_file}")
    try:
        weights = load_file(str(src / "model.safetensors"))
    except (OSError, ValueError) as e:
        raise UserError(f"{src / 'model.safetensors'}: unreadable ({e})") from None
    if (bias := weights.get("final_logits_bias")) is not None and bias.abs().max() > 0:
        raise UserError(
            f"{src / 'model.safetensors'}: final_logits_bias is not zero; mtcli's output layer has no bias"
        )
    start = config.get("decoder_start_token_id", BOS_ID)
    if (
        start != BOS_ID
    ):  # the start row goes into <s>'s input row; output rows stay Marian's, untied
        cfg = dataclasses.replace(cfg, tie_output=False)
    model = Seq2Seq(cfg)
    model.load_state_dict(mtcli_state_dict(weights, cfg, start))
    with tempfile.TemporaryDirectory() as tmp:
        _tokenizer_dir(src, Path(tmp) / "tokenizer")
        langs = {
            "src_lang": tokenizer.get("source_lang") or "en",
            "tgt_lang": tokenizer.get("target_lang") or "zh",
        }
        request = SaveRequest(
            tokenizer_dir=Path(tmp) / "tokenizer", extra={"imported_from": str(src)}, **langs
        )
        save_model(model, out, request)
    return out
