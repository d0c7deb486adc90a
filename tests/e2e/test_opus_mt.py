"""OPUS-MT as published: a MarianMT built from the real config.json of Helsinki-NLP/opus-mt-en-zh
(its special ids, 65,001-row vocabulary, swish, bad_words_ids, a decoder starting from <pad>;
fewer and narrower layers) around its real source.spm (../shared/fixtures/opus-mt), a
target.spm trained here on Tatoeba's Chinese, and a vocab.json numbered as Marian numbers one
(</s> 0, <unk> 1, both models' pieces in one list, <pad> last). Imported, it decodes every test
line as transformers' generate does, greedy and beam."""

from __future__ import annotations

import gzip
import json
import random

import pytest
import sentencepiece as spm
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import EOS_ID, DecodeConfig
from mtcli.data.batches import pad, padding_mask
from mtcli.decoding.search import beam_search, greedy
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.e2e
FIXTURES = REPO.parent / "shared" / "fixtures" / "opus-mt"
# </s> likelier than the random weights make it, as in a trained model: about half of the
# hypotheses end before the length limit (the rest run to it)
EOS_BIAS = 7.0
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba-en-zh" / "raw" / "cmn.txt.gz"


def _tatoeba(n: int) -> list[tuple[str, str]]:
    with gzip.open(TATOEBA, "rt", encoding="utf-8") as f:
        return [tuple(line.split("\t")[:2]) for line, _ in zip(f, range(n), strict=False)]


@pytest.fixture(scope="module")
def opus_dir(tmp_path_factory):
    """The OPUS-MT-shaped MarianMT directory, and its transformers model."""
    if not FIXTURES.is_dir() or not TATOEBA.is_file():
        pytest.skip("needs ../shared/fixtures/opus-mt and ../shared/data/tatoeba-en-zh")
    tmp = tmp_path_factory.mktemp("opus")
    pairs = _tatoeba(6000)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([zh for _, zh in pairs]), model_prefix=str(tmp / "target"),
        vocab_size=3000, model_type="bpe", character_coverage=0.9995, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, minloglevel=2,
    )  # fmt: skip
    config = json.loads((FIXTURES / "en-zh.config.json").read_text())
    pad_id, size = config["pad_token_id"], config["vocab_size"]
    models = {
        "source.spm": (FIXTURES / "en-zh.source.spm").read_bytes(),
        "target.spm": (tmp / "target.model").read_bytes(),
    }
    pieces = []
    for data in models.values():
        sp = spm.SentencePieceProcessor(model_proto=data)
        pieces += [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    pieces = list(dict.fromkeys(pieces))  # Marian's vocabulary: every piece once, both sides'
    random.Random(0).shuffle(pieces)  # in corpus-frequency order there: any order but the models'
    vocab = {"</s>": 0, "<unk>": 1, **{p: i for i, p in enumerate(pieces, 2)}}
    assert len(vocab) < pad_id
    meta = json.loads((FIXTURES / "en-zh.metadata.json").read_text())
    for code in meta["tgt_constituents"]:  # its target languages' tokens, as the real vocab has
        vocab[f">>{code}<<"] = len(vocab)
    for i in range(len(vocab), pad_id):  # the rest of the real target model's 32k pieces
        vocab[f"▁unused{i}"] = i
    vocab["<pad>"] = pad_id
    assert len(vocab) == size
    small = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "init_std": 0.3}  # fmt: skip
    config = {k: v for k, v in config.items() if not k.startswith("_")} | small
    torch.manual_seed(3)
    marian = transformers.MarianMTModel(transformers.MarianConfig(**config)).eval()
    target = spm.SentencePieceProcessor(model_proto=models["target.spm"])
    allowed = [vocab[target.id_to_piece(i)] for i in range(3, target.get_piece_size())] + [0, 1]
    with torch.no_grad():
        # mtcli's import keeps the target model's pieces only (hf_import.py); a trained OPUS-MT
        # seldom writes another, this one never, so both sides normalise over the same pieces
        bias = torch.full((size,), -1e4)
        bias[allowed] = 0.0
        bias[0] = EOS_BIAS
        marian.final_logits_bias.copy_(bias[None])
    out = tmp / "opus-mt-en-zh"
    marian.save_pretrained(out)
    for name, data in models.items():
        (out / name).write_bytes(data)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"source_lang": "eng", "target_lang": "zho"}))  # fmt: skip
    (out / "metadata.json").write_text(json.dumps(meta))  # its model card's: cmn_Hans first
    return out, marian, vocab, [en for en, _ in pairs[-30:]]


def _generate(marian, src: torch.Tensor, beams: int, limit: int) -> list[int]:
    """transformers' search, with the config's bad_words_ids (<pad>), no length normalisation."""
    with torch.inference_mode():
        out = marian.generate(input_ids=src, max_new_tokens=limit + 1, num_beams=beams, do_sample=False,
                              length_penalty=0.0)  # fmt: skip
    return [i for i in out[0].tolist()[1:] if i not in (marian.config.pad_token_id, 0)]


def _as_transformers_scores(model, src: torch.Tensor, tokens: list[int], limit: int) -> float:
    """A hypothesis's log-probability as transformers ranks it: with its </s> where it ended,
    without one where it ran to the limit (uncached forward pass)."""
    ended = len(tokens) < limit
    ids = tokens + [EOS_ID] if ended else tokens
    with torch.inference_mode():
        lp = torch.log_softmax(model(src, pad([[2] + ids])), -1)[0, : len(ids)]
    return float(lp.gather(1, torch.tensor(ids)[:, None]).sum())


