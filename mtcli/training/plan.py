"""A new run on the user's own files, planned for its corpus and budget: whether the automatic
choices apply, the settings layer they make (below the user's flags, which still win), and
the checks of the budget those choices make possible (the step rate is known).

The choices are auto.py's table read with step_rate.py's timings; this module only joins
them to the settings layers and says what a user got wrong before any work.
"""

from __future__ import annotations

import dataclasses
import os

from mtcli.config import TrainConfig
from mtcli.errors import UserError
from mtcli.settings import Layer, build_from_layers, flag
from mtcli.training.auto import SMALLEST_CORPUS, Choice, corpus_facts

FEWEST_STEPS = 200  # a budget that allows fewer steps teaches a model nothing worth keeping
STEPS_SLACK = 1.5  # --max-steps beyond this many times what --max-time allows contradicts it


class ChosenLayer(Layer):
    """Settings mtcli chose for the corpus and budget (said, a reason a line, at the start)."""


def plans_itself(cfg: TrainConfig, told: bool, continues: bool) -> bool:
    """Whether the run's settings are chosen for it: a new run on --src/--tgt with a
    --max-time, and no --preset, --config or --init to say them (`told`)."""
    return bool(cfg.src and cfg.tgt and cfg.max_time) and not (
        told or continues or cfg.init or cfg.data
    )


def planned(
    cfg: TrainConfig, base: list[Layer], requested: list[Layer], device, say
) -> tuple[TrainConfig, list[Choice]]:
    """`cfg` with the choices for its corpus and budget under the user's flags; the choices
    (those a flag overrode left out)."""
    from mtcli.data.parallel_text import check_parallel
    from mtcli.training.step_rate import measured_choices, rate_of

    pairs = check_parallel(cfg.src, cfg.tgt) - cfg.valid_size * (not cfg.valid_src)
    if pairs < SMALLEST_CORPUS:
        raise UserError(
            f"--src {cfg.src}: {pairs:,} pairs to train on; mtcli sizes a run for "
            f"{SMALLEST_CORPUS:,} or more (fewer teach a Transformer next to nothing and leave "
            "none to validate on); give your own settings (--preset quick) to try anyway"
        )
    facts = corpus_facts(cfg.src, cfg.tgt, pairs)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    choices = measured_choices(facts, cfg.max_time, device, world, say)
    values = {k: v for choice in choices for k, v in choice.values.items()}
    layer = ChosenLayer(values, lambda k, v: f"{flag(k)} {v} (chosen for the corpus and budget)")
    chosen = build_from_layers(TrainConfig, [*base, layer, *requested])
    chosen = dataclasses.replace(chosen, src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang)
    check_budget(chosen, rate_of(chosen, facts, device))
    overridden = {k for layer in requested for k in layer.values}
    return chosen, [c for c in choices if not set(c.values) <= overridden]


def check_budget(cfg: TrainConfig, rate: float) -> None:
    """One line where the budget cannot hold the run asked for, at `rate` steps a second."""
    steps = int(rate * cfg.max_time * 60)
    said = f"--max-time {cfg.max_time:g} allows ~{steps:,} steps at {rate:.1f} a second here"
    if steps < FEWEST_STEPS:
        minutes = FEWEST_STEPS / rate / 60
        raise UserError(
            f"{said}, too few to learn from (at least {FEWEST_STEPS}): give --max-time "
            f"{minutes:.1f} or more"
        )
    if (cfg.valid_src or cfg.valid_size) and steps < cfg.valid_every:
        raise UserError(
            f"{said}, fewer than --valid-every {cfg.valid_every:,}: the run would end before "
            f"its first validation; give --valid-every {max(1, steps // 10)} or a longer --max-time"
        )
    if cfg.max_steps and cfg.max_steps > STEPS_SLACK * steps:
        raise UserError(
            f"--max-steps {cfg.max_steps:,} and {said}: the time ends the run long before the "
            "steps; give one of them"
        )
