"""`mtcli train`: flags and TOML into a TrainConfig, progress on stderr, then `training.loop.train`.

Settings come in layers, each checked before any work starts: the defaults, then what the
run being continued recorded (or the --init model's shape), then --config, then the flags.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from mtcli.cli.console import console
from mtcli.config import TrainConfig
from mtcli.device import import_torch, limit_kernel_caches
from mtcli.errors import UserError
from mtcli.settings import Layer, build_from_layers, toml_layer
from mtcli.training.reports import Message, Report, StepReport, ValidReport

# flag name -> TrainConfig field ("model." for ModelConfig fields)
FLAGS = {
    "src": "src",
    "tgt": "tgt",
    "data": "data",
    "valid_src": "valid_src",
    "valid_tgt": "valid_tgt",
    "valid_size": "valid_size",
    "tokenizer": "tokenizer",
    "vocab_size": "vocab_size",
    "init": "init",
    "out": "out",
    "max_tokens": "max_tokens",
    "accum": "accum",
    "max_steps": "max_steps",
    "max_epochs": "max_epochs",
    "max_time": "max_time",
    "max_len": "max_len",
    "max_ratio": "max_ratio",
    "valid_every": "valid_every",
    "valid_bleu_lines": "valid_bleu_lines",
    "save_every": "save_every",
    "save_every_minutes": "save_every_minutes",
    "seed": "seed",
    "device": "device",
    "precision": "precision",
    "lr_factor": "lr_factor",
    "warmup": "warmup",
    "warmup_share": "warmup_share",
    "label_smoothing": "label_smoothing",
    "bpe_dropout": "bpe_dropout",
    "placeholders": "placeholders",
    "tags": "tags",
    "casing": "casing",
    "end_punct": "end_punct",
    "keep": "keep",
    "patience": "patience",
    "src_lang": "src_lang",
    "tgt_lang": "tgt_lang",
    "log_every": "log_every",
    "threads": "threads",
    "tensorboard": "tensorboard",
    "d_model": "model.d_model",
    "n_heads": "model.n_heads",
    "n_enc_layers": "model.n_enc_layers",
    "n_dec_layers": "model.n_dec_layers",
    "d_ff": "model.d_ff",
    "dropout": "model.dropout",
    "pre_norm": "model.pre_norm",
    "activation": "model.activation",
    "attention": "model.attention",
}
FLAG_OF = {field: "--" + name.replace("_", "-") for name, field in FLAGS.items()}


class ProgressReporter:
    """Turns training reports into a live bar on a TTY, or plain periodic lines otherwise."""

    def __init__(self) -> None:
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("[bold]{task.fields[what]}"),
            BarColumn(bar_width=24),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            transient=False,
        )
        self.task = None
        self.best_bleu: float | None = None  # shown beside the progress once there is one

    def __enter__(self) -> ProgressReporter:
        if self.live:
            self.progress.start()
            self.task = self.progress.add_task("train", total=1.0, what="train", stats="")
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.progress.stop()

    def __call__(self, report: Report) -> None:
        if isinstance(report, Message):
            console.print(report.text, soft_wrap=True, markup=False)
        elif isinstance(report, StepReport):
            stats = (
                f"epoch {report.epoch} step {report.step} loss {report.loss:.3f} ppl {report.ppl:.1f} "
                f"lr {report.lr:.2e} {report.tokens_per_s:,.0f} tgt tok/s"
            )
            if self.best_bleu is not None:
                stats += f" best BLEU {self.best_bleu:.2f}"
            if self.live:
                self.progress.update(self.task, completed=report.fraction or 0.0, stats=stats)
            else:
                eta = ""
                if report.fraction:
                    eta = f" eta {clock(report.elapsed * (1 / report.fraction - 1))}"
                console.print(f"{stats} elapsed {report.elapsed:.0f}s{eta}", soft_wrap=True)
        elif isinstance(report, ValidReport):
            if report.bleu is not None and report.is_best:
                self.best_bleu = report.bleu
            bleu = f" BLEU {report.bleu:.2f}" if report.bleu is not None else ""
            mark = " [green]new best[/]" if report.is_best else ""
            console.print(
                f"valid step {report.step}: loss {report.loss:.3f} ppl {report.ppl:.2f}{bleu}{mark}"
            )


def clock(seconds: float) -> str:
    """A duration as H:MM:SS, the hours unbounded: 30 hours is 30:00:00 (strftime's %H wrapped
    it to 06:00:00, and a budget of 1e300 minutes overflowed time_t)."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def flag_layer(flags: dict) -> Layer:
    values = {FLAGS[name]: value for name, value in flags.items() if value is not None}
    if "warmup" in values and "warmup_share" not in values:
        values["warmup_share"] = 0.0  # --warmup N is N steps, whatever a preset sizes by time
    return Layer(values, lambda key, value: f"{FLAG_OF[key]} {value}")


