"""The training loop: warm-up schedule, label-smoothed loss, validation, checkpoints, resume, DDP.

Reads top to bottom in nanoGPT's order: `train` sets up (process group, run directory,
model and tokenizer, data, optimizer, restored state), then loops: lr from the schedule,
forward, loss, backward, clip, step; every N steps log, validate and checkpoint. The pieces
it leans on each have a name and a place: the process group (distributed.py), the run
directory with its lock and checkpoint placement (run_dir.py), how a run starts or continues
(start.py), validation (validation.py), and here: the precision policy, the stop flag, the
Trainer (the run's working state, whose methods are the loop's steps), the checkpoint policy
and the trainer state a checkpoint holds.

Every checkpoint is resumable (it holds the trainer state), and a run resumed from any of
them continues bit for bit as if it had never stopped (CPU, fp32). Reports go to a callback;
nothing here prints, except a last word on a second Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mtcli.config import WARMUP_MEASURED_STEPS, TrainConfig, to_dict
from mtcli.data.batches import Resplit, collate, epoch_batches
from mtcli.data.parallel_text import read_corpus
from mtcli.data.token_store import TokenStore
from mtcli.data.tokenizer import Tokenizer
from mtcli.device import pick_device, use_cores
from mtcli.errors import Interrupted
from mtcli.store.checkpoint import SaveRequest, check_model_dir, write_model_dir
from mtcli.training.augment import Augmenter
from mtcli.training.checks import (
    check_inputs,
    warmup_for_budget,
    warmup_outlasts_budget,
    with_languages,
)
from mtcli.training.curve import read_curve, write_curve_png
from mtcli.training.distributed import ProcessGroup, rng_state, set_rng_state, start_process_group
from mtcli.training.final_model import describe_final, score_test, test_beside, write_final_model
from mtcli.training.held_out import with_held_out
from mtcli.training.pipeline import epoch_resplit, make_augmenter
from mtcli.training.reports import FinalModel, Message, Report, StepReport, TrainResult, ValidReport
from mtcli.training.run_dir import CURVE, METRICS, RunDir
from mtcli.training.start import begin_run, load_pairs, load_training_set, resumed_config
from mtcli.training.validation import Validator, smoothed_loss


# ---------------------------------------------------------------- pure pieces
def lr_at(step: int, cfg: TrainConfig, d_model: int) -> float:
    """The paper's schedule: factor * D^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1."""
    step = max(step, 1)
    return cfg.lr_factor * d_model**-0.5 * min(step**-0.5, step * cfg.warmup**-1.5)


def make_optimizer(params, cfg: TrainConfig, lr: float) -> torch.optim.Optimizer:
    """Adam as in the paper (betas 0.9/0.98, eps 1e-9), fused into one kernel where torch has it.

    The fused CPU kernel made whole training steps 5-10% faster here than the per-tensor loop.
    """
    params = list(params)  # iterated twice if the fused attempt fails
    kwargs = dict(lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=cfg.weight_decay)
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # an older torch or a device without it
        return torch.optim.Adam(params, **kwargs)


class Precision:
    """fp32, or bf16 autocast; on a GPU without bf16, fp16 autocast with a gradient scaler
    (fp16's narrow range would underflow small gradients without one)."""

    def __init__(self, device: torch.device, name: str):
        self.device, self.dtype, self.scaler = device, None, None
        if name == "bf16":
            self.dtype = torch.bfloat16
            if device.type == "cuda" and not torch.cuda.is_bf16_supported():
                self.dtype = torch.float16
                self.scaler = torch.amp.GradScaler("cuda")

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params, clip_norm: float) -> None:
        """Clip (on true gradients: unscaled first), step, and clear the gradients."""
        if self.scaler:
            self.scaler.unscale_(optimizer)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


