"""`mtcli train`: flags and TOML into a TrainConfig, progress on stderr, then `train.train`."""

from __future__ import annotations

import time

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from mtcli.cli.common import console, echo_config, train_config_from
from mtcli.train import Message, Report, StepReport, ValidReport, resume_config, train

# flag name -> TrainConfig field ("model." for ModelConfig fields)
FLAGS = {
    "src": "src",
    "tgt": "tgt",
    "valid_src": "valid_src",
    "valid_tgt": "valid_tgt",
    "tokenizer": "tokenizer",
    "out": "out",
    "max_tokens": "max_tokens",
    "accum": "accum",
    "max_steps": "max_steps",
    "max_epochs": "max_epochs",
    "max_time": "max_time",
    "valid_every": "valid_every",
    "valid_bleu_lines": "valid_bleu_lines",
    "seed": "seed",
    "device": "device",
    "precision": "precision",
    "lr_factor": "lr_factor",
    "warmup": "warmup",
    "label_smoothing": "label_smoothing",
    "bpe_dropout": "bpe_dropout",
    "keep": "keep",
    "patience": "patience",
    "src_lang": "src_lang",
    "tgt_lang": "tgt_lang",
    "log_every": "log_every",
    "threads": "threads",
    "d_model": "model.d_model",
    "n_heads": "model.n_heads",
    "n_enc_layers": "model.n_enc_layers",
    "n_dec_layers": "model.n_dec_layers",
    "d_ff": "model.d_ff",
    "dropout": "model.dropout",
    "pre_norm": "model.pre_norm",
    "activation": "model.activation",
}


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
            console.print(report.text, soft_wrap=True)
        elif isinstance(report, StepReport):
            stats = (
                f"epoch {report.epoch} step {report.step} loss {report.loss:.3f} ppl {report.ppl:.1f} "
                f"lr {report.lr:.2e} {report.tokens_per_s:,.0f} tgt tok/s"
            )
            if self.live:
                self.progress.update(self.task, completed=report.fraction or 0.0, stats=stats)
            else:
                eta = ""
                if report.fraction:
                    eta = f" eta {time.strftime('%H:%M:%S', time.gmtime(report.elapsed * (1 / report.fraction - 1)))}"
                console.print(f"{stats} elapsed {report.elapsed:.0f}s{eta}", soft_wrap=True)
        elif isinstance(report, ValidReport):
            bleu = f" BLEU {report.bleu:.2f}" if report.bleu is not None else ""
            mark = " [green]new best[/]" if report.is_best else ""
            console.print(
                f"valid step {report.step}: loss {report.loss:.3f} ppl {report.ppl:.2f}{bleu}{mark}"
            )


@click.command("train")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML file with TrainConfig fields.",
)
@click.option("--src", help="Training source text.")
@click.option("--tgt", help="Training target text (omit when --src is a source<TAB>target file).")
@click.option("--valid-src", help="Validation source text.")
@click.option("--valid-tgt", help="Validation target text.")
@click.option("--tokenizer", help="Tokenizer directory (default: train one into OUT/tokenizer).")
@click.option("--out", help="Output directory for checkpoints.  [default: runs/model]")
@click.option("--resume", type=click.Path(), help="Continue from a checkpoint (e.g. OUT/last).")
@click.option("--max-tokens", type=int, help="Padded tokens per batch.  [default: 4096]")
@click.option("--accum", type=int, help="Batches per optimizer step.  [default: 1]")
@click.option("--max-steps", type=int, help="Stop after N steps (0 = no limit).")
@click.option("--max-epochs", type=int, help="Stop after N epochs (0 = no limit).")
@click.option("--max-time", type=float, help="Wall-clock budget in minutes (0 = no limit).")
@click.option("--valid-every", type=int, help="Steps between validations.  [default: 500]")
@click.option(
    "--valid-bleu-lines", type=int, help="Validation lines translated for BLEU.  [default: 500]"
)
@click.option("--seed", type=int, help="Random seed.  [default: 1]")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), help="[default: auto]")
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), help="[default: fp32]")
@click.option("--lr-factor", type=float, help="Scale of the warm-up schedule.  [default: 2.0]")
@click.option("--warmup", type=int, help="Warm-up steps.  [default: 4000]")
@click.option("--label-smoothing", type=float, help="[default: 0.1]")
@click.option("--bpe-dropout", type=float, help="BPE-dropout on training text (0 = off).")
@click.option("--keep", type=int, help="Step checkpoints kept.  [default: 3]")
@click.option("--patience", type=int, help="Stop after N validations without improvement.")
@click.option("--src-lang", help="Source language code.  [default: en]")
@click.option("--tgt-lang", help="Target language code.  [default: zh]")
@click.option("--log-every", type=int, help="Steps between progress reports.  [default: 50]")
@click.option("--threads", type=int, help="Torch threads (0 = all cores).")
@click.option("--d-model", type=int, help="[default: 256]")
@click.option("--n-heads", type=int, help="[default: 4]")
@click.option("--n-enc-layers", type=int, help="[default: 3]")
@click.option("--n-dec-layers", type=int, help="[default: 3]")
@click.option("--d-ff", type=int, help="[default: 1024]")
@click.option("--dropout", type=float, help="[default: 0.1]")
@click.option(
    "--pre-norm/--post-norm", default=None, help="LayerNorm placement.  [default: post-norm]"
)
@click.option("--activation", type=click.Choice(["relu", "gelu"]), help="[default: relu]")
def train_command(config_path, resume, **flags) -> None:
    """Train a Transformer; checkpoints go to OUT/best, OUT/last and OUT/step-N.

    \b
    Several processes or machines: torchrun --nproc_per_node=2 -m mtcli train ...
    """
    overrides = {FLAGS[name]: value for name, value in flags.items()}
    base = resume_config(resume) if resume and not config_path else None
    cfg = train_config_from(config_path, overrides, base=base)
    if not cfg.src:
        raise click.UsageError(
            "--src is required (or set src in --config); without --tgt it is a TSV file"
        )
    echo_config(cfg)
    with ProgressReporter() as reporter:
        result = train(cfg, reporter, resume=resume)
    best = "no validation"
    if result.best is not None:
        best = f"best validation BLEU {result.best[0]:.2f}, loss {-result.best[1]:.3f}"
    console.print(
        f"done at step {result.step}; {best}; checkpoints in {result.out}", soft_wrap=True
    )