def recorded_layer(checkpoint: Path) -> Layer:
    """What the run being continued was trained with (unknown keys of other versions dropped)."""
    from mtcli.training.run_dir import recorded_settings

    train, model = recorded_settings(checkpoint)
    # the CPU count is the machine's, not the run's: a run recorded with 16 threads continues
    # on 2 CPUs (config.THREADS would refuse 16 here, even beside --threads 2)
    train.pop("threads", None)
    where = f"{checkpoint}/config.json"
    return Layer({**train, "model": model}, lambda k, v: f"{where}: {k} = {v!r}", strict=False)


def init_layer(init: str) -> Layer:
    """--init MODEL: its shape and languages are the defaults of the new run."""
    from mtcli.store.model_dir import read_config  # no torch: a bad --init is one line at once

    config = read_config(init)
    langs = {
        k: config[k]
        for k in ("src_lang", "tgt_lang")
        if isinstance(config.get(k), str) and config[k]
    }
    where = f"{init}/config.json"
    return Layer(
        {**langs, "model": config["model"]}, lambda k, v: f"{where}: {k} = {v!r}", strict=False
    )


def store_layer(data: str) -> Layer:
    """--data STORE: the filters it was binarized with are the run's defaults (a flag that asks
    for others is refused by checks.check_store)."""
    from mtcli.data.token_store import read_manifest

    filters = (read_manifest(data) or {}).get("key", {}).get("filters", {})
    where = f"{data}/manifest.json"
    return Layer(dict(filters), lambda k, v: f"{where}: {k} = {v!r}", strict=False)


def preset_layer(name: str) -> Layer:
    """--preset NAME: a packaged recipe's size and schedule (not its corpus or languages)."""
    from mtcli.training.presets import load_preset

    preset = load_preset(name)
    return Layer(preset.settings, lambda k, v: f"--preset {name}: {k} = {v!r}")


def settings_layers(
    config_path, flags: dict, resume: str | None, restart: bool, preset: str | None = None
) -> tuple[list[Layer], list[Layer]]:
    """The layers of the run's settings: the base (what the checkpoint it would continue from
    recorded, or the --init model's shape, and a --data store's filters) and what the user
    asked for (--preset, --config, the flags), each layer naming its own mistakes."""
    from mtcli.store.registry import find
    from mtcli.training.run_dir import resume_point

    if flags.get("init"):  # a model by name, as -m takes it
        flags = {**flags, "init": str(find(flags["init"], "--init"))}
    requested = [preset_layer(preset)] if preset else []
    requested += [toml_layer(config_path)] if config_path else []
    requested.append(flag_layer(flags))
    first = build_from_layers(TrainConfig, requested)  # where OUT is, whether --init is set
    checkpoint = resume_point(first.out, resume, restart)
    base = []
    if checkpoint is not None and not (config_path or preset):
        base = [recorded_layer(checkpoint)]  # `mtcli train --out OUT` alone continues OUT
    elif first.init and checkpoint is None:
        base = [init_layer(first.init)]
    if first.data and checkpoint is None:
        base.append(store_layer(first.data))
    if not first.valid_src and not any(layer.values.get("valid_src") for layer in base):
        base += prepared_validation_layer(first.src, first.tgt)
    if checkpoint is None and not any(layer.values.get("valid_src") for layer in base):
        base += held_out_layer(first)
    return base, requested


