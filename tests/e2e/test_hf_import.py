"""`mtcli import huggingface`: a MarianMT directory becomes an mtcli model directory. A random
MarianMT made here (separate vocabularies, swish) decodes greedily through mtcli as through
transformers' generate; mtcli -> MarianMT -> mtcli gives back the same weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import EOS_ID
from mtcli.data.batches import pad, padding_mask
from mtcli.data.tokenizer import TokenizerOptions, train_tokenizer
from mtcli.decoding.search import greedy
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, copy_sentences, write_lines

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.e2e  # a heavy extra: in `make e2e`, as .ci/run runs it
SHIPPED = REPO / "models" / "en-zh-tiny"


def _random_marian(tmp_path, **overrides):
    """A MarianMT directory as transformers saves one, with sentencepiece models trained here
    (one per side, mtcli's special ids) and vocab.json/target_vocab.json of their ids."""
    src = write_lines(tmp_path / "s.txt", copy_sentences(300, seed=1))
    tgt = write_lines(tmp_path / "t.txt", [s.upper()[::-1] for s in copy_sentences(300, seed=2)])
    tok = train_tokenizer(
        src,
        tgt,
        tmp_path / "tok",
        TokenizerOptions(vocab_size=60, joint=False, character_coverage=1.0),
    )
    settings = dict(vocab_size=tok.src_vocab_size, decoder_vocab_size=tok.tgt_vocab_size,
                    share_encoder_decoder_embeddings=False, d_model=32, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                    activation_function="swish", max_position_embeddings=64, scale_embedding=True,
                    init_std=0.3, pad_token_id=0, eos_token_id=EOS_ID, decoder_start_token_id=2,
                    forced_eos_token_id=EOS_ID)  # fmt: skip
    torch.manual_seed(0)
    marian = transformers.MarianMTModel(
        transformers.MarianConfig(**{**settings, **overrides})
    ).eval()
    out = tmp_path / "marian"
    marian.save_pretrained(out)
    for side, name, vocab in (
        ("src", "source.spm", "vocab.json"),
        ("tgt", "target.spm", "target_vocab.json"),
    ):
        shutil.copyfile(tmp_path / "tok" / f"{side}.model", out / name)
        sp = tok.src if side == "src" else tok.tgt
        (out / vocab).write_text(
            json.dumps({sp.id_to_piece(i): i for i in range(sp.get_piece_size())})
        )
    (out / "tokenizer_config.json").write_text(
        json.dumps({"separate_vocabs": True, "source_lang": "en", "target_lang": "xx"})
    )
    return marian, out, tok


@pytest.mark.parametrize("start", [2, 0])
def test_a_random_marian_decodes_the_same_through_mtcli(tmp_path, start):
    """Separate vocabularies and swish, a decoder starting from <s> or (as OPUS-MT's) from <pad>:
    greedy ids through mtcli equal transformers' generate on every line (each with mtcli's own
    length limit), and log-probabilities agree to 1e-4."""
    marian, directory, tok = _random_marian(tmp_path, decoder_start_token_id=start)
    result = CliRunner().invoke(
        main, ["import", "huggingface", str(directory), "--out", str(tmp_path / "mine")]
    )
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "mine")
    assert (
        loaded.model.cfg.activation,
        loaded.model.cfg.share_embeddings,
        loaded.tokenizer.joint,
    ) == ("swish", False, False)
    lines = copy_sentences(30, seed=9)
    same, lengths = 0, []
    for line in lines:
        src = pad([tok.encode_src(line) + [EOS_ID]])
        mask = padding_mask(src)
        ours = greedy(loaded.model.eval(), src, mask)[0].tokens
        limit = int(1.5 * src.size(1) + 10)
        with torch.inference_mode():
            out = marian.generate(input_ids=src, attention_mask=mask.long(), max_new_tokens=limit + 1, num_beams=1,
                                  do_sample=False, bad_words_ids=[[0], [2]])  # fmt: skip
        theirs = [i for i in out[0].tolist()[1:] if i not in (0, EOS_ID)]
        same += ours == theirs
        lengths.append(len(ours))
        with torch.inference_mode():
            a = torch.log_softmax(loaded.model(src, pad([[2] + ours])), -1)
            b = marian(
                input_ids=src, attention_mask=mask.long(), decoder_input_ids=pad([[start] + ours])
            ).logits
        assert float((a - torch.log_softmax(b, -1)).abs().max()) < 1e-4
    assert same == len(lines) and max(lengths) > 5  # and the outputs say something


