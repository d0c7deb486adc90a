"""Bad input as a hostile but fair user gives it, through the real `mtcli` process.

Every case must end in exactly one line on stderr naming the option, file or line, exit code 2,
no traceback, nothing on stdout, and nothing created, changed or removed in its folder.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, write_lines
from tests.forked import ForkServer


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path below `folder` with its size and modification time."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


# ---------------------------------------------------------------- what a case may change first
def _truncate_weights(d: Path) -> None:
    w = d / "model" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _bad_header(d: Path) -> None:
    w = d / "model" / "model.safetensors"
    w.write_bytes(b"\xff" * 8 + w.read_bytes()[8:])


def _edit_config(change):
    def edit(d: Path) -> None:
        path = d / "model" / "config.json"
        config = json.loads(path.read_text())
        path.write_text(json.dumps(change(config)))

    return edit


def _shapes_differ(config: dict) -> dict:
    config["model"]["d_ff"] *= 2
    return config


def _model_key(key, value):
    def change(config: dict) -> dict:
        config["model"][key] = value
        return config

    return change


def _break_tokenizer(d: Path) -> None:
    (d / "model" / "tokenizer.json").write_text('{"joint": "yes"')


def _corrupt_trainer_state(d: Path) -> None:
    shutil.copytree(d / "model", d / "run" / "last")
    (d / "run" / ".lock").write_text("")  # as in every run directory
    (d / "run" / "last" / "trainer_state.pt").write_bytes(b"PK\x03\x04 not a zip")


def _toml(text: str):
    return lambda d: (d / "run.toml").write_text(text)


# (name, arguments with {dir} for the case's folder, stdin, expected text in the one line, setup)
CPUS = len(os.sched_getaffinity(0))  # --threads may be at most this
TOKENIZE = ["tokenizer", "train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh"]  # then --out ...

CASES = [
    (
        "n_heads 0",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--n-heads", "0"],
        None,
        "--n-heads 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "d_model 0",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--d-model", "0"],
        None,
        "--d-model 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "heads do not divide",
        ["train", "--src", "{dir}/a.en", "--d-model", "100", "--n-heads", "3"],
        None,
        "--d-model 100: must be divisible by n_heads (3)",
        None,
    ),  # fmt: skip
    (
        "valid_every 0",
        ["train", "--src", "{dir}/a.en", "--valid-every", "0"],
        None,
        "--valid-every 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "log_every 0",
        ["train", "--src", "{dir}/a.en", "--log-every", "0"],
        None,
        "--log-every 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "warmup 0",
        ["train", "--src", "{dir}/a.en", "--warmup", "0"],
        None,
        "--warmup 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "dropout 2",
        ["train", "--src", "{dir}/a.en", "--dropout", "2"],
        None,
        "--dropout 2.0: must be below 1",
        None,
    ),  # fmt: skip
    (
        "lr_factor -1",
        ["train", "--src", "{dir}/a.en", "--lr-factor", "-1"],
        None,
        "--lr-factor -1.0: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "lr_factor nan",
        ["train", "--src", "{dir}/a.en", "--lr-factor", "nan"],
        None,
        "--lr-factor nan: must be a finite number",
        None,
    ),  # fmt: skip
    (
        "max_steps -5",
        ["train", "--src", "{dir}/a.en", "--max-steps", "-5"],
        None,
        "--max-steps -5: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "accum 0",
        ["train", "--src", "{dir}/a.en", "--accum", "0"],
        None,
        "--accum 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "enc layers -1",
        ["train", "--src", "{dir}/a.en", "--n-enc-layers", "-1"],
        None,
        "--n-enc-layers -1: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "label smoothing -0.1",
        ["train", "--src", "{dir}/a.en", "--label-smoothing", "-0.1"],
        None,
        "--label-smoothing -0.1: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "max_time -1",
        ["train", "--src", "{dir}/a.en", "--max-time", "-1"],
        None,
        "--max-time -1.0: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "keep -1",
        ["train", "--src", "{dir}/a.en", "--keep", "-1"],
        None,
        "--keep -1: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "threads -1",
        ["train", "--src", "{dir}/a.en", "--threads", "-1"],
        None,
        "--threads -1: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "threads above the CPUs",
        ["train", "--src", "{dir}/a.en", "--threads", str(CPUS + 1)],
        None,
        f"--threads {CPUS + 1}: must be at most {CPUS} (the CPUs this process may use)",
        None,
    ),  # fmt: skip
    (
        "translate threads above the CPUs",
        ["translate", "-m", "{dir}/model", "--threads", "100000", "x"],
        None,
        f"Invalid value for '--threads': 100000 is not in the range 0<=x<={CPUS}",
        None,
    ),  # fmt: skip
    (
        "a model past the memory",
        ["train", "--src", "{dir}/a.en", "--d-model", "1000000"],
        None,
        "--d-model 1000000 --d-ff 1024 --n-enc-layers 3 --n-dec-layers 3: 36,012,360,006,144 parameters",
        None,
    ),  # fmt: skip
    (
        "seed past 64 bits",
        ["train", "--src", "{dir}/a.en", "--seed", "99999999999999999999999"],
        None,
        "--seed 99999999999999999999999: must be at most 4294967295",
        None,
    ),  # fmt: skip
    (
        "sampling seed past 64 bits",
        ["translate", "-m", "{dir}/model", "--sample", "--seed", "99999999999999999999999", "x"],
        None,
        "--seed 99999999999999999999999: must be at most 4294967295",
        None,
    ),  # fmt: skip
    (
        "valid bleu lines -1",
        ["train", "--src", "{dir}/a.en", "--valid-bleu-lines", "-1"],
        None,
        "--valid-bleu-lines -1: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "max_len past positions",
        ["train", "--src", "{dir}/a.en", "--max-len", "300"],
        None,
        "--max-len 300: must be below model.max_positions (256)",
        None,
    ),  # fmt: skip
    (
        "toml string for int",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: max_tokens = 'big': must be an integer",
        _toml('max_tokens = "big"\n'),
    ),  # fmt: skip
    (
        "toml list for path",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: src = ['a']: must be a string",
        _toml('src = ["a"]\n'),
    ),  # fmt: skip
    (
        "toml model not a table",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: model = 3: must be a table",
        _toml("model = 3\n"),
    ),  # fmt: skip
    (
        "toml float for int",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: model.d_model = 2.5: must be an integer",
        _toml("[model]\nd_model = 2.5\n"),
    ),  # fmt: skip
    (
        "toml bool for float",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: model.dropout = True: must be a number",
        _toml("[model]\ndropout = true\n"),
    ),  # fmt: skip
    (
        "toml syntax",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: cannot read config",
        _toml("max_tokens = = 3\n"),
    ),  # fmt: skip
    (
        "toml unknown key",
        ["train", "--config", "{dir}/run.toml"],
        None,
        "run.toml: max_tokenz = 3: unknown setting",
        _toml("max_tokenz = 3\n"),
    ),  # fmt: skip
    (
        "train out is a user folder",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--out", "{dir}/mine"],
        None,
        "mine: a directory that is not an mtcli training run",
        None,
    ),  # fmt: skip
    (
        "train out under a file",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--out", "{dir}/a.en/run"],
        None,
        "a.en/run",
        None,
    ),  # fmt: skip
    (
        "resume missing",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--resume", "{dir}/nope"],
        None,
        "--resume",
        None,
    ),  # fmt: skip
    (
        "resume an exported model",
        ["train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh", "--resume", "{dir}/export"],
        None,
        "no trainer_state.pt to resume from",
        None,
    ),  # fmt: skip
    (
        "resume a corrupt state",
        ["train", "--out", "{dir}/run"],
        None,
        "trainer_state.pt: unreadable",
        _corrupt_trainer_state,
    ),  # fmt: skip
    (
        "init with another tokenizer",
        [
            "train",
            "--src",
            "{dir}/a.en",
            "--tgt",
            "{dir}/a.zh",
            "--init",
            "{dir}/model",
            "--tokenizer",
            "{dir}/tok",
            "--out",
            "{dir}/ft",
            "--max-len",
            "32",
        ],
        None,
        "conflicts with --init",
        None,
    ),  # fmt: skip
    (
        "init max_len default",
        [
            "train",
            "--src",
            "{dir}/a.en",
            "--tgt",
            "{dir}/a.zh",
            "--init",
            "{dir}/model",
            "--out",
            "{dir}/ft",
        ],
        None,
        "--max-len 128 (the default): must be below model.max_positions (64)",
        None,
    ),  # fmt: skip
    (
        "init with another shape",
        [
            "train",
            "--src",
            "{dir}/a.en",
            "--tgt",
            "{dir}/a.zh",
            "--init",
            "{dir}/model",
            "--d-model",
            "32",
            "--out",
            "{dir}/ft",
            "--max-len",
            "32",
        ],
        None,
        "has d_model 64; it cannot be trained as 32",
        None,
    ),  # fmt: skip
    (
        "batch_tokens -1",
        ["translate", "-m", "{dir}/model", "--batch-tokens", "-1", "x"],
        None,
        "--batch-tokens -1: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "max_len_a -1",
        ["translate", "-m", "{dir}/model", "--max-len-a", "-1", "x"],
        None,
        "--max-len-a -1.0: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "length penalty nan",
        ["translate", "-m", "{dir}/model", "--length-penalty", "nan", "x"],
        None,
        "--length-penalty nan: must be a finite number",
        None,
    ),  # fmt: skip
    (  # a Latin-1 terminal: the byte é is not UTF-8 (Python keeps it as a lone surrogate)
        "text not UTF-8",
        ["translate", "-m", "{dir}/model", "caf\udce9 ok"],
        None,
        "Invalid value for '[TEXT]...': invalid UTF-8 (byte 4)",
        None,
    ),  # fmt: skip
    (
        "prefix not UTF-8",
        ["translate", "-m", "{dir}/model", "--prefix", "\udcff", "x"],
        None,
        "Invalid value for '--prefix': invalid UTF-8 (byte 1)",
        None,
    ),  # fmt: skip
    (
        "attention sentence not UTF-8",
        ["attention", "-m", "{dir}/model", "a\udcffb"],
        None,
        "Invalid value for 'SENTENCE': invalid UTF-8 (byte 2)",
        None,
    ),  # fmt: skip
    (  # sampling records no attention: an internal error before
        "align a sample",
        ["translate", "-m", "{dir}/model", "--sample", "--align", "--format", "tsv", "x"],
        None,
        "--align reads a search's attention; it does not align --sample",
        None,
    ),  # fmt: skip
    (  # a corpus of paragraphs: sentencepiece skipped every line and failed an assertion
        "tokenizer corpus of long lines",
        ["tokenizer", "train", "--src", "{dir}/l.en", "--tgt", "{dir}/l.en", "--out", "{dir}/t"],
        None,
        "/l.en: every line is longer than 4,192 bytes, which sentencepiece skips",
        lambda d: (d / "l.en").write_text("word " * 1000 + "\n"),
    ),  # fmt: skip
    (  # input without newlines was read into memory whole (cat /dev/zero | ...)
        "stdin line past 1 MiB",
        ["tokenizer", "encode", "-t", "{dir}/tok"],
        b"a" * (2**20 + 1),
        "stdin:1: a line of more than 1,048,576 bytes (is it text?)",
        None,
    ),  # fmt: skip
    (
        "corpus line past 1 MiB",
        ["train", "--src", "{dir}/z.en", "--tgt", "{dir}/a.zh", "--out", "{dir}/r"],
        None,
        "z.en:2: a line of more than 1,048,576 bytes (is it text?)",
        lambda d: (d / "z.en").write_bytes(b"ok\n" + b"\0" * (2**20 + 1)),
    ),  # fmt: skip
    (  # --force or not, opening the input for writing emptied it before a line was read
        "output is the input",
        [
            "translate",
            "-m",
            "{dir}/model",
            "-i",
            "{dir}/notes.txt",
            "-o",
            "{dir}/notes.txt",
            "--force",
        ],
        None,
        "notes.txt: is the input; writing it would erase it before it is read",
        None,
    ),  # fmt: skip
    (  # --force replaced the folder it had just read: the raw download was gone
        "prepare over its own raw files",
        [
            "data",
            "prepare",
            "tatoeba-en-zh",
            "--from",
            "{dir}/raw",
            "--out",
            "{dir}/raw",
            "--force",
        ],
        None,
        "raw: is the input",
        None,
    ),  # fmt: skip
    (
        "tokenizer over the folder of its corpus",
        [*TOKENIZE, "--out", "{dir}", "--force"],
        None,
        "holds the input",
        None,
    ),  # fmt: skip
    (
        "export over its own checkpoint",
        ["export", "{dir}/model", "--out", "{dir}/model", "--force"],
        None,
        "model: is the input",
        None,
    ),  # fmt: skip
    (  # click's FloatRange let NaN through: every request then waited forever
        "batch wait nan",
        ["serve", "-m", "{dir}/model", "--batch-wait-ms", "nan"],
        None,
        "Invalid value for '--batch-wait-ms': nan is not a number",
        None,
    ),  # fmt: skip
    (
        "request timeout nan",
        ["serve", "-m", "{dir}/model", "--request-timeout", "nan"],
        None,
        "Invalid value for '--request-timeout': nan is not a number",
        None,
    ),  # fmt: skip
    (
        "no connection at all",
        ["serve", "-m", "{dir}/model", "--max-connections", "0"],
        None,
        "Invalid value for '--max-connections': 0 is not in the range x>=1.",
        None,
    ),  # fmt: skip
    (  # the server's own beam would be above what it lets a request ask
        "max beam below the beam",
        ["serve", "-m", "{dir}/model", "--beam-size", "5", "--max-beam", "2"],
        None,
        "--max-beam 2: below --beam-size 5, the server's own",
        None,
    ),  # fmt: skip
    (
        "character coverage nan",
        [*TOKENIZE, "--out", "{dir}/t", "--character-coverage", "nan"],
        None,
        "Invalid value for '--character-coverage': nan is not a number",
        None,
    ),  # fmt: skip
    (  # in our range before, below sentencepiece's: its internal assertion
        "character coverage below sentencepiece's",
        [*TOKENIZE, "--out", "{dir}/t", "--character-coverage", "0.95"],
        None,
        "0.95 is not in the range 0.98<=x<=1.0",
        None,
    ),  # fmt: skip
    (
        "beam 100000",
        ["translate", "-m", "{dir}/model", "--beam-size", "100000", "x"],
        None,
        "--beam-size 100000: must be at most 1024",
        None,
    ),  # fmt: skip
    (
        "100000 draws",
        ["translate", "-m", "{dir}/model", "--sample", "--nbest", "100000", "x"],
        None,
        "--nbest 100000: must be at most 1024",
        None,
    ),  # fmt: skip
    (
        "beam 0",
        ["translate", "-m", "{dir}/model", "--beam-size", "0", "x"],
        None,
        "--beam-size 0: must be at least 1",
        None,
    ),  # fmt: skip
    (
        "temperature 0",
        ["translate", "-m", "{dir}/model", "--sample", "--temperature", "0", "x"],
        None,
        "--temperature 0.0: must be at least 0.0001",
        None,
    ),  # fmt: skip
    (
        "top_p above 1",
        ["translate", "-m", "{dir}/model", "--sample", "--top-p", "2", "x"],
        None,
        "--top-p 2.0: must be at most 1",
        None,
    ),  # fmt: skip
    (
        "temperature without sample",
        ["translate", "-m", "{dir}/model", "--temperature", "0.5", "x"],
        None,
        "need --sample",
        None,
    ),  # fmt: skip
    (
        "no repeat ngram -1",
        ["translate", "-m", "{dir}/model", "--no-repeat-ngram", "-1", "x"],
        None,
        "--no-repeat-ngram -1: must be at least 0",
        None,
    ),  # fmt: skip
    (
        "glossary without tabs",
        ["translate", "-m", "{dir}/model", "--glossary", "{dir}/notes.txt", "x"],
        None,
        "notes.txt:1: expected source term TAB target term",
        None,
    ),  # fmt: skip
    (
        "attention kind",
        ["train", "--src", "{dir}/a.en", "--attention", "cosine"],
        None,
        "--attention",
        None,
    ),  # fmt: skip
    (
        "nbest above beam",
        ["translate", "-m", "{dir}/model", "--beam-size", "2", "--nbest", "3", "x"],
        None,
        "--nbest 3: must not exceed beam_size (2)",
        None,
    ),  # fmt: skip
    (
        "translate output exists",
        ["translate", "-m", "{dir}/model", "-o", "{dir}/a.zh", "x"],
        None,
        "--output",
        None,
    ),  # fmt: skip
    (
        "translate stdin not utf-8",
        ["translate", "-m", "{dir}/model"],
        b"ok\n\xff\xfe\n",
        "stdin:2: invalid UTF-8",
        None,
    ),  # fmt: skip
    (
        "truncated weights",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "model.safetensors: tensor",
        _truncate_weights,
    ),  # fmt: skip
    (
        "bad safetensors header",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "model.safetensors: not a safetensors file",
        _bad_header,
    ),  # fmt: skip
    (
        "shapes disagree",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "config.json implies",
        _edit_config(_shapes_differ),
    ),  # fmt: skip
    (
        "config is a list",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "config.json: expected a JSON object",
        _edit_config(lambda c: [c]),
    ),  # fmt: skip
    (
        "format is a string",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "config.json: format must be an integer",
        _edit_config(lambda c: {**c, "format": "1"}),
    ),  # fmt: skip
    (
        "config d_model string",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "config.json: model.d_model = 'big': must be an integer",
        _edit_config(_model_key("d_model", "big")),
    ),  # fmt: skip
    (
        "broken tokenizer.json",
        ["translate", "-m", "{dir}/model", "x"],
        None,
        "tokenizer.json: invalid JSON",
        _break_tokenizer,
    ),  # fmt: skip
    (
        "eval tokenize klingon",
        ["eval", "--hyp", "{dir}/a.zh", "--ref", "{dir}/a.zh", "--tokenize", "klingon"],
        None,
        "klingon",
        None,
    ),  # fmt: skip
    (
        "eval bootstrap 0",
        ["eval", "--hyp", "{dir}/a.zh", "--ref", "{dir}/a.zh", "--bootstrap", "0"],
        None,
        "--bootstrap",
        None,
    ),  # fmt: skip
    (
        "eval stdin not utf-8",
        ["eval", "--hyp", "-", "--ref", "{dir}/a.zh"],
        b"\xff\n",
        "stdin:1: invalid UTF-8",
        None,
    ),  # fmt: skip
    (
        "attention width 0",
        ["attention", "-m", "{dir}/model", "--width", "0", "x"],
        None,
        "--width",
        None,
    ),  # fmt: skip
    (
        "attention png under a file",
        ["attention", "-m", "{dir}/model", "--png", "{dir}/a.en/x.png", "x"],
        None,
        "--png",
        None,
    ),  # fmt: skip
    (
        "export over its own run",
        ["export", "{dir}/run2/step-2", "--out", "{dir}/run2"],
        None,
        "run2: holds the input",
        None,
    ),  # fmt: skip
    (
        "export over a user folder",
        ["export", "{dir}/model", "--out", "{dir}/mine"],
        None,
        "--out",
        None,
    ),  # fmt: skip
    (
        "tokenizer out is a user folder",
        [*TOKENIZE, "--out", "{dir}/mine"],
        None,
        "mtcli will not replace it",
        None,
    ),  # fmt: skip
    (
        "tokenizer out is a file",
        [*TOKENIZE, "--out", "{dir}/notes.txt"],
        None,
        "notes.txt: a file",
        None,
    ),  # fmt: skip
    (
        "tokenizer train not utf-8",
        ["tokenizer", "train", "--src", "{dir}/bad.en", "--tgt", "{dir}/a.zh", "--out", "{dir}/t"],
        None,
        "bad.en:2: invalid UTF-8",
        None,
    ),  # fmt: skip
    (
        "tokenizer vocab too small",
        [*TOKENIZE, "--out", "{dir}/t", "--vocab-size", "8"],
        None,
        "--vocab-size 8 is too small",
        None,
    ),  # fmt: skip
    (
        "tokenizer encode not utf-8",
        ["tokenizer", "encode", "-t", "{dir}/model"],
        b"\xff\n",
        "stdin:1: invalid UTF-8",
        None,
    ),  # fmt: skip
    (
        "tokenizer decode id out of range",
        ["tokenizer", "decode", "-t", "{dir}/model", "--ids"],
        b"5 99999\n",
        "stdin:1: id 99999 is outside the vocabulary",
        None,
    ),  # fmt: skip
    (
        "tokenizer decode not ids",
        ["tokenizer", "decode", "-t", "{dir}/model", "--ids"],
        b"a b\n",
        "stdin:1: expected whitespace-separated integer ids",
        None,
    ),  # fmt: skip
    (
        "prepare test size too big",
        [
            "data",
            "prepare",
            "tatoeba-en-zh",
            "--from",
            "{dir}/raw",
            "--out",
            "{dir}/p",
            "--no-verify",
            "--test-size",
            "100000",
        ],
        None,
        "--test-size 100000 and --valid-size 1000 leave no training pairs",
        None,
    ),  # fmt: skip
    (
        "prepare test size negative",
        [
            "data",
            "prepare",
            "tatoeba-en-zh",
            "--from",
            "{dir}/raw",
            "--out",
            "{dir}/p",
            "--test-size",
            "-5",
        ],
        None,
        "--test-size",
        None,
    ),  # fmt: skip
    (
        "prepare corrupt gz",
        ["data", "prepare", "tatoeba-en-zh", "--from", "{dir}/raw-gz", "--out", "{dir}/p"],
        None,
        "cmn.txt.gz: damaged archive",
        None,
    ),  # fmt: skip
    (
        "prepare corrupt zip",
        ["data", "prepare", "tatoeba-en-zh", "--from", "{dir}/raw-zip", "--out", "{dir}/p"],
        None,
        "cmn-eng.zip: damaged archive",
        None,
    ),  # fmt: skip
    (
        "prepare not utf-8",
        ["data", "prepare", "tatoeba-en-zh", "--from", "{dir}/raw-bad", "--out", "{dir}/p"],
        None,
        "cmn.txt: cmn.txt line 2: invalid UTF-8",
        None,
    ),  # fmt: skip
    (
        "prepare out is a user folder",
        [
            "data",
            "prepare",
            "tatoeba-en-zh",
            "--from",
            "{dir}/raw",
            "--out",
            "{dir}/mine",
            "--no-verify",
        ],
        None,
        "mtcli will not replace it",
        None,
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def world(tmp_path_factory, copy_model_dir) -> Path:
    """The folder every case starts from: text, a model, a run, raw corpora, a user's folder."""
    d = tmp_path_factory.mktemp("world")
    write_lines(d / "a.en", ["a b", "c d", "e f"])
    write_lines(d / "a.zh", ["一", "二", "三"])
    (d / "bad.en").write_bytes(b"fine\n\xff\xfe broken\n")
    (d / "notes.txt").write_text("my notes\n")
    (d / "mine").mkdir()
    (d / "mine" / "thesis.tex").write_text("\\section{mine}\n")
    shutil.copytree(copy_model_dir, d / "model")
    shutil.copytree(
        copy_model_dir,
        d / "tok",
        ignore=lambda *a: ["config.json", "model.safetensors", "trainer_state.pt"],
    )
    (d / "tok" / "spm.model").write_bytes((d / "tok" / "spm.model").read_bytes())
    shutil.copytree(copy_model_dir, d / "export", ignore=lambda *a: ["trainer_state.pt"])
    run2 = d / "run2"
    shutil.copytree(copy_model_dir, run2 / "step-2")
    rows = "".join(
        f"Sentence {i}.\t第{i}句。\tCC-BY 2.0 (France) Attribution: x\n" for i in range(30)
    )
    (d / "raw").mkdir()
    (d / "raw" / "cmn.txt").write_text(rows, encoding="utf-8")
    (d / "raw-gz").mkdir()
    (d / "raw-gz" / "cmn.txt.gz").write_bytes(gzip.compress(rows.encode())[:-20])
    (d / "raw-zip").mkdir()
    buf = d / "raw-zip" / "cmn-eng.zip"
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("cmn.txt", rows)
    buf.write_bytes(buf.read_bytes()[:40])
    (d / "raw-bad").mkdir()
    (d / "raw-bad" / "cmn.txt").write_bytes(rows.encode()[:50] + b"\n\xff\xfe\n")
    return d