def held_out_layer(first: TrainConfig) -> list[Layer]:
    """A new run on --src/--tgt with no validation set: valid_size, the pairs it holds out
    (data prepare's share of the corpus; none of a corpus too small to spare them)."""
    from mtcli.data.own_corpus import held_out_sizes
    from mtcli.data.parallel_text import check_parallel
    from mtcli.training.auto import SMALLEST_CORPUS

    if first.valid_src or not (first.src and first.tgt) or first.data:
        return []
    try:
        pairs = check_parallel(first.src, first.tgt)
    except UserError:  # said by check_inputs, in its order (--out first)
        return []
    if pairs < SMALLEST_CORPUS:
        return []
    size = held_out_sizes(pairs, None, None)[1]
    return [Layer({"valid_size": size}, lambda k, v: f"--valid-size {v} (5% of the pairs)")]


def prepared_validation_layer(src: str, tgt: str) -> list[Layer]:
    """The validation files beside --src/--tgt where they are a `data prepare` folder's train
    files (the split it just wrote), as a layer any --valid-src overrides; else none."""
    from mtcli.data.own_corpus import validation_beside

    found = validation_beside(src, tgt) if src and tgt else None
    if found is None:
        return []
    values = {"valid_src": found[0], "valid_tgt": found[1]}
    return [FoundLayer(values, lambda k, v: f"{FLAG_OF[k]} {v} (found beside --src)")]


class FoundLayer(Layer):
    """Settings mtcli found rather than was given (said at the start of the run)."""


def _found_validation(cfg: TrainConfig, base: list[Layer]) -> str | None:
    """The line saying that validation uses the files found beside --src, where it does."""
    if not any(isinstance(layer, FoundLayer) and "valid_src" in layer.values for layer in base):
        return None
    return (
        f"validation: {cfg.valid_src} and {cfg.valid_tgt}, found beside --src (the split "
        "`data prepare` wrote; --valid-src/--valid-tgt choose others)"
    )


def assemble_config(
    config_path, flags: dict, resume: str | None, restart: bool, preset: str | None = None
) -> tuple[TrainConfig, list[Layer], list[Layer]]:
    """The run's TrainConfig, on the settings of the checkpoint it would continue from (its
    languages not yet settled: `labelled` does that, once the inputs are checked), with the
    layers it was built from: the base (checkpoint, preset, config) and what was requested."""
    base, requested = settings_layers(config_path, flags, resume, restart, preset)
    return build_from_layers(TrainConfig, base + requested), base, requested


def labelled(
    cfg: TrainConfig, base: list[Layer], requested: list[Layer]
) -> tuple[TrainConfig, str]:
    """`cfg` with its languages: those asked for, checked against the corpus, else the
    corpus's, else what the base recorded; and the line saying where they came from."""
    from mtcli.training.checks import with_languages

    recorded = {side: value for side, (value, _) in languages_in(base).items()}
    return with_languages(cfg, languages_in(requested), recorded)


def languages_in(layers: list[Layer]) -> dict:
    """side -> what the last of `layers` that sets its language says (as a value for the base
    layers, as (value, how it was said) for the requested ones)."""
    found: dict = {}
    for layer in layers:
        for side in ("src", "tgt"):
            if value := layer.values.get(f"{side}_lang"):
                found[side] = (value, layer.describe(f"{side}_lang", value))
    return found


def list_presets(ctx, param, value) -> None:
    """--list-presets: the packaged presets, a line each, on stdout; then exit."""
    if not value or ctx.resilient_parsing:
        return
    from mtcli.training.presets import describe_presets

    for line in describe_presets():
        click.echo(line)
    ctx.exit()


