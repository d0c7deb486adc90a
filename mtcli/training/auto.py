"""The settings `mtcli train` chooses for a corpus of the user's own and a budget: the table
of rules below, and the one function that reads it.

A run on the user's files with no --preset and no --config gets its vocabulary, the
model's shape, its dropouts, label smoothing, BPE-dropout, batch, learning-rate schedule
and validation cadence from here; any flag still sets its own part. The facts it reads are
the corpus's (pairs, words a line, distinct characters) and the budget's: --max-time, at
the step rate each candidate shape reaches on this machine (measured by step_rate.py in the
first seconds; `rate` below). The experiments that set the rules are bench/own_corpus.py's,
their figures in bench/NOTES.md.

Why these rules (Sennrich & Zhang 2019, Araabi & Monz 2020, OPUS-MT's scripts): a small
corpus wants a small vocabulary (each piece must be seen often enough to learn), more
dropout where the budget shows it dozens of times (and light dropout where it passes over the
corpus only a few times, whatever its size: 29,000 pairs in 10 minutes scored 3.5 BLEU more
so), and a model no wider than the steps the budget allows can train; BPE-dropout pays off
only over hundreds of epochs. In a short budget too much regularisation starves the run
(2,000 pairs with dropout 0.3 and BPE-dropout: 3.4 BLEU under the quick preset). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from mtcli.data.textio import read_lines

# the fewest pairs a model can learn anything from: below this, validation and training
# both starve (Sennrich & Zhang's smallest corpus, 5k pairs, is ten times it)
SMALLEST_CORPUS = 500
FACTS_SAMPLE = 100_000  # lines read for lengths and characters (all are counted)


@dataclass(frozen=True)
class CorpusFacts:
    """What the rules read of a corpus."""

    pairs: int
    src_words: float  # mean words a line (a CJK character counts as a word)
    tgt_words: float
    characters: int  # distinct characters of both sides in the sample

    def describe(self) -> str:
        return (
            f"{self.pairs:,} pairs, {self.src_words:.1f} and {self.tgt_words:.1f} words a line, "
            f"{self.characters:,} distinct characters"
        )


@dataclass(frozen=True)
class Rule:
    """The settings of corpora up to `pairs` training pairs."""

    pairs: float
    vocab: int  # joint sentencepiece pieces
    dropout: float
    inner_dropout: float  # on attention weights and inside the feed-forward layer
    label_smoothing: float
    largest: str  # the widest shape this much data can use (SHAPES)


RULES = (
    Rule(3_000, vocab=2000, dropout=0.2, inner_dropout=0.1, label_smoothing=0.1, largest="small"),
    Rule(12_000, vocab=3000, dropout=0.2, inner_dropout=0.1, label_smoothing=0.1, largest="medium"),
    Rule(60_000, vocab=6000, dropout=0.2, inner_dropout=0.1, label_smoothing=0.1, largest="medium"),
    Rule(600_000, vocab=16000, dropout=0.1, inner_dropout=0.0, label_smoothing=0.1, largest="base"),
    Rule(math.inf, vocab=32000, dropout=0.1, inner_dropout=0.0, label_smoothing=0.1, largest="base"),
)  # fmt: skip

SHAPES = {  # smallest first: (d_model, heads, encoder layers, decoder layers, d_ff), lr_factor
    "small": ((128, 4, 3, 3, 512), 0.5),
    "medium": ((256, 4, 3, 3, 1024), 1.0),
    "base": ((512, 8, 6, 6, 2048), 1.0),
}
ENOUGH_STEPS = 2500  # a wider shape is taken only if the budget still allows it this many steps
BATCH_TOKENS = 4096  # padded tokens a step, all processes together
VALIDATIONS = 10  # in a budget: a curve to see, and checkpoints to average
WARMUP_SHARE = 0.3  # of the steps the budget allows (the quick preset's)
# BPE-dropout where the budget passes over the corpus this often: its new splits slow learning
# (and re-encoding each epoch costs a third of the step rate on 5k pairs), paying back only late
BPE_DROPOUT_EPOCHS = 300
# fewer passes than this over the corpus in the budget: light dropout, as for a large corpus
# (heavier dropout only slows a run that cannot memorise its pairs; 29k pairs in 10 minutes
# are ~7 passes)
FEW_PASSES = 10
# the last 30% of the run: with 5, checkpoints from a higher learning rate pulled the mean down
CHECKPOINTS_AVERAGED = 3
PIECES_PER_WORD = 1.3  # sentencepiece pieces a word, about, at the vocabularies above
PADDING_KEPT = 0.85  # of a batch's padded tokens, the real ones (batches group by length)


@dataclass(frozen=True)
class Choice:
    """One decision: the settings it makes and the reason, a line."""

    what: str
    values: dict = field(hash=False)
    why: str


def rule_for(pairs: int) -> Rule:
    return next(rule for rule in RULES if pairs <= rule.pairs)


def choose(
    facts: CorpusFacts, minutes: float, rate: Callable[[str], float] | None, world: int = 1
) -> list[Choice]:
    """The choices for a corpus with these facts and a budget of `minutes` (0: none); `rate`
    gives a shape's optimizer steps a second here (None: no budget to size by)."""
    rule = rule_for(facts.pairs)
    shape, steps, shape_why = _shape(rule, minutes, rate)
    choices = [
        _vocabulary(rule, facts),
        Choice("shape", _shape_values(shape), shape_why),
        _regularisation(rule, facts, steps),
        _batch(world),
        _schedule(shape, steps),
        _bpe_dropout(facts, steps),
        _validation(steps),
    ]
    return choices


