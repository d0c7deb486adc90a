"""The generation defaults a model directory carries (config.json's "generation": a distilled
student's greedy search, a recommended int8): translate, eval, serve and a CTranslate2 export
follow them unless a flag or a request asks otherwise; a bad table is one line."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from fastapi.testclient import TestClient

from mtcli.cli import main
from mtcli.cli.options import build_decode_config
from mtcli.config import DecodeConfig
from mtcli.data.tokenizer import Tokenizer
from mtcli.model.int8 import Int8Linear
from mtcli.model.transformer import Seq2Seq
from mtcli.serving.app import Models, ServeConfig, create_app, mtcli_served
from mtcli.serving.models import Wanted
from mtcli.store.checkpoint import SaveRequest, load_model, save_model
from tests.conftest import (
    copy_sentences,
    copy_tokenizer,
    reference_translations,
    tiny_config,
    write_lines,
)


@pytest.fixture(scope="module")
def greedy_model(tmp_path_factory) -> Path:
    """A random model (greedy and beam disagree on some lines) recommending greedy search."""
    tmp = tmp_path_factory.mktemp("generation")
    tok = copy_tokenizer(tmp)
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab=Tokenizer.load(tok).src_vocab_size)).eval()
    with torch.no_grad():  # sharper random logits: greedy and beam 5 differ on 6 of 12 lines
        for p in model.parameters():
            p.mul_(3.0)
    path = save_model(
        model, tmp / "m", SaveRequest(tokenizer_dir=tok, src_lang="en", tgt_lang="en")
    )
    config = json.loads((path / "config.json").read_text())
    config["generation"] = {"beam_size": 1}
    (path / "config.json").write_text(json.dumps(config))
    return path


LINES = copy_sentences(12, seed=2)


def test_translate_uses_the_models_generation_defaults(greedy_model):
    """Without -b the model's beam 1 decides (== -b 1); -b 5 still gets beam 5, which differs."""
    greedy, beam = (
        reference_translations(greedy_model, LINES, beam_size=1),
        reference_translations(greedy_model, LINES, beam_size=5),
    )
    assert greedy != beam  # otherwise this test could not tell them apart
    runner = CliRunner()
    for args, want in (([], greedy), (["-b", "5"], beam), (["--greedy"], greedy)):
        result = runner.invoke(
            main, ["translate", "-m", str(greedy_model), "-q", *args], input="\n".join(LINES) + "\n"
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == want, args


def test_eval_uses_them_too(greedy_model, tmp_path):
    """eval with the model's default scores its greedy output 100 against itself; -b 5 less."""
    src = write_lines(tmp_path / "src", LINES)
    ref = write_lines(tmp_path / "ref", reference_translations(greedy_model, LINES, beam_size=1))
    scores = {}
    for name, args in (("default", []), ("beam", ["-b", "5"])):
        result = CliRunner().invoke(
            main,
            [
                "eval",
                "--json",
                "-m",
                str(greedy_model),
                "--src",
                str(src),
                "--ref",
                str(ref),
                *args,
            ],
        )
        assert result.exit_code == 0, result.output
        scores[name] = next(iter(json.loads(result.stdout)["systems"].values()))["BLEU"]["score"]
    assert scores["default"] == pytest.approx(100.0) and scores["beam"] < 99


def test_serve_uses_them_unless_the_request_asks(greedy_model):
    """A request without beam_size is decoded greedily; one asking beam_size 5 gets beam 5."""
    loaded = load_model(greedy_model)
    cfg = ServeConfig(decode=build_decode_config())
    app = create_app(Models(lambda: [mtcli_served("m", loaded, "cpu")]), cfg, lambda line: None)
    with TestClient(app) as client:
        for _ in range(200):
            if client.get("/health").status_code == 200:
                break
        for extra, kwargs in (({}, {"beam_size": 1}), ({"beam_size": 5}, {"beam_size": 5})):
            r = client.post("/v1/translate", json={"lines": LINES, **extra})
            assert r.status_code == 200, r.text
            got = [t["translation"] for t in r.json()["translations"]]
            assert got == reference_translations(greedy_model, LINES, **kwargs), extra


def _int8_modules(model: torch.nn.Module) -> tuple[int, int]:
    """(int8 Linear layers, float Linear layers) of a model."""
    int8 = sum(isinstance(m, Int8Linear) for m in model.modules())
    return int8, sum(isinstance(m, torch.nn.Linear) for m in model.modules())


def test_a_model_recommending_int8_is_decoded_in_int8(greedy_model, tmp_path):
    """generation.quantize = int8: translate (and eval, through the same build_translator) and
    serve run its Linear layers in int8 unless --quantize none; its output is the plain
    model's under an explicit --quantize int8."""
    from mtcli.engines.build import EngineOptions, build_translator
    from mtcli.serving.models import loader

    model = tmp_path / "m"
    shutil.copytree(greedy_model, model)
    config = json.loads((model / "config.json").read_text())
    config["generation"] = {"beam_size": 1, "quantize": "int8"}
    (model / "config.json").write_text(json.dumps(config))
    options = EngineOptions(device="cpu", text_layer=False)
    recommended = build_translator([model], build_decode_config(), options)
    n_linear = _int8_modules(build_translator([greedy_model], DecodeConfig(), options).models[0])[1]
    assert _int8_modules(recommended.models[0]) == (n_linear, 0) and n_linear > 0
    fp32 = dataclasses.replace(options, quantize="none")
    assert _int8_modules(build_translator([model], build_decode_config(), fp32).models[0]) == (0, n_linear)  # fmt: skip
    (served,) = loader([model], "mtcli", "cpu", 1, ready=lambda line: None)()
    in_server = served.make_translator(DecodeConfig(beam_size=1), Wanted()).inner  # its layer's
    assert _int8_modules(in_server.models[0]) == (n_linear, 0)

    def cli(m: Path, *args: str) -> list[str]:
        result = CliRunner().invoke(
            main, ["translate", "-q", "-m", str(m), *args], input="\n".join(LINES) + "\n"
        )
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    assert cli(model) == cli(greedy_model, "--quantize", "int8")
    assert cli(model, "--quantize", "none") == reference_translations(
        greedy_model, LINES, beam_size=1
    )


def test_nbest_widens_a_greedy_default():
    """--nbest 3 on a model recommending beam 1 searches with beam 3 (not an error); a beam the
    user named is kept whatever the model says."""
    unset = build_decode_config(nbest=3, beam_size=None, length_penalty=None)
    assert unset.from_model == ("beam_size", "length_penalty")
    assert unset.with_generation({"beam_size": 1}).beam_size == 3
    named = build_decode_config(nbest=3, beam_size=4, length_penalty=None)
    assert named.with_generation({"beam_size": 1, "length_penalty": 0.6}).beam_size == 4
    assert named.with_generation({"length_penalty": 0.6}).length_penalty == 0.6


@pytest.mark.parametrize(
    "generation, message",
    [
        ({"beam_size": 0}, "generation.beam_size = 0: must be at least 1"),
        ({"beam": 4}, "generation.beam: unknown setting"),
        ("greedy", "generation = 'greedy': must be an object"),
        ({"length_penalty": "1"}, "generation.length_penalty = '1': must be a number"),
        ({"quantize": "int4"}, "generation.quantize = 'int4': must be one of none, int8"),
    ],
)
def test_a_bad_generation_table_is_one_line(greedy_model, tmp_path, generation, message):
    """A hand-edited "generation" in config.json is refused in one line naming the file."""
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(greedy_model, copy)
    config = json.loads((copy / "config.json").read_text())
    config["generation"] = generation
    (copy / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(main, ["translate", "-m", str(copy), "a b"])
    assert result.exit_code != 0 and message in result.output and "config.json" in result.output
    assert "Traceback" not in result.output


def test_a_ctranslate2_export_keeps_the_generation_defaults(greedy_model, tmp_path):
    """The export carries "generation"; CTranslate2's engine then searches greedily unless a
    flag asks a beam (its outputs equal its own explicit -b 1 and -b 5)."""
    pytest.importorskip("ctranslate2")
    from mtcli.engines.ct2 import CT2Translator
    from mtcli.store.ct2_export import export_ctranslate2

    out = export_ctranslate2(greedy_model, tmp_path / "ct2")
    assert json.loads((out / "mtcli.json").read_text())["generation"] == {"beam_size": 1}

    def texts(cfg):
        return [t.text for t in CT2Translator(out, cfg).translate_chunk(LINES)]

    greedy, beam = texts(DecodeConfig(beam_size=1)), texts(DecodeConfig(beam_size=5))
    assert greedy != beam
    assert texts(build_decode_config()) == greedy
    assert texts(build_decode_config(beam_size=5)) == beam
    # a recommended int8 travels too: CTranslate2 then computes in int8 unless asked otherwise
    config = json.loads((greedy_model / "config.json").read_text())
    shutil.copytree(greedy_model, tmp_path / "m8")
    config["generation"]["quantize"] = "int8"
    (tmp_path / "m8" / "config.json").write_text(json.dumps(config))
    out8 = export_ctranslate2(tmp_path / "m8", tmp_path / "ct2-int8")
    assert CT2Translator(out8, DecodeConfig()).translator.compute_type.startswith("int8")
    assert CT2Translator(out8, DecodeConfig(), quantize="none").translator.compute_type == "float32"