class StopFlag:
    """Set by SIGINT/SIGTERM; the loop finishes its step, saves `last`, then stops.

    A second signal means the user will not wait: the process ends at once (exit 130). What
    is on disk stays whole (writes are atomic); a half-written temporary directory is
    removed on the next start.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            # raising here could surface as a traceback from wherever the signal lands
            os.write(2, b"interrupted again: stopped without saving; last/ is the checkpoint\n")
            os._exit(130)
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            # after a signal the process is on its way out, saved: a second Ctrl-C in its last
            # moments (interpreter shutdown included) must not end in a traceback
            signal.signal(sig, signal.SIG_IGN if self.signum is not None else handler)


# ---------------------------------------------------------------- the loop
@dataclass
class Position:
    """Where a run stands: optimizer steps taken, the epoch, its batches done, time trained."""

    step: int = 0
    epoch: int = 0
    batch_pos: int = 0
    clock_start: float = field(default_factory=time.monotonic)  # now - time trained so far

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.clock_start


def train(
    cfg: TrainConfig,
    report: Callable[[Report], None] = lambda r: None,
    *,
    resume: str | None = None,
    restart: bool = False,
    force: bool = False,
    inputs_checked: bool = False,
    notes: tuple[str, ...] = (),
    choices: tuple = (),
) -> TrainResult:
    """Train as `cfg` says; return where it stopped. Raises Interrupted on a signal.

    Continues from `resume`, else from the newest checkpoint in OUT, unless `restart`.
    `inputs_checked`: the caller ran checks.check_inputs on `cfg` already (the CLI does, before
    it imports torch), so the files are not read twice. `notes`: lines said once the run has
    begun, beside its settings (where the CLI found the languages). `choices`: the settings
    chosen for the corpus and budget (training/plan.py), kept in OUT/choices.json.
    """
    device = pick_device(cfg.device)
    if device.type == "cpu":
        use_cores(cfg.threads)
    if not inputs_checked:
        check_inputs(cfg, force)  # before OUT is touched: a mistake there writes nothing
    if not (cfg.src_lang and cfg.tgt_lang):  # a library caller's config: the corpus's languages
        asked = {
            s: (v, f"{s}_lang = {v!r}") for s in ("src", "tgt") if (v := getattr(cfg, f"{s}_lang"))
        }
        cfg, note = with_languages(cfg, asked)
        notes = (*notes, note) if note else notes
    if cfg.init:
        check_model_dir(cfg.init)  # its tensor shapes too, the one check that needs torch
    group = start_process_group(device)
    if group.world > 1:  # rank 0's settings everywhere: its automatic choices timed its own steps
        cfg = group.gather(cfg)[0]
    run = RunDir.open(cfg.out, writer=group.is_main, force=force)
    try:
        return _train(cfg, report, resume, restart, group, run, notes, choices)
    finally:
        run.close()
        group.stop()


def _train(
    cfg: TrainConfig,
    report,
    resume: str | None,
    restart: bool,
    group: ProcessGroup,
    run: RunDir,
    notes: tuple[str, ...] = (),
    choices: tuple = (),
) -> TrainResult:
    say = report if group.is_main else (lambda r: None)
    cfg = _with_held_out(cfg, group, run, say)
    trainer, train_set, checkpoint = _set_up(cfg, say, resume, restart, group, run, notes)
    if choices and checkpoint is None and group.is_main:
        run.write_choices(choices)
    if spent := _budget_spent(cfg, trainer.pos, bad_valids=0):
        say(Message(f"nothing to do: {checkpoint} is at step {trainer.pos.step}, and {spent}"))
        return trainer.result
    if group.world > 1:
        ids = [group.device.index] if group.device.type == "cuda" else None
        trainer.net = torch.nn.parallel.DistributedDataParallel(trainer.model, device_ids=ids)
    if group.is_main:
        run.start_metrics(cfg.tensorboard, resumed_at=trainer.pos.step if checkpoint else None)
    if note := warmup_outlasts_budget(cfg):
        say(Message(note))

    # epochs until a budget is spent or a signal comes; each step: lr, forward, loss,
    # backward, clip, step (Trainer.step); then log, validate and save as they are due
    with StopFlag() as trainer.stop:
        ended = False
        while not ended and (cfg.max_epochs == 0 or trainer.pos.epoch < cfg.max_epochs):
            ended = _train_epoch(trainer, train_set)
            if not ended:
                trainer.pos.epoch, trainer.pos.batch_pos = trainer.pos.epoch + 1, 0
        if not ended:  # max_epochs reached
            trainer.after_step(epochs_done=True)
        group.barrier()
    result = trainer.finish()
    if group.is_main:
        result.final = _end_with_model(trainer)
    return result


def _with_held_out(cfg: TrainConfig, group: ProcessGroup, run: RunDir, say) -> TrainConfig:
    """`cfg` on OUT/heldout's split where it asks for one (rank 0 writes it, the others read)."""
    if group.is_main:
        cfg = with_held_out(cfg, run.path, lambda text: say(Message(text)))
    group.barrier()
    return cfg if group.is_main else with_held_out(cfg, run.path)