def _vocabulary(rule: Rule, facts: CorpusFacts) -> Choice:
    # every character needs a piece of its own before any merge: a Chinese side needs thousands
    vocab = max(rule.vocab, _round_up(facts.characters + 1000, 1000))
    why = f"{facts.pairs:,} pairs: a small corpus wants few pieces, each seen often"
    if vocab > rule.vocab:
        why += f" (at least its {facts.characters:,} characters and 1,000 merges)"
    return Choice(f"vocabulary {vocab:,} pieces", {"vocab_size": vocab}, why)


def _shape(rule: Rule, minutes: float, rate) -> tuple[str, int, str]:
    """The widest shape the corpus supports whose steps in the budget are enough (else the
    smallest); with the steps it gets, and why."""
    names = list(SHAPES)[: list(SHAPES).index(rule.largest) + 1]
    if not minutes or rate is None:
        return names[-1], 0, f"the widest for {rule.pairs:,.0f} pairs or fewer (no --max-time)"
    chosen, steps = names[0], int(rate(names[0]) * minutes * 60)
    for name in names[1:]:
        wider = int(rate(name) * minutes * 60)
        if wider < ENOUGH_STEPS:
            why = f"{name} would get ~{wider:,}"
            return chosen, steps, _steps_said(chosen, steps, rate, minutes) + f"; {why}"
        chosen, steps = name, wider
    return (
        chosen,
        steps,
        _steps_said(chosen, steps, rate, minutes) + " (the widest for this corpus)",
    )


def _steps_said(name: str, steps: int, rate, minutes: float) -> str:
    return f"~{steps:,} steps at {rate(name):.1f} a second in {minutes:g} minutes"


def _shape_values(name: str) -> dict:
    (d_model, heads, enc, dec, d_ff), _ = SHAPES[name]
    return {
        "model.d_model": d_model,
        "model.n_heads": heads,
        "model.n_enc_layers": enc,
        "model.n_dec_layers": dec,
        "model.d_ff": d_ff,
    }


