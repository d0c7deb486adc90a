"""`mtcli train --src A --tgt B --max-time M` on a corpus of the user's: the settings chosen for
the corpus and budget (auto.py's table, read with step rates), a validation set held out
without asking, the model the run ends with, the run shown, and the mistakes said before any
work."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.config import TrainConfig
from mtcli.errors import UserError
from mtcli.store.checkpoint import average_weights
from mtcli.store.model_dir import best_in_run
from mtcli.training import auto, step_rate
from mtcli.training.auto import ENOUGH_STEPS, CorpusFacts, choose, rule_for
from mtcli.training.final_model import write_final_model
from mtcli.training.held_out import with_held_out
from mtcli.training.plan import check_budget
from tests.conftest import write_lines

WORDS = [
    "sun",
    "moon",
    "tree",
    "river",
    "stone",
    "bird",
    "fish",
    "cloud",
    "rain",
    "wind",
    "fire",
    "snow",
]


def facts(pairs: int = 5000, characters: int = 60) -> CorpusFacts:
    return CorpusFacts(pairs, src_words=12.0, tgt_words=12.0, characters=characters)


def values_of(choices) -> dict:
    return {k: v for choice in choices for k, v in choice.values.items()}


def test_a_wider_model_only_where_the_budget_trains_it_long_enough():
    """The shape is the widest whose steps in the budget reach ENOUGH_STEPS: at 2.5 steps a
    second the medium shape gets 1,500 in 10 minutes, too few; at 5 it gets 3,000."""
    slow = {"small": 6.0, "medium": 2.5, "base": 0.5}
    chosen = values_of(choose(facts(), 10, slow.get))
    assert chosen["model.d_model"] == 128
    assert 10 * 60 * slow["medium"] < ENOUGH_STEPS
    fast = {"small": 12.0, "medium": 5.0, "base": 1.0}
    chosen = values_of(choose(facts(), 10, fast.get))
    assert chosen["model.d_model"] == 256  # base is wider than 5,000 pairs can use
    shape = next(c for c in choose(facts(), 10, fast.get) if c.what == "shape")
    assert "~3,000 steps at 5.0 a second in 10 minutes" in shape.why


def test_a_small_corpus_gets_few_pieces_and_heavy_dropout_a_large_one_the_reverse():
    small, large = (
        values_of(choose(facts(2000), 10, None)),
        values_of(choose(facts(2_000_000), 10, None)),
    )
    assert small["vocab_size"] < large["vocab_size"]
    assert small["model.dropout"] > large["model.dropout"]
    assert small["vocab_size"] == rule_for(2000).vocab


def test_a_budget_that_passes_over_the_corpus_a_few_times_gets_light_dropout():
    """Heavy dropout guards against memorising pairs seen dozens of times; 10 minutes at 3
    steps a second pass over 29,000 pairs ~7 times (batches of ~3,500 real tokens, 31 tokens
    a pair), too few to memorise: dropout 0.1 and none inside, as for a large corpus. The same
    budget passes over 5,000 pairs ~40 times: the size rule's dropout stays."""
    rate = {"small": 3.0, "medium": 1.0, "base": 0.5}.get
    few = values_of(choose(facts(29_000), 10, rate))
    assert (few["model.dropout"], few["model.attention_dropout"]) == (0.1, 0.0)
    many = values_of(choose(facts(5_000), 10, rate))
    assert many["model.dropout"] == rule_for(5_000).dropout == 0.2
    said = next(c for c in choose(facts(29_000), 10, rate) if c.what.startswith("dropout"))
    assert "~7 passes over 29,000 pairs" in said.why


def test_every_character_gets_a_piece_before_any_merge():
    """A Chinese side with 3,500 characters needs a vocabulary of at least those and 1,000
    merges, whatever the size rule says (sentencepiece refuses fewer)."""
    chosen = values_of(choose(facts(5000, characters=3500), 10, None))
    assert chosen["vocab_size"] == 5000 > rule_for(5000).vocab


def test_bpe_dropout_only_where_the_budget_passes_over_the_corpus_many_times():
    """Epochs = steps x batch tokens x PADDING_KEPT / the corpus's tokens (24 words a pair x
    PIECES_PER_WORD): 2,000 pairs are 62,400 tokens; 6,000 steps pass over them ~335 times,
    3,000 steps ~167 times (under BPE_DROPOUT_EPOCHS, 300: at 138 passes in 10 minutes its new
    splits still held 2,000 Multi30k pairs 3.4 BLEU under the quick preset)."""
    corpus_tokens = 2000 * 24 * auto.PIECES_PER_WORD
    many = 6000 * auto.BATCH_TOKENS * auto.PADDING_KEPT / corpus_tokens
    assert many == pytest.approx(334.8, abs=0.1) and many / 2 < auto.BPE_DROPOUT_EPOCHS < many
    rates = {"small": 10.0, "medium": 10.0}
    assert values_of(choose(facts(2000), 10, rates.get))["bpe_dropout"] == 0.1
    rates = {"small": 5.0, "medium": 0.01}
    assert values_of(choose(facts(2000), 10, rates.get))["bpe_dropout"] == 0.0


