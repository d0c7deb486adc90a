"""`mtcli distill`: the teacher's outputs are its own beam translations, resumed part by part;
the student starts from the teacher's layers and is exported decoding greedily (what a
model's generation defaults do: tests/test_generation_defaults.py)."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from mtcli.cli import main
from mtcli.config import DistillConfig, TrainConfig
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.training import distill as distill_module
from mtcli.training.distill import distill, kept_rows, shrunk_state, spread
from tests.conftest import copy_sentences, reference_translations, tiny_config, write_lines


# ---------------------------------------------------------------- pieces, against plain truth
def test_spread_keeps_the_first_and_last_layer_evenly():
    """1 of 3 -> [0]; 2 of 3 -> the first and the last; k of k -> all of them."""
    assert spread(1, 3) == [0] and spread(2, 3) == [0, 2] and spread(3, 6) == [0, 2, 5]
    assert all(spread(k, k) == list(range(k)) for k in range(1, 7))


def test_kept_rows_drops_exactly_the_lowest_scores():
    """The kept rows are, in order, all but the round(n * share) lowest (checked by sorting)."""
    rng = random.Random(3)
    for _ in range(50):
        scores = [
            rng.choice([-1.0, -0.5, -0.25, rng.random() * -3]) for _ in range(rng.randint(1, 30))
        ]
        share = rng.choice([0.0, 0.1, 0.5, 0.9])
        kept = list(np.flatnonzero(kept_rows(np.array(scores), share)))
        n_drop = round(len(scores) * share)
        assert len(kept) == len(scores) - n_drop and kept == sorted(kept)
        dropped = [scores[i] for i in range(len(scores)) if i not in kept]
        assert not dropped or not kept or max(dropped) <= min(scores[i] for i in kept)


def test_a_shrunk_student_holds_the_teachers_chosen_layers():
    """A 2+1-layer student of a 2+2 teacher: embeddings and encoder equal (so the same memory),
    its one decoder layer is the teacher's layer 0; a wider student gets no weights."""
    torch.manual_seed(0)
    teacher = Seq2Seq(tiny_config()).eval()
    student_cfg = tiny_config(n_dec_layers=1)
    student = Seq2Seq(student_cfg).eval()
    student.load_state_dict(shrunk_state(teacher, student_cfg))
    src = torch.randint(4, 24, (3, 7))
    mask = torch.ones_like(src, dtype=torch.bool)
    assert torch.equal(student.encode(src, mask), teacher.encode(src, mask))
    for name, tensor in student.decoder_layers[0].state_dict().items():
        assert torch.equal(tensor, teacher.decoder_layers[0].state_dict()[name])
    assert shrunk_state(teacher, tiny_config(d_model=64)) is None
    assert shrunk_state(teacher, tiny_config(n_enc_layers=3)) is None


# ---------------------------------------------------------------- the whole command
STUDENT_TOML = """
src_lang = "en"
tgt_lang = "en"
max_tokens = 2048
max_len = 32
max_steps = 6
warmup = 3
lr_factor = 0.1
valid_every = 3
valid_bleu_lines = 8
log_every = 1
keep = 3
[model]
d_model = 64
n_heads = 4
n_enc_layers = 2
n_dec_layers = 1
d_ff = 128
dropout = 0.0
max_positions = 64
"""


def _student_config(tmp: Path, valid: Path) -> TrainConfig:
    from mtcli.settings import build_from_layers, toml_layer

    toml = tmp / "student.toml"
    toml.write_text(STUDENT_TOML + "", encoding="utf-8")
    text = toml.read_text().replace(
        "max_len = 32", f'max_len = 32\nvalid_src = "{valid}"\nvalid_tgt = "{valid}"'
    )
    toml.write_text(text, encoding="utf-8")
    return build_from_layers(TrainConfig, [toml_layer(str(toml))])


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, copy_model_dir):
    """One distillation of the copy model on 40 sources, in parts of 16 lines."""
    tmp = tmp_path_factory.mktemp("distill")
    src = write_lines(tmp / "sources", copy_sentences(40, seed=11))
    cfg = DistillConfig(
        teacher=str(copy_model_dir), src=str(src), out=str(tmp / "kd"), average=2, part_lines=16
    )
    student = _student_config(tmp, src)
    model = distill(cfg, student)
    return cfg, student, model


def test_teacher_outputs_are_its_beam_translations(distilled, copy_model_dir):
    """OUT/teacher/train.tgt is the teacher's beam-5 translation of every source, in order."""
    cfg, _, _ = distilled
    sources = Path(cfg.src).read_text(encoding="utf-8").splitlines()
    folder = Path(cfg.out) / "teacher"
    assert (folder / "train.src").read_text(encoding="utf-8").splitlines() == sources
    want = reference_translations(copy_model_dir, sources, beam_size=5)
    assert (folder / "train.tgt").read_text(encoding="utf-8").splitlines() == want
    assert len(list((folder / "parts").glob("*.tsv"))) == 3  # 16 + 16 + 8 lines


