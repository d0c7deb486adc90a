"""The model a run ends with: OUT/model, the mean of its last step checkpoints or its best
checkpoint alone, whichever validates better, and its scores on a test split where the
corpus has one beside it (a `data prepare` folder's test.src/test.tgt).

Averaging the last checkpoints of a run (Vaswani et al. 2017 averaged the last 5 or 20) is
usually worth a point of BLEU over any one of them; on a run that overfits, its best
checkpoint can be better, so both are validated on the same lines and the better one kept.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mtcli.config import DecodeConfig
from mtcli.data.parallel_text import read_corpus
from mtcli.store.checkpoint import average_weights, export_model, load_model
from mtcli.training.metrics import MetricOptions, bleu_tokenizer_for, score_system
from mtcli.training.reports import FinalModel
from mtcli.training.run_dir import step_dirs
from mtcli.training.validation import Validator

MODEL = "model"
TEST_LINES = 2000  # a test split's lines translated at the end (data prepare keeps at most this)


def write_final_model(
    out: Path, validator: Validator | None, model: torch.nn.Module
) -> FinalModel | None:
    """OUT/model from the run's checkpoints (None when it saved none)."""
    best, last = out / "best", out / "last"
    steps = [path for _, path in step_dirs(out)]
    if last.is_dir() and (not steps or _step_of(last) != _step_of(steps[-1])):
        steps.append(last)  # the state the run ended in, when no step checkpoint is it
    if not best.is_dir() and not steps:
        return None
    candidates = {}
    if len(steps) > 1:
        candidates[f"the mean of {steps[0].name} ... {steps[-1].name}"] = steps
    if best.is_dir():
        candidates[f"best ({_step_of(best)})"] = [best]
    elif len(steps) == 1:
        candidates[f"{steps[0].name} ({_step_of(steps[0])})"] = steps
    scores = {name: _valid_bleu(paths, validator, model) for name, paths in candidates.items()}
    chosen = max(scores, key=lambda name: scores[name])
    # fp32: the weights just validated, not a rounding of them
    export_model(candidates[chosen], out / MODEL, torch.float32, force=True)
    other = [f"{name}: BLEU {score[0]:.2f}" for name, score in scores.items() if name != chosen]
    bleu = scores[chosen][0] if validator else None
    return FinalModel(out / MODEL, chosen, bleu, "; ".join(other) if validator else "")


def _step_of(path: Path) -> str:
    from mtcli.store.model_dir import read_config

    return f"step {read_config(path).get('step', '?')}"


def _valid_bleu(paths: list[Path], validator: Validator | None, model) -> list[float]:
    """[BLEU, -loss] of the mean of `paths` on the validation lines ([0, 0] without them),
    computed on the run's own model, whose weights are put back after."""
    if validator is None:
        return [0.0, 0.0]
    kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(average_weights(paths), strict=False)
    try:
        loss, bleu = validator.score()
    finally:
        model.load_state_dict(kept)
    return [bleu if bleu is not None else 0.0, -loss]


def test_beside(src: str, tgt: str) -> tuple[Path, Path] | None:
    """The test split of the `data prepare` folder whose train files `src` and `tgt` are."""
    from mtcli.data.own_corpus import validation_beside

    if not (src and tgt) or validation_beside(src, tgt) is None:
        return None
    paths = tuple(Path(p).with_name(Path(p).name.replace("train.", "test.")) for p in (src, tgt))
    return paths if all(p.is_file() for p in paths) else None


def score_test(final: FinalModel, split: tuple[Path, Path], tgt_lang: str, device) -> None:
    """The test split translated by OUT/model as `mtcli translate` would (its own beam), scored."""
    from mtcli.engines.build import EngineOptions, build_translator

    loaded = load_model(final.path)
    pairs = [(s, t) for _, s, t in read_corpus(split[0], split[1])][:TEST_LINES]
    decode = DecodeConfig()  # beam 5, as `mtcli translate -m OUT` decodes
    translator = build_translator([loaded], decode, EngineOptions(device=device, text_layer=False))
    hyps = [t.text for t in translator.translate_chunk([s for s, _ in pairs])]
    opts = MetricOptions(tokenize=bleu_tokenizer_for(tgt_lang), metrics=("bleu", "chrf"))
    scores = score_system(hyps, [[t for _, t in pairs]], opts)
    final.test = {s.name: round(s.score, 2) for s in scores} | {"lines": len(pairs)}
    final.test["from"] = str(split[0].with_suffix(""))


def describe_final(final: FinalModel) -> str:
    """The lines that end a run: the model to use, what it is, its scores."""
    valid = f", validation BLEU {final.valid_bleu:.2f}" if final.valid_bleu is not None else ""
    lines = [f"model to use: {final.path} ({final.made_of}{valid})"]
    if final.other:
        lines[0] += f"; {final.other}"
    if final.test:
        t = final.test
        scores = f"BLEU {t['BLEU']:.2f}, chrF2 {t['chrF2']:.2f}"
        lines.append(f"test {t['from']}.*, {t['lines']:,} lines: {scores}")
    return "\n".join(lines)