@pytest.mark.parametrize(
    ("settings", "rate", "message"),
    [
        ({"max_time": 0.5}, 5.0, "--max-time 0.5 allows ~150 steps at 5.0 a second here, too few"),
        (
            {"max_time": 1, "valid_size": 50, "valid_every": 500},
            5.0,
            "fewer than --valid-every 500: the run would end before its first validation",
        ),
        (
            {"max_time": 1, "max_steps": 1000},
            5.0,
            "--max-steps 1,000 and --max-time 1 allows ~300 steps",
        ),
    ],
)
def test_a_budget_that_cannot_hold_the_run_is_one_line(settings, rate, message):
    with pytest.raises(UserError, match=message):
        check_budget(TrainConfig(**settings), rate)
    check_budget(TrainConfig(max_time=10, valid_size=50, valid_every=300, max_steps=3000), rate)


def corpus(tmp_path: Path, pairs: int, seed: int = 0) -> tuple[Path, Path]:
    """Made-up pairs, the target the source's words reversed; every tenth source twice."""
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) for _ in range(pairs)]
    src = [src[i - 1] if i % 10 == 9 else line for i, line in enumerate(src)]
    tgt = [" ".join(reversed(line.split())) for line in src]
    return write_lines(tmp_path / "a.src", src), write_lines(tmp_path / "a.tgt", tgt)


def test_the_held_out_pairs_are_whole_sources_and_the_split_is_reused(tmp_path):
    src, tgt = corpus(tmp_path, 600)
    cfg = TrainConfig(src=str(src), tgt=str(tgt), valid_size=30)
    said = []
    split = with_held_out(cfg, tmp_path / "run", said.append)
    valid = set(Path(split.valid_src).read_text().splitlines())
    train = Path(split.src).read_text().splitlines()
    assert 30 <= len(Path(split.valid_src).read_text().splitlines()) <= 31  # a repeated source
    assert len(train) + len(Path(split.valid_tgt).read_text().splitlines()) == 600
    assert not valid & set(train)
    held, heldout = 600 - len(train), tmp_path / "run" / "heldout"
    assert said == [
        f"validation: {held} of the 600 pairs held out into {heldout} (whole source "
        "sentences; --valid-size N or --valid-src/--valid-tgt choose)"
    ]
    again = with_held_out(cfg, tmp_path / "run", said.append)
    assert again == split and len(said) == 1  # reused, not made again
    # resumed from the flags of the first command: the recorded validation files, the same split
    resumed = TrainConfig(src=str(src), tgt=str(tgt), valid_size=30, valid_src=split.valid_src)
    assert with_held_out(resumed, tmp_path / "run") == split
    # a validation set of the user's is theirs: nothing held out
    own = TrainConfig(
        src=str(src), tgt=str(tgt), valid_size=30, valid_src=str(src), valid_tgt=str(tgt)
    )
    assert with_held_out(own, tmp_path / "other") == own


class _WeightValidator:
    """A validator whose BLEU is a known function of the weights: minus the first weight."""

    def __init__(self, model):
        self.model = model

    def score(self):
        first = next(iter(self.model.state_dict().values()))
        return 1.0, -float(first.flatten()[0])


def test_the_run_ends_with_the_better_of_its_mean_and_its_best(copy_model_dir, tiny_model):
    """OUT/model is the mean of the last step checkpoints or the best one, whichever validates
    better: with a score known from the weights, the choice is checked by hand."""
    from mtcli.store.checkpoint import load_model

    run = copy_model_dir.parent
    model = load_model(run / "best").model
    steps = sorted(run.glob("step-*"), key=lambda p: int(p.name[5:]))
    name = next(iter(model.state_dict()))
    mean = float(average_weights(steps)[name].flatten()[0])  # last is step-200, a step dir too
    best = float(average_weights([run / "best"])[name].flatten()[0])
    final = write_final_model(run, _WeightValidator(model), model)
    assert final.valid_bleu == pytest.approx(max(-mean, -best), abs=1e-6)
    assert final.made_of.startswith("the mean" if -mean > -best else "best")
    assert best_in_run(run) == run / "model"
    written = load_model(run / "model").model.state_dict()[name]
    assert float(written.flatten()[0]) == pytest.approx(-final.valid_bleu, abs=1e-6)


