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
  feeds `<s>` elsewhere); where that makes the input and output rows differ, the output layer
  is untied, so every output row stays Marian's;
- `final_logits_bias`: mtcli's output bias;
- a vocabulary numbered otherwise (OPUS-MT's `</s>` 0, `<unk>` 1, `<pad>` last, one joint
  vocab.json over both sentencepiece models): mtcli reads ids from the sentencepiece model and
  fixes `<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3, so each sentencepiece model is renumbered to
  that (segmentation depends on the pieces and their scores, never on ids) and the embedding,
  output and bias rows are gathered by piece; a side keeps only its own model's pieces, so
  what Marian could emit outside the target model (a source-only piece) is not offered;
- refused: `normalize_embedding`, unscaled embeddings, stacks of other widths.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path

import sentencepiece as spm
import torch
from safetensors.torch import load_file

from mtcli import files
from mtcli.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ConfigError, ModelConfig, build
from mtcli.data.textio import read_json_object
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import SaveRequest, save_model
from mtcli.store.hf_export import marian_order
from mtcli.store.model_languages import language_tokens, languages, target_token

SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def _read_json(path: Path) -> dict:
    """A JSON object of the directory."""
    return read_json_object(path, "missing (a MarianMT directory has it)")


# mtcli's field <- MarianConfig's: the sizes every MarianMT config.json has
SIZES = {
    "src_vocab_size": "vocab_size", "d_model": "d_model", "n_heads": "encoder_attention_heads",
    "n_enc_layers": "encoder_layers", "n_dec_layers": "decoder_layers", "d_ff": "encoder_ffn_dim",
    "max_positions": "max_position_embeddings",
}  # fmt: skip


def model_config(config: dict, where: Path) -> ModelConfig:
    """mtcli's shape for a MarianConfig, or one line naming the field it cannot take."""

    def need(ok: bool, field: str, why: str) -> None:
        if not ok:
            raise UserError(f"{where}: {field} = {config.get(field)!r}: {why}")

    for field in SIZES.values():
        value = config.get(field)
        need(
            isinstance(value, int) and not isinstance(value, bool) and value > 0,
            field,
            "not a positive integer",
        )
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
    need(config["d_model"] % 2 == 0, "d_model", "an odd width has another sinusoidal table")
    shape = {mine: config[theirs] for mine, theirs in SIZES.items()}
    shape |= {
        "tgt_vocab_size": config.get("decoder_vocab_size") or config["vocab_size"],
        "activation": ACTIVATIONS[config["activation_function"]],
        "pre_norm": False,
        # whether the embeddings are one matrix is the vocabularies' to say (_mapping)
        "share_embeddings": False,
        **{k: config.get(k, 0.0) for k in ("dropout", "attention_dropout", "activation_dropout")},
    }
    try:  # mtcli's own rules (heads dividing d_model, dropout in [0, 1), ...)
        return build(ModelConfig, shape, lambda key: SIZES.get(key, key))
    except ConfigError as e:
        raise UserError(f"{where}: {e}") from None


def renumbered(model: bytes, extra: list[str] = ()) -> bytes:
    """A sentencepiece model with mtcli's special ids: <pad> 0, <unk> 1, <s> 2, </s> 3 (made
    where missing), every other piece after them in its own order, with its own score, then
    the `extra` pieces (language tokens Marian's vocabulary has beside the model) as
    user-defined ones, so each has an id and a row."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:  # it needs protobuf
        raise UserError(
            "renumbering a sentencepiece model needs protobuf: pip install protobuf"
        ) from None
    proto = pb.ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception as e:  # protobuf's DecodeError, whose module differs between its versions
        raise RuntimeError(f"unreadable ({e})") from None
    Piece = pb.ModelProto.SentencePiece
    kinds = {
        "<pad>": Piece.CONTROL,
        "<unk>": Piece.UNKNOWN,
        "<s>": Piece.CONTROL,
        "</s>": Piece.CONTROL,
    }
    have = {p.piece: p for p in proto.pieces}
    first = [
        have.get(name) or Piece(piece=name, score=0.0, type=kind) for name, kind in kinds.items()
    ]
    rest = [p for p in proto.pieces if p.piece not in kinds]
    added = [Piece(piece=t, score=0.0, type=Piece.USER_DEFINED) for t in extra if t not in have]
    del proto.pieces[:]
    proto.pieces.extend([*first, *rest, *added])
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = "<pad>", "<unk>", "<s>", "</s>"
    return proto.SerializeToString()


def rows_of(sp: spm.SentencePieceProcessor, vocab: dict, config: dict, where: Path) -> torch.Tensor:
    """(V,) long: the Marian row of each id of `sp` (renumbered), found by its piece; a piece
    vocab.json lacks takes the <unk> row, and mtcli's <pad>/<unk>/</s> take Marian's."""
    specials = {
        PAD_ID: config.get("pad_token_id"),
        UNK_ID: vocab.get("<unk>"),
        EOS_ID: config.get("eos_token_id"),
    }
    for i, marian in specials.items():
        if not isinstance(marian, int) or marian < 0:
            raise UserError(
                f"{where}: no {SPECIALS[i]} in the vocabulary (vocab.json / config.json)"
            )
    rows = [vocab.get(sp.id_to_piece(i), specials[UNK_ID]) for i in range(sp.get_piece_size())]
    for i, marian in specials.items():
        rows[i] = marian
    rows[BOS_ID] = vocab.get("<s>", specials[PAD_ID])  # never produced: only its input row matters
    return torch.tensor(rows)


def mtcli_state_dict(
    w: dict, cfg: ModelConfig, rows: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """MarianMT's tensors under mtcli's names: vocabulary rows gathered by `rows` (src, tgt_in,
    tgt_out), features back in mtcli's interleaved order."""
    back = torch.argsort(marian_order(cfg.d_model))  # mtcli feature i is Marian's back[i]
    enc, dec = _embeddings(w)
    out = {
        "src_embed.weight": enc[rows["src"]][:, back],
        "tgt_embed.weight": dec[rows["tgt_in"]][:, back],
    }
    if cfg.share_embeddings:  # the same rows of one matrix
        out["src_embed.weight"] = out["tgt_embed.weight"]
    lm_head = w.get("lm_head.weight", dec)
    out["out_proj.weight"] = (
        out["tgt_embed.weight"] if cfg.tie_output else lm_head[rows["tgt_out"]][:, back]
    )
    if cfg.output_bias:
        out["out_proj.bias"] = w["final_logits_bias"][0, rows["tgt_out"]]
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
    return out


def _tokenizer_dir(
    models: dict[str, bytes], out: Path, tokens: list[str], token: str | None
) -> None:
    """mtcli's tokenizer directory of the (renumbered) sentencepiece models, joint when they are
    one; a multilingual-target model's language tokens and default token in tokenizer.json."""
    out.mkdir()
    if models["source.spm"] == models["target.spm"]:
        (out / "spm.model").write_bytes(models["source.spm"])
        meta = {"joint": True, "src_model": "spm.model", "tgt_model": "spm.model"}
    else:
        (out / "src.model").write_bytes(models["source.spm"])
        (out / "tgt.model").write_bytes(models["target.spm"])
        meta = {"joint": False, "src_model": "src.model", "tgt_model": "tgt.model"}
    if token:
        meta |= {"target_tokens": tokens, "target_token": token}
    files.write_json(out / "tokenizer.json", meta)


def _embeddings(w: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's and the decoder's embedding matrices (transformers stores a shared one once)."""
    shared = w.get("model.shared.weight")
    enc, dec = (
        w.get("model.encoder.embed_tokens.weight", shared),
        w.get("model.decoder.embed_tokens.weight", shared),
    )
    if enc is None or dec is None:
        raise UserError("model.safetensors: no embedding matrix (model.shared.weight)")
    return enc, dec


def _weights(src: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """model.safetensors, else pytorch_model.bin read as tensors only (weights_only: a pickle
    that would run code is refused), as many published MarianMT repositories still have it."""
    path = src / "model.safetensors"
    bin_path = src / "pytorch_model.bin"
    try:
        if not path.is_file() and bin_path.is_file():
            path = bin_path
            with warnings.catch_warnings():  # torch's note on the pickle protocol: not the user's
                warnings.simplefilter("ignore")
                weights = torch.load(bin_path, map_location="cpu", weights_only=True)
        else:
            weights = load_file(str(path))
        return {k: v.float() for k, v in weights.items()}, path
    except FileNotFoundError:
        raise UserError(f"{path}: missing (a MarianMT directory has it)") from None
    except Exception as e:  # safetensors', torch's and pickle's own errors for damaged data
        raise UserError(f"{path}: unreadable ({str(e).splitlines()[0][:200]})") from None


def _mapping(
    src: Path, config: dict, tokenizer: dict, weights: dict, tokens: list[str]
) -> tuple[dict, dict, dict]:
    """The renumbered sentencepiece models (the source's with the language `tokens`), the rows
    each side takes, and the shape they give."""
    vocab_files = {
        "source.spm": "vocab.json",
        "target.spm": "target_vocab.json" if tokenizer.get("separate_vocabs") else "vocab.json",
    }
    models, rows = {}, {}
    for name, vocab_file in vocab_files.items():
        try:
            models[name] = renumbered(
                (src / name).read_bytes(), tokens if name == "source.spm" else []
            )
            sp = spm.SentencePieceProcessor(model_proto=models[name])
        except FileNotFoundError:
            raise UserError(f"{src / name}: missing (a MarianMT directory has it)") from None
        except (OSError, RuntimeError) as e:
            raise UserError(f"{src / name}: not a sentencepiece model ({e})") from None
        rows[name] = rows_of(sp, _read_json(src / vocab_file), config, src / vocab_file)
    start = config.get("decoder_start_token_id", rows["target.spm"][BOS_ID].item())
    tgt_in = rows["target.spm"].clone()
    tgt_in[BOS_ID] = (
        start  # mtcli's decoder starts from <s>: its input row is Marian's start token's
    )
    _, dec = _embeddings(weights)
    lm_head = weights.get("lm_head.weight")  # transformers stores a tied one once
    tied = lm_head is None or torch.equal(lm_head, dec)
    bias = weights.get("final_logits_bias")
    shape = {
        "src_vocab_size": len(rows["source.spm"]),
        "tgt_vocab_size": len(tgt_in),
        "share_embeddings": bool(config.get("share_encoder_decoder_embeddings", True))
        and models["source.spm"] == models["target.spm"]
        and torch.equal(rows["source.spm"], tgt_in),
        "tie_output": bool(tied) and torch.equal(tgt_in, rows["target.spm"]),
        "output_bias": bias is not None and bool(bias.abs().max() > 0),
    }
    return (
        models,
        {"src": rows["source.spm"], "tgt_in": tgt_in, "tgt_out": rows["target.spm"]},
        shape,
    )


def import_huggingface(
    src: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    langs: dict | None = None,
    origin: str | None = None,
    name: str | None = None,
) -> Path:
    """Write the MarianMT directory `src` as an mtcli model directory at `out`; `langs`
    (src_lang/tgt_lang) over what the directory says, `origin` recorded as imported_from,
    `name` the repository's (its languages where its files do not say them)."""
    src, out = Path(src), Path(out)
    files.check_replaceable(out, "model", "--out", force, reads=[src])
    config = _read_json(src / "config.json")
    cfg = model_config(config, src / "config.json")
    tok_file = src / "tokenizer_config.json"
    tokenizer = _read_json(tok_file) if tok_file.is_file() else {}
    tokens = language_tokens(_read_json(src / "vocab.json"))
    token, langs = target_token(tokens, {k: v for k, v in (langs or {}).items() if v}, src)
    langs = languages(src, tokenizer, name or src.name, langs)  # before the weights load
    weights, weights_file = _weights(src)
    models, rows, shape = _mapping(src, config, tokenizer, weights, tokens)
    cfg = dataclasses.replace(cfg, **shape)
    model = Seq2Seq(cfg)
    try:
        model.load_state_dict(mtcli_state_dict(weights, cfg, rows))
    except KeyError as e:
        raise UserError(
            f"{weights_file}: no tensor {e.args[0]}, which config.json's shape has"
        ) from None
    except (RuntimeError, IndexError) as e:  # a tensor of another shape than config.json says
        raise UserError(f"{weights_file}: {str(e).splitlines()[0][:200]}") from None
    extra = {"imported_from": origin or str(src)}
    with tempfile.TemporaryDirectory() as tmp:
        _tokenizer_dir(models, Path(tmp) / "tokenizer", tokens, token)
        save_model(model, out, SaveRequest(Path(tmp) / "tokenizer", extra=extra, **langs))
    return out