def test_the_student_starts_from_the_teacher_and_exports_greedy(distilled, copy_model_dir):
    """OUT/init holds the teacher's encoder and decoder layer 0; OUT/model is the mean of the
    last two checkpoints, shaped as --config says, recommending greedy search."""
    cfg, student, model = distilled
    init = load_file(str(Path(cfg.out) / "init" / "model.safetensors"))
    teacher = load_file(str(copy_model_dir / "model.safetensors"))
    for name in ("encoder_layers.1.ffn.up.weight", "decoder_layers.0.self_attn.qkv_proj.weight"):
        assert torch.equal(init[name], teacher[name].float())
    config = json.loads((model / "config.json").read_text())
    assert config["model"]["n_dec_layers"] == 1 and config["generation"] == {
        "beam_size": 1,
        "length_penalty": 1.0,
    }
    assert config["averaged_from"] == ["step 3", "step 6"]


def test_a_killed_distillation_translates_only_what_is_missing(distilled, monkeypatch):
    """With the last part and the manifest gone (a kill mid-way), the next run translates
    one part of 8 lines and writes the same outputs; the student's finished run is kept."""
    cfg, student, _ = distilled
    folder = Path(cfg.out) / "teacher"
    before = (folder / "train.tgt").read_bytes()
    (folder / "manifest.json").unlink()
    (folder / "parts" / "000002.tsv").unlink()
    chunks = []
    real = distill_module.teacher_translator

    def counting(*args):
        translator = real(*args)
        original = translator.translate_chunk
        translator.translate_chunk = lambda lines: chunks.append(len(lines)) or original(lines)
        return translator

    monkeypatch.setattr(distill_module, "teacher_translator", counting)
    distill(cfg, student)
    assert chunks == [8] and (folder / "train.tgt").read_bytes() == before


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda lines: lines[:-1], "do not match .* line for line; remove"),
        (
            lambda lines: [*lines[:2], "no tab here\n", *lines[3:]],
            r"000001.tsv:3: not a translation TAB its score",
        ),  # fmt: skip
        (
            lambda lines: [*lines[:2], "a b\tnot-a-number\n", *lines[3:]],
            r"000001.tsv:3: not a translation TAB",
        ),  # fmt: skip
    ],
)
def test_a_damaged_part_is_one_line(distilled, tmp_path, damage, message):
    """A part cut short or with a broken line (a hand-edited or damaged OUT) is one line
    naming it: the student never trains on pairs that do not belong together."""
    cfg, _, _ = distilled
    out = tmp_path / "kd"
    shutil.copytree(Path(cfg.out) / "teacher", out / "teacher")
    (out / "teacher" / "manifest.json").unlink()
    part = out / "teacher" / "parts" / "000001.tsv"
    part.write_text("".join(damage(part.read_text().splitlines(keepends=True))))
    other = DistillConfig(teacher=cfg.teacher, src=cfg.src, out=str(out), part_lines=16)
    with pytest.raises(UserError, match=message):
        distill_module.teacher_outputs(other, out / "teacher", lambda r: None)
    assert not (out / "teacher" / "manifest.json").exists()


def test_the_start_is_kept_for_its_shape_and_made_again_for_another(distilled, tmp_path):
    """OUT/init is reused for the same shape and teacher (a resumed run starts alike), and
    made again for another shape or when asked (--restart)."""
    cfg, student, _ = distilled
    init = Path(cfg.out) / "init"
    stamp = (init / "model.safetensors").stat().st_mtime_ns
    start = distill_module.student_start
    assert start(cfg.teacher, student.model, init, lambda r: None, fresh=False) == init
    assert (init / "model.safetensors").stat().st_mtime_ns == stamp
    other = tmp_path / "init"
    shutil.copytree(init, other)
    wider = dataclasses.replace(student.model, n_dec_layers=2)
    start(cfg.teacher, wider, other, lambda r: None, fresh=False)
    assert json.loads((other / "config.json").read_text())["model"]["n_dec_layers"] == 2
    said = []
    start(cfg.teacher, wider, other, said.append, fresh=True)
    assert said and "teacher's weights" in said[0].text


def test_drop_worst_leaves_out_the_lowest_scored_pairs(distilled, tmp_path, copy_model_dir):
    """--drop-worst 0.25 keeps the 30 best-scored of 40 pairs, sources and targets together."""
    cfg, _, _ = distilled
    parts = Path(cfg.out) / "teacher" / "parts"
    rows = [
        line.rsplit("\t", 1)
        for p in sorted(parts.glob("*.tsv"))
        for line in p.read_text().splitlines()
    ]
    sources = Path(cfg.src).read_text().splitlines()
    other = DistillConfig(
        teacher=cfg.teacher, src=cfg.src, out=str(tmp_path / "kd"), drop_worst=0.25
    )
    src, tgt = distill_module.teacher_outputs(other, tmp_path / "kd" / "teacher", lambda r: None)
    kept = src.read_text().splitlines()
    assert len(kept) == 30
    threshold = sorted(float(s) for _, s in rows)[10]
    assert all(float(rows[sources.index(line)][1]) >= threshold for line in kept)
    assert tgt.read_text().splitlines() == [rows[sources.index(line)][0] for line in kept]


