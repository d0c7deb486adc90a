"""The training loop: warm-up schedule, label-smoothed loss, validation, checkpoints, resume, DDP.

Reads top to bottom in nanoGPT's order: `train` sets up (process group, run directory,
model and tokenizer, data, optimizer, restored state), then loops: lr from the schedule,
forward, loss, backward, clip, step; every N steps log, validate and checkpoint. The pieces
it leans on each have a name and a place: the process group (distributed.py), the run
directory with its lock and checkpoint placement (run_dir.py), validation (validation.py),
the stop flag and the precision policy (below).

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

from mtcli.checkpoint import (
    SaveRequest,
    check_model_dir,
    load_model,
    load_trainer_state,
    write_model_dir,
)
from mtcli.config import (
    RESUMABLE_CHANGES,
    ModelConfig,
    TrainConfig,
    differences,
    from_dict,
    to_dict,
)
from mtcli.data import (
    Corpus,
    check_parallel,
    collate,
    epoch_batches,
    load_corpus,
    read_corpus,
    resplit,
)
from mtcli.device import pick_device, use_cores
from mtcli.distributed import ProcessGroup, rng_state, set_rng_state, start_process_group
from mtcli.errors import Interrupted, UserError
from mtcli.model import Seq2Seq
from mtcli.reports import Message, Report, StepReport, TrainResult, ValidReport
from mtcli.run_dir import RunDir, check_run_out, recorded_settings, resume_point
from mtcli.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.validation import Validator, smoothed_loss

# model fields that follow from the tokenizer, not from the user's settings
DERIVED_MODEL_FIELDS = ("src_vocab_size", "tgt_vocab_size", "share_embeddings")


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


# ---------------------------------------------------------------- setup
def prepare_tokenizer(cfg: TrainConfig, group: ProcessGroup) -> Path:
    """The tokenizer directory to use: the given one, or one trained now into OUT/tokenizer."""
    if cfg.tokenizer:
        Tokenizer.load(cfg.tokenizer)  # fail early on a bad directory
        return Path(cfg.tokenizer)
    if not cfg.tgt:
        raise UserError("a TSV corpus needs --tokenizer (train one with `mtcli tokenizer train`)")
    tok_dir = Path(cfg.out) / "tokenizer"
    if group.is_main and not (tok_dir / "tokenizer.json").is_file():
        train_tokenizer(
            cfg.src, cfg.tgt, tok_dir, TokenizerOptions(vocab_size=cfg.vocab_size, seed=cfg.seed)
        )
    group.barrier()
    return tok_dir


def load_pairs(src: str, tgt: str, tokenizer: Tokenizer, cfg: TrainConfig) -> Corpus:
    """Two aligned files, or one TSV file when `tgt` is empty."""
    return load_corpus(
        read_corpus(src, tgt or None),
        tokenizer.encode_src,
        tokenizer.encode_tgt,
        max_len=cfg.max_len,
        max_ratio=cfg.max_ratio,
    )


def epoch_corpus(corpus: Corpus, tokenizer: Tokenizer, cfg: TrainConfig, epoch: int) -> Corpus:
    """The training pairs as this epoch sees them: re-split by BPE-dropout when it is on.

    Seeded by (seed, epoch), so a resumed run sees the same splits as an uninterrupted one.
    """
    if cfg.bpe_dropout <= 0:
        return corpus
    rng = random.Random(cfg.seed * 1_000_003 + epoch)
    return resplit(
        corpus,
        lambda texts: tokenizer.sample_src(texts, cfg.bpe_dropout, rng),
        lambda texts: tokenizer.sample_tgt(texts, cfg.bpe_dropout, rng),
        max_len=cfg.max_len,
    )


def build_model_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ModelConfig:
    """The configured shape with vocabulary sizes from the tokenizer; shared embeddings only if joint."""
    return dataclasses.replace(
        cfg.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        share_embeddings=cfg.model.share_embeddings and tokenizer.joint,
    )


def architecture_differences(wanted: ModelConfig, actual: ModelConfig) -> list[tuple]:
    """(field, actual, wanted) for each model field the user chose that differs."""
    a, w = to_dict(actual), to_dict(wanted)
    return [(k, a[k], w[k]) for k in a if k not in DERIVED_MODEL_FIELDS and a[k] != w[k]]


def check_same_run(checkpoint: Path, cfg: TrainConfig) -> list[tuple]:
    """Refuse to resume a checkpoint with other model, data or optimisation settings.

    Budgets and cadences (RESUMABLE_CHANGES) may change; those changes are returned.
    """
    train_rec, model_rec = recorded_settings(checkpoint)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    recorded = to_dict(  # fields an older mtcli did not record take their defaults
        from_dict(
            TrainConfig, {**{k: v for k, v in train_rec.items() if k in known}, "model": model_rec}
        )
    )
    requested = to_dict(cfg)
    diffs = differences(
        {k: v for k, v in recorded.items() if k != "model"},
        {k: v for k, v in requested.items() if k != "model"},
    )
    diffs += [
        ("model." + k, a, w)
        for k, a, w in architecture_differences(cfg.model, from_dict(ModelConfig, model_rec))
    ]
    if refused := [d for d in diffs if d[0] not in RESUMABLE_CHANGES]:
        changes = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in refused)
        raise UserError(
            f"{checkpoint} was trained with other settings ({changes}); use the same settings "
            "to continue, --restart to start over, or another --out"
        )
    return diffs


@dataclass
class Start:
    """Where a run begins: its model, its tokenizer, and the trainer state when resumed."""

    model: Seq2Seq
    tokenizer: Tokenizer
    tokenizer_dir: Path
    state: dict | None = None


def continue_run(checkpoint: Path, cfg: TrainConfig, say) -> Start:
    """Model, tokenizer and trainer state of a checkpoint of this same run."""
    changes = check_same_run(checkpoint, cfg)
    state = load_trainer_state(checkpoint)
    loaded = load_model(checkpoint)
    for key, old, new in changes:
        say(Message(f"resuming with {key} {old!r} -> {new!r}"))
    say(Message(f"resuming from {checkpoint} at step {state['step']} (--restart to start over)"))
    return Start(loaded.model, loaded.tokenizer, loaded.path, state)


def check_init(cfg: TrainConfig) -> None:
    """--init MODEL brings its shape and tokenizer: a flag that asks for others is refused."""
    path, _, model_cfg, _ = check_model_dir(cfg.init)
    if cfg.tokenizer and Path(cfg.tokenizer).resolve() != path.resolve():
        raise UserError(
            f"--tokenizer {cfg.tokenizer} conflicts with --init {cfg.init}: the model brings its "
            "own tokenizer"
        )
    if diffs := architecture_differences(cfg.model, model_cfg):
        k, actual, wanted = diffs[0]
        raise UserError(f"--init {cfg.init} has {k} {actual!r}; it cannot be trained as {wanted!r}")


def start_from_model(cfg: TrainConfig) -> Start:
    """--init: a new run from a model's weights, shape and tokenizer (fresh optimizer)."""
    loaded = load_model(cfg.init)
    # the same weights in a model with this run's dropout rates
    model = Seq2Seq(dataclasses.replace(loaded.model.cfg, **_dropouts(cfg.model)))
    model.load_state_dict(loaded.model.state_dict())
    return Start(model, loaded.tokenizer, loaded.path)


