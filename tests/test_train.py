"""Training: the copy task, schedule, exact resume, Ctrl-C safety, checkpoints, torchrun/DDP."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mtcli.config import EOS_ID, TrainConfig
from mtcli.data.batches import pad, padding_mask
from mtcli.data.tokenizer import Tokenizer
from mtcli.decoding.search import greedy
from mtcli.errors import UserError
from mtcli.store.checkpoint import load_model
from mtcli.training.loop import lr_at, train
from mtcli.training.validation import smoothed_loss
from tests.conftest import REPO, copy_tokenizer, copy_train_config, write_lines


def test_lr_schedule_matches_the_paper():
    """lr = factor * D^-0.5 * min(step^-0.5, step * warmup^-1.5): linear rise, peak at warm-up, 1/sqrt decay."""
    cfg = TrainConfig(lr_factor=2.0, warmup=100)
    assert lr_at(50, cfg, 256) == pytest.approx(2.0 / 16 * 50 * 100**-1.5)
    assert lr_at(100, cfg, 256) == pytest.approx(2.0 / 16 / 10)
    assert lr_at(400, cfg, 256) == pytest.approx(2.0 / 16 / 20)
    assert max(range(1, 1000), key=lambda s: lr_at(s, cfg, 256)) == 100


def test_label_smoothed_loss_by_hand():
    """(1 - e) * -log p(y) + e * mean over the vocabulary of -log p(v); padding targets ignored."""
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]])  # (1, 2, 3)
    target = torch.tensor([[2, 0]])  # the second position is padding (PAD_ID = 0)
    p = [math.exp(2.0), math.exp(0.0), math.exp(-1.0)]
    log_p = [math.log(x / sum(p)) for x in p]
    expected = 0.9 * -log_p[2] + 0.1 * -sum(log_p) / 3
    assert float(smoothed_loss(logits, target, 0.1)) == pytest.approx(expected, rel=1e-6)


def test_bf16_loss_and_gradient_close_to_fp32():
    """The loss on bf16 logits (kept bf16 for speed) stays close to the fp32 one, gradient too."""
    g = torch.Generator().manual_seed(0)
    base = (torch.randn(4, 50, 600, generator=g) * 3).bfloat16()  # the same values in both
    target = torch.randint(1, 600, (4, 50), generator=g)
    grads = []
    for dtype in (torch.float32, torch.bfloat16):
        logits = base.to(dtype).requires_grad_()  # exact: bf16 -> fp32 loses nothing
        loss = smoothed_loss(logits, target, 0.1)
        loss.backward()
        grads.append((float(loss.detach()), logits.grad.float()))
    (loss32, grad32), (loss16, grad16) = grads
    assert loss16 == pytest.approx(loss32, rel=2e-3)
    torch.testing.assert_close(grad16, grad32, atol=2e-3, rtol=0.05)


def test_copy_task_is_learned_exactly(copy_model_dir, copy_lines):
    """A tiny model overfits 32 copy pairs within 200 steps: greedy reproduces every input exactly."""
    loaded = load_model(copy_model_dir)
    tok = loaded.tokenizer
    src = pad([tok.encode_src(line) + [EOS_ID] for line in copy_lines])
    hyps = greedy(loaded.model, src, padding_mask(src))
    outputs = [tok.decode_tgt(h.tokens) for h in hyps]
    assert outputs == copy_lines
    assert loaded.config["valid"]["bleu"] == pytest.approx(100.0)


def test_checkpoint_layout(copy_model_dir):
    """Every checkpoint is resumable; last/ is the newest, written once (hard links); --keep step
    dirs remain; files are as readable as the umask allows; no temporary names are left."""
    run = copy_model_dir.parent
    names = sorted(p.name for p in run.iterdir())
    # tokenizer given: none trained; .lock marks a run directory and is never removed
    assert names == [
        ".lock",
        "best",
        "curve.png",
        "data",
        "last",
        "metrics.jsonl",
        "model",  # the mean of the last checkpoints or best, whichever validates better
        "step-100",
        "step-150",
        "step-200",
    ]  # step-50 is gone: --keep 3
    for name in ("best", "last", "step-100", "step-150", "step-200"):
        assert (run / name / "trainer_state.pt").is_file(), name
    weights = [(run / n / "model.safetensors").stat() for n in ("last", "step-200")]
    assert weights[0].st_ino == weights[1].st_ino  # one file, two names
    umask = os.umask(0)
    os.umask(umask)
    assert weights[0].st_mode & 0o777 == 0o666 & ~umask
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [50, 100, 150, 200]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, 201))


PIPELINE = dict(bpe_dropout=0.3, placeholders=0.5, tags=0.5, casing=0.2, end_punct=0.2)


@pytest.mark.parametrize(
    "pipeline", [{}, {"bpe_dropout": 0.3}, PIPELINE], ids=["stored", "bpe-dropout", "placeholders"]
)
def test_resume_gives_the_same_losses(tmp_path, pipeline):
    """Interrupted at step 4 and resumed = an uninterrupted run with the same seed (CPU, fp32),
    with each pair split anew (BPE-dropout) and rewritten by the placeholder pipeline."""
    tok = copy_tokenizer(tmp_path)
    if "placeholders" in pipeline:
        from mtcli.data.tokenizer import add_placeholders

        add_placeholders(tok, tmp_path / "tok-ph")
        tok = tmp_path / "tok-ph"
    base = copy_train_config(
        tmp_path,
        tok,
        max_tokens=96,
        max_steps=10,
        valid_every=4,
        **pipeline,
        model=dataclasses.replace(copy_train_config(tmp_path, tok).model, dropout=0.3),
    )  # dropout: the RNG state must be restored too
    straight = train(dataclasses.replace(base, out=str(tmp_path / "a")))
    first = train(dataclasses.replace(base, out=str(tmp_path / "b"), max_steps=4))
    second = train(
        dataclasses.replace(base, out=str(tmp_path / "b")), resume=str(tmp_path / "b" / "last")
    )
    assert len(straight.losses) == 10 and len(first.losses) == 4 and len(second.losses) == 6
    assert first.losses + second.losses == straight.losses
    a, b = load_model(tmp_path / "a" / "last").model, load_model(tmp_path / "b" / "last").model
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name


def test_bpe_dropout_resplits_each_epoch_reproducibly(tmp_path):
    """BPE-dropout re-splits the same pairs differently per epoch, identically for the same epoch,
    and every split still decodes to the original text."""
    from mtcli.data.parallel_text import read_corpus
    from mtcli.data.token_store import encode_pairs
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.training.pipeline import epoch_resplit
    from mtcli.training.start import filters_of

    tok_dir = copy_tokenizer(tmp_path)
    cfg = copy_train_config(tmp_path, tok_dir, bpe_dropout=0.5)
    tok = Tokenizer.load(tok_dir)
    corpus = encode_pairs(read_corpus(cfg.src, cfg.tgt), tok, filters_of(cfg))
    everything = list(range(len(corpus)))

    def split(epoch: int, indices=everything) -> list[list[int]]:
        return [ids.tolist() for ids in epoch_resplit(corpus, tok, cfg, epoch)(indices)[0]]

    one, again, two = split(1), split(1), split(2)
    assert one == again and one != two
    assert one != [corpus.src.pair(i).tolist() for i in everything]
    texts = [src for _, src, _ in read_corpus(cfg.src, cfg.tgt)]
    assert [tok.decode_tgt(ids) for ids in two] == texts
    assert split(1, everything[5:9]) == split(1, everything[5:9]) != one[5:9]  # seeded per batch
    assert epoch_resplit(corpus, tok, dataclasses.replace(cfg, bpe_dropout=0.0), 1) is None


def test_init_with_an_extended_tokenizer_grows_the_embeddings(copy_model_dir, tmp_path):
    """--init MODEL --tokenizer (MODEL's tokenizer with the placeholder pieces): every old row
    of the shared embedding is the model's, the new rows are new, and the model dir says which
    pieces a model was trained to carry."""
    from mtcli.data.placeholders import all_pieces
    from mtcli.data.tokenizer import add_placeholders
    from mtcli.training.start import start_from_model

    add_placeholders(copy_model_dir, tmp_path / "tok")
    cfg = copy_train_config(tmp_path, tmp_path / "tok", init=str(copy_model_dir))
    start = start_from_model(cfg)
    old = load_model(copy_model_dir)
    n = old.model.cfg.src_vocab_size
    grown = start.model.src_embed.weight
    assert grown.shape[0] == n + len(all_pieces())
    assert torch.equal(grown[:n], old.model.src_embed.weight) and grown[n:].abs().sum() > 0
    assert start.model.out_proj.weight is start.model.tgt_embed.weight  # still tied
    assert old.placeholders == []  # trained without the pipeline
    old.config["train"]["tags"] = 0.1
    old.tokenizer = start.tokenizer
    assert old.placeholders == ["｟t1｠", "｟/t1｠", "｟t2｠", "｟/t2｠", "｟t3｠", "｟/t3｠"]


def _small_train_args(tmp_path, out, *extra: str) -> list[str]:
    """`train` arguments for a 32-wide model on the copy corpus (for subprocess tests)."""
    tok = copy_tokenizer(tmp_path)
    cfg = copy_train_config(tmp_path, tok)
    sizes = [
        "--d-model",
        "32",
        "--n-heads",
        "2",
        "--d-ff",
        "64",
        "--n-enc-layers",
        "1",
        "--n-dec-layers",
        "1",
    ]
    return [
        "train",
        "--src",
        cfg.src,
        "--tgt",
        cfg.tgt,
        "--tokenizer",
        str(tok),
        "--out",
        str(out),
        *sizes,
        *extra,
    ]


@pytest.mark.slow
def test_sigint_saves_a_resumable_last(tmp_path):
    """SIGINT during `mtcli train` finishes the step, saves a loadable last/, exits 130."""
    args = _small_train_args(
        tmp_path,
        tmp_path / "run",
        "--max-steps",
        "100000",
        "--log-every",
        "1",
        "--max-tokens",
        "256",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtcli", *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "step 5 " in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "Traceback" not in err and "same command again" in err
    loaded = load_model(tmp_path / "run" / "last")
    state = torch.load(tmp_path / "run" / "last" / "trainer_state.pt", weights_only=True)
    assert state["step"] >= 5 and loaded.model.cfg.d_model == 32


def test_train_flags_override_toml(tmp_path):
    """A TOML config sets fields, flags win, unknown keys name the file."""
    from click.testing import CliRunner

    from mtcli.cli import main
    from mtcli.cli.train import assemble_config

    toml = tmp_path / "run.toml"
    toml.write_text("max_tokens = 1000\nwarmup = 10\n[model]\nd_model = 64\nn_heads = 2\n")
    flags = {"warmup": 20, "n_heads": 4, "out": str(tmp_path / "run")}
    cfg = assemble_config(str(toml), flags, resume=None, restart=False)[0]
    assert (cfg.max_tokens, cfg.warmup, cfg.model.d_model, cfg.model.n_heads) == (1000, 20, 64, 4)
    toml.write_text("max_tokenz = 3\n")
    src = write_lines(tmp_path / "s", ["a"])
    result = CliRunner().invoke(
        main, ["train", "--config", str(toml), "--src", str(src), "--tgt", str(src)]
    )
    assert result.exit_code == 2 and f"{toml}: max_tokenz = 3: unknown setting" in result.output


def test_patience_stops_early(tmp_path):
    """With nothing to learn (lr 0), the second validation brings no improvement: patience 1 stops there."""
    tok = copy_tokenizer(tmp_path)
    cfg = copy_train_config(
        tmp_path, tok, lr_factor=0.0, max_steps=100, valid_every=2, patience=1, max_tokens=96
    )
    messages = []
    result = train(cfg, lambda r: messages.append(str(getattr(r, "text", r))))
    assert result.step == 4
    # the echoed config shows the model as built: vocabulary sizes from the tokenizer (vocab=0 asked)
    shown = json.loads(next(m for m in messages if m.startswith("config: "))[len("config: ") :])
    assert shown["model"]["src_vocab_size"] == Tokenizer.load(tok).src_vocab_size > 0


def test_gradient_accumulation_equals_one_big_batch():
    """accum over two batches gives the gradient of their union, normalised per target token."""
    from mtcli.data.batches import collate
    from mtcli.data.token_store import TokenStore
    from mtcli.model.transformer import Seq2Seq
    from mtcli.training.distributed import ProcessGroup
    from mtcli.training.loop import Precision, _accumulate
    from mtcli.training.validation import smoothed_loss
    from tests.conftest import tiny_config

    g = torch.Generator().manual_seed(0)
    corpus = TokenStore.from_ids(
        src=[torch.randint(4, 24, (n,), generator=g).tolist() for n in (3, 5, 2, 6)],
        tgt=[torch.randint(4, 24, (n,), generator=g).tolist() for n in (4, 2, 5, 3)],
    )
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config())
    cfg = TrainConfig(label_smoothing=0.1)
    cpu = torch.device("cpu")
    _accumulate(model, corpus, [[0, 1], [2, 3]], cfg, Precision(cpu, "fp32"), ProcessGroup())
    accumulated = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    batch = collate(corpus, [0, 1, 2, 3])
    (
        smoothed_loss(model(batch.src_ids, batch.tgt_in), batch.tgt_out, 0.1) / batch.n_tgt_tokens
    ).backward()
    for a, p in zip(accumulated, model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-4)


def test_tsv_corpus_trains(tmp_path):
    """One source<TAB>target file (no --tgt) trains like two aligned files; without a tokenizer it is one line."""
    tok = copy_tokenizer(tmp_path)
    cfg = copy_train_config(tmp_path, tok, max_steps=3, valid_every=3)
    tsv = write_lines(
        tmp_path / "c.tsv", [f"{s}\t{s}" for s in Path(cfg.src).read_text().splitlines()]
    )
    result = train(dataclasses.replace(cfg, src=str(tsv), tgt="", valid_src=str(tsv), valid_tgt=""))
    assert (
        result.step == 3
        and load_model(tmp_path / "run" / "best").config["valid"]["bleu"] is not None
    )
    with pytest.raises(UserError, match="TSV corpus needs --tokenizer"):
        train(dataclasses.replace(cfg, src=str(tsv), tgt="", tokenizer="", out=str(tmp_path / "b")))


def test_the_eta_line_counts_hours_past_a_day_and_takes_any_budget(capsys):
    """Plain progress lines (not a terminal): 30 hours left reads 30:00:00 (strftime's %H had
    wrapped it to 06:00:00), and a run 1e-300 of the way (--max-time 1e300) prints too (it was
    an internal error: time_t overflowed)."""
    from mtcli.cli.train import ProgressReporter, clock
    from mtcli.training.reports import StepReport

    assert [clock(s) for s in (0, 59.6, 3661, 30 * 3600)] == ["0:00:00", "0:01:00", "1:01:01", "30:00:00"]  # fmt: skip
    reporter = ProgressReporter()
    assert not reporter.live  # pytest captures the output: no terminal
    for fraction in (0.25, 1e-300):
        report = StepReport(1, 1, loss=1.0, lr=1e-3, tokens_per_s=1.0, elapsed=36_000.0, fraction=fraction)  # fmt: skip
        reporter(report)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("elapsed 36000s eta 30:00:00"), lines
    eta = lines[1].split(" eta ")[1]  # ~3.6e303 hours
    assert len(eta) > 300 and eta[:-6].isdigit() and eta[-6] == ":", lines


# ---------------------------------------------------------------- a first run of one's own
def test_a_preset_brings_its_size_not_its_corpus(tmp_path):
    """--preset quick sets the size and schedule; --src/--tgt and the languages stay the
    user's (the recipe's Tatoeba paths and en/zh are left out); flags still win."""
    from mtcli.cli.train import assemble_config
    from mtcli.training.presets import load_preset, preset_names

    assert {"quick", "en-zh-tiny", "zh-en-tiny"} <= set(preset_names())
    flags = {"src": "mine.en", "tgt": "mine.de", "warmup": 50, "out": str(tmp_path / "run")}
    cfg = assemble_config(None, flags, None, False, preset="en-zh-tiny")[0]
    recipe = load_preset("en-zh-tiny").settings
    assert (cfg.src, cfg.tgt, cfg.valid_src, cfg.src_lang) == ("mine.en", "mine.de", "", "")
    assert cfg.model.d_model == recipe["model"]["d_model"] and cfg.precision == recipe["precision"]
    assert cfg.warmup == 50
    assert assemble_config(None, flags, None, False, preset="quick")[0].model.d_model == 128


def test_list_presets_and_an_unknown_one(tmp_path):
    """--list-presets prints one line per preset on stdout; --preset nope names those there are."""
    from click.testing import CliRunner

    from mtcli.cli import main
    from mtcli.training.presets import preset_names

    listed = CliRunner().invoke(main, ["train", "--list-presets"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == preset_names()
    assert "d_model 128" in listed.stdout and "5 minutes" in listed.stdout
    bad = CliRunner().invoke(main, ["train", "--preset", "nope", "--src", "a", "--tgt", "b"])
    assert bad.exit_code == 2 and "--preset nope: no such preset (en-zh-student" in bad.output


def test_a_budget_that_ends_inside_the_warm_up_is_named(tmp_path):
    """--max-steps under --warmup is said at the start; --max-time, once the step rate says
    the budget ends inside the warm-up; a budget past it says nothing."""
    from mtcli.config import TrainConfig
    from mtcli.training.checks import warmup_outlasts_budget

    said = warmup_outlasts_budget(TrainConfig(max_steps=200, warmup=4000))
    assert said and "--max-steps 200 ends inside the warm-up (--warmup 4,000)" in said
    assert "--warmup 20" in said and "--preset" in said
    timed = warmup_outlasts_budget(TrainConfig(max_time=2, warmup=4000), step=40, elapsed=20.0)
    assert timed and "--max-time 2 ends near step 240" in timed  # 2 steps/s for 120 s
    assert warmup_outlasts_budget(TrainConfig(max_time=60, warmup=4000), step=40, elapsed=20.0) is None  # fmt: skip
    assert warmup_outlasts_budget(TrainConfig(max_steps=5000, warmup=4000)) is None
    tok = copy_tokenizer(tmp_path)
    reports = []
    train(copy_train_config(tmp_path, tok, max_steps=3, warmup=30, valid_every=10), reports.append)
    assert any("--max-steps 3 ends inside the warm-up" in getattr(r, "text", "") for r in reports)
    timed, reports = copy_train_config(tmp_path, tok, max_steps=0, max_time=0.05, warmup=100_000,
                                       valid_every=1000, out=str(tmp_path / "timed")), []  # fmt: skip
    train(timed, reports.append)  # no --max-steps: the step rate says it, after 20 steps
    said = [r.text for r in reports if "ends near step" in getattr(r, "text", "")]
    assert len(said) == 1 and "--max-time 0.05" in said[0] and "--warmup 100,000" in said[0]


def test_a_preset_sized_by_time_fits_its_warm_up_in_its_budget(tmp_path):
    """--preset quick's warm-up of 300 steps was never finished where steps were slower, and
    the --warmup its warning advised was refused on the resumed run: a warm-up share sizes the
    warm-up from the first 20 steps' rate (recorded, and kept on resume), and a schedule change
    on resume is allowed (it holds no state)."""
    from mtcli.training.checks import warmup_for_budget
    from mtcli.training.run_dir import recorded_settings
    from mtcli.training.start import check_same_run

    sized = warmup_for_budget(TrainConfig(max_time=5, warmup_share=0.3), step=20, elapsed=20.0)
    assert sized[0] == 90 and "90 steps, 30% of the ~300 that --max-time 5 allows" in sized[1]
    assert warmup_for_budget(TrainConfig(max_time=5), step=20, elapsed=20.0) is None
    tok = copy_tokenizer(tmp_path)
    cfg = copy_train_config(tmp_path, tok, max_steps=0, max_time=0.02, warmup=100_000,
                            warmup_share=0.3, valid_every=1000, save_every=10)  # fmt: skip
    reports = []
    train(cfg, reports.append)
    texts = [getattr(r, "text", "") for r in reports]
    said = [t for t in texts if t.startswith("warm-up: ")]
    assert len(said) == 1 and not any("ends near step" in t for t in texts)
    measured = int(said[0].split()[1].replace(",", ""))
    last = Path(cfg.out) / "last"
    assert 20 < measured < 100_000 and recorded_settings(last)[0]["warmup"] == measured
    reports = []
    train(dataclasses.replace(cfg, max_time=0.03), reports.append)  # the preset's 100,000 again
    texts = [getattr(r, "text", "") for r in reports]
    assert not any("resuming with warmup" in t or "ends near step" in t for t in texts)
    assert recorded_settings(last)[0]["warmup"] == measured
    changed = check_same_run(last, dataclasses.replace(cfg, warmup=7, warmup_share=0.0))
    assert {d[0] for d in changed} >= {"warmup", "warmup_share"}
    from mtcli.cli.train import assemble_config

    flags = {"src": "a", "tgt": "b", "out": str(tmp_path / "new")}
    assert assemble_config(None, flags, None, False, "quick")[0].warmup_share == 0.3
    fixed = assemble_config(None, {**flags, "warmup": 11}, None, False, "quick")[0]
    assert (fixed.warmup, fixed.warmup_share) == (11, 0.0)  # --warmup N is N steps