# ---------------------------------------------------------------- the command line
def _distill_cli(tmp: Path, *args: str):
    src = tmp / "sources"
    if not src.exists():
        write_lines(src, copy_sentences(10, seed=4))
    toml = tmp / "student.toml"
    if not toml.exists():
        toml.write_text(STUDENT_TOML.replace("max_steps = 6", "max_steps = 2"), encoding="utf-8")
    return CliRunner().invoke(
        main, ["distill", "--src", str(src), "--config", str(toml), "--out", str(tmp / "kd"), *args]
    )


def test_the_command_writes_a_greedy_student(tmp_path, copy_model_dir):
    """`mtcli distill` end to end: OUT/model translates, and by default greedily."""
    args = ("--teacher", str(copy_model_dir), "--average", "1")
    result = _distill_cli(tmp_path, *args, "--quantize", "int8")
    assert result.exit_code == 0, result.output
    model = tmp_path / "kd" / "model"
    generation = json.loads((model / "config.json").read_text())["generation"]
    assert generation == {"beam_size": 1, "length_penalty": 1.0, "quantize": "int8"}
    lines = copy_sentences(4, seed=9)
    result = CliRunner().invoke(
        main,
        ["translate", "-q", "-m", str(model), "--quantize", "none"],
        input="\n".join(lines) + "\n",
    )
    assert result.stdout.splitlines() == reference_translations(model, lines, beam_size=1)
    # another shape: the finished run is refused in one line, --restart trains the new one
    toml = tmp_path / "student.toml"
    toml.write_text(toml.read_text().replace("n_dec_layers = 1", "n_dec_layers = 2"))
    again = _distill_cli(tmp_path, *args)
    assert again.exit_code != 0 and "--restart to start over" in again.output, again.output
    again = _distill_cli(tmp_path, *args, "--restart")
    assert again.exit_code == 0, again.output
    assert json.loads((model / "config.json").read_text())["model"]["n_dec_layers"] == 2


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (None, ["--teacher", "no-such-model"], "--teacher no-such-model: no such model directory"),
        (None, ["--beam-size", "0"], "--beam-size 0: must be at least 1"),
        (None, ["--drop-worst", "1.5"], "--drop-worst 1.5: must be below 1"),
        (None, ["--drop-worst", "nan"], "--drop-worst nan: must be a finite number"),
        (lambda t: (t / "sources").write_bytes(b"a b\n\xff\xfe\n"), [], "sources:2"),
        (lambda t: (t / "kd").write_text("mine"), [], "--out"),
        (
            lambda t: (t / "student.toml").write_text("max_steps = 'x'"),
            [],
            "student.toml: max_steps = 'x'",
        ),
        (
            lambda t: (t / "student.toml").write_text('tgt_lang = "de"\nmax_len = 32'),
            [],
            "but --config trains en->de",
        ),
    ],
)
def test_bad_inputs_are_one_line_before_any_work(tmp_path, copy_model_dir, setup, args, message):
    """A wrong teacher, option, source file or --out stops distill in one line, nothing written."""
    if setup:
        setup(tmp_path)
    teacher = [] if "--teacher" in args else ["--teacher", str(copy_model_dir)]
    result = _distill_cli(tmp_path, *teacher, *args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "kd").is_dir()


def test_a_sigkilled_distill_resumes_to_the_same_teacher_outputs(
    tmp_path, copy_model_dir, training_forks
):
    """A real `mtcli distill` SIGKILLed at a random moment of the teacher's pass (after a first
    part is written) and run again ends with the teacher outputs of an uninterrupted pass
    (parts of 200 lines: the first part is written, the last not yet, at the kill)."""
    import signal
    import time

    lines = copy_sentences(1000, seed=13)  # 5 parts of 200 lines
    src = write_lines(tmp_path / "sources", lines)
    toml = tmp_path / "student.toml"
    toml.write_text(STUDENT_TOML.replace("max_steps = 6", "max_steps = 1"), encoding="utf-8")
    args = ["distill", "--teacher", str(copy_model_dir), "--src", str(src),
            "--config", str(toml), "--out", str(tmp_path / "kd"), "--average", "1", "--part-lines", "200"]  # fmt: skip
    proc = training_forks.spawn(args, stderr=tmp_path / "killed.log")  # a process of its own
    parts = tmp_path / "kd" / "teacher" / "parts"
    deadline = time.monotonic() + 120
    while not list(parts.glob("*.tsv")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(random.Random(3).uniform(0.0, 0.1))  # early in the second part
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "distill ended before the kill"
    assert not (tmp_path / "kd" / "teacher" / "manifest.json").exists()
    code, _, err = training_forks.run(args, timeout=300)
    assert code == 0, err.decode()
    got = (tmp_path / "kd" / "teacher" / "train.tgt").read_text(encoding="utf-8").splitlines()
    assert got == reference_translations(copy_model_dir, lines, beam_size=5)