def test_export_then_import_gives_back_the_same_weights(tmp_path):
    """The shipped model through MarianMT and back: every tensor equal; it translates as the
    shipped model does, traced, in an ensemble with itself, and through CTranslate2."""
    for args in (["export", "--format", "huggingface", str(SHIPPED), "--out", str(tmp_path / "hf")],
                 ["import", "huggingface", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]):  # fmt: skip
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    a, b = (load_model(p).model.state_dict() for p in (SHIPPED, tmp_path / "back"))
    assert a.keys() == b.keys() and all(torch.equal(a[k].float(), b[k].float()) for k in a)
    back = str(tmp_path / "back")
    # the search's: the directory carries no reranking weights, and an ensemble is not reranked
    shipped = ["translate", "-m", str(SHIPPED), "--no-rerank", "Why do we work?"]
    expected = CliRunner().invoke(main, shipped).stdout
    for args in (
        ["translate", "-m", back],
        ["translate", "--trace", "-m", back],
        ["translate", "-m", back, "-m", back],
    ):
        result = CliRunner().invoke(main, [*args, "Why do we work?"])
        assert result.exit_code == 0 and result.stdout.splitlines()[0] == expected.strip(), (
            result.output
        )
    assert (
        CliRunner()
        .invoke(main, ["export", "--format", "ctranslate2", back, "--out", str(tmp_path / "ct2")])
        .exit_code
        == 0
    )
    result = CliRunner().invoke(
        main,
        ["translate", "--engine", "ctranslate2", "-m", str(tmp_path / "ct2"), "Why do we work?"],
    )
    assert result.exit_code == 0 and result.stdout.strip() == expected.strip()


