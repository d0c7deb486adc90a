"""Nothing lost: SIGKILL at random moments, resuming by re-running, the run lock, --restart,
--init, the metrics log, and directory swaps interrupted at any instant."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mtcli import files
from mtcli.config import ModelConfig, from_dict
from mtcli.errors import UserError
from mtcli.files import clean_leftovers, replace_dir, temp_dir_beside
from mtcli.store.checkpoint import load_model, load_trainer_state
from mtcli.training.loop import train
from mtcli.training.run_dir import STEP_DIR, RunDir
from tests.conftest import copy_tokenizer, copy_train_config
from tests.forked import ForkedProcess, ForkServer


def _kill_args(tmp_path: Path, out: Path) -> list[str]:
    """A tiny model that takes a few seconds, checkpoints often, uses dropout and BPE-dropout."""
    cfg = copy_train_config(tmp_path, copy_tokenizer(tmp_path))
    return [
        "train", "--src", cfg.src, "--tgt", cfg.tgt, "--valid-src", cfg.src, "--valid-tgt", cfg.tgt,
        "--tokenizer", cfg.tokenizer, "--out", str(out), "--d-model", "32", "--n-heads", "2",
        "--d-ff", "64", "--n-enc-layers", "1", "--n-dec-layers", "1", "--max-len", "32",
        "--dropout", "0.3", "--bpe-dropout", "0.2", "--max-tokens", "64", "--max-steps", "320",
        "--valid-every", "40", "--valid-bleu-lines", "8", "--save-every", "10", "--keep", "2",
        "--log-every", "1", "--threads", "1", "--lr-factor", "0.5", "--warmup", "20",
    ]  # fmt: skip


def _start(forks: ForkServer, args: list[str], log: Path | None = None) -> ForkedProcess:
    """`mtcli ARGS` in a process of its own, with stderr piped, or written to `log` (a run
    nobody reads while it goes would block once the pipe is full). Forked from a parent that
    imported torch already (tests/forked.py): each start here was 2.3 CPU-seconds of imports."""
    return forks.spawn(args, stderr=log if log is not None else "pipe")


def _kill_at_a_random_moment(proc: subprocess.Popen, rng: random.Random) -> str:
    """SIGKILL: right after a validation line (checkpoints are being written) or at a random
    time into training, never after the run's end (the whole run takes about 2 s, so the
    delays are short). Returns where the run started and the moment, for the messages."""
    after_validation = rng.random() < 0.5
    delay = rng.uniform(0, 0.05) if after_validation else rng.uniform(0.0, 0.3)
    step, start = "?", "step 0"
    while True:
        line = proc.stderr.readline()
        assert line, "the run ended before it could be killed"
        if line.startswith("resuming from"):
            start = "resumed at step " + line.split(" at step ")[1].split()[0]
        if line.startswith("epoch "):
            step = line.split(" step ")[1].split()[0]
        if ("valid step" in line) if after_validation else line.startswith("epoch "):
            break
    time.sleep(delay)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL, "the run ended before the kill"
    where = "after a validation" if after_validation else "while training"
    return f"{start}, killed {where} + {delay:.3f} s from the log line of step {step}"


def _every_checkpoint_loads(out: Path) -> None:
    for path in out.iterdir():
        if path.name in ("last", "best") or STEP_DIR.match(path.name):
            load_model(path)
            assert load_trainer_state(path)["step"] > 0, path


@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_is_bit_exact(tmp_path, training_forks):
    """A run SIGKILLed at 5 random moments and re-run after each kill ends with exactly the
    weights of an uninterrupted run; after every kill, every checkpoint on disk loads."""
    rng = random.Random(int(os.environ.get("MTCLI_KILL_SEED", time.time())))
    # the uninterrupted run goes on beside the killed ones (each takes one thread); both
    # argument lists are made first, as making one rewrites the corpus files a run reads
    uninterrupted = _kill_args(tmp_path, tmp_path / "straight")
    args = _kill_args(tmp_path, tmp_path / "killed")
    straight = _start(training_forks, uninterrupted, log=tmp_path / "straight.log")
    moments = []
    for _ in range(5):
        moments.append(_kill_at_a_random_moment(_start(training_forks, args), rng))
        _every_checkpoint_loads(tmp_path / "killed")
    final = _start(training_forks, args)
    out, err = final.communicate(timeout=300)
    assert final.returncode == 0 and "Traceback" not in err, err
    assert straight.wait(timeout=300) == 0, (tmp_path / "straight.log").read_text()
    a = load_file(str(tmp_path / "straight" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"killed {moments}: {differ[:3]} differ"
    assert load_trainer_state(tmp_path / "killed" / "last")["step"] == 320
    print("kill moments:", moments)


@pytest.mark.slow
def test_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path, training_forks):
    """Ctrl-C twice, 0.05 s apart, at three moments: exit 130, no traceback; what is on disk loads."""

    outs = [tmp_path / f"run{attempt}" for attempt in range(3)]
    runs = [_kill_args(tmp_path, out) for out in outs]  # one at a time: they write files

    def interrupt_twice(attempt: int) -> None:
        out = outs[attempt]
        proc = _start(training_forks, runs[attempt])
        while not (line := proc.stderr.readline()).startswith("epoch "):
            assert line, "the run ended before its first step"
        time.sleep(0.1 * attempt)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, err
        _every_checkpoint_loads(out)

    with ThreadPoolExecutor(max_workers=3) as pool:  # start-up is most of each: overlap it
        list(pool.map(interrupt_twice, range(3)))


# ---------------------------------------------------------------- resuming by re-running
def _cfg(tmp_path: Path, **overrides):
    cfg = copy_train_config(tmp_path, copy_tokenizer(tmp_path), max_tokens=96, valid_every=4)
    return dataclasses.replace(cfg, **overrides)


def test_rerun_continues_and_a_finished_run_does_nothing(tmp_path):
    """The same settings again continue from OUT/last; at max_steps there is nothing to do;
    a larger max_steps (a budget) goes on; another learning rate is refused naming it."""
    messages = []
    cfg = _cfg(tmp_path, max_steps=6)
    assert train(cfg).step == 6
    again = train(cfg, lambda r: messages.append(getattr(r, "text", "")))
    assert again.step == 6 and again.losses == []
    assert any("nothing to do" in m for m in messages)
    assert load_trainer_state(tmp_path / "run" / "last")["step"] == 6  # no step 7
    more = train(dataclasses.replace(cfg, max_steps=8), lambda r: messages.append(getattr(r, "text", "")))  # fmt: skip
    assert more.step == 8 and len(more.losses) == 2
    assert any("resuming with max_steps 6 -> 8" in m for m in messages)
    with pytest.raises(UserError, match=r"lr_factor 0.15 -> 0.3"):
        train(dataclasses.replace(cfg, max_steps=10, lr_factor=0.3))


def test_a_run_recorded_with_more_threads_than_here_continues(tmp_path):
    """The thread count recorded in OUT is the machine's it ran on: `mtcli train --out OUT`
    continues on a machine with fewer CPUs (the recorded count was refused by config.THREADS)."""
    from mtcli.cli.train import assemble_config

    cfg = _cfg(tmp_path, max_steps=2)
    train(cfg)
    recorded = tmp_path / "run" / "last" / "config.json"
    config = json.loads(recorded.read_text())
    config["train"]["threads"] = len(os.sched_getaffinity(0)) + 1
    recorded.write_text(json.dumps(config))
    again = assemble_config(None, {"out": cfg.out, "max_steps": 3}, None, False)[0]
    assert again.threads == 0 and again.max_steps == 3 and again.lr_factor == cfg.lr_factor


def test_restart_starts_over_and_keeps_the_users_files(tmp_path):
    """--restart removes what the earlier run wrote (only mtcli's names) and trains from step 1."""
    cfg = _cfg(tmp_path, max_steps=4)
    shutil.copytree(cfg.tokenizer, tmp_path / "run" / "tokenizer")  # a tokenizer kept in OUT
    cfg = dataclasses.replace(cfg, tokenizer=str(tmp_path / "run" / "tokenizer"))
    train(cfg)
    (tmp_path / "run" / "notes.txt").write_text("mine\n")
    result = train(dataclasses.replace(cfg, lr_factor=0.3), restart=True)
    assert result.step == 4 and len(result.losses) == 4
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine\n"
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").is_file()  # --tokenizer names it


@pytest.mark.parametrize(
    ("name", "content"),
    [("best", "photo.jpg"), ("last", "notes.txt"), ("step-3", "a.txt"), ("metrics.jsonl", None)],
)
def test_a_users_file_under_an_mtcli_name_is_never_replaced(tmp_path, name, content):
    """A folder of the user's used with --force may hold their own best/, last/, step-N/ or
    metrics.jsonl: a run would replace it, --restart remove it (it did: a photo in best/ was
    deleted). Refused before anything is written, --restart and --force or not."""
    cfg = _cfg(tmp_path, max_steps=2)
    mine = tmp_path / "run" / name
    if content is None:
        mine.parent.mkdir()
        mine.write_text("my own log\n")
    else:
        mine.mkdir(parents=True)
        (mine / content).write_text("mine\n")
    before = sorted(p.name for p in (tmp_path / "run").rglob("*"))
    for restart in (False, True):
        with pytest.raises(UserError, match=rf"--out .*run: {name} is not an mtcli"):
            train(cfg, restart=restart, force=True)
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == before


def test_steps_left_by_a_run_that_went_further_do_not_outrank_new_ones(tmp_path):
    """Resumed from step-4 of a run that reached step-8, with --keep 1: the new step-6 stays
    (it is not pruned for step-8), and step-8 waits until the run passes it."""
    cfg = _cfg(tmp_path, max_steps=8, save_every=2, keep=10, valid_every=100)
    train(cfg)
    resumed = dataclasses.replace(cfg, max_steps=6, keep=1)
    train(resumed, resume=str(tmp_path / "run" / "step-4"))
    steps = sorted(p.name for p in (tmp_path / "run").glob("step-*"))
    assert steps == ["step-6", "step-8"]


def test_metrics_log_is_rewound_on_resume(tmp_path):
    """Lines a killed run logged after its last checkpoint are dropped when it resumes, so
    metrics.jsonl holds each step once, in order."""
    cfg = _cfg(tmp_path, max_steps=4, log_every=1)
    train(cfg)
    metrics = tmp_path / "run" / "metrics.jsonl"
    with metrics.open("a") as f:  # what a run killed at step 6 had logged past its checkpoint
        f.write(json.dumps({"kind": "train", "step": 5}) + "\n" + '{"kind": "tra')
    train(dataclasses.replace(cfg, max_steps=6))
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    train_steps = [
        s
        for s, line in zip(steps, metrics.read_text().splitlines(), strict=True)
        if '"train"' in line
    ]
    assert train_steps == [1, 2, 3, 4, 5, 6]


def test_tensorboard_events(tmp_path):
    """--tensorboard writes loss, lr, tokens/s and validation loss/BLEU as scalars."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(_cfg(tmp_path, max_steps=4, log_every=2, tensorboard=str(tmp_path / "tb")))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/tokens_per_s", "valid/loss", "valid/bleu"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 4]


def test_tensorboard_missing_is_one_line(tmp_path, monkeypatch):
    """Without the optional package, --tensorboard is refused before anything is written."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(UserError, match=r"pip install 'mtcli\[tensorboard\]'"):
        train(_cfg(tmp_path, max_steps=2, tensorboard=str(tmp_path / "tb")))
    assert not (tmp_path / "run").exists()


def test_a_second_writer_is_refused(tmp_path):
    """While one process holds OUT, a second `train` on it is one line, and changes nothing."""
    cfg = _cfg(tmp_path, max_steps=2)
    holder = RunDir.open(cfg.out, writer=True)
    try:
        with pytest.raises(UserError, match="another mtcli train is writing there"):
            train(cfg)
    finally:
        holder.close()
    assert train(cfg).step == 2


def test_init_fine_tunes_from_a_model(tmp_path, copy_model_dir):
    """--init takes the model's weights, shape and tokenizer, with a fresh optimizer and schedule."""
    cfg = _cfg(tmp_path, max_steps=3, lr_factor=0.0, out=str(tmp_path / "ft"), tokenizer="")
    cfg = dataclasses.replace(cfg, init=str(copy_model_dir), model=load_model(copy_model_dir).model.cfg)  # fmt: skip
    result = train(cfg)
    assert result.step == 3  # a new run: steps count from 0
    tuned, original = load_model(tmp_path / "ft" / "last"), load_model(copy_model_dir)
    for (name, a), (_, b) in zip(
        tuned.model.state_dict().items(), original.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name  # lr 0: the weights are the model's own
    assert (tmp_path / "ft" / "last" / "spm.model").read_bytes() == (
        copy_model_dir / "spm.model"
    ).read_bytes()


def test_init_whose_weights_disagree_with_its_config_writes_nothing(tmp_path, copy_model_dir):
    """The --init model's tensor shapes are checked (with torch) before OUT is created."""
    model = tmp_path / "model"
    shutil.copytree(copy_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["model"]["d_ff"] *= 2
    (model / "config.json").write_text(json.dumps(config))
    cfg = _cfg(tmp_path, max_steps=3, out=str(tmp_path / "ft"), tokenizer="")
    cfg = dataclasses.replace(cfg, init=str(model), model=from_dict(ModelConfig, config["model"]))
    with pytest.raises(UserError, match=r"has shape .* but config.json implies"):
        train(cfg)
    assert not (tmp_path / "ft").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_training_in_each_precision(tmp_path):
    """On a GPU: fp32 and bf16 (fp16 with a scaler where bf16 is missing) train, save and resume."""
    for precision in ("fp32", "bf16"):
        cfg = _cfg(
            tmp_path, max_steps=4, device="cuda", precision=precision, out=str(tmp_path / precision)
        )
        assert train(cfg).step == 4
        assert train(dataclasses.replace(cfg, max_steps=6)).step == 6
        assert load_trainer_state(tmp_path / precision / "last")["rng"][0]["cuda"].numel() > 0


# ---------------------------------------------------------------- directory swaps
def _dir_with(path: Path, text: str) -> Path:
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(text)
    return path


def test_swap_is_whole_at_every_instant(tmp_path):
    """Replacing a directory leaves it whole (old or new) throughout; the fallback's moment
    between its two renames reads DIR.old; the next start restores or cleans what a kill left."""
    dst = _dir_with(tmp_path / "m", "old")
    replace_dir(_dir_with(temp_dir_beside(dst), "new"), dst, "config.json")  # the exchange
    assert (dst / "config.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]

    os.replace(dst, tmp_path / "m.old")  # a kill between the fallback's two renames
    assert clean_leftovers(tmp_path, "config.json", "m".__eq__) == ["m.old"]
    assert (dst / "config.json").read_text() == "new"  # renamed back: it was the only copy

    dead = _dir_with(tmp_path / "m.tmp-999999999-x", "half")  # a pid that cannot be alive
    live = _dir_with(tmp_path / f"m.tmp-{os.getpid()}-y", "busy")
    _dir_with(tmp_path / "m.old", "stale")
    assert sorted(clean_leftovers(tmp_path, "config.json", "m".__eq__)) == ["m.old", dead.name]
    assert live.exists() and (dst / "config.json").read_text() == "new"


def test_a_users_dir_old_beside_the_output_is_never_removed(tmp_path, monkeypatch):
    """DIR.old is the name the fallback swap sets DIR aside under. A folder of the user's of
    that name was deleted when DIR did not exist yet; now a new DIR is one rename, and the
    fallback refuses rather than remove it."""
    mine = tmp_path / "m.old"
    mine.mkdir()
    (mine / "photo.jpg").write_text("mine")
    dst = tmp_path / "m"
    replace_dir(_dir_with(temp_dir_beside(dst), "new"), dst, "config.json")  # m is new
    assert (dst / "config.json").read_text() == "new" and (mine / "photo.jpg").is_file()
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)  # a filesystem without it
    with pytest.raises(UserError, match=r"m\.old: in the way"):
        replace_dir(_dir_with(temp_dir_beside(dst), "newer"), dst, "config.json")
    assert (dst / "config.json").read_text() == "new" and (mine / "photo.jpg").is_file()
    shutil.rmtree(mine)
    _dir_with(mine, "stale")  # a copy a kill left (it has the marker): it goes
    replace_dir(_dir_with(temp_dir_beside(dst), "newest"), dst, "config.json")
    assert (dst / "config.json").read_text() == "newest" and not mine.exists()


def test_leftover_cleaning_leaves_the_users_folders_alone(tmp_path):
    """The folder a directory is written into may be the user's: their backup.old is not a
    leftover (it was renamed to backup), nor another name's .old or temporary-looking dir."""
    (tmp_path / "backup.old").mkdir()
    (tmp_path / "backup.old" / "photo.jpg").write_text("mine")
    _dir_with(tmp_path / "other.old", "theirs")  # holds a config.json, but not our name
    _dir_with(tmp_path / "other.tmp-999999999-x", "theirs")
    (tmp_path / "n.old").mkdir()  # our name, but not what we write there (no config.json)
    _dir_with(tmp_path / "m.old", "only copy")  # ours: restored
    before = {"backup.old", "other.old", "other.tmp-999999999-x", "n.old"}
    assert clean_leftovers(tmp_path, "config.json", {"m", "n"}.__contains__) == ["m.old"]
    assert {p.name for p in tmp_path.iterdir()} == before | {"m"}
    assert (tmp_path / "backup.old" / "photo.jpg").read_text() == "mine"
