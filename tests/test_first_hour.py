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
    # a word of 200,000 letters after a dot took ~100 s through a backtracking pattern
    assert not names_a_file("a." + "b" * 200_000 + "!")


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


WORK_TEXT = [
    "The council postponed the budget hearing until further notice.",
    "Quarterly revenue exceeded analyst expectations by a wide margin.",
    "Please reset your password using the link below.",
    "The API returns a paginated list of resources.",
    "Our warehouse ships orders within two business days.",
    "Why do we work?",
]


def test_mostly_flagged_lines_of_a_shipped_model_point_to_a_published_one():
    """After most of a user's lines were flagged, nothing pointed to `mtcli models pull`: now
    one line names the command for the pair; a run mostly unflagged says nothing of it."""
    result = invoke("translate", input="".join(line + "\n" for line in WORK_TEXT))
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == len(WORK_TEXT)
    hint = "`mtcli models pull Helsinki-NLP/opus-mt-en-zh` gets a published en->zh model"
    assert result.stderr.count(hint) == 1 and "needs the network" in result.stderr
    easy = invoke("translate", input="Why do we work?\nI love you.\nWhere is the station?\n")
    assert "models pull" not in easy.stderr


def test_the_published_model_hint_is_for_shipped_models_and_most_lines_only(tmp_path):
    """By hand: more than half of at least 5 lines; a model of the user's gets no hint."""
    import shutil

    from mtcli.store.registry import bigger_model_hint, for_direction

    shipped = for_direction("zh", "en").path
    assert "opus-mt-zh-en" in bigger_model_hint(shipped, "zh", 3, 5)
    assert "opus-mt-zh-en" in bigger_model_hint(None, "zh", 3, 5)
    assert bigger_model_hint(shipped, "zh", 2, 4) is None  # 4 lines: too few to judge
    assert bigger_model_hint(shipped, "zh", 5, 10) is None  # half is not most
    mine = shutil.copytree(shipped, tmp_path / "mine")
    assert bigger_model_hint(mine, "zh", 10, 10) is None


def test_make_demo_downloads_the_corpus_where_shared_is_missing(tmp_path):
    """`make demo` in a plain clone stopped at `--from ../shared/...: no such directory`: the
    corpus comes from ../shared where it is there, else `data prepare` downloads it."""
    import subprocess

    from tests.conftest import REPO

    def prepare_line(shared) -> str:
        dry = subprocess.run(["make", "-n", "-B", "data/tatoeba/test.src", f"SHARED={shared}"],
                             cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
        return next(line for line in dry.stdout.splitlines() if "data prepare" in line)

    assert "--from" not in prepare_line(tmp_path / "absent")
    (tmp_path / "tatoeba-en-zh" / "raw").mkdir(parents=True)
    assert f"--from {tmp_path}/tatoeba-en-zh/raw" in prepare_line(tmp_path)


def test_report_lists_every_line_to_read_with_why(tmp_path):
    """Text mode named 10 flagged lines and '...', a document three strings: --report FILE
    lists each line (or document string) with its source, translation, confidence and why;
    an existing report is refused without --force, and the report is never the output."""
    lines = [WORK_TEXT[0], "There are five patients in the waiting room.", "Why do we work?"]
    src = tmp_path / "in.txt"
    src.write_text("".join(line + "\n" for line in lines))
    report = tmp_path / "report.jsonl"
    result = invoke("translate", "-i", str(src), "--report", str(report))
    assert result.exit_code == 0 and f"--report {report} lists each" in result.stderr
    records = [json.loads(line) for line in report.read_text().splitlines()]
    out = result.stdout.splitlines()
    assert [r["line"] for r in records] == [1, 2]
    assert [(r["source"], r["translation"]) for r in records] == list(
        zip(lines[:2], out[:2], strict=True)
    )
    assert records[0]["why"][0].startswith("low confidence") and records[0]["confidence"] < 0.2
    assert records[1]["why"] == ["writes 50, which its source does not have"]  # 房间里有50个人
    again = invoke("translate", "-i", str(src), "--report", str(report))
    assert again.exit_code == 2 and "--report" in again.output and "exists" in again.output
    same = invoke(
        "translate", "-i", str(src), "-o", str(tmp_path / "o"), "--report", str(tmp_path / "o")
    )
    assert same.exit_code == 2 and "is the --output file" in same.output
    dash = invoke("translate", "-i", str(src), "--report", "-")
    assert dash.exit_code == 2 and "stdout carries the translations" in dash.output
    srt = tmp_path / "a.srt"
    srt.write_text(
        f"1\n00:00:01,000 --> 00:00:02,000\n{lines[2]}\n\n2\n00:00:03,000 --> 00:00:04,000\n{lines[1]}\n"
    )
    doc_report = tmp_path / "doc.jsonl"
    result = invoke(
        "translate", str(srt), "-o", str(tmp_path / "b.srt"), "--report", str(doc_report)
    )
    records = [json.loads(line) for line in doc_report.read_text().splitlines()]
    assert result.exit_code == 0 and [(r["string"], r["source"]) for r in records] == [
        (2, lines[1])
    ]


def test_the_default_threads_leave_a_busy_cpu_to_its_process(monkeypatch):
    """With a CPU-bound process on one of two cores, 17 lines took 11-12 s at the default
    threads and 3 s with --threads 1 (each OpenMP barrier waited for a thread with no core):
    the default now counts only the CPUs no other process is running on, and OpenMP's threads
    spin 10,000 times before they sleep, not 300,000 (a user's own setting wins)."""
    import os
    import subprocess
    import sys
    import time

    from mtcli import device

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert device._others_running() >= 1
        assert device.idle_cpus() <= max(1, (os.cpu_count() or 1) - 1)
    finally:
        hog.kill()
        hog.wait()
    monkeypatch.setattr(device, "_others_running", lambda: 0)
    assert device.idle_cpus() == device.available_cpus()
    monkeypatch.setattr(device, "_others_running", lambda: 99)
    assert device.idle_cpus() == 1
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    device.import_torch()
    assert os.environ["GOMP_SPINCOUNT"] == "10000"
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    device.import_torch()
    assert os.environ["GOMP_SPINCOUNT"] == "5"


def test_this_processs_own_busy_threads_are_not_counted_as_another_process(monkeypatch):
    """A thread of mtcli's own that is running (torch's OpenMP workers spin after each parallel
    region) is not a process to leave a core to: counted as one, it changed the next run's
    thread count, and a resumed run's losses drifted from an uninterrupted one's."""
    import hashlib
    import threading

    from mtcli import device

    stop, data = threading.Event(), bytes(1 << 24)

    def busy():
        while not stop.is_set():
            hashlib.sha256(data)  # holds a core without the GIL, as torch's kernels do

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        assert max(device._own_running() for _ in range(5)) >= 2
    finally:
        stop.set()
        worker.join()
    # the kernel's count less this process's own (another process may be running beside it)
    monkeypatch.setattr(device, "_own_running", lambda: 10_000)
    assert device._others_running() == 0
    monkeypatch.undo()

    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(device.os, "scandir", no_proc)  # no /proc (macOS): counted, no crash
    assert device._own_running() == 1