def test_what_mtcli_cannot_take_is_refused_in_one_line(tmp_path):
    """Unscaled embeddings, a LayerNorm on embeddings, stacks of two widths, a width as a string,
    NaN dropout, a layer count the weights lack, a truncated safetensors file, a sentencepiece
    model of junk: one line each, naming the field or file; --out stays absent."""
    _, directory, _ = _random_marian(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    cases = {
        "scale_embedding": (False, "scale_embedding = False: mtcli scales embeddings"),
        "normalize_embedding": (
            True,
            "normalize_embedding = True: mtcli has no LayerNorm on embeddings",
        ),
        "decoder_ffn_dim": (128, "decoder_ffn_dim = 128: differs from encoder_ffn_dim"),
        "d_model": ("32", "d_model = '32': not a positive integer"),
        "dropout": (float("nan"), "dropout = nan: must be a finite number"),
        "encoder_layers": (3, "no tensor model.encoder.layers.2.self_attn.q_proj.weight"),
    }

    def refused(message: str) -> None:
        result = CliRunner().invoke(
            main, ["import", "huggingface", str(directory), "--out", str(tmp_path / "x")]
        )
        assert (
            result.exit_code == 2 and message in result.output and result.output.count("\n") == 1
        ), result.output

    for field, (value, message) in cases.items():
        (directory / "config.json").write_text(json.dumps({**config, field: value}))
        refused(message)
    (directory / "config.json").write_text(json.dumps(config))
    spm_bytes, weights = (
        (directory / "source.spm").read_bytes(),
        (directory / "model.safetensors").read_bytes(),
    )
    (directory / "source.spm").write_bytes(b"junk")
    refused("source.spm: not a sentencepiece model")
    (directory / "source.spm").write_bytes(spm_bytes)
    (directory / "model.safetensors").write_bytes(weights[:1000])
    refused("model.safetensors: unreadable")
    assert not (tmp_path / "x").exists()


def test_an_opus_mt_numbered_model_is_renumbered_and_decodes_the_same(tmp_path):
    """OPUS-MT's layout: sentencepiece models numbering <unk> 0, <s> 1, </s> 2 and no <pad>, one
    joint vocab.json over both (</s> 0, <unk> 1, <pad> last), decoding from <pad>, a nonzero
    final_logits_bias. mtcli renumbers each model (it still splits every line into the same
    pieces) and gathers the rows by piece: greedy outputs equal transformers' (there kept to the
    target model's pieces, which are all mtcli offers)."""
    import sentencepiece as spm

    texts = {
        "source": copy_sentences(300, seed=1),
        "target": [s.upper()[::-1] for s in copy_sentences(300, seed=2)],
    }
    for side, lines in texts.items():
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / side),
                                       vocab_size=20, model_type="bpe", character_coverage=1.0, unk_id=0,
                                       bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)  # fmt: skip
    sps = {
        side: spm.SentencePieceProcessor(model_file=str(tmp_path / f"{side}.model"))
        for side in texts
    }
    vocab = {"</s>": 0, "<unk>": 1}
    for sp in sps.values():
        for i in range(3, sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    pad_id = vocab["<pad>"] = len(vocab)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish",
        max_position_embeddings=64, scale_embedding=True, init_std=0.3, pad_token_id=pad_id, eos_token_id=0,
        decoder_start_token_id=pad_id, forced_eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(1)
    marian = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        marian.final_logits_bias.normal_(0, 0.5)
    directory = tmp_path / "opus"
    marian.save_pretrained(directory)
    for side in texts:
        shutil.copyfile(tmp_path / f"{side}.model", directory / f"{side}.spm")
    (directory / "vocab.json").write_text(json.dumps(vocab))
    args = ["import", "huggingface", str(directory), "--out", str(tmp_path / "mine")]
    result = CliRunner().invoke(main, args)  # no file says its languages: refused, not guessed
    assert result.exit_code == 2 and "--from gives it" in result.output
    result = CliRunner().invoke(main, [*args, "--from", "en", "--to", "xx"])
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "mine")
    ours_tok, cfg = loaded.tokenizer, loaded.model.cfg
    assert [ours_tok.src.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert cfg.output_bias and cfg.src_vocab_size == sps["source"].get_piece_size() + 1  # + <pad>
    allowed = {
        vocab[sps["target"].id_to_piece(i)] for i in range(3, sps["target"].get_piece_size())
    } | {0, 1}
    banned = [[i] for i in range(len(vocab)) if i not in allowed]
    same, lengths = 0, []
    for line in copy_sentences(30, seed=9):
        pieces = sps["source"].encode(line, out_type=str)
        assert ours_tok.src.encode(line, out_type=str) == pieces  # the same split after renumbering
        src = pad([ours_tok.encode_src(line) + [EOS_ID]])
        ours = [
            ours_tok.tgt.id_to_piece(i)
            for i in greedy(loaded.model.eval(), src, padding_mask(src))[0].tokens
        ]
        marian_src = torch.tensor([[vocab.get(p, 1) for p in pieces] + [0]])
        limit = int(1.5 * marian_src.size(1) + 10)
        with torch.inference_mode():
            out = marian.generate(input_ids=marian_src, max_new_tokens=limit + 1, num_beams=1, do_sample=False,
                                  bad_words_ids=banned)  # fmt: skip
        by_id = {i: p for p, i in vocab.items()}
        theirs = [by_id[i] for i in out[0].tolist()[1:] if i not in (pad_id, 0)]
        same += ours == theirs
        lengths.append(len(ours))
    assert same == 30 and max(lengths) > 5


def test_every_command_takes_an_imported_model(tmp_path):
    """An imported model is an mtcli model directory: --prefix, --glossary, eval, attention,
    serve's app and train --init all take it."""
    from fastapi.testclient import TestClient

    from mtcli.config import ServeConfig
    from mtcli.serving.app import Models, create_app, mtcli_served
    from tests.conftest import wait_ready

    hf, back = tmp_path / "hf", tmp_path / "back"
    assert (
        CliRunner()
        .invoke(main, ["export", "--format", "huggingface", str(SHIPPED), "--out", str(hf)])
        .exit_code
        == 0
    )
    assert (
        CliRunner().invoke(main, ["import", "huggingface", str(hf), "--out", str(back)]).exit_code
        == 0
    )
    m = ["-m", str(back)]
    assert (
        CliRunner()
        .invoke(main, ["translate", *m, "--prefix", "我们", "Why do we work?"])
        .stdout.startswith("我们")
    )
    (tmp_path / "terms.tsv").write_text("work\t劳动\n", encoding="utf-8")
    glossed = CliRunner().invoke(
        main, ["translate", *m, "--glossary", str(tmp_path / "terms.tsv"), "Why do we work?"]
    )
    assert "劳动" in glossed.stdout, glossed.output
    src = write_lines(tmp_path / "s.en", ["Why do we work?", "I like cats."])
    ref = write_lines(tmp_path / "r.zh", ["我们为什么工作？", "我喜欢猫。"])
    scored = CliRunner().invoke(main, ["eval", *m, "--src", str(src), "--ref", str(ref), "--json"])
    assert scored.exit_code == 0 and "BLEU" in scored.stdout, scored.output
    assert CliRunner().invoke(main, ["attention", *m, "Why do we work?"]).exit_code == 0
    app = create_app(Models(lambda: [mtcli_served("back", load_model(back), "cpu")]), ServeConfig())
    with TestClient(app) as client:
        assert wait_ready(client)
        answer = client.post(
            "/translate", json={"q": "Why do we work?", "source": "en", "target": "zh"}
        )
        assert answer.status_code == 200 and answer.json()["translatedText"]
    tuned = CliRunner().invoke(main, ["train", "--init", str(back), "--src", str(src), "--tgt", str(ref),
                                      "--out", str(tmp_path / "run"), "--max-steps", "1"])  # fmt: skip
    assert tuned.exit_code == 0, tuned.output


STUDENT = """src_lang = "en"
tgt_lang = "xx"
max_tokens = 2048
max_len = 40
max_steps = 4
warmup = 2
lr_factor = 0.1
log_every = 1
[model]
d_model = 32
n_heads = 4
n_enc_layers = 1
n_dec_layers = 1
d_ff = 64
activation = "swish"
share_embeddings = false
max_positions = 64
"""


def test_an_imported_marian_teaches_a_student_end_to_end(tmp_path):
    """pull -> distill -> ship with a teacher from outside: `mtcli distill --teacher` on an
    imported MarianMT writes the teacher's outputs (greedy: transformers' own, line for line),
    starts a one-layer student from the teacher's weights under its tokenizer, trains it and
    exports a model that translates."""
    marian, directory, tok = _random_marian(tmp_path)
    teacher = tmp_path / "teacher"
    imported = CliRunner().invoke(
        main, ["import", "huggingface", str(directory), "--out", str(teacher)]
    )
    assert imported.exit_code == 0, imported.output
    lines = copy_sentences(24, seed=5)
    src = write_lines(tmp_path / "sources", lines)
    (tmp_path / "student.toml").write_text(STUDENT)
    args = ["distill", "--teacher", str(teacher), "--src", str(src), "--config", str(tmp_path / "student.toml"),
            "--out", str(tmp_path / "kd"), "--beam-size", "1", "--average", "1"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "student's widths differ" not in result.output
    taught = (tmp_path / "kd" / "teacher" / "train.tgt").read_text(encoding="utf-8").splitlines()
    theirs = []
    for line in lines:
        ids = pad([tok.encode_src(line) + [EOS_ID]])
        limit = int(1.5 * ids.size(1) + 10)
        with torch.inference_mode():
            out = marian.generate(input_ids=ids, max_new_tokens=limit + 1, num_beams=1, do_sample=False,
                                  bad_words_ids=[[0], [2]])  # fmt: skip
        theirs.append(tok.decode_tgt([i for i in out[0].tolist()[1:] if i not in (0, EOS_ID)]))
    assert taught == theirs and sum(map(bool, theirs)) >= 12
    init = load_model(tmp_path / "kd" / "init")
    layer = marian.model.encoder.layers[0].fc1.bias
    assert torch.equal(init.model.encoder_layers[0].ffn.up.bias, layer.detach())  # the teacher's
    assert init.tokenizer.joint is False and (tmp_path / "kd" / "model" / "tgt.model").is_file()
    translated = CliRunner().invoke(
        main, ["translate", "-q", "-m", str(tmp_path / "kd" / "model"), lines[0]]
    )
    assert translated.exit_code == 0 and translated.stdout.count("\n") == 1


def test_a_multilingual_target_model_writes_the_language_to_names(tmp_path):
    """A Marian vocabulary with >>cmn_Hans<<-style tokens (OPUS-MT's multilingual targets):
    imported, each source starts with the chosen token as MarianTokenizer starts it; greedy
    through mtcli equals transformers' on that input for every token; --to chooses it (the
    model card's tgt_constituents give the default), and a language it lacks is one line."""
    marian, directory, tok = _random_marian(tmp_path)
    tokens = [">>cmn_Hans<<", ">>cmn_Hant<<", ">>yue_Hant<<"]
    config = marian.config
    config.vocab_size += len(tokens)
    torch.manual_seed(1)
    marian = transformers.MarianMTModel(config).eval()
    marian.save_pretrained(directory)
    vocab = json.loads((directory / "vocab.json").read_text())
    vocab |= {t: tok.src_vocab_size + i for i, t in enumerate(tokens)}
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"separate_vocabs": True, "source_lang": "eng", "target_lang": "zho"})
    )
    out = tmp_path / "mul"
    refused = CliRunner().invoke(main, ["import", "huggingface", str(directory), "--out", str(out)])
    assert (
        refused.exit_code == 2
        and "writes 3 languages (cmn_Hans, cmn_Hant, yue_Hant)" in refused.output
    )
    (directory / "metadata.json").write_text(
        json.dumps({"tgt_constituents": ["cmn_Hant", "yue_Hant"]})
    )
    mislabelled = CliRunner().invoke(
        main, ["import", "huggingface", str(directory), "--out", str(out), "--to", "de"]
    )  # a language it does not write is refused, not written on its label
    assert mislabelled.exit_code == 2 and "--to de: the model writes cmn_Hans" in mislabelled.output
    result = CliRunner().invoke(main, ["import", "huggingface", str(directory), "--out", str(out)])
    assert result.exit_code == 0, result.output
    loaded = load_model(out)
    assert loaded.tokenizer.target_token == ">>cmn_Hant<<" and loaded.config["tgt_lang"] == "zh"
    lines = copy_sentences(12, seed=3)
    outputs = {}
    for token in tokens:
        mine = loaded.tokenizer.for_target(token[2:-2])
        for line in lines:
            src = pad([mine.encode_src(line) + [EOS_ID]])
            assert src[0, 0].item() == mine.src.piece_to_id(token)
            ours = greedy(loaded.model.eval(), src, padding_mask(src))[0].tokens
            theirs_src = torch.tensor([[vocab[token], *tok.encode_src(line), EOS_ID]])
            limit = int(1.5 * theirs_src.size(1) + 10)
            with torch.inference_mode():
                gen = marian.generate(input_ids=theirs_src, max_new_tokens=limit + 1, num_beams=1,
                                      do_sample=False, bad_words_ids=[[0], [2]])  # fmt: skip
            assert ours == [i for i in gen[0].tolist()[1:] if i not in (0, EOS_ID)], (token, line)
            outputs.setdefault(token, []).append(ours)
    assert len({str(o) for o in outputs.values()}) == 3  # the token changes what is written
    args = ["translate", "-q", "-m", str(out), "--to", "yue_Hant", "--beam-size", "1", lines[0]]
    cli = CliRunner().invoke(main, args)
    assert (
        cli.exit_code == 0
        and cli.stdout.strip() == tok.decode_tgt(outputs[">>yue_Hant<<"][0]).strip()
    )
    wrong = CliRunner().invoke(main, ["translate", "-m", str(out), "--to", "de", lines[0]])
    assert wrong.exit_code == 2 and "the model writes cmn_Hans, cmn_Hant, yue_Hant" in wrong.output


