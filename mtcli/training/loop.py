"""The training loop: warm-up schedule, label-smoothed loss, validation, checkpoints, resume, DDP.

Reads top to bottom in nanoGPT's order: `train` sets up (process group, run directory,
model and tokenizer, data, optimizer, restored state), then loops: lr from the schedule,
forward, loss, backward, clip, step; every N steps log, validate and checkpoint. The pieces
it leans on each have a name and a place: the process group (distributed.py), the run
directory with its lock and checkpoint placement (run_dir.py), how a run starts or continues
(run_start.py), validation (validation.py), and below: the precision policy, the stop flag,
the checkpoint policy and the trainer state a checkpoint holds.

Every checkpoint is resumable (it holds the trainer state), and a run resumed from any of
them continues bit for bit as if it had never stopped (CPU, fp32). Reports go to a callback;
nothing here prints, except a last word on a second Ctrl-C.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mtcli.config import TrainConfig, to_dict
from mtcli.data.batches import Corpus, collate, epoch_batches
from mtcli.data.parallel_text import read_corpus
from mtcli.device import pick_device, use_cores
from mtcli.errors import Interrupted
from mtcli.store.checkpoint import SaveRequest, check_model_dir, write_model_dir
from mtcli.training.checks import check_inputs
from mtcli.training.distributed import ProcessGroup, rng_state, set_rng_state, start_process_group
from mtcli.training.reports import Message, Report, StepReport, TrainResult, ValidReport
from mtcli.training.run_dir import RunDir
from mtcli.training.start import begin_run, epoch_corpus, load_pairs, load_training_set
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


def my_share(batches: list, group: ProcessGroup) -> list:
    """This rank's equal share of an epoch's batches (DDP's collectives need equal counts)."""
    share = len(batches) // group.world
    return batches[group.rank * share : (group.rank + 1) * share]


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
) -> TrainResult:
    """Train as `cfg` says; return where it stopped. Raises Interrupted on a signal.

    Continues from `resume`, else from the newest checkpoint in OUT, unless `restart`.
    """
    device = pick_device(cfg.device)
    if device.type == "cpu":
        use_cores(cfg.threads)
    check_inputs(cfg, force)  # before OUT is touched: a mistake there writes nothing
    if cfg.init:
        check_model_dir(cfg.init)  # its tensor shapes too, the one check that needs torch
    group = start_process_group(device)
    run = RunDir.open(cfg.out, writer=group.is_main, force=force)
    try:
        return _train(cfg, report, resume, restart, group, run)
    finally:
        run.close()
        group.stop()