def _end_with_model(trainer: Trainer) -> FinalModel | None:
    """OUT/curve.png, and OUT/model, said with its scores: validation, and the test split
    where there is one."""
    cfg, out = trainer.cfg, trainer.run.path
    if not write_curve_png(read_curve(out / METRICS), out / CURVE):
        trainer.say(Message(f"{out / CURVE} needs matplotlib: pip install 'mtcli[plot]'"))
    final = write_final_model(out, trainer.validator, trainer.model)
    if final is None:
        return None
    if split := test_beside(cfg.src, cfg.tgt):
        trainer.say(Message(f"translating {split[0]} with {final.path} to score it"))
        score_test(final, split, cfg.tgt_lang, trainer.group.device)
    trainer.say(Message(describe_final(final)))
    return final


def _set_up(cfg: TrainConfig, say, resume, restart, group: ProcessGroup, run: RunDir, notes=()):
    """The model and tokenizer (a checkpoint of this run, a model to fine-tune, or new), the
    training set, validation, the optimizer, and where the run stands."""
    device, precision = group.device, Precision(group.device, cfg.precision)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    start, checkpoint = begin_run(cfg, group, run, resume, restart, say)
    model, tokenizer = start.model.to(device).train(), start.tokenizer
    # the model table as built: its vocabulary sizes come from the tokenizer, not the flags
    shown = {**to_dict(cfg), "model": to_dict(model.cfg)}
    say(Message(f"config: {json.dumps(shown, ensure_ascii=False)}"))
    for note in notes:
        say(Message(note))
    say(
        Message(
            f"model: {model.num_parameters():,} parameters, {group.world} process(es), "
            f"device {device}, {precision.name}"
        )
    )
    if group.world > 1 and checkpoint is None:
        torch.manual_seed(cfg.seed + group.rank)  # the same init everywhere, own dropout masks
    train_set = load_training_set(cfg, start, group, say)
    augmenter = make_augmenter(cfg, train_set, run.path, group, say)
    validator = make_validator(cfg, model, tokenizer, device, precision, say)
    optimizer = make_optimizer(model.parameters(), cfg, lr_at(1, cfg, model.cfg.d_model))
    pos = Position()
    if start.state is not None:
        pos = restore(start.state, optimizer, precision, validator, group, say)
        cfg = resumed_config(cfg, checkpoint, pos.step)
    result = TrainResult(step=pos.step, best=validator.best if validator else None, out=run.path)
    trainer = Trainer(
        cfg,
        group,
        run,
        model,
        model,
        tokenizer,
        start.tokenizer_dir,
        validator,
        optimizer,
        precision,
        pos,
        result,
        CheckpointPolicy(cfg),
        say,
        augmenter=augmenter,
        warmup_checked=pos.step >= WARMUP_MEASURED_STEPS and cfg.warmup_share > 0,
    )
    return trainer, train_set, checkpoint


def _train_epoch(trainer: Trainer, train_set: TokenStore) -> bool:
    """This rank's batches of the epoch from where the run stands; True when the run ends."""
    cfg, pos, group = trainer.cfg, trainer.pos, trainer.group
    resplit = epoch_resplit(train_set, trainer.tokenizer, cfg, pos.epoch, trainer.augmenter)
    batches_of_epoch = epoch_batches(
        train_set, max_tokens=cfg.max_tokens, seed=cfg.seed, epoch=pos.epoch
    )
    mine = batches_of_epoch.share(group.rank, group.world)
    # full groups of `accum` batches; alone, a last partial group still counts
    while pos.batch_pos + cfg.accum <= len(mine) or (
        pos.batch_pos < len(mine) and group.world == 1
    ):
        group_of = [
            mine[k] for k in range(pos.batch_pos, min(pos.batch_pos + cfg.accum, len(mine)))
        ]
        loss, lr, n_tokens = trainer.step(train_set, group_of, resplit)
        trainer.log(loss, lr, n_tokens, epochs_done=pos.epoch + pos.batch_pos / max(len(mine), 1))
        if trainer.after_step():
            return True
    return False