def _run_case(world: Path, root: Path, case, forks: ForkServer) -> tuple[str, str | None]:
    """Run one case in its own process and its own copy of the world; None when it behaved,
    else what went wrong."""
    name, args, stdin, expected, setup = case
    d = root / name.replace(" ", "_")
    shutil.copytree(world, d, symlinks=True)
    if setup:
        setup(d)
    before = _snapshot(d)
    code, stdout, stderr = forks.run([a.format(dir=d) for a in args], stdin or b"", REPO)
    lines = stderr.decode(errors="replace").strip().splitlines()
    problems = []
    if code != 2:
        problems.append(f"exit {code}")
    if len(lines) != 1 or "Traceback" in stderr.decode(errors="replace"):
        problems.append(f"{len(lines)} stderr lines")
    if lines and expected not in lines[-1]:
        problems.append(f"message lacks {expected!r}")
    if stdout:
        problems.append("stdout not empty")
    if _snapshot(d) != before:
        problems.append("files changed")
    got = lines[-1] if lines else ""
    return f"{name}: exit {code}: {got}", ("; ".join(problems) or None)


@pytest.mark.slow
def test_every_bad_input_is_one_line_exit_2_and_changes_nothing(world, tmp_path):
    """Each case of the table: one stderr line with the expected words, exit 2, no traceback,
    no stdout, its folder byte for byte as before."""
    # a process a case, forked from a warm parent that imported the CLI (tests/forked.py); a
    # parent with torch imported forks slower (8.4 s for the table against 6-7)
    forks = ForkServer()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:  # one a core
            outcomes = list(pool.map(lambda case: _run_case(world, tmp_path, case, forks), CASES))
    finally:
        forks.close()
    print("\n".join(line for line, _ in outcomes))  # the table, for the closing note
    failures = [f"{line}  <- {problem}" for line, problem in outcomes if problem]
    assert not failures, "\n".join(failures)