def test_opus_mt_as_published_decodes_as_transformers_does(opus_dir, tmp_path):
    """Greedy: the same pieces on every line. Beam 4 (no length normalisation on either side):
    the same on every line that ends before the length limit; at the limit mtcli, as Marian
    and fairseq, ends each hypothesis with a forced </s> and counts its log-probability, while
    transformers stops without one: the four hypotheses mtcli finishes hold transformers' best,
    which is their best once that last </s> is left out of those cut at the limit."""
    directory, marian, vocab, lines = opus_dir
    args = ["import", "huggingface", str(directory), "--out", str(tmp_path / "m")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "m")
    tok, model = loaded.tokenizer, loaded.model.eval()
    assert (loaded.config["src_lang"], loaded.config["tgt_lang"]) == ("en", "zh")  # eng/zho
    assert tok.target_token == ">>cmn_Hans<<" and len(tok.target_tokens) == 39
    assert model.cfg.activation == "swish" and not model.cfg.share_embeddings
    source = spm.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    by_id = {i: p for p, i in vocab.items()}
    counts = {"greedy": 0, "beam ended": 0, "beam at the limit": 0, "limit, same": 0}
    for line in lines:
        pieces = source.encode(line, out_type=str)
        assert tok.src.encode(line, out_type=str) == pieces  # renumbered: the same split
        src = pad([tok.encode_src(line) + [EOS_ID]])
        mask = padding_mask(src)
        # MarianTokenizer's input: the target language's token (the model card's first), pieces, </s>
        marian_src = torch.tensor(
            [[vocab[">>cmn_Hans<<"]] + [vocab.get(p, 1) for p in pieces] + [0]]
        )
        limit = int(1.5 * marian_src.size(1) + 10)
        ids = greedy(model, src, mask)[0].tokens
        theirs = [by_id[i] for i in _generate(marian, marian_src, 1, limit)]
        counts["greedy"] += [tok.tgt.id_to_piece(i) for i in ids] == theirs
        four = [h.tokens for h in beam_search(model, src, mask, beam_size=4, alpha=0.0, nbest=4)[0]]
        theirs = [by_id[i] for i in _generate(marian, marian_src, 4, limit)]
        if len(four[0]) < limit:
            counts["beam ended"] += [tok.tgt.id_to_piece(i) for i in four[0]] == theirs
            continue
        counts["beam at the limit"] += 1
        counts["limit, same"] += [tok.tgt.id_to_piece(i) for i in four[0]] == theirs
        best = max(four, key=lambda t: _as_transformers_scores(model, src, t, limit))
        assert [tok.tgt.id_to_piece(i) for i in best] == theirs, line
    ended = len(lines) - counts["beam at the limit"]
    assert counts["greedy"] == len(lines) and counts["beam ended"] == ended, counts
    assert ended >= 10 and counts["beam at the limit"] >= 5  # both cases met
    print(f"OPUS-MT-shaped: {counts} of {len(lines)} lines")


def test_opus_mt_converted_by_ct2_transformers_converter_decodes_as_transformers_does(
    opus_dir, tmp_path
):
    """ct2-transformers-converter's MarianMT (its decoder from </s> on a zero embedding, no
    <pad>, </s> left to the caller): `mtcli import ctranslate2` feeds the source with </s>, and
    mtcli's CTranslate2 engine gives transformers' greedy output on every test line, for the
    model card's default target language and for another chosen as --to chooses it."""
    converters = pytest.importorskip("ctranslate2.converters")
    from mtcli.engines.ct2 import CT2Translator, max_output_tokens

    directory, marian, vocab, lines = opus_dir
    converted = tmp_path / "ct2"
    copied = ["source.spm", "target.spm", "tokenizer_config.json", "metadata.json"]
    converters.TransformersConverter(str(directory), copy_files=copied).convert(str(converted))
    out = tmp_path / "opus-mt-en-zh-ct2"
    result = CliRunner().invoke(main, ["import", "ctranslate2", str(converted), "--out", str(out)])
    assert result.exit_code == 0 and "en->zh" in result.output and "with </s>" in result.output
    default = CT2Translator(out, DecodeConfig(beam_size=1), threads=2)
    source = spm.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(directory / "target.spm"))
    by_id = {i: p for p, i in vocab.items()}
    same, outputs = 0, {}
    for code in ("cmn_Hans", "cmn_Hant"):  # the model card's default, and --to cmn_Hant
        ours = default.for_target(code)
        for line, mine in zip(lines, ours.translate_chunk(lines), strict=True):
            pieces = [vocab[f">>{code}<<"]] + [
                vocab.get(p, 1) for p in source.encode(line, out_type=str)
            ]
            marian_src = torch.tensor([pieces + [0]])
            limit = max_output_tokens(marian_src.size(1), ours.cfg, ours.max_src_tokens)
            ids = [target.piece_to_id(by_id[i]) for i in _generate(marian, marian_src, 1, limit)]
            theirs = target.decode(
                [i for i in ids if not (target.is_control(i) or target.is_unknown(i))]
            )
            same += mine.text == theirs
            outputs.setdefault(code, []).append(mine.text)
    assert outputs["cmn_Hans"] != outputs["cmn_Hant"]  # the token reaches the model
    assert same == 2 * len(lines), f"{same} of {2 * len(lines)}"