@click.command("train")
@click.option(
    "--preset",
    help="A packaged size and schedule (e.g. quick, en-zh-tiny); your corpus and languages stay yours.",
)
@click.option(
    "--list-presets",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=list_presets,
    help="List the presets and exit.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML file with TrainConfig fields (after --preset; flags win over both).",
)
@click.option("--src", help="Training source text.")
@click.option("--tgt", help="Training target text (omit when --src is a source<TAB>target file).")
@click.option("--data", help="A token store of `mtcli data binarize` (instead of --src/--tgt).")
@click.option("--valid-src", help="Validation source text.")
@click.option("--valid-tgt", help="Validation target text.")
@click.option(
    "--valid-size",
    type=int,
    help="Without --valid-src: pairs held out of --src/--tgt to validate on (0 = none).  "
    "[default: 5% of the pairs, 100 to 1,000]",
)
@click.option("--tokenizer", help="Tokenizer directory (default: train one into OUT/tokenizer).")
@click.option("--vocab-size", type=int, help="Pieces of the tokenizer trained into OUT/tokenizer.")
@click.option("--init", help="Start from this model's weights, shape and tokenizer (fine-tuning).")
@click.option("--out", help="Output directory for checkpoints.  [default: runs/model]")
@click.option(
    "--resume", type=click.Path(), help="Continue from this checkpoint (default: OUT's newest)."
)
@click.option("--restart", is_flag=True, help="Start over even if OUT holds a run to continue.")
@click.option(
    "--force",
    is_flag=True,
    help="Use an --out that is not an mtcli run (nothing there is removed).",
)
@click.option("--max-tokens", type=int, help="Padded tokens per batch.  [default: 4096]")
@click.option("--accum", type=int, help="Batches per optimizer step.  [default: 1]")
@click.option("--max-steps", type=int, help="Stop after N steps (0 = no limit).")
@click.option("--max-epochs", type=int, help="Stop after N epochs (0 = no limit).")
@click.option("--max-time", type=float, help="Wall-clock budget in minutes (0 = no limit).")
@click.option("--max-len", type=int, help="Drop pairs with more tokens on a side.  [default: 128]")
@click.option(
    "--max-ratio", type=float, help="Drop pairs whose length ratio is above this.  [default: 9]"
)
@click.option("--valid-every", type=int, help="Steps between validations.  [default: 500]")
@click.option(
    "--valid-bleu-lines", type=int, help="Validation lines translated for BLEU.  [default: 500]"
)
@click.option("--save-every", type=int, help="Steps between checkpoints (0 = at every validation).")
@click.option(
    "--save-every-minutes", type=float, help="Refresh OUT/last at least this often.  [default: 10]"
)
@click.option("--seed", type=int, help="Random seed.  [default: 1]")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), help="[default: auto]")
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), help="[default: fp32]")
@click.option("--lr-factor", type=float, help="Scale of the warm-up schedule.  [default: 2.0]")
@click.option("--warmup", type=int, help="Warm-up steps.  [default: 4000]")
@click.option(
    "--warmup-share",
    type=float,
    help="With --max-time: the warm-up is this share of the steps the budget allows, "
    "from the first 20 steps' rate.  [default: 0 (off); --preset quick: 0.3]",
)
@click.option("--label-smoothing", type=float, help="[default: 0.1]")
@click.option("--bpe-dropout", type=float, help="BPE-dropout on training text (0 = off).")
@click.option(
    "--placeholders",
    type=float,
    help="Share of pairs with spans and aligned words as placeholders.",
)
@click.option("--tags", type=float, help="Share of pairs with an aligned phrase in inline tags.")
@click.option("--casing", type=float, help="Share of pairs in UPPER or Title Case on both sides.")
@click.option("--end-punct", type=float, help="Share of pairs without final punctuation.")
@click.option("--keep", type=int, help="Step checkpoints kept.  [default: 3]")
@click.option("--patience", type=int, help="Stop after N validations without improvement.")
@click.option(
    "--src-lang", help="Source language code.  [default: the corpus's, from its manifest or text]"
)
@click.option(
    "--tgt-lang", help="Target language code.  [default: the corpus's, from its manifest or text]"
)
@click.option("--log-every", type=int, help="Steps between progress reports.  [default: 50]")
@click.option("--threads", type=int, help="Torch threads (0 = all cores).")
@click.option(
    "--tensorboard", help="Also write TensorBoard events here (pip install 'mtcli[tensorboard]')."
)
@click.option("--d-model", type=int, help="[default: 256]")
@click.option("--n-heads", type=int, help="[default: 4]")
@click.option("--n-enc-layers", type=int, help="[default: 3]")
@click.option("--n-dec-layers", type=int, help="[default: 3]")
@click.option("--d-ff", type=int, help="[default: 1024]")
@click.option("--dropout", type=float, help="[default: 0.1]")
@click.option(
    "--pre-norm/--post-norm", default=None, help="LayerNorm placement.  [default: post-norm]"
)
@click.option("--activation", type=click.Choice(["relu", "gelu", "swish"]), help="[default: relu]")
@click.option(
    "--attention",
    type=click.Choice(["dot", "additive"]),
    help="Cross-attention scores.  [default: dot]",
)
def train_command(preset, config_path, resume, restart, force, **flags) -> None:
    """Train a Transformer; checkpoints go to OUT/best, OUT/last and OUT/step-N.

    \b
    Running the same command again continues the run from OUT/last (--restart starts over).
    Several processes or machines: torchrun --nproc_per_node=2 -m mtcli train ...
    """
    if resume and restart:
        raise click.UsageError("--resume and --restart exclude each other")
    cfg, base, requested = assemble_config(config_path, flags, resume, restart, preset)
    from mtcli.training.checks import check_inputs

    check_inputs(cfg, force)  # without torch: a wrong file or --out is one line at once
    cfg, note = labelled(cfg, base, requested)
    notes = [n for n in (note, _found_validation(cfg, base)) if n]
    limit_kernel_caches()  # bf16 matmuls are oneDNN's: its caches grew without bound
    import_torch()  # only once the settings and inputs are known to be good
    told = bool(preset or config_path)
    cfg, choices = planned_for_corpus(cfg, base, requested, told, resume, restart)
    result = _train_with_progress(cfg, resume, restart, force, notes, choices)
    console.print(_summary(result), soft_wrap=True, markup=False)


