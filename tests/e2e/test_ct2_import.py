"""`mtcli import argos` and `mtcli import ctranslate2`: models made elsewhere, run by mtcli's
CTranslate2 engine. Packages mtcli exports come back translating as before; a package laid
out as argos-train lays one out (OpenNMT-py's vocabulary order and config, a .txt vocabulary,
stanza/, a target_prefix) translates as Argos itself translates it; what is not a package is
one line and nothing written. (ct2-transformers-converter's MarianMT: tests/e2e/test_opus_mt.py.)"""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, DecodeConfig
from tests.conftest import REPO, TATOEBA
from tests.e2e.test_argos import argos_translate

pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.e2e
SHIPPED = REPO / "models" / "en-zh-tiny"
LINES = (TATOEBA / "test.en").read_text(encoding="utf-8").splitlines()[:40]


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _ct2(path, **settings):
    from mtcli.engines.ct2 import CT2Translator

    return CT2Translator(path, DecodeConfig(**settings), threads=2)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The shipped model as mtcli exports it: a CTranslate2 directory and an Argos package."""
    tmp = tmp_path_factory.mktemp("exported")
    assert (
        _invoke(
            "export", str(SHIPPED), "--format", "ctranslate2", "--out", str(tmp / "ct2")
        ).exit_code
        == 0
    )
    assert (
        _invoke(
            "export", str(SHIPPED), "--format", "argos", "--out", str(tmp / "p.argosmodel")
        ).exit_code
        == 0
    )
    return tmp


def test_what_mtcli_exported_comes_back_translating_as_before(exported, tmp_path):
    """Both imports of the shipped model give the export's outputs on 40 test lines, greedy and
    beam 4; the package's own </s> (CTranslate2 adds it there) is not doubled."""
    for args, out in (
        (["import", "argos", str(exported / "p.argosmodel")], tmp_path / "from-argos"),
        (["import", "ctranslate2", str(exported / "ct2")], tmp_path / "from-ct2"),
    ):
        result = _invoke(*args, "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "en->zh" in result.output and "with </s>" in result.output
        for settings in ({"beam_size": 1}, {"beam_size": 4}):
            before = [t.text for t in _ct2(exported / "ct2", **settings).translate_chunk(LINES)]
            assert [t.text for t in _ct2(out, **settings).translate_chunk(LINES)] == before
    marker = json.loads((tmp_path / "from-argos" / "mtcli.json").read_text())
    assert marker["source_eos"] is False  # its config.json says add_source_eos


def test_an_imported_model_translates_evaluates_and_serves_under_the_text_layer(exported, tmp_path):
    """translate (text layer: sentences split, a number checked), eval and serve by the CLI."""
    from tests.test_serve import _Server

    out = tmp_path / "en-zh-argos"
    assert _invoke("import", "argos", str(exported / "p.argosmodel"), "--out", str(out)).exit_code == 0  # fmt: skip
    line = "Why do we work? I have 3 cats."
    plain = _invoke("translate", "-m", str(out), line)  # mtcli's own engine cannot read it
    assert plain.exit_code == 2 and "--engine ctranslate2" in plain.output
    mine = _invoke("translate", "-m", str(out), "--engine", "ctranslate2", line)
    theirs = _invoke("translate", "-m", str(exported / "ct2"), "--engine", "ctranslate2", line)
    assert mine.exit_code == 0 and mine.stdout == theirs.stdout and mine.stdout.count("\n") == 1
    (tmp_path / "src.txt").write_text("\n".join(LINES[:10]) + "\n", encoding="utf-8")
    refs = (TATOEBA / "test.zh").read_text(encoding="utf-8").splitlines()[:10]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    src, ref = str(tmp_path / "src.txt"), str(tmp_path / "ref.txt")
    scores = []
    for m in (out, exported / "ct2"):
        result = _invoke(
            "eval", "-m", str(m), "--engine", "ctranslate2", "--src", src, "--ref", ref, "--json"
        )
        assert result.exit_code == 0, result.output
        scores.append(list(json.loads(result.stdout)["systems"].values())[0])
    assert scores[0]["BLEU"]["score"] > 0 and scores[0] == scores[1]
    server = _Server("--engine", "ctranslate2", "-m", str(out))
    try:
        import httpx

        r = httpx.post(
            server.url + "/translate",
            json={"q": LINES[0], "source": "en", "target": "zh"},
            timeout=30,
        )
    finally:
        code, _ = server.stop()
    assert r.status_code == 200 and r.json()["translatedText"] == _invoke(
        "translate", "-m", str(out), "--engine", "ctranslate2", LINES[0]
    ).stdout.rstrip("\n")
    assert code == 0


def _argos_train_package(tmp_path, target_prefix: str = "") -> tuple:
    """A package as argos-train lays one out: OpenNMT-py's model converted by CTranslate2's
    opennmt-py converter (vocabulary <unk> <blank> <s> </s> then the pieces, decoder from <s>,
    no source </s> added), the vocabulary as the .txt older CTranslate2 wrote, one
    sentencepiece.model, stanza/, Argos's own metadata.json; weights: the shipped model's rows
    in that order."""
    from mtcli.store.checkpoint import load_model
    from mtcli.store.ct2_export import build_spec

    loaded = load_model(SHIPPED)
    spec = build_spec(loaded.model)
    sp = loaded.tokenizer.tgt
    order = [UNK_ID, PAD_ID, BOS_ID, EOS_ID, *range(4, sp.get_piece_size())]
    for rows in (spec.encoder.embeddings[0], spec.decoder.embeddings, spec.decoder.projection):
        rows.weight = rows.weight[order]
        if isinstance(getattr(rows, "bias", None), type(rows.weight)):
            rows.bias = rows.bias[order]
    vocab = ["<unk>", "<blank>", "<s>", "</s>", *(sp.id_to_piece(i) for i in order[4:])]
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    folder = tmp_path / f"en_zh{'-prefixed' if target_prefix else ''}"
    (folder / "model").mkdir(parents=True)
    spec.save(str(folder / "model"))
    vocab_json = folder / "model" / "shared_vocabulary.json"
    (folder / "model" / "shared_vocabulary.txt").write_text(
        "\n".join(json.loads(vocab_json.read_text())) + "\n"
    )
    vocab_json.unlink()
    shutil.copyfile(SHIPPED / "spm.model", folder / "sentencepiece.model")
    (folder / "stanza" / "en").mkdir(parents=True)
    (folder / "stanza" / "en" / "tokenize.pt").write_bytes(b"not unpacked by mtcli")
    meta = {"package_version": "1.0", "argos_version": "1.5", "from_code": "en", "from_name": "English",
            "to_code": "zh", "to_name": "Chinese"}  # fmt: skip
    if target_prefix:
        meta["target_prefix"] = target_prefix
    (folder / "metadata.json").write_text(json.dumps(meta))
    (folder / "README.md").write_text("argos-train package\n")
    package = tmp_path / f"translate-en_zh{'-prefixed' if target_prefix else ''}.argosmodel"
    with zipfile.ZipFile(package, "w") as z:
        for path in sorted(folder.rglob("*")):
            z.write(path, path.relative_to(folder.parent))
    return package, json.loads((folder / "model" / "config.json").read_text())


@pytest.mark.parametrize("prefix", ["", "我"])
def test_an_argos_train_package_translates_as_argos_does(tmp_path, prefix):
    """Argos's translate (beam 4, length penalty 0.2) and mtcli's engine on the imported package
    give the same 40 lines; with a target_prefix, forced first and left out of the text by both."""
    package, config = _argos_train_package(tmp_path, prefix)
    assert config["decoder_start_token"] == "<s>" and not config.get("add_source_eos")
    argos = argos_translate(package, LINES, tmp_path)
    out = tmp_path / "imported"
    result = _invoke("import", "argos", str(package), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "without </s>" in result.output  # OpenNMT-py's models are trained without one
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.bin", "mtcli.json", "sentencepiece.model", "shared_vocabulary.txt",
        "tokenizer.json",
    ]  # fmt: skip
    marker = json.loads((out / "mtcli.json").read_text())
    assert marker["never_generate"] == ["<blank>", "<s>"]
    assert marker["target_prefix"] == ([prefix] if prefix else [])
    ours = [t.text for t in _ct2(out, beam_size=4, length_penalty=0.2).translate_chunk(LINES)]
    assert ours == argos
    assert len(set(ours)) >= 30 and all(ours)  # translations, not one repeated or empty line


def test_what_is_not_a_package_is_one_line_and_nothing_is_written(exported, tmp_path):
    """A truncated zip, a zip with no metadata.json, a name outside the package's folder, a zip
    bomb, a tokenizer of another model, and an --out of the user's: one line, exit 2, no
    traceback, nothing at --out."""
    good = (exported / "p.argosmodel").read_bytes()
    cases = {}
    cases["truncated"] = (good[: len(good) // 2], "not a zip")
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as z:
        z.writestr("pkg/README.md", "hello")
    cases["no metadata"] = ((tmp_path / "empty.zip").read_bytes(), "no metadata.json")
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as z:
        z.writestr("pkg/metadata.json", "{}")
        z.writestr("pkg/model/../../../evil.txt", "x")
    cases["outside"] = ((tmp_path / "evil.zip").read_bytes(), "outside the package's folder")
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/metadata.json", "{}")
        z.writestr("pkg/model/model.bin", b"\0" * (64 << 20))
    cases["bomb"] = ((tmp_path / "bomb.zip").read_bytes(), "not a real package")
    for name, (data, message) in cases.items():
        package = tmp_path / f"{name.replace(' ', '-')}.argosmodel"
        package.write_bytes(data)
        result = _invoke("import", "argos", str(package), "--out", str(tmp_path / "out"))
        assert result.exit_code == 2, (name, result.output)
        assert message in result.output and "Traceback" not in result.output, (name, result.output)
        assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil.txt").exists()
    other = tmp_path / "other"
    shutil.copytree(exported / "ct2", other)
    (other / "mtcli.json").unlink()
    # OPUS-MT's English tokenizer: 32,000 pieces, most of them not in the shipped vocabulary
    shutil.copyfile(
        REPO.parent / "shared" / "fixtures" / "opus-mt" / "en-zh.source.spm", other / "spm.model"
    )
    result = _invoke(
        "import",
        "ctranslate2",
        str(other),
        "--out",
        str(tmp_path / "out"),
        "--from",
        "en",
        "--to",
        "zh",
    )
    assert result.exit_code == 2 and "another model's tokenizer" in result.output, result.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    result = _invoke("import", "argos", str(exported / "p.argosmodel"), "--out", str(mine))
    assert result.exit_code == 2 and "will not replace it" in result.output
    assert (mine / "notes.txt").read_text() == "mine"
