"""The training loop: warm-up schedule, label-smoothed loss, validation, checkpoints, resume, DDP.

Reads top to bottom in nanoGPT's order. Reports through a callback and never prints, so the
CLI decides how progress looks. Distributed runs are started by torchrun, which sets
RANK / WORLD_SIZE; each rank trains on a disjoint share of every epoch's batches and only
rank 0 validates and writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mtcli.checkpoint import SaveRequest, load_model, load_trainer_state, read_config, save_model
from mtcli.config import DecodeConfig, ModelConfig, TrainConfig, to_dict
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
from mtcli.errors import Interrupted, UserError
from mtcli.evaluate import bleu, bleu_tokenizer_for
from mtcli.model import Seq2Seq
from mtcli.tokenizer import PAD_ID, Tokenizer, TokenizerOptions, seed_sampling, train_tokenizer
from mtcli.translate import Translator

STEP_DIR = re.compile(r"^step-(\d+)$")


# ---------------------------------------------------------------- reports (for the CLI)
@dataclass
class StepReport:
    step: int
    epoch: int
    loss: float  # label-smoothed cross-entropy per target token
    lr: float
    tokens_per_s: float  # target tokens (all ranks) per second since the last report
    elapsed: float  # seconds since this run started
    fraction: float | None  # estimated share of the run done (None when unbounded)

    @property
    def ppl(self) -> float:
        return math.exp(min(self.loss, 50.0))


@dataclass
class ValidReport:
    step: int
    loss: float  # plain cross-entropy (no smoothing) per target token
    bleu: float | None
    is_best: bool

    @property
    def ppl(self) -> float:
        return math.exp(min(self.loss, 50.0))


@dataclass
class Message:
    text: str


Report = StepReport | ValidReport | Message


@dataclass
class TrainResult:
    step: int
    best: list[float] | None  # best validation [BLEU, -loss] (BLEU 0 when it is off)
    losses: list[float] = field(default_factory=list)  # one per optimizer step of this run
    out: Path = Path()


# ---------------------------------------------------------------- pure pieces
def lr_at(step: int, cfg: TrainConfig, d_model: int) -> float:
    """The paper's schedule: factor * D^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1."""
    step = max(step, 1)
    return cfg.lr_factor * d_model**-0.5 * min(step**-0.5, step * cfg.warmup**-1.5)


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Summed label-smoothed cross-entropy over non-pad targets. logits (B, T, V), target (B, T).

    bf16 logits stay bf16: the kernel works in fp32 inside each row, and converting the
    (tokens x V) logits to fp32 first cost ~15% of a bf16 training step (2,614 -> 3,044 target
    tokens/s measured); the per-token losses are summed in fp32.
    """
    losses = F.cross_entropy(
        logits.flatten(0, 1),
        target.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=smoothing,
        reduction="none",
    )  # (B*T,), zero at padding
    return losses.float().sum()


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


def autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---------------------------------------------------------------- distributed
@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any (so all ranks stop at the same step)."""
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def sum(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())


def init_distributed(device: torch.device) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return Dist(rank, world)


