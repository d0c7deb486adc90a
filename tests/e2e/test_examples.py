"""Every command a newcomer is shown runs as written (issue 43, item 5): each line of the README's
```sh blocks, each `$ ` line of its transcripts (whose shown output must be what it prints), and
each `mtcli ...` example in the help of `mtcli` and of every subcommand.

They run in order, in a fresh folder, through bash, with this venv's `mtcli` first on PATH
and the Tatoeba download already in mtcli's cache, laid out as `mtcli data prepare` leaves it
(no network here). What is changed, and only this: `mtcli train` gets a tiny budget appended
(flags win over a preset); `make test` and `make e2e` are not run (they are this suite);
`mtcli serve` starts in the background and serves the blocks after it. Files the README treats as the
reader's own (corpus.en, corpus.de) are made from Multi30k first. In `make e2e`: minutes.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import click
import pytest

from mtcli.cli import main
from tests.conftest import REPO, SHARED, TATOEBA

pytestmark = pytest.mark.e2e

BUDGET = ["--max-steps", "40", "--valid-every", "20", "--valid-bleu-lines", "20"]
NOT_RUN = {
    "make test": "the suite itself", "make e2e": "the suite itself",
    # need the hub and sacrebleu's server: tests/test_hub.py and test_published_sets.py run them
    # offline on caches laid out as those tools lay them out
    "mtcli models pull Helsinki-NLP/opus-mt-en-zh": "a download",
    'mtcli translate -m opus-mt-en-zh --to cmn_Hant "The council postponed the budget hearing."': "its model",
    "mtcli eval -m opus-mt-en-zh --test-set wmt20 --langpair en-zh": "a download",
    # a package from Argos's index, a corpus from statmt.org, the pulled teacher: run offline by
    # tests/e2e/test_ct2_import.py, test_mtdata.py and test_hf_import.py on what they lay out
    "mtcli import argos translate-en_zh-1_9.argosmodel --out en-zh-argos": "a downloaded package",
    'mtcli translate -m en-zh-argos --engine ctranslate2 "Where is the station?"': "its package",
    "mtcli data get Statmt-news_commentary-18.1-eng-zho --out nc18": "a download",
    "mtcli distill --teacher opus-mt-en-zh --src nc18/train.eng --config student.toml --out kd": "a download",
}  # fmt: skip
FENCE = re.compile(r"^```(\w*)\s*$")


def joined(lines: list[str]) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return [line for line in out if line.strip()]


def readme_blocks(text: str) -> list[tuple[str, list[str], list[str]]]:
    """Each fenced block as (kind, commands, shown output): a ```sh block's lines are all
    commands; in a plain block, `$ ` lines are commands and the lines up to the next are
    what they print."""
    blocks, kind, body = [], None, []
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence and kind is None:
            kind, body = fence.group(1) or "plain", []
        elif fence:
            blocks.append((kind, body))
            kind = None
        elif kind is not None:
            body.append(line)
    out = []
    for kind, lines in blocks:
        if kind == "sh":
            out.append(("sh", joined(lines), []))
        elif kind == "plain" and lines and lines[0].startswith("$ "):
            commands = joined([lines[0][2:], *[x for x in lines[1:] if x.startswith("    ")]])
            shown = [x for x in lines[1:] if not x.startswith("    ") and not x.startswith("$ ")]
            out.append(("transcript", commands, shown))
    return out


def help_examples() -> list[str]:
    """The `mtcli ...` lines of every help text, continuations joined."""
    found = []

    def visit(command: click.Command, ctx: click.Context) -> None:
        help_text = command.get_help(ctx)
        lines = [line.strip() for line in help_text.splitlines()]
        starts = [i for i, line in enumerate(lines) if line.startswith("mtcli ")]
        for i in starts:
            found.extend(joined(_with_continuation(lines, i))[:1])
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                visit(sub, click.Context(sub, info_name=name, parent=ctx))

    visit(main, click.Context(main, info_name="mtcli"))
    return found


def _with_continuation(lines: list[str], i: int) -> list[str]:
    taken = [lines[i]]
    while taken[-1].endswith("\\") and i + 1 < len(lines):
        i += 1
        taken.append(lines[i])
    return taken


# ---------------------------------------------------------------- running them
@pytest.fixture
def workdir(tmp_path) -> tuple[Path, dict]:
    """A folder with the reader's own corpus, and the environment the commands run in."""
    cache = tmp_path / "cache"
    downloads = cache / "downloads" / "tatoeba-en-zh"
    downloads.mkdir(parents=True)
    # manythings.org's archive as `data prepare` downloads it: cmn.txt inside cmn-eng.zip
    text = gzip.decompress((TATOEBA / "raw" / "cmn.txt.gz").read_bytes())
    with zipfile.ZipFile(downloads / "cmn-eng.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("cmn.txt", text)
    work = tmp_path / "work"
    work.mkdir()
    for suffix in ("en", "de"):
        lines = (SHARED / "multi30k-en-de" / f"train.{suffix}").read_text(encoding="utf-8")
        (work / f"corpus.{suffix}").write_text("\n".join(lines.splitlines()[:6000]) + "\n")
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTCLI_")}
    env.update(PATH=bin_dir + os.pathsep + env["PATH"], MTCLI_CACHE=str(cache), NO_COLOR="1")
    return work, env


def run_line(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    command = line
    if re.match(r"\s*mtcli train\b", line) and "--list-presets" not in line:
        command = line + " " + " ".join(BUDGET)
    if line.startswith("make "):
        cwd = REPO  # the Makefile's targets run from the checkout
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def check(line: str, done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"{line}\nexit {done.returncode}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, f"{line}\n{done.stderr[-2000:]}"


class Server:
    """`mtcli serve` of a README block, running until the README's commands end."""

    def __init__(self, line: str, cwd: Path, env: dict):
        self.port = int(re.search(r"--port (\d+)", line).group(1))
        self.proc = subprocess.Popen(["bash", "-c", "exec " + line], cwd=cwd, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # listening, and its models loaded
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return
            except OSError:  # refused, or 503 while the models load
                time.sleep(0.2)
        raise AssertionError(f"{line}: not ready after 120 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def test_every_readme_command_runs_as_written(workdir):
    """The README's commands, block after block, in one folder: each exits 0 without a
    traceback, and a transcript prints what the README shows."""
    work, env = workdir
    blocks = readme_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 8, "the README's command blocks were not found"
    ran, servers = [], []
    try:
        for kind, commands, shown in blocks:
            for line in commands:
                if line.split("#")[0].strip() in NOT_RUN:
                    continue
                if line.startswith("mtcli serve"):  # serves the blocks after it
                    servers.append(Server(line, work, env))
                    continue
                done = run_line(line, work, env)
                check(line, done)
                if kind == "transcript":
                    assert done.stdout.splitlines() == shown, (line, done.stdout)
                ran.append(line)
    finally:
        for server in servers:
            server.stop()
    assert servers, "the README serves nothing"
    print(f"{len(ran)} README commands ran")


def test_every_help_example_runs_as_written(workdir):
    """The examples in `mtcli -h` and every subcommand's help, in order, in one folder."""
    work, env = workdir
    examples = help_examples()
    assert any(e.startswith("mtcli train") for e in examples), examples
    for line in examples:
        check(line, run_line(line, work, env))
    print(f"{len(examples)} help examples ran")