def _dropouts(cfg: ModelConfig) -> dict:
    return {k: getattr(cfg, k) for k in ("dropout", "attention_dropout", "activation_dropout")}


def start_new(cfg: TrainConfig, group: ProcessGroup) -> Start:
    tok_dir = prepare_tokenizer(cfg, group)
    tokenizer = Tokenizer.load(tok_dir)
    return Start(Seq2Seq(build_model_config(cfg, tokenizer)), tokenizer, tok_dir)


def check_inputs(cfg: TrainConfig, force: bool) -> None:
    """Every input a run reads, checked before it writes anything: --out, the corpora, the
    tokenizer or --init model, the TensorBoard package."""
    check_run_out(Path(cfg.out), force)
    # a corpus mistake (missing file, misaligned lines, bad UTF-8) should stop the run before
    # minutes go into training a tokenizer on it
    for src, tgt in ((cfg.src, cfg.tgt), (cfg.valid_src, cfg.valid_tgt)):
        if src:
            check_parallel(src, tgt or None)
    if cfg.tokenizer:
        Tokenizer.load(cfg.tokenizer)
    if cfg.init:
        check_init(cfg)
    if cfg.tensorboard:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise UserError(
                "--tensorboard needs the tensorboard package: pip install 'mtcli[tensorboard]'"
            ) from None


