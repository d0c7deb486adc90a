"""A model's languages come from its corpus, plain input is routed as the README says, and
input in another language than a chosen model's is flagged (issue 43, items 1-3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.cli.train import assemble_config, labelled
from mtcli.config import TrainConfig
from mtcli.errors import UserError
from mtcli.text.corpus_languages import corpus_languages, languages_of_corpus
from mtcli.text.language import contradicts, sure_language
from mtcli.training.checks import with_languages
from tests.conftest import SHARED, write_lines

MULTI30K = SHARED / "multi30k-en-de"
HAN = "我们为什么工作？"


def _german_corpus(folder: Path, n: int = 300) -> tuple[Path, Path]:
    """The first `n` pairs of Multi30k's English-German training set."""
    folder.mkdir(parents=True, exist_ok=True)
    sides = []
    for suffix in ("en", "de"):
        lines = (MULTI30K / f"train.{suffix}").read_text(encoding="utf-8").splitlines()[:n]
        sides.append(write_lines(folder / f"a.{suffix}", lines))
    return sides[0], sides[1]


def _invoke(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(main, list(args), env={"NO_COLOR": "1", **(env or {})}, input=input)


# ---------------------------------------------------------------- the identifier, by hand
def test_sure_language_and_contradictions_by_hand():
    """Scripts and confident three-word lines are sure; a short Latin line is not; a claim the
    identifier cannot name is contradicted only by a script; Han does not rule out Japanese."""
    assert sure_language("Where is the train station?") == "en"
    assert sure_language("Wo ist der Bahnhof, bitte?") == "de"
    assert sure_language(HAN) == "zh"
    assert sure_language("Hi.") is None and sure_language("12:45") is None
    assert contradicts("de", "en") and contradicts("en", "zh") and contradicts("zh-Hans", "en")
    assert not contradicts("de", "de") and not contradicts("pt_BR", "pt")
    assert not contradicts("sv", "de")  # py3langid is not asked about Swedish here
    assert contradicts("sv", "zh")  # but Swedish is not written in Han
    assert not contradicts("ja", "zh") and not contradicts("de", None)


# ---------------------------------------------------------------- item 1: labels from the corpus
def test_a_corpus_prepared_without_language_flags_is_labelled_by_its_text(tmp_path):
    """`data prepare --src a.en --tgt a.de` writes en/de (it wrote en/zh, the flags' defaults);
    a flag its text contradicts is one line naming both, and nothing is written."""
    src, tgt = _german_corpus(tmp_path / "raw")
    out = tmp_path / "prep"
    args = [
        "data",
        "prepare",
        "--src",
        str(src),
        "--tgt",
        str(tgt),
        "--test-size",
        "20",
        "--valid-size",
        "20",
    ]
    result = _invoke(*args, "--out", str(out))
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("en", "de")
    assert "languages: en (from the text of" in result.stderr
    refused = _invoke(*args, "--out", str(tmp_path / "prep2"), "--tgt-lang", "zh")
    assert refused.exit_code == 2 and not (tmp_path / "prep2").exists()
    (line,) = refused.stderr.strip().splitlines()
    assert "--tgt-lang zh" in line and f"{tgt} is in de" in line


def test_train_takes_the_languages_of_the_prepared_corpus(tmp_path):
    """A run on a prepared folder's splits is labelled as its manifest says, not en->zh; a
    flag the manifest contradicts is refused naming both; the text decides without one."""
    src, tgt = _german_corpus(tmp_path / "raw", n=60)
    prepared = tmp_path / "prep"
    prepared.mkdir()
    for split, side, path in (("train", "src", src), ("train", "tgt", tgt)):
        shutil.copy(path, prepared / f"{split}.{side}")
    (prepared / "manifest.json").write_text(
        json.dumps({"corpus": "own", "src_lang": "en", "tgt_lang": "de"})
    )
    flags = {
        "src": str(prepared / "train.src"),
        "tgt": str(prepared / "train.tgt"),
        "out": str(tmp_path / "run"),
    }
    cfg, note = _labelled(flags)
    assert (cfg.src_lang, cfg.tgt_lang) == ("en", "de") and "manifest.json" in note
    with pytest.raises(UserError, match=r"--tgt-lang zh, but .*manifest.json says de"):
        _labelled({**flags, "tgt_lang": "zh"})
    plain = {**flags, "src": str(src), "tgt": str(tgt)}  # no manifest beside them: the text
    assert _labelled(plain)[0].tgt_lang == "de"
    with pytest.raises(UserError, match=r"--tgt-lang zh, but the text of .*a.de is in de"):
        _labelled({**plain, "tgt_lang": "zh"})
    assert _labelled({**plain, "tgt_lang": "de-CH"})[0].tgt_lang == "de-CH"  # agrees


def _labelled(flags: dict) -> tuple[TrainConfig, str]:
    return labelled(*assemble_config(None, flags, None, False))


def test_a_library_config_without_languages_takes_the_corpus_s(tmp_path):
    """TrainConfig's languages default to empty (they were en/zh): with_languages fills them."""
    src, tgt = _german_corpus(tmp_path, n=40)
    cfg, note = with_languages(TrainConfig(src=str(src), tgt=str(tgt)), {})
    assert (cfg.src_lang, cfg.tgt_lang) == ("en", "de") and note.startswith("languages: en")


def test_a_chinese_side_is_identified_from_a_tsv(tmp_path):
    """One source<TAB>target file: each column is identified."""
    tsv = write_lines(tmp_path / "pairs.tsv", [f"Why do we work every day?\t{HAN}"] * 5)
    found = corpus_languages(str(tsv), None)
    assert (found["src"].language, found["tgt"].language) == ("en", "zh")
    assert languages_of_corpus(str(tsv), None, {})[0] == {"src": "en", "tgt": "zh"}


def test_a_wrongly_labelled_model_is_relabelled_by_export(tmp_path, copy_model_dir):
    """`mtcli export MODEL --out DIR --tgt-lang de` writes the new label without retraining
    (the weights are the same); a bad code, or a converted format, is one line."""
    out = tmp_path / "relabelled"
    result = _invoke("export", str(copy_model_dir), "--out", str(out), "--tgt-lang", "de", "--fp32")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["tgt_lang"] == "de" and config["train"]["tgt_lang"] == "de"
    assert (out / "model.safetensors").read_bytes() == _fp32_weights(copy_model_dir, tmp_path)
    bad = _invoke("export", str(copy_model_dir), "--out", str(tmp_path / "x"), "--tgt-lang", "12")
    assert bad.exit_code == 2 and "'12' is not a language code" in bad.output
    converted = _invoke(
        "export",
        str(copy_model_dir),
        "--out",
        str(tmp_path / "y"),
        "--format",
        "argos",
        "--tgt-lang",
        "de",
    )
    assert converted.exit_code == 2 and "relabel first" in converted.output


def _fp32_weights(model: Path, tmp_path: Path) -> bytes:
    """The weights as an export without relabelling writes them."""
    plain = tmp_path / "plain"
    assert _invoke("export", str(model), "--out", str(plain), "--fp32").exit_code == 0
    return (plain / "model.safetensors").read_bytes()


# ---------------------------------------------------------------- item 2: routing
@pytest.fixture
def user_en_de(tmp_path, copy_model_dir) -> dict:
    """A user's en->de model on MTCLI_MODEL_PATH (the copy model, labelled so)."""
    folder = tmp_path / "mine"
    shutil.copytree(copy_model_dir, folder / "my-en-de", ignore=shutil.ignore_patterns("trainer_state.pt"))  # fmt: skip
    config_path = folder / "my-en-de" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(src_lang="en", tgt_lang="de")
    config_path.write_text(json.dumps(config))
    return {"MTCLI_MODEL_PATH": str(folder)}


def test_a_users_model_never_takes_over_plain_input(user_en_de):
    """With an en->de model on MTCLI_MODEL_PATH, plain English still goes to the shipped
    en->zh model (it came out of the user's), and stderr names the other model once."""
    for args in ([], ["--from", "en"]):
        result = _invoke(
            "translate", *args, "Where is the train station?", "Why do we work?", env=user_en_de
        )
        assert result.exit_code == 0, result.output
        assert any("\u4e00" <= c <= "\u9fff" for c in result.stdout), result.stdout
        notes = [line for line in result.stderr.splitlines() if "my-en-de" in line]
        assert len(notes) == 1 and "used en-zh-tiny" in notes[0] and "--to de" in notes[0]
    chosen = _invoke("translate", "--to", "de", "-q", "a b c", env=user_en_de)
    assert chosen.exit_code == 0 and not any("\u4e00" <= c <= "\u9fff" for c in chosen.stdout)


def test_the_shipped_models_alone_route_without_a_note():
    """A teacher and its shipped student are a documented choice: no note."""
    result = _invoke("translate", "Why do we work?")
    assert result.exit_code == 0 and result.stderr == ""


# ---------------------------------------------------------------- item 3: the wrong language
def test_input_in_another_language_than_the_chosen_model_s_is_flagged():
    """-m zh-en-tiny on an English line: one warning naming the language identified, and in
    jsonl a field saying so; the Chinese line and a short Latin one carry none."""
    lines = "Where is the train station?\n" + HAN + "\nHi.\nWhere do you work every day?\n"
    result = _invoke("translate", "-m", "zh-en-tiny", "--format", "jsonl", input=lines)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 4
    flagged = [r.get("wrong_language") for r in records]
    expected = {"identified": "en", "model_source": "zh"}
    assert flagged == [expected, None, None, expected]
    warning, flagged = result.stderr.strip().splitlines()  # and the confidence's summary
    assert "input line 1 is in en, but zh-en-tiny translates from zh" in warning
    assert "flagged as unreliable (lines 1, " in flagged and [r["flagged"] for r in records][0]


def test_a_language_no_model_knows_says_so():
    """German into the en->zh model: the warning says no installed model translates from de."""
    result = _invoke("translate", "-m", "en-zh-tiny", "Wo ist der Bahnhof, bitte?")
    assert result.exit_code == 0
    assert "is in de" in result.stderr and "no installed model translates from de" in result.stderr


def test_a_run_labelled_by_the_old_default_is_relabelled_when_it_continues(tmp_path):
    """A checkpoint recorded with tgt_lang 'zh' continues under the corpus's 'de' (it was
    refused: 'trained with other settings (tgt_lang 'zh' -> 'de')'), and says so."""
    from mtcli.store.model_dir import read_config
    from mtcli.training.loop import train
    from tests.conftest import copy_tokenizer, copy_train_config

    tok = copy_tokenizer(tmp_path)
    first = copy_train_config(tmp_path, tok, max_steps=2, valid_every=2, tgt_lang="zh")
    train(first)
    reports = []
    train(
        copy_train_config(tmp_path, tok, max_steps=3, valid_every=2, tgt_lang="de"), reports.append
    )
    said = [getattr(r, "text", "") for r in reports]
    assert "resuming with tgt_lang 'zh' -> 'de'" in said
    assert read_config(tmp_path / "run" / "last")["tgt_lang"] == "de"


def test_a_prepared_corpus_read_the_other_way_round_swaps_its_languages(tmp_path):
    """zh-en trained on an en-zh prepared folder (--src train.tgt --tgt train.src): the
    manifest's languages follow the files (the zh-en preset was refused for 'src_lang zh')."""
    from mtcli.text.corpus_languages import corpus_languages

    (tmp_path / "manifest.json").write_text(json.dumps({"src_lang": "en", "tgt_lang": "zh"}))
    for name, text in (("train.src", "Hello.\n"), ("train.tgt", "你好。\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    forward = corpus_languages(str(tmp_path / "train.src"), str(tmp_path / "train.tgt"))
    backward = corpus_languages(str(tmp_path / "train.tgt"), str(tmp_path / "train.src"))
    assert (forward["src"].language, forward["tgt"].language) == ("en", "zh")
    assert (backward["src"].language, backward["tgt"].language) == ("zh", "en")
