"""The command group: help, version, and where output goes."""

from __future__ import annotations

from click.testing import CliRunner

from mtcli import __version__
from mtcli.cli import main
from tests.conftest import run_mtcli


def test_help_lists_commands_and_a_pipeline():
    """-h and --help both work; the group help shows a worked pipeline and every subcommand."""
    for flag in ("-h", "--help"):
        result = CliRunner().invoke(main, [flag])
        assert result.exit_code == 0
        for command in ("tokenizer", "train", "translate", "eval", "data", "attention", "export"):
            assert f"\n  {command} " in result.output
        assert (
            "mtcli translate -m runs/en-zh/best < data/tatoeba/test.src > hyp.txt" in result.output
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
