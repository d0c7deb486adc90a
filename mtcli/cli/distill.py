"""`mtcli distill`: a teacher's translations of a corpus, then a student trained on them
(training/distill.py), with the same progress on stderr as `mtcli train`."""

from __future__ import annotations

import click

from mtcli.cli.console import console
from mtcli.cli.train import ProgressReporter
from mtcli.config import QUANTIZE_CHOICES, DistillConfig, TrainConfig
from mtcli.device import import_torch, limit_kernel_caches
from mtcli.settings import Layer, build_from_layers, flag, toml_layer

D = DistillConfig()


@click.command("distill")
@click.option(
    "--teacher",
    required=True,
    help="The model whose translations the student learns (name or directory).",
)
@click.option("--src", required=True, help="The corpus's sources; the teacher writes the targets.")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML: the student's TrainConfig (its [model] shape, schedule, validation set).",
)
@click.option(
    "--out", default=D.out, show_default=True, help="teacher/, init/, student/ and model/ go here."
)
@click.option(
    "--beam-size", type=int, default=D.beam_size, show_default=True, help="The teacher's beam."
)
@click.option(
    "--teacher-engine",
    type=click.Choice(["mtcli", "ctranslate2"]),
    default=D.teacher_engine,
    show_default=True,
)
@click.option(
    "--drop-worst",
    type=float,
    default=D.drop_worst,
    show_default=True,
    help="Share of pairs left out: those the teacher scored lowest.",
)
@click.option(
    "--part-lines",
    type=int,
    default=D.part_lines,
    show_default=True,
    help="Sources the teacher translates and writes as one part (what a kill may cost).",
)
@click.option(
    "--average",
    type=int,
    default=D.average,
    show_default=True,
    help="Last checkpoints averaged into OUT/model.",
)
@click.option(
    "--student-beam",
    type=int,
    default=D.student_beam,
    show_default=True,
    help="The student's default beam.",
)
@click.option(
    "--quantize",
    type=click.Choice(QUANTIZE_CHOICES),
    default=D.quantize,
    show_default=True,
    help="int8: the student asks to be decoded with int8 Linear layers (CPU) by default.",
)
@click.option(
    "--fp16/--fp32", default=D.fp16, show_default=True, help="The exported student's weights."
)
@click.option(
    "--restart", is_flag=True, help="Train the student again from its start (teacher outputs kept)."
)
@click.option("--force", is_flag=True, help="Use an --out that is not mtcli's distillation folder.")
def distill_command(config_path, restart, force, **flags) -> None:
    """Train a smaller, faster student on a teacher's translations (sequence-level KD).

    \b
    Running the same command again continues where a killed run stopped.
    """
    from mtcli.cli.train import init_layer
    from mtcli.store.registry import find
    from mtcli.training.checks import check_distill

    flags["teacher"] = str(find(flags["teacher"], "--teacher"))
    cfg = build_from_layers(
        DistillConfig, [Layer(flags, lambda k, v: f"{flag(k)} {v}", cls=DistillConfig)]
    )
    # the teacher's languages and shape are the defaults the student's TOML changes
    student = build_from_layers(TrainConfig, [init_layer(cfg.teacher), toml_layer(config_path)])
    check_distill(cfg, student, force)  # without torch: a wrong input is one line at once
    limit_kernel_caches()
    import_torch()
    from mtcli.training.distill import distill

    with ProgressReporter() as reporter:
        out = distill(cfg, student, reporter, restart=restart)
    console.print(
        f"student in {out}; translate with: mtcli translate -m {out}", markup=False, soft_wrap=True
    )