@dataclass
class Trainer:
    """What the loop works on and a checkpoint captures: the model, its optimizer, where the
    run stands, validation, and when to save. One per run; its methods are the loop's steps."""

    cfg: TrainConfig
    group: ProcessGroup
    run: RunDir
    model: torch.nn.Module
    net: torch.nn.Module  # the model, or its DistributedDataParallel wrapper
    tokenizer: Tokenizer
    tokenizer_dir: Path
    validator: Validator | None
    optimizer: torch.optim.Optimizer
    precision: Precision
    pos: Position
    result: TrainResult
    policy: CheckpointPolicy
    say: Callable[[Report], None]
    stop: StopFlag | None = None
    last_valid: ValidReport | None = None
    window_tokens: float = 0.0  # target tokens since the last progress report
    window_start: float = field(default_factory=time.monotonic)
    warmup_checked: bool = False  # whether --max-time's steps were set against the warm-up
    augmenter: Augmenter | None = None  # the placeholder pipeline, when the run has it on

    def step(
        self, store: TokenStore, batches: list, resplit: Resplit | None
    ) -> tuple[float, float, int]:
        """One optimizer step over this rank's `batches` (the paper's lr schedule, clipped
        gradients); returns the loss per target token, the lr and the target tokens, of all ranks."""
        lr = lr_at(self.pos.step + 1, self.cfg, self.model.cfg.d_model)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        loss_sum, n_tokens = _accumulate(
            self.net, store, batches, self.cfg, self.precision, self.group, resplit
        )
        self.precision.step(self.optimizer, self.model.parameters(), self.cfg.clip_norm)
        self.pos.step, self.pos.batch_pos = self.pos.step + 1, self.pos.batch_pos + len(batches)
        loss = loss_sum / max(n_tokens, 1)
        self.result.losses.append(loss)
        return loss, lr, n_tokens

    def log(self, loss: float, lr: float, n_tokens: int, epochs_done: float) -> None:
        """A progress report every log_every steps (and at the first), with the token rate."""
        self.window_tokens += n_tokens
        pos = self.pos
        if pos.step % self.cfg.log_every != 0 and pos.step != 1:
            return
        now = time.monotonic()
        rate = self.window_tokens / max(now - self.window_start, 1e-9)  # every rank's tokens
        self.window_tokens, self.window_start = 0.0, now
        done = _fraction_done(self.cfg, pos, epochs_done)
        report = StepReport(pos.step, pos.epoch + 1, loss, lr, rate, pos.elapsed, done)
        self.say(report)
        self.run.record(report)
        said_at_start = 0 < self.cfg.max_steps < self.cfg.warmup  # --max-steps' line, once
        if not self.warmup_checked and pos.step >= WARMUP_MEASURED_STEPS and not said_at_start:
            self.warmup_checked = True
            if sized := warmup_for_budget(self.cfg, pos.step, pos.elapsed):
                self.cfg = dataclasses.replace(self.cfg, warmup=sized[0])  # saved with the run
                self.say(Message(sized[1]))
            elif note := warmup_outlasts_budget(self.cfg, pos.step, pos.elapsed):
                self.say(Message(note))

    def after_step(self, epochs_done: bool = False) -> bool:
        """Validate and checkpoint as they are due; True when the run ends at this step."""
        cfg, group, validator, policy = self.cfg, self.group, self.validator, self.policy
        improved, bad_valids = False, 0
        if (
            validator
            and self.pos.step % cfg.valid_every == 0
            and policy.validated_at != self.pos.step
        ):
            improved = self.validate()
            bad_valids = int(group.sum(validator.bad if group.is_main else 0))  # for patience
        spent = epochs_done or _budget_spent(cfg, self.pos, bad_valids)
        ending = group.any(self.stop.signum is not None or bool(spent))
        if (
            ending
            and validator
            and self.stop.signum is None
            and policy.validated_at != self.pos.step
        ):
            improved = self.validate()  # the model the run ends with is validated too
        names = policy.names(self.pos.step, improved, ending=ending)
        if group.any(bool(names)):
            self.save(names)
        return ending

    def validate(self) -> bool:
        """Validate (on rank 0); True when this is the best model so far."""
        self.policy.validated_at = self.pos.step
        if self.group.is_main:
            self.last_valid = self.validator(self.pos.step)
            self.run.record(self.last_valid)
        last = self.last_valid
        return bool(last and last.is_best and last.step == self.pos.step)

    def save(self, names: list[str]) -> None:
        """A resumable checkpoint of this moment under `names` (collective: every rank's RNG)."""
        rngs = self.group.gather(rng_state(self.group.device))
        if self.group.is_main:
            state = trainer_state(self.pos, self.optimizer, self.precision, self.validator, rngs)
            extra = {"step": self.pos.step, "train": _train_config_record(self.cfg)}
            if self.last_valid is not None:
                extra["valid"] = {"loss": self.last_valid.loss, "bleu": self.last_valid.bleu}
            request = SaveRequest(
                tokenizer_dir=self.tokenizer_dir,
                src_lang=self.cfg.src_lang,
                tgt_lang=self.cfg.tgt_lang,
                extra=extra,
                trainer_state=state,
            )
            fill = lambda d: write_model_dir(self.model, d, request)  # noqa: E731
            self.run.checkpoint(fill, names, keep=self.cfg.keep, step=self.pos.step)
            self.run.sync_metrics()
        self.policy.saved(self.pos.step)

    def finish(self) -> TrainResult:
        """Where the run stopped; a signal is Interrupted, once `last` is saved."""
        self.result.step = self.pos.step
        self.result.best = self.validator.best if self.validator else None
        if self.stop.signum is not None:
            code = 130 if self.stop.signum == signal.SIGINT else 143
            raise Interrupted(
                f"interrupted at step {self.pos.step}; saved {self.run.path / 'last'}. Run the "
                "same command again to continue.",
                code,
            )
        return self.result