def my_share(batches: list, group: ProcessGroup) -> list:
    """This rank's equal share of an epoch's batches (DDP's collectives need equal counts)."""
    share = len(batches) // group.world
    return batches[group.rank * share : (group.rank + 1) * share]


# ---------------------------------------------------------------- the loop
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
    group = start_process_group(device)
    run = RunDir.open(cfg.out, writer=group.is_main, force=force)
    try:
        return _train(cfg, report, resume, restart, group, run)
    finally:
        run.close()
        group.stop()


def _train(
    cfg: TrainConfig,
    report,
    resume_from: str | None,
    restart: bool,
    group: ProcessGroup,
    run: RunDir,
) -> TrainResult:
    say = report if group.is_main else (lambda r: None)
    device = group.device
    precision = Precision(device, cfg.precision)
    group.barrier()  # rank 0 has cleaned what a killed run left in OUT
    checkpoint = resume_point(run.path, resume_from, restart)
    if restart and group.is_main and (removed := run.clear()):
        say(Message(f"--restart: removed {', '.join(removed)} from {run.path}"))
    group.barrier()

    # model and tokenizer: a checkpoint of this run, a model to fine-tune, or new
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    if checkpoint is not None:
        start = continue_run(checkpoint, cfg, say)
    elif cfg.init:
        start = start_from_model(cfg)
    else:
        start = start_new(cfg, group)
    model, tokenizer, state = start.model, start.tokenizer, start.state
    model.to(device).train()
    say(Message(f"config: {json.dumps(to_dict(cfg), ensure_ascii=False)}"))
    if group.world > 1 and state is None:
        torch.manual_seed(cfg.seed + group.rank)  # the same init everywhere, own dropout masks
    say(Message(f"model: {model.num_parameters():,} parameters, {group.world} process(es), "
                f"device {device}, {precision.name}"))  # fmt: skip

    # data
    train_set = load_pairs(cfg.src, cfg.tgt, tokenizer, cfg)
    say(Message(f"train {cfg.src}: {train_set.stats.summary()}"))
    if len(train_set) == 0:
        raise UserError(f"{cfg.src}: no usable training pairs")
    validator = None
    if cfg.valid_src:
        valid_set = load_pairs(cfg.valid_src, cfg.valid_tgt, tokenizer, cfg)
        say(Message(f"valid {cfg.valid_src}: {valid_set.stats.summary()}"))
        shown = list(
            itertools.islice(
                read_corpus(cfg.valid_src, cfg.valid_tgt or None), cfg.valid_bleu_lines
            )
        )
        validator = Validator(
            model, tokenizer, valid_set, sources=[s for _, s, _ in shown],
            references=[t for _, _, t in shown], tgt_lang=cfg.tgt_lang, max_tokens=cfg.max_tokens,
            device=device, autocast=precision.autocast, say=say,
        )  # fmt: skip

    # optimizer and where the run stands: restored from the checkpoint, or at the start
    optimizer = make_optimizer(model.parameters(), cfg, lr_at(1, cfg, model.cfg.d_model))
    step, epoch, batch_pos, elapsed = 0, 0, 0, 0.0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        if precision.scaler is not None and state.get("scaler"):
            precision.scaler.load_state_dict(state["scaler"])
        step, epoch, batch_pos = state["step"], state["epoch"], state["batch_pos"]
        elapsed = state.get("elapsed", 0.0)
        _restore_rng(state["rng"], group, say)
        if validator is not None:
            validator.best, validator.bad = state.get("best"), state.get("bad_valids", 0)
    net = torch.nn.parallel.DistributedDataParallel(model) if group.world > 1 else model
    result = TrainResult(step=step, best=validator.best if validator else None, out=run.path)
    if spent := _budget_spent(cfg, step, epoch, elapsed, 0):
        say(Message(f"nothing to do: {checkpoint} is at step {step}, and {spent}"))
        return result
    if group.is_main:
        run.start_metrics(cfg.tensorboard, resumed_at=step if checkpoint is not None else None)

    def save(names: list[str]) -> None:
        """A resumable checkpoint of this moment under `names` (collective: every rank's RNG)."""
        rngs = group.gather(rng_state(device))
        if not group.is_main:
            return
        trainer_state = {
            "optimizer": optimizer.state_dict(), "step": step, "epoch": epoch,
            "batch_pos": batch_pos, "elapsed": time.monotonic() - clock_start, "rng": rngs,
            "best": validator.best if validator else None,
            "bad_valids": validator.bad if validator else 0,
            "scaler": precision.scaler.state_dict() if precision.scaler else None,
        }  # fmt: skip
        extra = {"step": step, "train": _train_config_record(cfg)}
        if last_valid is not None:
            extra["valid"] = {"loss": last_valid.loss, "bleu": last_valid.bleu}
        request = SaveRequest(
            tokenizer_dir=start.tokenizer_dir, src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang,
            extra=extra, trainer_state=trainer_state,
        )  # fmt: skip
        run.checkpoint(
            lambda d: write_model_dir(model, d, request), names, keep=cfg.keep, step=step
        )
        run.sync_metrics()

    def validate() -> bool:
        """Validate on rank 0; True there when this is the best model so far."""
        nonlocal last_valid
        policy.validated_at = step
        if not group.is_main:
            return False
        last_valid = validator(step)
        run.record(last_valid)
        return last_valid.is_best

    def after_step(epochs_done: bool) -> bool:
        """Validate and checkpoint as due; True when the run ends at this step."""
        now = time.monotonic()
        improved = bad_valids = 0
        if validator is not None and step % cfg.valid_every == 0 and policy.validated_at != step:
            improved = validate()
            bad_valids = int(group.sum(validator.bad if group.is_main else 0))  # for patience
        spent = epochs_done or _budget_spent(cfg, step, epoch, now - clock_start, bad_valids)
        ending = group.any(stop.signum is not None or bool(spent))
        if ending and validator is not None and stop.signum is None and policy.validated_at != step:
            improved = validate()  # the model the run ends with is validated too
        names = policy.names(step, bool(improved), ending=ending, now=now)
        if group.any(bool(names)):
            save(names)
            policy.saved(step, now)
        return ending

    # the loop, in nanoGPT's order: lr, forward, loss, backward, clip, step; log; validate, save
    policy = CheckpointPolicy(cfg)
    clock_start = time.monotonic() - elapsed  # max_time counts the time of every resume too
    window_tokens, window_start = 0.0, time.monotonic()
    last_valid: ValidReport | None = None
    with StopFlag() as stop:
        ended = False
        while not ended and (cfg.max_epochs == 0 or epoch < cfg.max_epochs):
            seen = epoch_corpus(train_set, tokenizer, cfg, epoch)
            mine = my_share(
                epoch_batches(seen, max_tokens=cfg.max_tokens, seed=cfg.seed, epoch=epoch), group
            )
            # full groups of `accum` batches; alone, a last partial group still counts
            while not ended and (
                batch_pos + cfg.accum <= len(mine) or (batch_pos < len(mine) and group.world == 1)
            ):
                batches = mine[batch_pos : batch_pos + cfg.accum]
                lr = lr_at(step + 1, cfg, model.cfg.d_model)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                loss_sum, n_tokens = _accumulate(net, seen, batches, cfg, precision, device)
                precision.step(optimizer, model.parameters(), cfg.clip_norm)
                step += 1
                batch_pos += len(batches)
                loss = loss_sum / max(n_tokens, 1)
                result.losses.append(loss)
                window_tokens += n_tokens
                if step % cfg.log_every == 0 or step == 1:
                    now = time.monotonic()
                    rate = group.world * window_tokens / max(now - window_start, 1e-9)
                    window_tokens, window_start = 0.0, now
                    fraction = _fraction_done(
                        cfg, step, epoch + batch_pos / max(len(mine), 1), now - clock_start
                    )
                    step_report = StepReport(step, epoch + 1, loss, lr, rate, now - clock_start, fraction)  # fmt: skip
                    say(step_report)
                    run.record(step_report)
                ended = after_step(epochs_done=False)
            if not ended:
                epoch, batch_pos = epoch + 1, 0
        if not ended:  # max_epochs reached
            after_step(epochs_done=True)
        group.barrier()
        result.step, result.best = step, validator.best if validator else None
        if stop.signum is not None:
            code = 130 if stop.signum == signal.SIGINT else 143
            raise Interrupted(
                f"interrupted at step {step}; saved {run.path / 'last'}. Run the same command "
                "again to continue.",
                code,
            )
    return result


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

    def names(self, step: int, improved: bool, *, ending: bool, now: float) -> list[str]:
        if step == self.saved_at:
            return []
        cfg, names = self.cfg, []
        if step % cfg.checkpoint_every == 0 and cfg.keep > 0:
            names.append(f"step-{step}")
        if improved or (ending and not cfg.valid_src):  # nothing to select by: the final model
            names.append("best")
        minutes = cfg.save_every_minutes
        if names or ending or (minutes and now - self.last_save >= minutes * 60):
            names.append("last")
        return names

    def saved(self, step: int, now: float) -> None:
        self.saved_at, self.last_save = step, now


