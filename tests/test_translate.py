"""`mtcli translate` as a pipeline filter: one line out per line in, order kept, streaming."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from dataclasses import replace

import pytest
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import DecodeConfig
from mtcli.data.textio import read_chunks
from mtcli.engines.build import EngineOptions, build_translator
from mtcli.engines.translator import Translator
from mtcli.errors import UserError
from mtcli.model.linear import Linear, onednn_available
from mtcli.store.checkpoint import load_model
from tests.conftest import REPO, run_mtcli, write_lines


@pytest.mark.slow
def test_pipeline_keeps_one_line_per_line(tmp_path, copy_model_dir, copy_lines):
    """1,000 lines with empty lines and a 5,000-word line -> exactly 1,000 aligned output lines;
    the long line is translated in parts that fit the model, not truncated."""
    rng = random.Random(0)
    lines = [rng.choice(copy_lines) for _ in range(1000)]
    for i in rng.sample(range(1000), 50):
        lines[i] = ""
    long_index = 500
    lines[long_index] = " ".join(rng.choice("abcdefghij") for _ in range(5000))
    proc = run_mtcli(
        "translate", "-m", str(copy_model_dir), "--beam-size", "2", input="\n".join(lines) + "\n"
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == 1000
    for i, (src, hyp) in enumerate(zip(lines, out, strict=False)):
        if i != long_index:
            assert hyp == src, (
                f"line {i + 1}"
            )  # the copy model reproduces its inputs: alignment is visible
    assert "truncated" not in proc.stderr
    # every part is translated: more words than one pass over 64 positions could write
    assert len(out[long_index].split()) > 64


def test_text_argument_and_formats(copy_model_dir, copy_lines):
    """TEXT argument, tsv and jsonl (with n-best) formats; results only on stdout."""
    runner = CliRunner()
    line = copy_lines[0]
    result = runner.invoke(main, ["translate", "-m", str(copy_model_dir), line])
    assert result.exit_code == 0 and result.stdout == line + "\n"
    result = runner.invoke(
        main,
        ["translate", "-m", str(copy_model_dir), "--format", "jsonl", "--nbest", "3"],
        input=f"{line}\n\n",
    )
    records = [json.loads(r) for r in result.stdout.splitlines()]
    assert [r["source"] for r in records] == [line, ""]
    assert records[0]["translation"] == line and len(records[0]["nbest"]) == 3
    scores = [h["score"] for h in records[0]["nbest"]]
    assert scores == sorted(scores, reverse=True)
    result = runner.invoke(
        main, ["translate", "-m", str(copy_model_dir), "--format", "tsv", "--greedy", line]
    )
    src, hyp, score = result.stdout.rstrip("\n").split("\t")
    assert (src, hyp) == (line, line) and float(score) < 0


def test_tsv_columns_are_the_runs_on_every_line():
    """Column 4 is the confidence on every line of a run that has one, empty on a blank line
    (it used to be missing there, so the alignment moved into column 4); the alignment is
    column 5 on every line."""
    lines = "Hello.\n\nWhere is the station?\n"
    args = ["translate", "--format", "tsv", "--align"]  # each line routed: a blank one passes
    rows = [r.split("\t") for r in CliRunner().invoke(main, args, input=lines).stdout.splitlines()]
    assert [len(r) for r in rows] == [5, 5, 5]
    assert rows[1][3:] == ["", ""] and float(rows[0][3]) >= 0 and "-" in rows[2][4]
    plain = CliRunner().invoke(main, [*args[:-1], "--no-confidence"], input=lines).stdout
    assert [len(r.split("\t")) for r in plain.splitlines()] == [3, 3, 3]


def test_input_output_files_and_env_model(tmp_path, copy_model_dir, copy_lines):
    """-i/-o files, and $MTCLI_MODEL when -m is absent."""
    src = write_lines(tmp_path / "in.txt", copy_lines[:5])
    out = tmp_path / "out.txt"
    result = CliRunner().invoke(
        main,
        ["translate", "-i", str(src), "-o", str(out)],
        env={"MTCLI_MODEL": str(copy_model_dir)},
    )
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines() == copy_lines[:5]


def test_missing_model_is_a_one_line_error(tmp_path):
    """A missing model directory names the path and the option it came from."""
    result = CliRunner().invoke(main, ["translate", "-m", str(tmp_path / "none"), "hi"])
    assert result.exit_code == 2
    assert f"-m {tmp_path / 'none'}: no such model directory or installed model" in result.output


def test_read_chunks_streams_before_input_ends():
    """A chunk is handed on as soon as no more input is waiting (tail -f makes progress)."""
    r, w = os.pipe()
    chunks = read_chunks(r, max_lines=1000)
    os.write(w, b"one\ntwo\n")
    assert next(chunks) == ["one", "two"]  # would block forever if it waited for 1,000 lines or EOF
    threading.Timer(0.05, lambda: (os.write(w, b"three\nfour"), os.close(w))).start()
    assert [line for chunk in chunks for line in chunk] == [
        "three",
        "four",
    ]  # last line needs no newline
    os.close(r)


def test_read_chunks_caps_chunk_size_and_reports_bad_utf8():
    """Chunks never exceed max_lines; invalid UTF-8 names the line."""
    r, w = os.pipe()
    os.write(w, b"".join(b"%d\n" % i for i in range(25)))
    os.close(w)
    assert [len(c) for c in read_chunks(r, max_lines=10)] == [10, 10, 5]
    r, w = os.pipe()
    os.write(w, b"ok\n\xff\n")
    os.close(w)
    with pytest.raises(UserError, match="stdin:2: invalid UTF-8"):
        list(read_chunks(r, max_lines=10))


def test_chunked_translation_keeps_order(copy_model_dir, copy_lines):
    """Sorting by length inside chunks never changes the output order."""
    loaded = load_model(copy_model_dir)
    translator = Translator(
        loaded.model, loaded.tokenizer, DecodeConfig(beam_size=2, chunk_lines=7, batch_tokens=40)
    )
    results = [t.text for t in translator.translate_stream(copy_lines)]
    assert results == copy_lines


@pytest.mark.skipif(not onednn_available(), reason="oneDNN's packed weights: x86 only")
def test_a_model_loaded_to_translate_keeps_only_packed_weights_and_scores_alike(
    copy_model_dir, copy_lines
):
    """build_translator loads a model from its directory with each Linear weight only in
    oneDNN's layout (the tied output projection kept): n-best outputs and scores equal those of
    a Translator over the same model loaded untouched; int8 leaves the weights to torch.ao."""
    cfg = DecodeConfig(beam_size=3, nbest=3)
    options = EngineOptions(device="cpu", text_layer=False)
    packed = build_translator([copy_model_dir], cfg, options)
    linears = [m for m in packed.models[0].modules() if isinstance(m, Linear)]
    assert sum(m.weight.is_meta for m in linears) == len(linears) - 1
    loaded = load_model(copy_model_dir)
    plain = Translator(loaded.model, loaded.tokenizer, cfg)
    for got, expected in zip(
        packed.translate_chunk(copy_lines), plain.translate_chunk(copy_lines), strict=True
    ):
        assert [text for text, _ in got.nbest] == [text for text, _ in expected.nbest]
        assert [score for _, score in got.nbest] == pytest.approx(
            [s for _, s in expected.nbest], abs=1e-4
        )
    int8 = build_translator([copy_model_dir], cfg, replace(options, quantize="int8"))
    assert not any(p.is_meta for p in int8.models[0].parameters())


def test_int8_quantized_translation(copy_model_dir, copy_lines):
    """--quantize int8 swaps the Linear layers for dynamic int8 ones and still copies its inputs."""
    result = CliRunner().invoke(
        main,
        ["translate", "-m", str(copy_model_dir), "--quantize", "int8", "--greedy"],
        input="\n".join(copy_lines) + "\n",
    )
    assert result.exit_code == 0, result.output
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(copy_lines)
    assert sum(a == b for a, b in zip(outputs, copy_lines, strict=True)) >= 0.9 * len(copy_lines)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_is_one_line_naming_where_the_results_went(copy_model_dir):
    """Writing results fails (ENOSPC): one line naming stdout or the -o file, exit 1. It was
    '[Errno 28] No space left on device', which named nothing (for -o, the failure at close
    hid the named one)."""

    def run(*args: str) -> subprocess.Popen:
        with open("/dev/full", "w") as full:
            return subprocess.Popen(
                [sys.executable, "-m", "mtcli", *args], stdin=subprocess.PIPE, stdout=full,
                stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip

    model = str(copy_model_dir)
    cases = [  # all at once: start-up is most of each
        ("stdout", run("translate", "-m", model, "a b")),
        ("/dev/full", run("translate", "-m", model, "-o", "/dev/full", "--force", "a b")),
        ("stdout", run("tokenizer", "encode", "-t", model)),
    ]
    for name, proc in cases:
        _, err = proc.communicate("a b\n", timeout=120)
        assert proc.returncode == 1, (name, err)
        assert err == f"Error: {name}: No space left on device\n", err


def test_stdin_redirected_from_the_output_file_is_refused(tmp_path, copy_model_dir):
    """`mtcli translate -o f --force < f` (and a link to f) would empty f before reading it:
    refused in one line, f intact. Before, f was left empty and the exit code was 0."""
    mine = write_lines(tmp_path / "mine.txt", ["a b", "c d"])
    (tmp_path / "link.txt").symlink_to(mine)
    for out in (mine, tmp_path / "link.txt"):
        with open(mine) as stdin:
            done = subprocess.run(
                [sys.executable, "-m", "mtcli", "translate", "-m", str(copy_model_dir), "-o", str(out), "--force"],
                stdin=stdin, capture_output=True, text=True, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip
        assert done.returncode == 2 and "is the input; writing it would erase it" in done.stderr
        assert mine.read_text() == "a b\nc d\n"
