"""The command group: help, version, and where output goes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mtcli import __version__
from mtcli.cli import main
from tests.conftest import REPO, run_mtcli, write_lines


def test_help_lists_commands_and_a_pipeline():
    """-h and --help both work; the group help shows a worked pipeline and every subcommand."""
    for flag in ("-h", "--help"):
        result = CliRunner().invoke(main, [flag])
        assert result.exit_code == 0
        for command in ("tokenizer", "train", "translate", "eval", "data", "attention", "export"):
            assert f"\n  {command} " in result.output
        assert (
            "mtcli translate -m runs/en-zh/best -i data/tatoeba/test.src -o hyp.txt"
            in result.output
        )


def test_version():
    """--version prints the package version."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_unknown_command_is_a_usage_error():
    """A typo gives click's usage error (exit 2), no traceback, nothing on stdout."""
    proc = run_mtcli("translte", "x")
    assert proc.returncode == 2 and proc.stdout == "" and "No such command" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("closed", "command"), [(0, ["tokenizer", "encode"]), (1, ["eval"])])
def test_a_closed_standard_stream_is_one_line(closed, command, tmp_path, copy_model_dir):
    """`mtcli ... <&-` or `>&-`: one line naming the stream, exit 1 (Python leaves the stream
    None, and the first use was an internal error: AttributeError)."""
    text = write_lines(tmp_path / "a.txt", ["a b c d"])
    args = {"tokenizer": ["-t", str(copy_model_dir)], "eval": ["--hyp", str(text), "--ref", str(text)]}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "mtcli", *command, *args[command[0]]], stderr=subprocess.PIPE,
        text=True, cwd=REPO, env={**os.environ, "NO_COLOR": "1"}, preexec_fn=lambda: os.close(closed),
    )  # fmt: skip
    name = ["stdin", "stdout"][closed]
    assert done.returncode == 1 and done.stderr == f"Error: {name}: closed (Bad file descriptor)\n"


def test_the_readme_is_for_a_newcomer():
    """Under 350 lines, with the two commands, the shipped models' limits said plainly, a
    quickstart, serving, one speed table and where to read more (the rounds are in docs/)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 350
    for heading in ("## Set-up: two commands", "## The shipped models, and what they cannot do",
                    "## Quickstart", "## Serving", "## Speed", "## Where to read more"):  # fmt: skip
        assert f"\n{heading}\n" in readme, heading
    assert "make demo" in readme and "make test" in readme
    assert "25,000 short everyday sentences" in readme and "they are wrong" in readme
    for page in ("docs/guide.md", "docs/models.md", "docs/speed.md"):
        assert (REPO / page).is_file() and f"]({page}" in readme, page