def _restore_rng(states, group: ProcessGroup, say) -> None:
    """Each rank takes its own saved random state; a different number of ranks re-seeds."""
    states = [states] if isinstance(states, dict) else states  # mtcli 0.1 saved one
    if len(states) == group.world:
        set_rng_state(states[group.rank], group.device)
    else:
        say(Message(f"the checkpoint was saved by {len(states)} process(es), not {group.world}: "
                    "random state re-seeded, so dropout masks differ from the first run"))  # fmt: skip


def _budget_spent(cfg: TrainConfig, step: int, epoch: int, elapsed: float, bad_valids: int) -> str:
    """Why the run must stop now (empty: it may go on)."""
    if cfg.max_steps and step >= cfg.max_steps:
        return f"max_steps is {cfg.max_steps}"
    if cfg.max_epochs and epoch >= cfg.max_epochs:
        return f"max_epochs is {cfg.max_epochs}"
    if cfg.max_time and elapsed >= cfg.max_time * 60:
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


def _fraction_done(cfg: TrainConfig, step: int, epochs_done: float, elapsed: float) -> float | None:
    parts = []
    if cfg.max_steps:
        parts.append(step / cfg.max_steps)
    if cfg.max_epochs:
        parts.append(epochs_done / cfg.max_epochs)
    if cfg.max_time:
        parts.append(elapsed / (cfg.max_time * 60))
    return min(max(parts), 1.0) if parts else None


def _train_config_record(cfg: TrainConfig) -> dict:
    record = to_dict(cfg)
    record.pop("model", None)  # the model config is stored on its own
    return record