def make_validator(cfg: TrainConfig, model, tokenizer, device, precision, say) -> Validator | None:
    """Validation on --valid-src/--valid-tgt (None without them)."""
    if not cfg.valid_src:
        return None
    valid_set = load_pairs(cfg.valid_src, cfg.valid_tgt, tokenizer, cfg)
    say(Message(f"valid {cfg.valid_src}: {valid_set.stats.summary()}"))
    lines = read_corpus(cfg.valid_src, cfg.valid_tgt or None)
    shown = list(itertools.islice(lines, cfg.valid_bleu_lines))
    return Validator(
        model,
        tokenizer,
        valid_set,
        sources=[s for _, s, _ in shown],
        references=[t for _, _, t in shown],
        tgt_lang=cfg.tgt_lang,
        max_tokens=cfg.max_tokens,
        device=device,
        autocast=precision.autocast,
        say=say,
    )


def trainer_state(pos: Position, optimizer, precision: Precision, validator, rngs: list) -> dict:
    """What a checkpoint holds besides the weights, to continue exactly where it was taken."""
    return {
        "optimizer": optimizer.state_dict(),
        "scaler": precision.scaler.state_dict() if precision.scaler else None,
        "step": pos.step,
        "epoch": pos.epoch,
        "batch_pos": pos.batch_pos,
        "elapsed": pos.elapsed,
        "rng": rngs,  # one per rank
        "best": validator.best if validator else None,
        "bad_valids": validator.bad if validator else 0,
    }


def restore(state: dict, optimizer, precision: Precision, validator, group, say) -> Position:
    """Put a trainer state back (the inverse of `trainer_state`); returns the run's position."""
    optimizer.load_state_dict(state["optimizer"])
    if precision.scaler is not None and state.get("scaler"):
        precision.scaler.load_state_dict(state["scaler"])
    if validator is not None:
        validator.best, validator.bad = state.get("best"), state.get("bad_valids", 0)
    _restore_rng(state["rng"], group, say)
    # max_time counts the time of every resume too
    started = time.monotonic() - state.get("elapsed", 0.0)
    return Position(state["step"], state["epoch"], state["batch_pos"], started)