def _train_with_progress(cfg: TrainConfig, resume, restart: bool, force: bool, notes, choices):
    """The run, its progress on stderr; its TrainResult."""
    from mtcli.training.loop import train

    with ProgressReporter() as reporter:
        return train(
            cfg,
            reporter,
            resume=resume,
            restart=restart,
            force=force,
            inputs_checked=True,
            notes=tuple(notes),
            choices=tuple(choices),
        )


def planned_for_corpus(cfg: TrainConfig, base, requested, told: bool, resume, restart: bool):
    """`cfg` with the settings chosen for its corpus and budget where the run plans itself
    (training/plan.py), each choice said with its reason; and the choices."""
    from mtcli.training.plan import planned, plans_itself
    from mtcli.training.run_dir import resume_point

    continues = resume_point(cfg.out, resume, restart) is not None
    if not plans_itself(cfg, told, continues):
        return cfg, []
    from mtcli.device import pick_device

    say = _on_first_rank(lambda text: console.print(text, soft_wrap=True, markup=False))
    chosen, choices = planned(cfg, base, requested, pick_device(cfg.device), say)
    for choice in choices:
        say(f"chosen: {choice.what}: {choice.why}")
    if choices:
        say("(any flag still sets its part; --preset or --config choose everything yourself)")
    return chosen, choices


def _on_first_rank(say):
    """`say` on the first process of a torchrun group (all of them would say the same)."""
    return say if os.environ.get("RANK", "0") == "0" else (lambda text: None)


def _summary(result) -> str:
    best = "no validation"
    if result.best is not None:
        best = f"best validation BLEU {result.best[0]:.2f}, loss {-result.best[1]:.3f}"
    done = f"done at step {result.step}; {best}; checkpoints in {result.out}"
    if result.final is None:
        return done
    return (
        f'{done}\nnext: mtcli translate -m {result.out} "A sentence."  (or -i FILE); '
        f"mtcli runs show {result.out}"
    )
