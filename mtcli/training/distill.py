"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher's beam-search
translations of a corpus's sources become the targets a smaller student is trained on, so the
student learns the teacher's one consistent answer per sentence instead of the spread of
human references, and decodes well greedily.

`distill(cfg, student, report)` runs four steps, each kept in OUT, so a killed run continues
where it stopped (running the same command again):

    OUT/teacher/   the teacher's outputs: train.src, train.tgt, train.score (its score per line),
                   written chunk by chunk (OUT/teacher/parts) and keyed by the teacher, the
                   corpus and the search, so another of either is translated again
    OUT/init/      the student before training: the teacher's weights wherever the shapes agree
                   (embeddings, every encoder layer it keeps, evenly spaced decoder layers:
                   "shrink and fine-tune", Shleifer & Rush 2020), else a random start
    OUT/student/   the training run (training/loop.py): checkpoints, resumable as any run
    OUT/model/     the mean of its last checkpoints, exported with its generation defaults
                   (config.json "generation": greedy), which translate, eval and serve use

Reports through a callback like training; imports no rich or click.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from mtcli import files
from mtcli.config import DecodeConfig, DistillConfig, ModelConfig, TrainConfig, to_dict
from mtcli.data.textio import read_json, read_lines
from mtcli.engines.build import EngineOptions, build_translator
from mtcli.errors import UserError
from mtcli.model.transformer import Seq2Seq
from mtcli.store.checkpoint import SaveRequest, export_model, load_model, save_model
from mtcli.store.model_dir import CONFIG_FILE, WEIGHTS_FILE, read_config
from mtcli.training.loop import train
from mtcli.training.reports import Message, Report, TrainResult
from mtcli.training.run_dir import step_dirs

MARKER = "distill.json"  # OUT's record of the DistillConfig (files.KINDS["distill"])
PARTS_DONE = "key.json"  # in OUT/teacher/parts: what the parts there were translated from


def distill(
    cfg: DistillConfig,
    student: TrainConfig,
    report: Callable[[Report], None] = lambda r: None,
    *,
    restart: bool = False,
) -> Path:
    """Teacher outputs, the student's start, its training, its export; returns OUT/model.
    `student` is the student's TrainConfig (shape and schedule); its corpus, --init and OUT
    are distill's own and set here. `restart`: the student trains again from its start (the
    teacher's outputs are kept while they fit)."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    files.write_file_atomic(out / MARKER, json.dumps(to_dict(cfg), indent=2).encode())
    src, tgt = teacher_outputs(cfg, out / "teacher", report)
    init = student_start(cfg.teacher, student.model, out / "init", report, fresh=restart)
    run = dataclasses.replace(
        student, src=str(src), tgt=str(tgt), init=str(init), out=str(out / "student")
    )
    result = train(run, report, restart=restart)
    return export_student(cfg, result, out / "model", report)


# ---------------------------------------------------------------- 1. the teacher's outputs
def teacher_key(cfg: DistillConfig) -> dict:
    """What the teacher's outputs depend on: its weights, the corpus, the search and engine."""
    teacher = Path(cfg.teacher)
    return {
        "teacher_sha256": files.sha256_of(teacher / WEIGHTS_FILE),
        "src_sha256": files.sha256_of(cfg.src),
        "beam_size": cfg.beam_size,
        "engine": cfg.teacher_engine,
        "part_lines": cfg.part_lines,  # where the parts' boundaries fall
    }


def teacher_outputs(cfg: DistillConfig, folder: Path, report) -> tuple[Path, Path]:
    """OUT/teacher/train.src and train.tgt: the sources the student learns from (drop_worst
    of them left out) and the teacher's translation of each."""
    key = teacher_key(cfg)
    done = folder / "manifest.json"
    if done.is_file() and read_json(done).get("key") == {**key, "drop_worst": cfg.drop_worst}:
        report(Message(f"teacher outputs in {folder} are up to date"))
        return folder / "train.src", folder / "train.tgt"
    parts = folder / "parts"
    translate_parts(cfg, key, parts, report)
    return write_training_pairs(cfg, key, folder, parts, report)


