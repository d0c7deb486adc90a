"""Bad input as a hostile but fair user gives it, through the real `mtcli` process.

Every case must end in exactly one line on stderr naming the option, file or line, exit code 2,
no traceback, nothing on stdout, and nothing created, changed or removed in its folder.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
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


def case(name: str, argv, expected: str, stdin: bytes | None = None, setup=None) -> tuple:
    """One hostile input: its name, the command line (a string split as a shell splits it, or
    a list; {dir} is the case's folder), what the one line must say, stdin, a setup."""
    return name, shlex.split(argv) if isinstance(argv, str) else argv, stdin, expected, setup


CPUS = len(os.sched_getaffinity(0))  # --threads may be at most this
TOKENIZE = ["tokenizer", "train", "--src", "{dir}/a.en", "--tgt", "{dir}/a.zh"]  # then --out ...

CASES = [
    case("n_heads 0", "train --src {dir}/a.en --tgt {dir}/a.zh --n-heads 0", "--n-heads 0: must be at least 1"),
    case("d_model 0", "train --src {dir}/a.en --tgt {dir}/a.zh --d-model 0", "--d-model 0: must be at least 1"),
    case("heads do not divide", "train --src {dir}/a.en --d-model 100 --n-heads 3", "--d-model 100: must be divisible by n_heads (3)"),
    case("valid_every 0", "train --src {dir}/a.en --valid-every 0", "--valid-every 0: must be at least 1"),
    case("log_every 0", "train --src {dir}/a.en --log-every 0", "--log-every 0: must be at least 1"),
    case("warmup 0", "train --src {dir}/a.en --warmup 0", "--warmup 0: must be at least 1"),
    case("dropout 2", "train --src {dir}/a.en --dropout 2", "--dropout 2.0: must be below 1"),
    case("lr_factor -1", "train --src {dir}/a.en --lr-factor -1", "--lr-factor -1.0: must be at least 0"),
    case("lr_factor nan", "train --src {dir}/a.en --lr-factor nan", "--lr-factor nan: must be a finite number"),
    case("max_steps -5", "train --src {dir}/a.en --max-steps -5", "--max-steps -5: must be at least 0"),
    case("accum 0", "train --src {dir}/a.en --accum 0", "--accum 0: must be at least 1"),
    case("enc layers -1", "train --src {dir}/a.en --n-enc-layers -1", "--n-enc-layers -1: must be at least 1"),
    case("label smoothing -0.1", "train --src {dir}/a.en --label-smoothing -0.1", "--label-smoothing -0.1: must be at least 0"),
    case("max_time -1", "train --src {dir}/a.en --max-time -1", "--max-time -1.0: must be at least 0"),
    case("keep -1", "train --src {dir}/a.en --keep -1", "--keep -1: must be at least 0"),
    case("threads -1", "train --src {dir}/a.en --threads -1", "--threads -1: must be at least 0"),
    case("threads above the CPUs", ["train", "--src", "{dir}/a.en", "--threads", str(CPUS + 1)], f"--threads {CPUS + 1}: must be at most {CPUS} (the CPUs this process may use)"),
    case("translate threads above the CPUs", "translate -m {dir}/model --threads 100000 x", f"Invalid value for '--threads': 100000 is not in the range 0<=x<={CPUS}"),
    case("a model past the memory", "train --src {dir}/a.en --d-model 1000000", "--d-model 1000000 --d-ff 1024 --n-enc-layers 3 --n-dec-layers 3: 36,012,360,006,144 parameters"),
    case("seed past 64 bits", "train --src {dir}/a.en --seed 99999999999999999999999", "--seed 99999999999999999999999: must be at most 4294967295"),
    case("sampling seed past 64 bits", "translate -m {dir}/model --sample --seed 99999999999999999999999 x", "--seed 99999999999999999999999: must be at most 4294967295"),
    case("valid bleu lines -1", "train --src {dir}/a.en --valid-bleu-lines -1", "--valid-bleu-lines -1: must be at least 0"),
    case("max_len past positions", "train --src {dir}/a.en --max-len 300", "--max-len 300: must be below model.max_positions (256)"),
    case("toml string for int", "train --config {dir}/run.toml", "run.toml: max_tokens = 'big': must be an integer", setup=_toml('max_tokens = "big"\n')),
    case("toml list for path", "train --config {dir}/run.toml", "run.toml: src = ['a']: must be a string", setup=_toml('src = ["a"]\n')),
    case("toml model not a table", "train --config {dir}/run.toml", "run.toml: model = 3: must be a table", setup=_toml("model = 3\n")),
    case("toml float for int", "train --config {dir}/run.toml", "run.toml: model.d_model = 2.5: must be an integer", setup=_toml("[model]\nd_model = 2.5\n")),
    case("toml bool for float", "train --config {dir}/run.toml", "run.toml: model.dropout = True: must be a number", setup=_toml("[model]\ndropout = true\n")),
    case("toml syntax", "train --config {dir}/run.toml", "run.toml: cannot read config", setup=_toml("max_tokens = = 3\n")),
    case("toml unknown key", "train --config {dir}/run.toml", "run.toml: max_tokenz = 3: unknown setting", setup=_toml("max_tokenz = 3\n")),
    case("train out is a user folder", "train --src {dir}/a.en --tgt {dir}/a.zh --out {dir}/mine", "mine: a directory that is not an mtcli training run"),
    case("train out under a file", "train --src {dir}/a.en --tgt {dir}/a.zh --out {dir}/a.en/run", "a.en/run"),
    case("resume missing", "train --src {dir}/a.en --tgt {dir}/a.zh --resume {dir}/nope", "--resume"),
    case("resume an exported model", "train --src {dir}/a.en --tgt {dir}/a.zh --resume {dir}/export", "no trainer_state.pt to resume from"),
    case("resume a corrupt state", "train --out {dir}/run", "trainer_state.pt: unreadable", setup=_corrupt_trainer_state),
    case("init with another tokenizer", "train --src {dir}/a.en --tgt {dir}/a.zh --init {dir}/model --tokenizer {dir}/tok --out {dir}/ft --max-len 32", "conflicts with --init"),
    case("init max_len default", "train --src {dir}/a.en --tgt {dir}/a.zh --init {dir}/model --out {dir}/ft", "--max-len 128 (the default): must be below model.max_positions (64)"),
    case("init with another shape", "train --src {dir}/a.en --tgt {dir}/a.zh --init {dir}/model --d-model 32 --out {dir}/ft --max-len 32", "has d_model 64; it cannot be trained as 32"),
    case("batch_tokens -1", "translate -m {dir}/model --batch-tokens -1 x", "--batch-tokens -1: must be at least 1"),
    case("max_len_a -1", "translate -m {dir}/model --max-len-a -1 x", "--max-len-a -1.0: must be at least 0"),
    case("length penalty nan", "translate -m {dir}/model --length-penalty nan x", "--length-penalty nan: must be a finite number"),
    case("text not UTF-8", "translate -m {dir}/model 'caf\udce9 ok'", "Invalid value for '[TEXT]...': invalid UTF-8 (byte 4)"),
    case("prefix not UTF-8", "translate -m {dir}/model --prefix \udcff x", "Invalid value for '--prefix': invalid UTF-8 (byte 1)"),
    case("attention sentence not UTF-8", "attention -m {dir}/model a\udcffb", "Invalid value for 'SENTENCE': invalid UTF-8 (byte 2)"),
    case("align a sample", "translate -m {dir}/model --sample --align --format tsv x", "--align reads a search's attention; it does not align --sample"),
    case("tokenizer corpus of long lines", "tokenizer train --src {dir}/l.en --tgt {dir}/l.en --out {dir}/t", "/l.en: every line is longer than 4,192 bytes, which sentencepiece skips", setup=lambda d: (d / "l.en").write_text("word " * 1000 + "\n")),
    case("stdin line past 1 MiB", "tokenizer encode -t {dir}/tok", "stdin:1: a line of more than 1,048,576 bytes (is it text?)", stdin=b"a" * (2**20 + 1)),
    case("corpus line past 1 MiB", "train --src {dir}/z.en --tgt {dir}/a.zh --out {dir}/r", "z.en:2: a line of more than 1,048,576 bytes (is it text?)", setup=lambda d: (d / "z.en").write_bytes(b"ok\n" + b"\0" * (2**20 + 1))),
    case("output is the input", "translate -m {dir}/model -i {dir}/notes.txt -o {dir}/notes.txt --force", "notes.txt: is the input; writing it would erase it before it is read"),
    case("prepare over its own raw files", "data prepare tatoeba-en-zh --from {dir}/raw --out {dir}/raw --force", "raw: is the input"),
    case("tokenizer over the folder of its corpus", [*TOKENIZE, "--out", "{dir}", "--force"], "holds the input"),
    case("export over its own checkpoint", "export {dir}/model --out {dir}/model --force", "model: is the input"),
    case("batch wait nan", "serve -m {dir}/model --batch-wait-ms nan", "Invalid value for '--batch-wait-ms': nan is not a number"),
    case("request timeout nan", "serve -m {dir}/model --request-timeout nan", "Invalid value for '--request-timeout': nan is not a number"),
    case("no connection at all", "serve -m {dir}/model --max-connections 0", "Invalid value for '--max-connections': 0 is not in the range x>=1."),
    case("max beam below the beam", "serve -m {dir}/model --beam-size 5 --max-beam 2", "--max-beam 2: below --beam-size 5, the server's own"),
    case("character coverage nan", [*TOKENIZE, "--out", "{dir}/t", "--character-coverage", "nan"], "Invalid value for '--character-coverage': nan is not a number"),
    case("character coverage below sentencepiece's", [*TOKENIZE, "--out", "{dir}/t", "--character-coverage", "0.95"], "0.95 is not in the range 0.98<=x<=1.0"),
    case("beam 100000", "translate -m {dir}/model --beam-size 100000 x", "--beam-size 100000: must be at most 1024"),
    case("100000 draws", "translate -m {dir}/model --sample --nbest 100000 x", "--nbest 100000: must be at most 1024"),
    case("beam 0", "translate -m {dir}/model --beam-size 0 x", "--beam-size 0: must be at least 1"),
    case("temperature 0", "translate -m {dir}/model --sample --temperature 0 x", "--temperature 0.0: must be at least 0.0001"),
    case("top_p above 1", "translate -m {dir}/model --sample --top-p 2 x", "--top-p 2.0: must be at most 1"),
    case("temperature without sample", "translate -m {dir}/model --temperature 0.5 x", "need --sample"),
    case("no repeat ngram -1", "translate -m {dir}/model --no-repeat-ngram -1 x", "--no-repeat-ngram -1: must be at least 0"),
    case("glossary without tabs", "translate -m {dir}/model --glossary {dir}/notes.txt x", "notes.txt:1: expected source term TAB target term"),
    case("attention kind", "train --src {dir}/a.en --attention cosine", "--attention"),
    case("nbest above beam", "translate -m {dir}/model --beam-size 2 --nbest 3 x", "--nbest 3: must not exceed beam_size (2)"),
    case("translate output exists", "translate -m {dir}/model -o {dir}/a.zh x", "--output"),
    case("translate stdin not utf-8", "translate -m {dir}/model", "stdin:2: invalid UTF-8", stdin=b"ok\n\xff\xfe\n"),
    case("truncated weights", "translate -m {dir}/model x", "model.safetensors: tensor", setup=_truncate_weights),
    case("bad safetensors header", "translate -m {dir}/model x", "model.safetensors: not a safetensors file", setup=_bad_header),
    case("shapes disagree", "translate -m {dir}/model x", "config.json implies", setup=_edit_config(_shapes_differ)),
    case("config is a list", "translate -m {dir}/model x", "config.json: expected a JSON object", setup=_edit_config(lambda c: [c])),
    case("format is a string", "translate -m {dir}/model x", "config.json: format must be an integer", setup=_edit_config(lambda c: {**c, "format": "1"})),
    case("config d_model string", "translate -m {dir}/model x", "config.json: model.d_model = 'big': must be an integer", setup=_edit_config(_model_key("d_model", "big"))),
    case("broken tokenizer.json", "translate -m {dir}/model x", "tokenizer.json: invalid JSON", setup=_break_tokenizer),
    case("eval tokenize klingon", "eval --hyp {dir}/a.zh --ref {dir}/a.zh --tokenize klingon", "klingon"),
    case("eval bootstrap 0", "eval --hyp {dir}/a.zh --ref {dir}/a.zh --bootstrap 0", "--bootstrap"),
    case("eval stdin not utf-8", "eval --hyp - --ref {dir}/a.zh", "stdin:1: invalid UTF-8", stdin=b"\xff\n"),
    case("attention width 0", "attention -m {dir}/model --width 0 x", "--width"),
    case("attention png under a file", "attention -m {dir}/model --png {dir}/a.en/x.png x", "--png"),
    case("export over its own run", "export {dir}/run2/step-2 --out {dir}/run2", "run2: holds the input"),
    case("export over a user folder", "export {dir}/model --out {dir}/mine", "--out"),
    case("tokenizer out is a user folder", [*TOKENIZE, "--out", "{dir}/mine"], "mtcli will not replace it"),
    case("tokenizer out is a file", [*TOKENIZE, "--out", "{dir}/notes.txt"], "notes.txt: a file"),
    case("tokenizer train not utf-8", "tokenizer train --src {dir}/bad.en --tgt {dir}/a.zh --out {dir}/t", "bad.en:2: invalid UTF-8"),
    case("tokenizer vocab too small", [*TOKENIZE, "--out", "{dir}/t", "--vocab-size", "8"], "--vocab-size 8 is too small"),
    case("tokenizer encode not utf-8", "tokenizer encode -t {dir}/model", "stdin:1: invalid UTF-8", stdin=b"\xff\n"),
    case("tokenizer decode id out of range", "tokenizer decode -t {dir}/model --ids", "stdin:1: id 99999 is outside the vocabulary", stdin=b"5 99999\n"),
    case("tokenizer decode not ids", "tokenizer decode -t {dir}/model --ids", "stdin:1: expected whitespace-separated integer ids", stdin=b"a b\n"),
    case("prepare test size too big", "data prepare tatoeba-en-zh --from {dir}/raw --out {dir}/p --no-verify --test-size 100000", "--test-size 100000 and --valid-size 1000 leave no training pairs"),
    case("prepare test size negative", "data prepare tatoeba-en-zh --from {dir}/raw --out {dir}/p --test-size -5", "--test-size"),
    case("prepare corrupt gz", "data prepare tatoeba-en-zh --from {dir}/raw-gz --out {dir}/p", "cmn.txt.gz: damaged archive"),
    case("prepare corrupt zip", "data prepare tatoeba-en-zh --from {dir}/raw-zip --out {dir}/p", "cmn-eng.zip: damaged archive"),
    case("prepare not utf-8", "data prepare tatoeba-en-zh --from {dir}/raw-bad --out {dir}/p", "cmn.txt: cmn.txt line 2: invalid UTF-8"),
    case("prepare out is a user folder", "data prepare tatoeba-en-zh --from {dir}/raw --out {dir}/mine --no-verify", "mtcli will not replace it"),
]  # fmt: skip


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