def test_explain_walks_an_imported_marian_with_transformers_own_numbers(tmp_path):
    """`mtcli explain` on an imported MarianMT (swish, separate vocabularies, scaled
    embeddings): every encoder layer's attention and the chosen layer's output equal what
    transformers' own MarianMT computes (output_attentions, output_hidden_states) to 1e-5, and
    the walk's greedy translation is `mtcli translate --greedy`'s."""
    from mtcli.explain.walk import explain
    from mtcli.store.hf_export import marian_order

    marian, directory, tok = _random_marian(tmp_path)
    mine = tmp_path / "mine"
    result = CliRunner().invoke(main, ["import", "huggingface", str(directory), "--out", str(mine)])
    assert result.exit_code == 0, result.output
    line = copy_sentences(1, seed=4)[0]
    src = pad([tok.encode_src(line) + [EOS_ID]])
    marian.config._attn_implementation = "eager"  # sdpa gives no attention weights
    with torch.inference_mode():
        theirs = marian.get_encoder()(
            input_ids=src, output_attentions=True, output_hidden_states=True
        )
    order = marian_order(32)  # MarianMT's features (sines, then cosines) in mtcli's order
    for layer in range(2):
        walked = explain(load_model(mine), line, layer=layer, head=1)
        assert walked.shape["activation"] == "swish"
        expected = theirs.attentions[layer][0].numpy()  # (H, S, S)
        assert abs(walked.encoder["all_heads"] - expected).max() < 1e-5
        ours = walked.encoder["out"][:, order.numpy()]  # (S, D) in MarianMT's order
        assert abs(ours - theirs.hidden_states[layer + 1][0].numpy()).max() < 1e-4
    translated = CliRunner().invoke(
        main, ["translate", "-q", "-m", str(mine), "--greedy", "--no-confidence", line]
    )
    assert walked.translation == translated.stdout.strip()