def translate_parts(cfg: DistillConfig, key: dict, parts: Path, report) -> None:
    """The teacher translates the sources chunk by chunk into parts/NNNNNN.tsv (translation
    TAB score), each written whole; parts of another key are removed first."""
    if (parts / PARTS_DONE).is_file() and read_json(parts / PARTS_DONE) != key:
        files.remove_dir(parts)
    parts.mkdir(parents=True, exist_ok=True)
    files.write_file_atomic(parts / PARTS_DONE, json.dumps(key).encode())
    translator = None
    for number, chunk in enumerate(chunks(read_lines(cfg.src), cfg.part_lines)):
        part = parts / f"{number:06d}.tsv"
        if part.is_file():
            continue  # translated before a kill
        translator = translator or teacher_translator(cfg, parts.parent, report)
        lines = [f"{t.text}\t{t.score:.4f}\n" for t in translator.translate_chunk(chunk)]
        files.write_file_atomic(part, "".join(lines).encode("utf-8"))
        report(Message(f"teacher: {number * cfg.part_lines + len(chunk):,} lines translated"))


def chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def teacher_translator(cfg: DistillConfig, folder: Path, report):
    """The teacher under its search, on the model's own view of each line (no text layer:
    the student is trained on these lines exactly as they are)."""
    decode = DecodeConfig(beam_size=cfg.beam_size)
    options = EngineOptions(engine=cfg.teacher_engine, text_layer=False)
    model = Path(cfg.teacher)
    if cfg.teacher_engine == "ctranslate2":
        from mtcli.store.ct2_export import export_ctranslate2

        model = export_ctranslate2(model, folder / "ct2", force=True)
        report(Message(f"teacher exported for CTranslate2 into {model}"))
    return build_translator([model], decode, options)


def write_training_pairs(cfg: DistillConfig, key: dict, folder: Path, parts: Path, report):
    """train.src/.tgt/.score from the parts, the worst-scored share left out, then the
    manifest (removed first and written last: a folder without it is assembled again). Streams
    the lines: only the scores (8 bytes a line) are held, whatever the corpus's size."""
    (folder / "manifest.json").unlink(missing_ok=True)
    scores = np.fromiter((score for _, score in teacher_rows(parts)), dtype=np.float64)
    keep = kept_rows(scores, cfg.drop_worst)
    try:
        with contextlib.ExitStack() as stack:
            paths = [folder / f"train.{name}" for name in ("src", "tgt", "score")]
            outs = [stack.enter_context(open(p, "w", encoding="utf-8")) for p in paths]
            rows = zip(read_lines(cfg.src), teacher_rows(parts), strict=True)
            for i, (source, (text, score)) in enumerate(rows):
                if keep[i]:
                    for out, value in zip(outs, (source, text, f"{score:.4f}"), strict=True):
                        out.write(value + "\n")
    except ValueError:  # zip's: one of them ended first
        why = f"the translations do not match {cfg.src} line for line"
        raise UserError(f"{parts}: {why}; remove {folder} and run again") from None
    n, kept = len(scores), int(keep.sum())
    manifest = {"key": {**key, "drop_worst": cfg.drop_worst}, "lines": n, "kept": kept}
    files.write_file_atomic(folder / "manifest.json", json.dumps(manifest, indent=2).encode())
    left = f"{n - kept:,} with the lowest scores left out"
    report(Message(f"teacher outputs: {kept:,} pairs kept of {n:,} ({left})"))
    return folder / "train.src", folder / "train.tgt"


def teacher_rows(parts: Path) -> Iterator[tuple[str, float]]:
    """(translation, score) of each source line, in corpus order, read from the parts; a line
    that is not translation TAB score (a damaged part) is one error naming it."""
    for part in sorted(parts.glob("*.tsv")):
        for number, line in enumerate(read_lines(part), 1):
            text, tab, score = line.rpartition("\t")
            try:
                value = float(score) if tab else None
            except ValueError:
                value = None
            if value is None:
                why = f"{part}:{number}: not a translation TAB its score"
                raise UserError(f"{why}; remove {parts.parent} and run again")
            yield text, value


def kept_rows(scores: np.ndarray, drop_worst: float) -> np.ndarray:
    """Which rows stay (bool, corpus order) when the `drop_worst` share with the lowest scores
    goes (ties at the threshold go by position: exactly round(n * drop_worst) rows leave)."""
    n_drop = round(len(scores) * drop_worst)
    order = np.lexsort((np.arange(len(scores)), scores))  # by score, then by position
    keep = np.ones(len(scores), dtype=bool)
    keep[order[:n_drop]] = False
    return keep


