"""What a new user types in their first hour, and what must come back: a file name never
translated as text, other tools' option names pointed at mtcli's, text already in the target
language passed through, binary input named for what it is."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.data.textio import binary_kind
from mtcli.documents.document import names_a_file

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"


def invoke(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_a_file_name_is_told_from_a_sentence():
    """One word that holds a '/' or ends in an extension names a file; a sentence with spaces,
    a version number and plain words are text; -o naming a document makes any word a file."""
    for name in ("missing.srt", "report.docx", "shot.png", "notes/x", "a.b.c.txt"):
        assert names_a_file(name), name
    for text in ("Version 2.0 is out.", "2.0", "Hello.", "我们为什么工作？", "Why do we work?"):
        assert not names_a_file(text), text
    assert names_a_file("Hello", "out.srt") and not names_a_file("Hello", "out.txt")
    assert not names_a_file("Why do we work?", "out.srt")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("missing.srt", None, "missing.srt: no such file"),
        ("report.docx", None, "report.docx: no such file"),
        ("shot.png", PNG, "shot.png: a PNG image, not a format mtcli translates: .txt .srt"),
        ("notes.xyz", b"hello\n", "notes.xyz: a .xyz file, not a format mtcli translates"),
    ],
)
def test_a_file_name_is_never_translated_as_text(tmp_path, monkeypatch, name, data, message):
    """A missing document, a typo'd one and a real image were translated as words (exit 0,
    `滚。` written into the -o file): now one line, exit 2, nothing written, before any model
    loads (no -m is given, so loading one would fail differently)."""
    monkeypatch.chdir(tmp_path)
    if data is not None:
        (tmp_path / name).write_bytes(data)
    out = "out" + name[name.index(".") :]
    result = invoke("translate", "-m", "no-such-model", name, "-o", out)
    assert result.exit_code == 2 and result.output.startswith(f"Error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / out).exists()


def test_a_sentence_with_a_version_number_is_still_text(copy_model_dir):
    result = invoke("translate", "-m", str(copy_model_dir), "Version 2.0 is out.")
    assert result.exit_code == 0 and result.stdout.count("\n") == 1, result.output


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [
        ("--target", "'--to'"),
        ("--tgt", "'--to'"),
        ("--source", "'--from'"),
        ("--src-lang", "'--from'"),
        ("--lang", "'--from', '--to'"),
    ],
)
def test_other_tools_option_names_suggest_mtclis(typed, suggested):
    """click guessed --target as --trace and --lang as --align: the names of LibreTranslate,
    argos-translate and translate-shell now point at --to and --from."""
    result = invoke("translate", typed, "zh", "hello")
    assert result.exit_code == 2 and suggested in result.output, result.output
    assert "--trace" not in result.output and "--align" not in result.output


def test_an_option_name_is_only_suggested_where_the_command_has_it():
    """eval has --src, not --from: --source is not pointed at an option eval lacks."""
    result = invoke("eval", "--source", "x")
    assert result.exit_code == 2 and "'--from'" not in result.output


def test_a_line_already_in_the_target_language_passes_through(tmp_path):
    """--to zh on Chinese ran it through the en->zh model: now it passes through unchanged in
    every format, said once; the English line beside it is still translated."""
    lines = "Where is the station?\n会议取消了。\n我们明天见。\n"
    text = invoke("translate", "--to", "zh", "--no-confidence", input=lines)
    out = text.stdout.splitlines()
    assert out[1:] == ["会议取消了。", "我们明天见。"] and out[0] != "Where is the station?"
    assert text.stderr.count("already in zh") == 1, text.stderr
    records = invoke("translate", "--to", "zh", "--format", "jsonl", input=lines).stdout
    passed = [json.loads(r) for r in records.splitlines()][1]
    assert passed["translation"] == "会议取消了。" and passed["passthrough"] is True
    tsv = invoke("translate", "--to", "zh", "--format", "tsv", input=lines).stdout.splitlines()
    assert tsv[2].split("\t")[:2] == ["我们明天见。", "我们明天见。"]
    single = invoke("translate", "--to", "en", "我们为什么工作？")
    assert single.stdout.strip() != "我们为什么工作？"  # zh->en: a model from zh exists


def test_binary_input_is_named_for_what_it_is(tmp_path, copy_model_dir):
    """An image given as lines said `invalid UTF-8 (byte 1)`: now what the file is."""
    assert binary_kind(PNG) == "a PNG image"
    assert binary_kind(b"%PDF-1.7\n") == "a PDF document"
    assert binary_kind(b"\x1f\x8b\x08\x00") == "a gzip archive"
    assert binary_kind(b"Hello\n") is None
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    result = invoke("translate", "-m", str(copy_model_dir), "-i", str(shot))
    assert result.exit_code == 2
    assert f"Error: {shot}: a PNG image, not text: mtcli reads UTF-8 text" in result.output


def test_a_training_runs_folder_as_model_uses_its_best(tmp_path, copy_model_dir, copy_lines):
    """-m runs/mine was refused with a pointer to runs/mine/best: now best is used, and said."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(copy_model_dir, run / "best")
    direct = invoke("translate", "-m", str(copy_model_dir), copy_lines[0], "--no-confidence")
    via_run = invoke("translate", "-m", str(run), copy_lines[0], "--no-confidence")
    assert via_run.exit_code == 0 and via_run.stdout == direct.stdout
    assert f"-m {run} is a training run: using {run / 'best'}" in via_run.stderr