# ---------------------------------------------------------------- signals
class StopFlag:
    """Set by SIGINT/SIGTERM; the loop finishes its step, saves `last`, then stops."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # second Ctrl-C: the user means it
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- setup
def prepare_tokenizer(cfg: TrainConfig, ddp: Dist) -> Path:
    """The tokenizer directory to use: the given one, or one trained now into OUT/tokenizer."""
    if cfg.tokenizer:
        Tokenizer.load(cfg.tokenizer)  # fail early on a bad directory
        return Path(cfg.tokenizer)
    if not cfg.tgt:
        raise UserError("a TSV corpus needs --tokenizer (train one with `mtcli tokenizer train`)")
    tok_dir = Path(cfg.out) / "tokenizer"
    if ddp.is_main and not (tok_dir / "tokenizer.json").is_file():
        train_tokenizer(
            cfg.src, cfg.tgt, tok_dir, TokenizerOptions(vocab_size=cfg.vocab_size, seed=cfg.seed)
        )
    ddp.barrier()
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
    seed_sampling(cfg.seed * 1_000_003 + epoch)
    return resplit(
        corpus,
        lambda texts: tokenizer.sample_src(texts, cfg.bpe_dropout),
        lambda texts: tokenizer.sample_tgt(texts, cfg.bpe_dropout),
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


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))


# ---------------------------------------------------------------- validation
@torch.no_grad()
def validate_loss(model: Seq2Seq, corpus: Corpus, cfg: TrainConfig, device: torch.device) -> float:
    """Cross-entropy per target token over the whole validation set (no smoothing)."""
    model.eval()
    total, tokens = 0.0, 0
    for indices in epoch_batches(corpus, max_tokens=cfg.max_tokens, seed=0, epoch=0):
        batch = collate(corpus, indices).to(device)
        with autocast(device, cfg.precision):
            logits = model(batch.src_ids, batch.tgt_in)
        # fp32 here whatever the training precision: validation measures the model
        total += float(smoothed_loss(logits.float(), batch.tgt_out, 0.0))
        tokens += batch.n_tgt_tokens
    model.train()
    return total / max(tokens, 1)


def validate_bleu(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    sources: list[str],
    refs: list[str],
    cfg: TrainConfig,
    device,
) -> float:
    """BLEU of greedy translations of the first validation lines."""
    model.eval()
    translator = Translator(model, tokenizer, DecodeConfig(beam_size=1), device=device)
    hyps = [t.text for t in translator.translate_chunk(sources)]
    model.train()
    return bleu(hyps, refs, tokenize=bleu_tokenizer_for(cfg.tgt_lang))


# ---------------------------------------------------------------- checkpoints
def prune_step_dirs(out: Path, keep: int) -> None:
    """Delete all but the newest `keep` OUT/step-N directories."""
    steps = sorted(
        (int(m.group(1)), p) for p in out.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()
    )
    for _, path in steps[: max(len(steps) - keep, 0)]:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- the loop
def train(
    cfg: TrainConfig,
    report: Callable[[Report], None] = lambda r: None,
    *,
    resume: str | None = None,
) -> TrainResult:
    """Train a model as `cfg` says; return where it stopped. Raises Interrupted on a signal."""
    device = pick_device(cfg.device)
    if device.type == "cpu":
        use_cores(cfg.threads)
    ddp = init_distributed(device)
    try:
        return _train(cfg, report, resume, device, ddp)
    finally:
        if ddp.world > 1:
            dist.destroy_process_group()


def _train(
    cfg: TrainConfig, report, resume: str | None, device: torch.device, ddp: Dist
) -> TrainResult:
    say = report if ddp.is_main else (lambda r: None)
    out = Path(cfg.out)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    # a corpus mistake (missing file, misaligned lines, bad UTF-8) should stop the run before
    # minutes go into training a tokenizer on it
    for src, tgt in ((cfg.src, cfg.tgt), (cfg.valid_src, cfg.valid_tgt)):
        if src:
            check_parallel(src, tgt or None)

    # tokenizer, model, optimizer: fresh or restored
    state = None
    if resume:
        loaded = load_model(resume)
        state = load_trainer_state(resume)
        tokenizer, model = loaded.tokenizer, loaded.model
        tok_dir = loaded.path
        model_cfg = model.cfg
        say(Message(f"resuming from {resume} at step {state['step']}"))
    else:
        tok_dir = prepare_tokenizer(cfg, ddp)
        tokenizer = Tokenizer.load(tok_dir)
        model_cfg = build_model_config(cfg, tokenizer)
        model = Seq2Seq(model_cfg)
    model.to(device).train()
    say(
        Message(
            f"model: {model.num_parameters():,} parameters, {ddp.world} process(es), device {device}"
        )
    )

    train_set = load_pairs(cfg.src, cfg.tgt, tokenizer, cfg)
    say(Message(f"train {cfg.src}: {train_set.stats.summary()}"))
    if len(train_set) == 0:
        raise UserError(f"{cfg.src}: no usable training pairs")

    optimizer = make_optimizer(model.parameters(), cfg, lr_at(1, cfg, model_cfg.d_model))
    step, epoch, batch_pos = 0, 0, 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        step, epoch, batch_pos = state["step"], state["epoch"], state["batch_pos"]
        set_rng_state(state["rng"])
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp.world > 1 else model

    def save(path: Path, with_state: bool, extra: dict | None = None) -> None:
        trainer_state = None
        if with_state:
            trainer_state = {
                "optimizer": optimizer.state_dict(),
                "step": step,
                "epoch": epoch,
                "batch_pos": batch_pos,
                "best": validate.best if validate else None,
                "bad_valids": validate.bad if validate else 0,
                "rng": rng_state(),
            }
        save_model(
            model,
            path,
            SaveRequest(
                tokenizer_dir=tok_dir,
                src_lang=cfg.src_lang,
                tgt_lang=cfg.tgt_lang,
                extra={"step": step, "train": _train_config_record(cfg), **(extra or {})},
                trainer_state=trainer_state,
            ),
        )

    validate = None
    if cfg.valid_src:
        valid_set = load_pairs(cfg.valid_src, cfg.valid_tgt, tokenizer, cfg)
        say(Message(f"valid {cfg.valid_src}: {valid_set.stats.summary()}"))
        shown = list(
            itertools.islice(
                read_corpus(cfg.valid_src, cfg.valid_tgt or None), cfg.valid_bleu_lines
            )
        )
        validate = Validator(
            model, tokenizer, valid_set,
            sources=[src for _, src, _ in shown], references=[tgt for _, _, tgt in shown],
            cfg=cfg, device=device, save=save, say=say,
        )  # fmt: skip
        if state is not None:
            validate.best, validate.bad = state.get("best"), state.get("bad_valids", 0)

    result = TrainResult(step=step, best=None, out=out)
    start = time.monotonic()
    window_tokens, window_start = 0.0, start
    with StopFlag() as stop:
        while cfg.max_epochs == 0 or epoch < cfg.max_epochs:
            seen = epoch_corpus(train_set, tokenizer, cfg, epoch)
            batches = epoch_batches(seen, max_tokens=cfg.max_tokens, seed=cfg.seed, epoch=epoch)
            # an equal share per rank, or DDP's collective calls would fall out of step
            share = len(batches) // ddp.world
            mine = batches[ddp.rank * share : (ddp.rank + 1) * share]
            while batch_pos + cfg.accum <= len(mine) or (batch_pos < len(mine) and ddp.world == 1):
                group = mine[batch_pos : batch_pos + cfg.accum]
                lr = lr_at(step + 1, cfg, model_cfg.d_model)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                loss_sum, n_tokens = _accumulate(net, seen, group, cfg, device)
                if cfg.clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                batch_pos += len(group)
                loss = loss_sum / max(n_tokens, 1)
                result.losses.append(loss)
                window_tokens += n_tokens

                now = time.monotonic()
                if ddp.is_main and (step % cfg.log_every == 0 or step == 1):
                    rate = ddp.world * window_tokens / max(now - window_start, 1e-9)
                    window_tokens, window_start = 0.0, now
                    fraction = _fraction_done(
                        cfg, step, epoch + batch_pos / max(len(mine), 1), now - start
                    )
                    say(StepReport(step, epoch + 1, loss, lr, rate, now - start, fraction))

                bad_valids = 0
                if validate is not None and step % cfg.valid_every == 0:
                    if ddp.is_main:
                        validate(step)
                    bad_valids = int(ddp.sum(validate.bad if ddp.is_main else 0))  # for patience
                out_of_budget = (
                    (cfg.max_steps and step >= cfg.max_steps)
                    or (cfg.max_time and now - start >= cfg.max_time * 60)
                    or (cfg.patience and bad_valids >= cfg.patience)
                )
                if ddp.any(stop.signum is not None or bool(out_of_budget)):
                    break
            else:
                epoch, batch_pos = epoch + 1, 0
                continue
            break  # inner loop broke: stop training

        # the end (budget, patience, epochs or a signal): validate what was not yet validated,
        # then always leave a resumable `last`
        if ddp.is_main:
            if validate is not None and stop.signum is None and step % cfg.valid_every:
                validate(step)
            save(out / "last", with_state=True)
        ddp.barrier()
        result.step, result.best = step, validate.best if validate else None
        if stop.signum is not None:
            code = 130 if stop.signum == signal.SIGINT else 143
            raise Interrupted(
                f"interrupted at step {step}; saved {out / 'last'}. Resume with: "
                f"mtcli train ... --resume {out / 'last'}",
                code,
            )
    if validate is None and ddp.is_main:
        save(out / "best", with_state=False)  # nothing to select by: the final model is the best
    return result


def _accumulate(
    net, corpus: Corpus, group: list[list[int]], cfg: TrainConfig, device
) -> tuple[float, int]:
    """Forward and backward over `accum` batches; gradients are per target token of the group."""
    batches = [collate(corpus, indices) for indices in group]
    n_tokens = sum(b.n_tgt_tokens for b in batches)
    loss_sum = 0.0
    for batch in batches:
        batch = batch.to(device)
        with autocast(device, cfg.precision):
            logits = net(batch.src_ids, batch.tgt_in)  # (B, T, V)
        loss = smoothed_loss(logits, batch.tgt_out, cfg.label_smoothing)
        (loss / n_tokens).backward()
        loss_sum += loss.item()
    return loss_sum, n_tokens


@dataclass
class Validator:
    """Scores the model every `valid_every` steps and keeps best/, step-N/ and the patience count."""

    model: Seq2Seq
    tokenizer: Tokenizer
    corpus: Corpus
    sources: list[str]  # the first valid_bleu_lines lines, translated for BLEU
    references: list[str]
    cfg: TrainConfig
    device: torch.device
    save: Callable[..., None]
    say: Callable[[Report], None]
    best: list[float] | None = None  # [BLEU, -loss] of the best validation so far
    bad: int = 0  # validations since the last improvement

    def __call__(self, step: int) -> None:
        loss = validate_loss(self.model, self.corpus, self.cfg, self.device)
        score = None
        if self.cfg.valid_bleu_lines and self.sources:
            score = validate_bleu(
                self.model, self.tokenizer, self.sources, self.references, self.cfg, self.device
            )
        # BLEU first; the loss breaks ties (BLEU saturates on easy sets long before the loss does)
        metric = [score if score is not None else 0.0, -loss]
        improved = self.best is None or metric > list(self.best)
        self.best, self.bad = (metric, 0) if improved else (self.best, self.bad + 1)
        self.say(ValidReport(step, loss, score, improved))
        extra = {"valid": {"loss": loss, "bleu": score}}
        out = Path(self.cfg.out)
        self.save(out / f"step-{step}", with_state=False, extra=extra)
        prune_step_dirs(out, self.cfg.keep)
        if improved:
            self.save(out / "best", with_state=False, extra=extra)


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


def resume_config(path: str) -> dict:
    """The training config recorded in a checkpoint, to rebuild a run from `--resume` alone."""
    return read_config(path).get("train", {})