# ---------------------------------------------------------------- 2. the student's start
def spread(keep: int, of: int) -> list[int]:
    """`keep` of `of` layers, evenly spaced from the first to the last (DistilBART's choice):
    1 of 3 -> [0], 2 of 3 -> [0, 2], 3 of 6 -> [0, 2, 5]. Measured for the shipped en-zh
    teacher, a 1-layer decoder from its layer 0, 1 or 2 started at validation loss 6.7, 7.4
    and 15.4; two layers from [0, 2] at 2.8 and from [1, 2] at 6.3."""
    if keep == 1:
        return [0]
    return [round(i * (of - 1) / (keep - 1)) for i in range(keep)]


def shrunk_state(teacher: Seq2Seq, cfg: ModelConfig) -> dict[str, torch.Tensor] | None:
    """The teacher's weights for a student of shape `cfg`, or None when they do not fit:
    every width must agree, and the student may only have fewer (or as many) layers."""
    t = teacher.cfg
    same = (
        "d_model",
        "n_heads",
        "d_ff",
        "src_vocab_size",
        "tgt_vocab_size",
        "activation",
        "pre_norm",
        "share_embeddings",
        "tie_output",
        "output_bias",
        "attention",
    )
    if any(getattr(t, k) != getattr(cfg, k) for k in same):
        return None
    if cfg.n_enc_layers > t.n_enc_layers or cfg.n_dec_layers > t.n_dec_layers:
        return None
    layers = {
        "encoder_layers": spread(cfg.n_enc_layers, t.n_enc_layers),
        "decoder_layers": spread(cfg.n_dec_layers, t.n_dec_layers),
    }
    state = {}
    for name, tensor in teacher.state_dict().items():
        stack, _, rest = name.partition(".")
        if stack not in layers:
            state[name] = tensor
            continue
        index, _, param = rest.partition(".")
        for new, old in enumerate(layers[stack]):
            if old == int(index):
                state[f"{stack}.{new}.{param}"] = tensor
    return state


def student_start(teacher_dir: str, shape: ModelConfig, out: Path, report, fresh: bool) -> Path:
    """OUT/init: a model directory of the student's shape, holding the teacher's weights
    where they fit (random ones otherwise). Kept while it is this shape from this teacher, so
    a resumed run starts alike; made again when either changed, or when `fresh`."""
    teacher = load_model(teacher_dir)
    vocab = {
        k: getattr(teacher.model.cfg, k)
        for k in ("src_vocab_size", "tgt_vocab_size", "share_embeddings")
    }
    cfg = dataclasses.replace(shape, **vocab)
    made_from = {"teacher_sha256": files.sha256_of(teacher.path / WEIGHTS_FILE)}
    if not fresh and (out / CONFIG_FILE).is_file():
        kept = read_config(out)
        if kept["model"] == to_dict(cfg) and kept.get("made_from") == made_from:
            return out
    model = Seq2Seq(cfg)
    if (state := shrunk_state(teacher.model, cfg)) is not None:
        model.load_state_dict(state)
        layers = spread(cfg.n_dec_layers, teacher.model.cfg.n_dec_layers)
        report(Message(f"student starts from the teacher's weights (decoder layers {layers})"))
    else:
        report(Message("student's widths differ from the teacher's: it starts from random weights"))
    request = SaveRequest(
        tokenizer_dir=teacher.path,
        src_lang=teacher.src_lang,
        tgt_lang=teacher.tgt_lang,
        extra={"made_from": made_from},
    )
    return save_model(model, out, request)


# ---------------------------------------------------------------- 4. the exported student
def export_student(cfg: DistillConfig, result: TrainResult, out: Path, report) -> Path:
    """OUT/model: the mean of the student's last `average` step checkpoints (or its last
    state, if it saved none), decoded with `student_beam` by default (config.json's
    "generation"), with int8 Linear layers where `quantize` asks for them."""
    steps = [path for _, path in step_dirs(Path(result.out))]
    last = Path(result.out) / "last"
    if not steps and not last.is_dir():
        raise UserError(f"{result.out}: the student's run left no checkpoint to export")
    chosen = steps[-cfg.average :] or [last]  # a run too short to validate saved only its last
    dtype = torch.float16 if cfg.fp16 else torch.float32
    generation = {"beam_size": cfg.student_beam, "length_penalty": 1.0}
    if cfg.quantize != "none":
        generation["quantize"] = cfg.quantize
    export_model(chosen, out, dtype, force=True, generation=generation)
    report(Message(f"student: mean of {', '.join(p.name for p in chosen)} exported to {out}"))
    return out