@dataclass
class CheckpointPolicy:
    """When a checkpoint is written, and under which names.

    step-N every `checkpoint_every` steps (kept: the newest `keep`), best when validation
    improves, and last with every checkpoint, at the end, and at least every
    `save_every_minutes` (so a crash loses at most that much work).
    """

    cfg: TrainConfig
    last_save: float = field(default_factory=time.monotonic)
    saved_at: int = -1  # step of the newest checkpoint
    validated_at: int = -1  # step of the newest validation

    def names(self, step: int, improved: bool, *, ending: bool) -> list[str]:
        if step == self.saved_at:
            return []
        cfg, names = self.cfg, []
        if step % cfg.checkpoint_every == 0 and cfg.keep > 0:
            names.append(f"step-{step}")
        if improved or (ending and not cfg.valid_src):  # nothing to select by: the final model
            names.append("best")
        minutes = cfg.save_every_minutes
        if names or ending or (minutes and time.monotonic() - self.last_save >= minutes * 60):
            names.append("last")
        return names

    def saved(self, step: int) -> None:
        self.saved_at, self.last_save = step, time.monotonic()


def _restore_rng(states, group: ProcessGroup, say) -> None:
    """Each rank takes its own saved random state; a different number of ranks re-seeds."""
    states = [states] if isinstance(states, dict) else states  # mtcli 0.1 saved one
    if len(states) == group.world:
        set_rng_state(states[group.rank], group.device)
    else:
        say(
            Message(
                f"the checkpoint was saved by {len(states)} process(es), not {group.world}: "
                "random state re-seeded, so dropout masks differ from the first run"
            )
        )


def _budget_spent(cfg: TrainConfig, pos: Position, bad_valids: int) -> str:
    """Why the run must stop now (empty: it may go on)."""
    if cfg.max_steps and pos.step >= cfg.max_steps:
        return f"max_steps is {cfg.max_steps}"
    if cfg.max_epochs and pos.epoch >= cfg.max_epochs:
        return f"max_epochs is {cfg.max_epochs}"
    if cfg.max_time and pos.elapsed >= cfg.max_time * 60:
        return f"max_time ({cfg.max_time:g} min) is spent"
    if cfg.patience and bad_valids >= cfg.patience:
        return f"patience ({cfg.patience}) ran out"
    return ""


def _accumulate(
    net,
    store: TokenStore,
    batches: list,
    cfg: TrainConfig,
    precision: Precision,
    group: ProcessGroup,
    resplit: Resplit | None = None,
) -> tuple[float, int]:
    """Forward and backward over this rank's `accum` batches; gradients are per target token of
    the whole step, every rank's batches together. Returns the step's loss sum and token count
    over all ranks.

    DDP averages gradients over ranks, so each rank scales its loss by world / (the step's
    tokens on all ranks): the average is then the gradient of the summed loss over the global
    token count, the same as one process with every batch (not a mean of per-rank means). The
    micro-batches before the last skip DDP's all-reduce (`no_sync`); the last one reduces the
    accumulated sum once.
    """
    padded = [collate(store, indices, resplit) for indices in batches]
    n_tokens = int(group.sum(sum(b.n_tgt_tokens for b in padded)))
    loss_sum = 0.0
    defer_sync = getattr(net, "no_sync", None)  # DDP's; a bare model has nothing to reduce
    for j, batch in enumerate(padded):
        batch = batch.to(group.device)
        last = j == len(padded) - 1
        with contextlib.nullcontext() if last or defer_sync is None else defer_sync():
            with precision.autocast():
                logits = net(batch.src_ids, batch.tgt_in)  # (B, T, V)
            loss = smoothed_loss(logits, batch.tgt_out, cfg.label_smoothing)
            precision.backward(loss * group.world / max(n_tokens, 1))
        loss_sum += loss.item()
    return group.sum(loss_sum), n_tokens


def _fraction_done(cfg: TrainConfig, pos: Position, epochs_done: float) -> float | None:
    parts = []
    if cfg.max_steps:
        parts.append(pos.step / cfg.max_steps)
    if cfg.max_epochs:
        parts.append(epochs_done / cfg.max_epochs)
    if cfg.max_time:
        parts.append(pos.elapsed / (cfg.max_time * 60))
    return min(max(parts), 1.0) if parts else None


def _train_config_record(cfg: TrainConfig) -> dict:
    record = to_dict(cfg)
    record.pop("model", None)  # the model config is stored on its own
    return record
