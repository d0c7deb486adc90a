"""Scoring with sacrebleu: BLEU, chrF and TER on lists of strings, signatures, significance.

Never decodes: it takes finished translations. The BLEU tokenizer follows the target language.
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from mtcli.errors import UserError

CJK_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}


def bleu_tokenizer_for(lang: str) -> str:
    """sacrebleu's own choice: 'zh' for Chinese, '13a' for languages with spaces."""
    return "zh" if lang.lower().startswith("zh") else "13a"


@dataclass
class MetricOptions:
    tokenize: str = "13a"  # BLEU tokenizer
    chrf_word_order: int = 0  # 0 = chrF2, 2 = chrF++
    metrics: tuple[str, ...] = ("bleu", "chrf", "ter")


def make_metrics(opts: MetricOptions) -> dict:
    """Fresh sacrebleu metric objects keyed by name."""
    table = {
        "bleu": lambda: BLEU(tokenize=opts.tokenize),
        "chrf": lambda: CHRF(word_order=opts.chrf_word_order),
        "ter": lambda: TER(),
    }
    return {name: table[name]() for name in opts.metrics}


def check_lengths(hyps: list[str], refs: list[list[str]], hyp_name: str, ref_names: list[str]) -> None:
    """One line per segment everywhere, and something to score."""
    if not hyps:
        raise UserError(f"{hyp_name}: no lines to score (empty file)")
    for ref, name in zip(refs, ref_names, strict=True):
        if not ref:
            raise UserError(f"{name}: no lines to score (empty file)")
        if len(ref) != len(hyps):
            raise UserError(f"{hyp_name} has {len(hyps)} lines but {name} has {len(ref)}")


@dataclass
class Score:
    name: str  # metric name as sacrebleu prints it, e.g. BLEU, chrF2, TER
    score: float
    signature: str
    ci: float | None = None  # half-width of the 95% interval (bootstrap)
    p_value: float | None = None  # against the baseline system


def score_system(hyps: list[str], refs: list[list[str]], opts: MetricOptions) -> list[Score]:
    """Corpus-level scores of one system against one or more reference streams."""
    out = []
    for metric in make_metrics(opts).values():
        result = metric.corpus_score(hyps, refs)
        out.append(Score(result.name, result.score, str(metric.get_signature())))
    return out


def bleu(hyps: list[str], refs: list[str], tokenize: str = "13a") -> float:
    """Corpus BLEU against a single reference (used by validation during training)."""
    return BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score


def compare_systems(
    systems: dict[str, list[str]], refs: list[list[str]], opts: MetricOptions, *, n_samples: int = 1000, seed: int = 12345
) -> dict[str, list[Score]]:
    """Paired bootstrap resampling (sacrebleu's paired-bs); the first system is the baseline.

    With a single system this gives bootstrap confidence intervals for it.
    """
    metrics = make_metrics(opts)
    test = PairedTest(
        systems, metrics, references=refs, test_type="bs", n_samples=n_samples, seed=seed
    )
    signatures, results = test()
    out: dict[str, list[Score]] = {}
    for name, per_metric in results.items():
        scores = []
        for key, result in per_metric.items():
            sig = str(signatures[key]) if key in signatures else ""
            scores.append(Score(result.name, result.score, sig, result.mean and result.ci, result.p_value))
        out[name] = scores
    return out