def _regularisation(rule: Rule, facts: CorpusFacts, steps: int) -> Choice:
    passes = _epochs(facts, steps) if steps else math.inf
    few = passes < FEW_PASSES  # each pair seen too few times to memorise: as a large corpus
    dropout, inner = (0.1, 0.0) if few else (rule.dropout, rule.inner_dropout)
    values = {
        "model.dropout": dropout,
        "model.attention_dropout": inner,
        "model.activation_dropout": inner,
        "label_smoothing": rule.label_smoothing,
    }
    what = (
        f"dropout {dropout:g} (attention and feed-forward {inner:g}), "
        f"label smoothing {rule.label_smoothing:g}"
    )
    why = f"{facts.pairs:,} pairs are seen many times over: guard against memorising them"
    if few:
        why = f"~{passes:.0f} passes over {facts.pairs:,} pairs: too few to memorise them"
    return Choice(what, values, why)


def _batch(world: int) -> Choice:
    per_process = max(256, BATCH_TOKENS // world)
    why = "padded tokens a step" + (f", {world} processes together" if world > 1 else "")
    return Choice(f"batch {per_process:,} tokens a process", {"max_tokens": per_process}, why)


def _schedule(shape: str, steps: int) -> Choice:
    _, factor = SHAPES[shape]
    if steps:
        values = {
            "lr_factor": factor,
            "warmup": min(4000, max(100, round(WARMUP_SHARE * steps))),
            "warmup_share": WARMUP_SHARE,
        }
        why = f"warm-up {WARMUP_SHARE:.0%} of the steps the budget allows, measured again after 20 steps"
    else:
        values = {"lr_factor": factor, "warmup": 4000, "warmup_share": 0.0}
        why = "warm-up 4,000 steps (the paper's): no budget to size it by"
    return Choice(f"learning rate x{factor:g}", values, why)


def _bpe_dropout(facts: CorpusFacts, steps: int) -> Choice:
    epochs = _epochs(facts, steps)
    if steps and epochs >= BPE_DROPOUT_EPOCHS:
        why = f"~{epochs:.0f} passes over the corpus: a new split of each pair every epoch pays"
        return Choice("BPE-dropout 0.1", {"bpe_dropout": 0.1}, why)
    why = "no budget to count epochs by"
    if steps:
        why = f"~{epochs:.0f} passes over the corpus: too few for new splits to pay"
    return Choice("no BPE-dropout", {"bpe_dropout": 0.0}, why)


def _epochs(facts: CorpusFacts, steps: int) -> float:
    """Passes over the corpus in `steps` steps: a batch is about PADDING_KEPT real tokens."""
    corpus_tokens = facts.pairs * (facts.src_words + facts.tgt_words) * PIECES_PER_WORD
    return steps * BATCH_TOKENS * PADDING_KEPT / max(corpus_tokens, 1.0)


def _validation(steps: int) -> Choice:
    every = max(50, _round_up(steps // VALIDATIONS, 50)) if steps else 1000
    values = {"valid_every": every, "save_every": 0, "keep": CHECKPOINTS_AVERAGED}
    why = (
        f"~{VALIDATIONS} validations in the budget; the last {CHECKPOINTS_AVERAGED} "
        "checkpoints kept to average"
    )
    return Choice(f"validation every {every:,} steps", values, why)


def _round_up(n: float, to: int) -> int:
    return int(math.ceil(n / to) * to)


def corpus_facts(src: str, tgt: str, pairs: int) -> CorpusFacts:
    """The facts of a corpus of `pairs` pairs (counted by checks.check_parallel), from its
    first FACTS_SAMPLE lines."""
    words, characters = [0, 0], set()
    seen = 0
    for side, path in enumerate((src, tgt)):
        for n, line in enumerate(read_lines(path)):
            if n >= FACTS_SAMPLE:
                break
            words[side] += _words(line)
            characters.update(line)
            seen += side == 0
    seen = max(seen, 1)
    return CorpusFacts(pairs, words[0] / seen, words[1] / seen, len(characters - {" "}))


def _words(line: str) -> int:
    """Words of a line, a CJK character each (those scripts write no spaces)."""
    cjk = sum(1 for ch in line if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return len(line.split()) + cjk