def _train(
    cfg: TrainConfig, report, resume: str | None, restart: bool, group: ProcessGroup, run: RunDir
) -> TrainResult:
    say = report if group.is_main else (lambda r: None)
    device, precision = group.device, Precision(group.device, cfg.precision)

    # model and tokenizer: a checkpoint of this run, a model to fine-tune (--init), or new
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    start, checkpoint = begin_run(cfg, group, run, resume, restart, say)
    model, tokenizer = start.model.to(device).train(), start.tokenizer
    # the model table as built: its vocabulary sizes come from the tokenizer, not the flags
    shown = {**to_dict(cfg), "model": to_dict(model.cfg)}
    say(Message(f"config: {json.dumps(shown, ensure_ascii=False)}"))
    say(Message(f"model: {model.num_parameters():,} parameters, {group.world} process(es), "
                f"device {device}, {precision.name}"))  # fmt: skip
    if group.world > 1 and checkpoint is None:
        torch.manual_seed(cfg.seed + group.rank)  # the same init everywhere, own dropout masks

    # data, validation, optimizer, and where the run stands
    train_set = load_training_set(cfg, tokenizer, say)
    validator = make_validator(cfg, model, tokenizer, device, precision, say)
    optimizer = make_optimizer(model.parameters(), cfg, lr_at(1, cfg, model.cfg.d_model))
    pos = Position()
    if start.state is not None:
        pos = restore(start.state, optimizer, precision, validator, group, say)
    result = TrainResult(step=pos.step, best=validator.best if validator else None, out=run.path)
    if spent := _budget_spent(cfg, pos, bad_valids=0):
        say(Message(f"nothing to do: {checkpoint} is at step {pos.step}, and {spent}"))
        return result
    net = model
    if group.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if group.is_main:
        run.start_metrics(cfg.tensorboard, resumed_at=pos.step if checkpoint else None)
    policy = CheckpointPolicy(cfg)
    last_valid: ValidReport | None = None

    def save(names: list[str]) -> None:
        """A resumable checkpoint of this moment under `names` (collective: every rank's RNG)."""
        rngs = group.gather(rng_state(device))
        if group.is_main:
            state = trainer_state(pos, optimizer, precision, validator, rngs)
            extra = {"step": pos.step, "train": _train_config_record(cfg)}
            if last_valid is not None:
                extra["valid"] = {"loss": last_valid.loss, "bleu": last_valid.bleu}
            request = SaveRequest(
                tokenizer_dir=start.tokenizer_dir, src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang,
                extra=extra, trainer_state=state,
            )  # fmt: skip
            fill = lambda d: write_model_dir(model, d, request)  # noqa: E731
            run.checkpoint(fill, names, keep=cfg.keep, step=pos.step)
            run.sync_metrics()
        policy.saved(pos.step)

    def validate() -> bool:
        """Validate (on rank 0); True when this is the best model so far."""
        nonlocal last_valid
        policy.validated_at = pos.step
        if group.is_main:
            last_valid = validator(pos.step)
            run.record(last_valid)
        return bool(last_valid and last_valid.is_best and last_valid.step == pos.step)

    def after_step(epochs_done: bool = False) -> bool:
        """Validate and checkpoint as they are due; True when the run ends at this step."""
        improved, bad_valids = False, 0
        if validator and pos.step % cfg.valid_every == 0 and policy.validated_at != pos.step:
            improved = validate()
            bad_valids = int(group.sum(validator.bad if group.is_main else 0))  # for patience
        spent = epochs_done or _budget_spent(cfg, pos, bad_valids)
        ending = group.any(stop.signum is not None or bool(spent))
        if ending and validator and stop.signum is None and policy.validated_at != pos.step:
            improved = validate()  # the model the run ends with is validated too
        names = policy.names(pos.step, improved, ending=ending)
        if group.any(bool(names)):
            save(names)
        return ending

    # the loop, in nanoGPT's order: lr, forward, loss, backward, clip, step; log; validate, save
    window_tokens, window_start = 0.0, time.monotonic()
    ended = False
    with StopFlag() as stop:
        while not ended and (cfg.max_epochs == 0 or pos.epoch < cfg.max_epochs):
            seen = epoch_corpus(train_set, tokenizer, cfg, pos.epoch)
            batches_of_epoch = epoch_batches(
                seen, max_tokens=cfg.max_tokens, seed=cfg.seed, epoch=pos.epoch
            )
            mine = my_share(batches_of_epoch, group)
            # full groups of `accum` batches; alone, a last partial group still counts
            while not ended and (
                pos.batch_pos + cfg.accum <= len(mine)
                or (pos.batch_pos < len(mine) and group.world == 1)
            ):
                batches = mine[pos.batch_pos : pos.batch_pos + cfg.accum]
                lr = lr_at(pos.step + 1, cfg, model.cfg.d_model)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                loss_sum, n_tokens = _accumulate(net, seen, batches, cfg, precision, device)
                precision.step(optimizer, model.parameters(), cfg.clip_norm)
                pos.step, pos.batch_pos = pos.step + 1, pos.batch_pos + len(batches)
                loss = loss_sum / max(n_tokens, 1)
                result.losses.append(loss)
                window_tokens += n_tokens
                if pos.step % cfg.log_every == 0 or pos.step == 1:
                    now = time.monotonic()
                    rate = group.world * window_tokens / max(now - window_start, 1e-9)
                    window_tokens, window_start = 0.0, now
                    done = _fraction_done(cfg, pos, pos.epoch + pos.batch_pos / max(len(mine), 1))
                    step_report = StepReport(pos.step, pos.epoch + 1, loss, lr, rate, pos.elapsed, done)  # fmt: skip
                    say(step_report)
                    run.record(step_report)
                ended = after_step()
            if not ended:
                pos.epoch, pos.batch_pos = pos.epoch + 1, 0
        if not ended:  # max_epochs reached
            after_step(epochs_done=True)
        group.barrier()
    result.step, result.best = pos.step, validator.best if validator else None
    if stop.signum is not None:
        code = 130 if stop.signum == signal.SIGINT else 143
        raise Interrupted(
            f"interrupted at step {pos.step}; saved {run.path / 'last'}. Run the same command "
            "again to continue.",
            code,
        )
    return result


def make_validator(cfg: TrainConfig, model, tokenizer, device, precision, say) -> Validator | None:
    """Validation on --valid-src/--valid-tgt (None without them)."""
    if not cfg.valid_src:
        return None
    valid_set = load_pairs(cfg.valid_src, cfg.valid_tgt, tokenizer, cfg)
    say(Message(f"valid {cfg.valid_src}: {valid_set.stats.summary()}"))
    lines = read_corpus(cfg.valid_src, cfg.valid_tgt or None)
    shown = list(itertools.islice(lines, cfg.valid_bleu_lines))
    return Validator(
        model, tokenizer, valid_set, sources=[s for _, s, _ in shown],
        references=[t for _, _, t in shown], tgt_lang=cfg.tgt_lang, max_tokens=cfg.max_tokens,
        device=device, autocast=precision.autocast, say=say,
    )  # fmt: skip


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
        say(Message(f"the checkpoint was saved by {len(states)} process(es), not {group.world}: "
                    "random state re-seeded, so dropout masks differ from the first run"))  # fmt: skip


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
    net, corpus: Corpus, group: list[list[int]], cfg: TrainConfig, precision: Precision, device
) -> tuple[float, int]:
    """Forward and backward over `accum` batches; gradients are per target token of the group."""
    batches = [collate(corpus, indices) for indices in group]
    n_tokens = sum(b.n_tgt_tokens for b in batches)
    loss_sum = 0.0
    for batch in batches:
        batch = batch.to(device)
        with precision.autocast():
            logits = net(batch.src_ids, batch.tgt_in)  # (B, T, V)
        loss = smoothed_loss(logits, batch.tgt_out, cfg.label_smoothing)
        precision.backward(loss / n_tokens)
        loss_sum += loss.item()
    return loss_sum, n_tokens


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
