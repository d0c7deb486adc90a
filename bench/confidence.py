"""Fit the confidence of each shipped model on held-out data, and measure it on other data.

    python bench/confidence.py [--data data/tatoeba] [--fit] [--name confidence]

Needs `mtcli data prepare tatoeba-en-zh --out data/tatoeba`. Per shipped model (en-zh-tiny and
its student with zh-en-tiny as their reverse, zh-en-tiny with en-zh-tiny); after retraining a
model, fit it again (its old weights describe another model's scores):

The data recipe. Fitted on the *valid* split (1,000 pairs, never trained on): the model's own
translations (beam 5), labelled good where their sentence chrF (sacrebleu) is 50 or more, and
corruptions of the good ones, labelled bad: a dropped sentence (the source gets another line's
sentence after it, the output stays), a changed number, another line's translation, a truncated
output, a repeated phrase. Judged on the *test* split (2,000 pairs) and its own corruptions
(another seed), and on lines written far from the training data (bench/confidence/far-*.txt).

With --fit, writes models/NAME/confidence.json (the weights, the threshold, what they were fitted
on); always writes bench/results/NAME.json: AUC of chrF >= 50 against chrF <= 20, Spearman with
sentence chrF, the share of good test translations flagged, of each corruption flagged, of the
far lines flagged, a reliability table, and ten examples.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, RESULTS, read_lines, write_result  # noqa: E402

GOOD, BAD = 50.0, 20.0  # sentence chrF of a good translation, and of a bad one
ALONE = 300  # lines translated and judged one at a time (alone_against_batched)
GOOD_FLAGGED = 0.10  # the threshold flags this share of the valid split's good translations
# each shipped model: its reverse (the installed model the other way), its languages
MODELS = {
    "en-zh-tiny": ("zh-en-tiny", "en", "zh"),
    "zh-en-tiny": ("en-zh-tiny", "zh", "en"),
    "en-zh-tiny-student": ("zh-en-tiny", "en", "zh"),
}
TIMED = ("en-zh-tiny", "zh-en-tiny")
KINDS = ("dropped_sentence", "changed_number", "other_line", "truncated", "repeated_phrase")
NUMBER_WORDS = {
    "en": ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"],
    "zh": ["一", "二", "三", "四", "五", "六", "七", "八", "九", "十", "两"],
}


def split(data: Path, part: str, src_lang: str) -> tuple[list[str], list[str]]:
    """Sources and references of one split, read from `src_lang`."""
    en, zh = read_lines(data / f"{part}.src"), read_lines(data / f"{part}.tgt")
    return (en, zh) if src_lang == "en" else (zh, en)


def translate(model: Path, lines: list[str], beam: int = 5) -> list[str]:
    return [t.text for t in translations(model, lines, beam)]


def translations(model: Path, lines: list[str], beam: int = 5) -> list:
    """The model's Translations of `lines`, each with what its search read (Translation.reading)."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    translator = build_translator(
        [model], DecodeConfig(beam_size=beam), EngineOptions(device="cpu", text_layer=False)
    )
    translator.reading = True  # as under the text layer with the confidence on
    return translator.translate_chunk(lines)