@pytest.fixture
def fake_rates(monkeypatch):
    """Step rates known in advance (timing real steps would make the choice depend on the
    machine): 30 steps a second up to d_model 128, 3 above."""

    def rate(dims, *args):
        return 30.0 if dims[0] <= 128 else 3.0

    monkeypatch.setattr(step_rate, "cached_rate", rate)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def train_on(src: Path, tgt: Path, out: Path, *flags: str):
    """`mtcli train --src SRC --tgt TGT --out OUT FLAGS`, in-process; errors as exit codes."""
    args = ["train", "--src", str(src), "--tgt", str(tgt), "--out", str(out), *flags]
    return CliRunner().invoke(main, args)


def test_a_run_on_raw_files_plans_itself_and_ends_with_the_model_to_use(tmp_path, fake_rates):
    src, tgt = corpus(tmp_path, 600)
    out = tmp_path / "run"
    small_steps = ["--max-tokens", "400"]  # a flag sets its part: 4,096 tokens a step is slow here
    result = train_on(
        src, tgt, out, "--max-time", "0.2", "--max-steps", "12", "--log-every", "4", *small_steps
    )
    assert result.exit_code == 0, result.output
    said = result.output
    # 0.2 min x 30 steps/s = 360 steps of the small shape, the widest 570 pairs can use
    assert "chosen: shape: ~360 steps at 30.0 a second in 0.2 minutes (the widest" in said
    assert "chosen: vocabulary 2,000 pieces" in said
    assert "validation: 30 of the 600 pairs held out" in said
    assert f"model to use: {out / 'model'}" in said
    assert f"next: mtcli translate -m {out}" in said
    recorded = json.loads((out / "last" / "config.json").read_text())
    assert recorded["model"]["d_model"] == 128 and recorded["train"]["valid_size"] == 30
    choices = json.loads((out / "choices.json").read_text())["choices"]
    assert {k: choices[1][k] for k in ("what", "values")} == {
        "what": "vocabulary 2,000 pieces",
        "values": {"vocab_size": 2000},
    }
    shown = invoke("runs", "show", str(out)).output
    assert "chosen for the corpus and budget:" in shown and "best: step 12" in shown
    assert f"model to use: {out / 'model'}" in shown
    # more time on the same command continues the run: no refusal, the warm-up kept
    warmup = recorded["train"]["warmup"]
    more = train_on(
        src, tgt, out, "--max-time", "0.3", "--max-steps", "16", "--log-every", "4", *small_steps
    )
    assert more.exit_code == 0, more.output
    assert "resuming from" in more.output and "chosen:" not in more.output
    again = json.loads((out / "last" / "config.json").read_text())
    assert again["step"] == 16 and again["train"]["warmup"] == warmup


def test_a_flag_still_sets_its_part(tmp_path, fake_rates):
    src, tgt = corpus(tmp_path, 600)
    out = tmp_path / "run"
    shape = ["--d-model", "64", "--n-heads", "2", "--n-enc-layers", "1", "--n-dec-layers", "1"]
    result = train_on(
        src, tgt, out, "--max-time", "0.2", "--max-steps", "2", *shape, "--d-ff", "64"
    )
    assert result.exit_code == 0, result.output
    model = json.loads((out / "last" / "config.json").read_text())["model"]
    assert (model["d_model"], model["n_heads"], model["d_ff"]) == (64, 2, 64)
    assert model["dropout"] == rule_for(570).dropout  # the rest still chosen
    assert "chosen: shape" not in result.output


def test_a_corpus_too_small_to_learn_from_is_one_line(tmp_path):
    src, tgt = corpus(tmp_path, 120)
    result = train_on(src, tgt, tmp_path / "run", "--max-time", "5")
    assert result.exit_code == 2
    assert "120 pairs to train on; mtcli sizes a run for 500 or more" in result.output
    assert not (tmp_path / "run").exists()


def test_the_step_rate_times_real_steps_in_both_precisions():
    """A smoke test (timings are the bench's): the timing builds the model and trains it on a
    made-up batch in fp32 and bf16, and returns a rate."""
    for precision in ("fp32", "bf16"):
        dims = (32, 4, 1, 1, 64)
        rate = step_rate.steps_per_second(dims, facts(), 100, 512, torch.device("cpu"), precision)
        assert 0 < rate < float("inf")