def read_against_forced(
    name: str, calibration, sources: list[str], refs: list[str], results: list
) -> dict:
    """The confidences translate gives (the forward model's scores read from the search) against
    those of a second, teacher-forced pass (how the weights were fitted): the largest
    difference, the lines flagged alike, the AUC of each, and the share of lines the forward
    pass still runs for (written in other pieces than the tokenizer's)."""
    from mtcli.engines.calibration import roc_auc
    from mtcli.engines.confidence import read_scores

    est = estimator(name, calibration)
    outputs = [r.text for r in results]
    readings = [r.reading for r in results]
    read = np.asarray(est(sources, outputs, readings))
    forced = np.asarray(est(sources, outputs))
    tokens = [est.forward.tokenizer.encode_tgt(o) for o in outputs]
    passes = sum(
        read_scores(r, o, t) is None for r, o, t in zip(readings, outputs, tokens, strict=True)
    )
    threshold = calibration.threshold
    chrf = sentence_chrf(outputs, refs)
    ranked, good = (chrf >= GOOD) | (chrf <= BAD), chrf >= GOOD
    return {
        "max_difference": round(float(np.abs(read - forced).max()), 6),
        "flagged_alike": round(float(((read < threshold) == (forced < threshold)).mean()), 4),
        "auc_read": round(roc_auc(read[ranked], good[ranked]), 4),
        "auc_forced": round(roc_auc(forced[ranked], good[ranked]), 4),
        "flagged_read": round(float((read < threshold).mean()), 4),
        "flagged_forced": round(float((forced < threshold).mean()), 4),
        "forward_pass_share": round(passes / len(sources), 4),
    }


def sentence_chrf(hyps: list[str], refs: list[str]) -> np.ndarray:
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    return np.array([chrf.sentence_score(h, [r]).score for h, r in zip(hyps, refs, strict=True)])


# ---------------------------------------------------------------- corruptions
def corrupt(
    kind: str, i: int, sources: list[str], outputs: list[str], lang: str, rng: random.Random
):
    """(source, output) of pair i corrupted by `kind`, or None where it does not apply."""
    src, out = sources[i], outputs[i]
    joiner = "" if lang == "zh" else " "
    if kind == "dropped_sentence":
        other = sources[rng.randrange(len(sources))]
        return src + ("" if lang == "en" else " ") + other, out  # a Chinese source: no space
    if kind == "changed_number":
        changed = _changed_number(out, lang, rng)
        return (src, changed) if changed else None
    if kind == "other_line":
        j = rng.randrange(len(outputs))
        return (src, outputs[j]) if outputs[j] != out else None
    units = list(out) if lang == "zh" else out.split()
    if len(units) < 3:
        return None
    if kind == "truncated":
        return src, joiner.join(units[: max(1, len(units) // 2)])
    start = rng.randrange(len(units) - 1)  # repeated_phrase: two units said four times
    phrase = units[start : start + 2]
    return src, joiner.join(units[:start] + phrase * 4 + units[start + 2 :])


def _changed_number(text: str, lang: str, rng: random.Random) -> str | None:
    """`text` with one number changed: a digit, or a number word of the target language."""
    digits = [m for m in re.finditer(r"\d", text)]
    if digits:
        m = rng.choice(digits)
        new = str((int(m.group()) + rng.randrange(1, 9)) % 10)
        return text[: m.start()] + new + text[m.end() :]
    words = NUMBER_WORDS[lang]
    pattern = "|".join(words) if lang == "zh" else r"\b(" + "|".join(words) + r")\b"
    found = list(re.finditer(pattern, text, flags=re.IGNORECASE))
    if not found:
        return None
    m = rng.choice(found)
    new = rng.choice([w for w in words if w != m.group().lower()])
    return text[: m.start()] + new + text[m.end() :]


def corruptions(
    sources, outputs, good: np.ndarray, lang: str, seed: int
) -> list[tuple[str, str, str]]:
    """(kind, source, output) for each kind over the good pairs (a fifth of them each)."""
    rng = random.Random(seed)
    chosen = [i for i in range(len(sources)) if good[i]]
    made = []
    for kind in KINDS:
        for i in rng.sample(chosen, min(len(chosen), max(40, len(chosen) // 5))):
            if (pair := corrupt(kind, i, sources, outputs, lang, rng)) is not None:
                made.append((kind, *pair))
    return made


# ---------------------------------------------------------------- signals, fit, measures
def estimator(name: str, calibration=None):
    from mtcli.engines.calibration import Calibration
    from mtcli.engines.confidence import SIGNALS, ConfidenceEstimator, Direction
    from mtcli.engines.loading import ready_to_decode
    from mtcli.store.checkpoint import load_model

    reverse_name, src, tgt = MODELS[name]
    forward, reverse = (
        ready_to_decode(load_model(REPO / "models" / n)) for n in (name, reverse_name)
    )
    n = len(SIGNALS)
    calibration = calibration or Calibration(list(SIGNALS), [0.0] * n, [1.0] * n, [0.0] * n, 0.0)
    return ConfidenceEstimator(
        Direction(forward.model, forward.tokenizer), Direction(reverse.model, reverse.tokenizer),
        calibration, src, tgt, "cpu",
    )  # fmt: skip


def fit(name: str, sources, outputs, chrf, bad_pairs):
    """The Calibration fitted on the valid split's translations and corruptions."""
    from mtcli.engines.calibration import fitted

    est = estimator(name)
    good = chrf >= GOOD
    kept = np.flatnonzero(good)
    ratios = est.raw_signals([sources[i] for i in kept], [outputs[i] for i in kept])[
        "log_length_ratio"
    ]
    mu = float(np.median(ratios))  # the typical length ratio of a good translation
    est.calibration.constants = {"log_length_ratio": mu}
    corrupted = est.signals([s for _, s, _ in bad_pairs], [o for _, _, o in bad_pairs])
    x = np.vstack([est.signals(sources, outputs), corrupted])
    y = np.concatenate([good.astype(float), np.zeros(len(bad_pairs))])
    calibration = fitted(list(est.calibration.signals), x, y)
    calibration.constants = {"log_length_ratio": mu}
    natural = calibration.confidence(x[: len(sources)])
    calibration.threshold = round(float(np.quantile(natural[good], GOOD_FLAGGED)), 4)
    calibration.fitted_on = {
        "data": "valid split of tatoeba-en-zh (bench/confidence.py)", "translations": len(sources),
        "good (chrF >= 50)": int(good.sum()), "corruptions": len(bad_pairs),
        "threshold": f"flags {GOOD_FLAGGED:.0%} of the good valid translations",
    }  # fmt: skip
    return calibration


def measure(
    name: str, calibration, sources, outputs, refs, bad_pairs, far_sources, far_outputs
) -> dict:
    from mtcli.engines.calibration import roc_auc, spearman

    est = estimator(name, calibration)
    chrf = sentence_chrf(outputs, refs)
    conf = np.asarray(est(sources, outputs))
    flagged = conf < calibration.threshold
    good, bad = chrf >= GOOD, chrf <= BAD
    ranked = good | bad
    bad_conf = np.asarray(est([s for _, s, _ in bad_pairs], [o for _, _, o in bad_pairs]))
    far = np.asarray(est(far_sources, far_outputs))
    kinds = np.array([k for k, _, _ in bad_pairs])
    by_kind = {
        kind: round(float((bad_conf[kinds == kind] < calibration.threshold).mean()), 3)
        for kind in KINDS
    }
    flagged_bad = flagged[bad].sum() + (bad_conf < calibration.threshold).sum()
    return {
        "lines": len(sources), "good": int(good.sum()), "bad": int(bad.sum()),
        "auc_good_vs_bad": round(roc_auc(conf[ranked], good[ranked]), 4),
        "spearman_with_chrf": round(spearman(conf, chrf), 4),
        "good_flagged": round(float(flagged[good].mean()), 4),
        "all_flagged": round(float(flagged.mean()), 4),
        "corrupted": len(bad_pairs), "corrupted_flagged": round(float((bad_conf < calibration.threshold).mean()), 4),
        "corrupted_flagged_by_kind": by_kind,
        "far_lines": len(far), "far_flagged": round(float((far < calibration.threshold).mean()), 4),
        # of all flagged (test lines and corruptions), the share that is bad; of all bad, the share flagged
        "precision": round(float(flagged_bad / (flagged.sum() + (bad_conf < calibration.threshold).sum())), 4),
        "recall": round(float(flagged_bad / (bad.sum() + len(bad_pairs))), 4),
        "reliability": reliability(conf, good),
        "examples": examples(sources, outputs, conf, chrf, far_sources, far_outputs, far, calibration.threshold),
    }  # fmt: skip


def reliability(conf: np.ndarray, good: np.ndarray) -> list[dict]:
    """Per confidence band: its lines, their mean confidence and the share of them that is good."""
    rows = []
    for lo in np.arange(0, 1, 0.2):
        inside = (conf >= lo) & (conf < lo + 0.2 + (1e-9 if lo >= 0.8 else 0))
        if inside.any():
            rows.append({"band": f"{lo:.1f}-{lo + 0.2:.1f}", "lines": int(inside.sum()),
                         "mean_confidence": round(float(conf[inside].mean()), 3),
                         "share_good": round(float(good[inside].mean()), 3)})  # fmt: skip
    return rows


def examples(sources, outputs, conf, chrf, far_sources, far_outputs, far, threshold) -> list[dict]:
    """Ten lines: the three most and least confident test lines, two in between, two far ones."""
    order = np.argsort(conf)
    picks = [*order[:3], *order[len(order) // 2 : len(order) // 2 + 2], *order[-3:]]
    rows = [{"source": sources[i], "translation": outputs[i], "confidence": round(float(conf[i]), 3),
             "flagged": bool(conf[i] < threshold), "chrF": round(float(chrf[i]), 1)} for i in picks]  # fmt: skip
    rows += [{"source": far_sources[i], "translation": far_outputs[i], "confidence": round(float(far[i]), 3),
              "flagged": bool(far[i] < threshold), "chrF": None} for i in range(2)]  # fmt: skip
    return rows


def run_model(name: str, data: Path, refit: bool) -> dict:
    from mtcli.engines.calibration import Calibration

    _, src_lang, tgt_lang = MODELS[name]
    model = REPO / "models" / name
    if refit:
        sources, refs = split(data, "valid", src_lang)
        outputs = translate(model, sources)
        chrf = sentence_chrf(outputs, refs)
        calibration = fit(
            name,
            sources,
            outputs,
            chrf,
            corruptions(sources, outputs, chrf >= GOOD, tgt_lang, 1),
        )
        print(f"{name}: wrote {calibration.save(model).relative_to(REPO)}")
    calibration = Calibration.load(model)
    sources, refs = split(data, "test", src_lang)
    outputs = translate(model, sources)
    bad_pairs = corruptions(sources, outputs, sentence_chrf(outputs, refs) >= GOOD, tgt_lang, 2)
    far_file = REPO / "bench" / "confidence" / f"far-{src_lang}.txt"
    far_sources = [x for x in read_lines(far_file) if not x.startswith("#")]
    far_outputs = translate(model, far_sources)
    result = measure(name, calibration, sources, outputs, refs, bad_pairs, far_sources, far_outputs)
    result["read_from_the_search"] = read_against_forced(
        name, calibration, sources, refs, translations(model, sources)
    )
    result["weights"] = dict(
        zip(calibration.signals, [round(c, 4) for c in calibration.coef], strict=True)
    )
    result["threshold"] = calibration.threshold
    return result


def read_only(name: str, data: Path) -> dict:
    """read_against_forced on the test split, and alone_against_batched."""
    from mtcli.engines.calibration import Calibration

    model = REPO / "models" / name
    sources, refs = split(data, "test", MODELS[name][1])
    results = translations(model, sources)
    calibration = Calibration.load(model)
    record = read_against_forced(name, calibration, sources, refs, results)
    return record | alone_against_batched(name, calibration, sources, results)


def alone_against_batched(name: str, calibration, sources: list[str], results: list) -> dict:
    """The first ALONE lines translated and judged one at a time against the same lines in the
    test split's batches: how many translations differ, and the largest confidence difference
    (a line's output and confidence should not depend on the lines beside it)."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    est = estimator(name, calibration)
    translator = build_translator(
        [REPO / "models" / name],
        DecodeConfig(beam_size=5),
        EngineOptions(device="cpu", text_layer=False),
    )
    translator.reading = True
    batched = results[:ALONE]
    alone = [translator.translate_chunk([s])[0] for s in sources[:ALONE]]
    scored = [
        est([s], [t.text], [t.reading])[0] for s, t in zip(sources[:ALONE], alone, strict=True)
    ]
    together = est(sources[:ALONE], [t.text for t in batched], [t.reading for t in batched])
    return {
        "alone_lines": ALONE,
        "alone_translations_differing": sum(
            a.text != b.text for a, b in zip(alone, batched, strict=True)
        ),
        "alone_confidence_max_difference": float(np.abs(np.subtract(scored, together)).max()),
    }


def timing(data: Path, n: int = 1000, rounds: int = 3) -> dict:
    """Seconds to translate n test lines with and without confidence, beam 5 and greedy, both
    directions: the two translators interleaved in one process, the fastest of `rounds`."""
    record = {}
    for name in TIMED:
        sources = split(data, "test", MODELS[name][1])[0][:n]
        for beam in (5, 1):
            made = {judged: _translator(name, beam, judged) for judged in (False, True)}
            best = _fastest(made, sources, rounds)
            record[f"{name} beam {beam}"] = {
                "without": round(best[False], 3), "with": round(best[True], 3),
                "cost": round(best[True] / best[False] - 1, 3),
            }  # fmt: skip
            print(name, f"beam {beam}", record[f"{name} beam {beam}"])
    return record


def _translator(name: str, beam: int, judged: bool):
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    options = EngineOptions(device="cpu", confidence=judged)
    return build_translator([REPO / "models" / name], DecodeConfig(beam_size=beam), options)


def _fastest(translators: dict, sources: list[str], rounds: int) -> dict:
    """The fastest pass of each translator over `sources`, their passes interleaved."""
    import time

    for translator in translators.values():  # warm: the first pass pays for oneDNN's kernels
        translator.translate_chunk(sources[:50])
    best = dict.fromkeys(translators, float("inf"))
    for _ in range(rounds):
        for key, translator in translators.items():
            start = time.perf_counter()
            translator.translate_chunk(sources)
            best[key] = min(best[key], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / "data" / "tatoeba"))
    parser.add_argument(
        "--fit", action="store_true", help="Fit again and write models/*/confidence.json."
    )
    parser.add_argument("--name", default="confidence")
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="Only compare the confidences read from the search with a forced pass's.",
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help="Which of the shipped models (comma-separated)."
    )
    args = parser.parse_args()
    names = args.models.split(",")
    if args.read_only:
        print(json.dumps({name: read_only(name, Path(args.data)) for name in names}, indent=1))
        return
    previous = RESULTS / f"{args.name}.json"
    record = json.loads(previous.read_text()) if previous.is_file() else {}
    record |= {name: run_model(name, Path(args.data), args.fit) for name in names}
    if set(names) == set(MODELS):  # the cost, timed when every model is measured again
        record["time"] = timing(Path(args.data))
    for d in names:
        r = record[d]
        print(
            f"{d}: AUC {r['auc_good_vs_bad']:.3f}, Spearman {r['spearman_with_chrf']:.3f}; flagged: good "
            f"{r['good_flagged']:.1%}, corrupted {r['corrupted_flagged']:.1%} {r['corrupted_flagged_by_kind']}, "
            f"far {r['far_flagged']:.1%}; threshold {r['threshold']}, P {r['precision']:.2f} R {r['recall']:.2f}"
        )
    print(f"wrote {write_result(args.name, record)}")


if __name__ == "__main__":
    main()
