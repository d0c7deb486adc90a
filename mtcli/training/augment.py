"""The placeholder pipeline: each training pair, as this epoch gives it to the model.

A model learns to carry a placeholder piece (data/placeholders.py) only from pairs that hold
one at the same place on both sides, and to write fluent text around it only if it met it in
fluent sentences. Tatoeba holds few URLs and no `{name}`, so most of them are made here:

- spans the pair holds on both sides (a number, a time, a price, a Latin name inside Chinese)
  become the piece of their kind on both sides;
- a word and the words aligned to it (eflomal, data/alignment.py) become a placeholder of a
  random kind: `Most boys like baseball.` / `大部分男生喜欢棒球。` -> `Most boys like ｟url1｠.` /
  `大部分男生喜欢｟url1｠。`, so a placeholder is met as a subject, an object, after a preposition;
- an aligned phrase is wrapped in tag pieces on both sides (`｟t1｠棒球｟/t1｠`), so a tag comes
  back around the translation of what it enclosed, never empty;
- both sides in UPPER CASE or Title Case, and without their final punctuation (OpusTrainer's
  UpperCase, TitleCase and RemoveEndPunct modifiers).

Written here rather than taken from opustrainer 0.5: it pins sentencepiece==0.1.99 (mtcli needs
0.2), its modifiers draw from the process-wide `random` (a resumed run or a second DDP rank
could not repeat a pair's draw), and its tag modifier works on space-separated tokens with
Moses detokenization, which Chinese does not have. Here every draw comes from a generator
seeded by (run seed, epoch, pair index): the same pair gets the same rewrite on any rank, after
any resume. Imports no torch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mtcli.data.alignment import Links, words
from mtcli.data.placeholders import (
    PER_SENTENCE,
    SPAN_KINDS,
    TAGS,
    piece_kind,
    span_piece,
    tag_pieces,
)
from mtcli.text.spans import find_spans

END_PUNCT = ".!?。！？"
# words a placeholder would not stand for (it stands for a thing: a name, a link, a value)
FUNCTION_WORDS = frozenset(
    (  # noqa: SIM905 (a list of 80 one-word strings reads worse)
        "the a an to of in on at for and or but is are was were be been am do does did not no he "
        "she it we you they i me him her us them my your his its our their this that these those "
        "there here what who how why when where which will would can could should must have has "
        "had very so too as by with from up out if than then just all some any"
    ).split()
)
# a word after these is most often a noun where a span would stand (at ｟time1｠, visit the ｟url1｠)
BEFORE_A_NOUN = frozenset(
    (  # noqa: SIM905
        "the a an my your his her our their this that these those to at in on for from with "
        "about visit call see open use buy"
    ).split()
)


@dataclass(frozen=True)
class Rates:
    """The share of pairs each step of the pipeline rewrites (TrainConfig's fields)."""

    placeholders: float = 0.0
    tags: float = 0.0
    casing: float = 0.0
    end_punct: float = 0.0

    @property
    def on(self) -> bool:
        return any((self.placeholders, self.tags, self.casing, self.end_punct))


class Augmenter:
    """Rewrites pair `i` of a corpus for an epoch; `links[i]` are its word alignments."""

    def __init__(self, rates: Rates, links, src_lang: str, tgt_lang: str, seed: int):
        self.rates, self.links, self.seed = rates, links, seed
        # the side whose words are words (not CJK characters) picks what a placeholder replaces
        self.pick_target = src_lang == "zh" and tgt_lang != "zh"
        self.cased_source = src_lang != "zh"  # a target's case must follow from its source's

    def __call__(self, i: int, epoch: int, src: str, tgt: str) -> tuple[str, str]:
        rng = random.Random(f"{self.seed}:{epoch}:{i}")
        rates = self.rates
        links = self.links[i]
        if rng.random() < rates.end_punct:
            src, tgt = _without_end_punct(src, tgt)
            links = _within(links, src, tgt)
        edits: list[_Edit] = []
        if rng.random() < rates.placeholders:
            edits += self._placeholders(src, tgt, links, rng)
        if rng.random() < rates.tags:
            edits += self._tags(src, tgt, links, edits, rng)
        src, tgt = _apply(src, tgt, edits)
        if rng.random() < rates.casing and self.cased_source:
            src, tgt = _recased(src, tgt, upper=rng.random() < 0.5)
        return src, tgt

    def _placeholders(self, src: str, tgt: str, links: Links, rng: random.Random) -> list:
        """Spans both sides hold, and one or two aligned words, as pieces of their kind."""
        edits = _shared_spans(src, tgt)
        taken = [e for e in edits]
        units = [u for u in _aligned_units(src, tgt, links, self.pick_target) if _free(u, taken)]
        rng.shuffle(units)
        for unit in units[: rng.choice((1, 1, 2))]:
            if _free(unit, taken):
                taken.append(_Edit(*unit, kind=rng.choice(SPAN_KINDS)))
        return _numbered(taken)

    def _tags(self, src: str, tgt: str, links: Links, taken: list, rng: random.Random) -> list:
        """One or two aligned phrases of one to three words, each wrapped in a tag pair."""
        phrases = [p for p in _aligned_phrases(src, tgt, links) if _free(p, taken)]
        rng.shuffle(phrases)
        tags: list[_Edit] = []
        for phrase in phrases[: rng.choice((1, 1, 2))]:
            if _free(phrase, taken + tags):
                tags.append(_Edit(*phrase, kind="tag", n=len(tags) + 1))
        return tags[:TAGS]


@dataclass(frozen=True)
class _Edit:
    """Characters [s0, s1) of the source and [t0, t1) of the target, replaced by one piece
    (or, for a tag, wrapped in a pair)."""

    s0: int
    s1: int
    t0: int
    t1: int
    kind: str = "num"
    n: int = 0


def _free(unit, taken: list[_Edit]) -> bool:
    s0, s1, t0, t1 = unit[:4] if isinstance(unit, tuple) else (unit.s0, unit.s1, unit.t0, unit.t1)
    return not any(s0 < e.s1 and e.s0 < s1 or t0 < e.t1 and e.t0 < t1 for e in taken)


def _shared_spans(src: str, tgt: str) -> list[_Edit]:
    """Spans written alike on both sides (7:30, 1999, iPhone), each as its kind's piece."""
    edits: list[_Edit] = []
    target = find_spans(tgt)
    for span in find_spans(src):
        same = next((t for t in target if t.text == span.text), None)
        if same is not None:
            target.remove(same)
            kind = piece_kind(span.kind, training=True)
            edit = _Edit(span.start, span.end, same.start, same.end, kind)
            if _free(edit, edits):
                edits.append(edit)
    return edits


def _aligned_units(src: str, tgt: str, links: Links, pick_target: bool) -> list[tuple]:
    """(s0, s1, t0, t1) of each content word of the spaced side and the contiguous words of the
    other side aligned to it (and to nothing else)."""
    sw, tw = words(src), words(tgt)
    if pick_target:  # zh -> en: an English word of the target and its Chinese characters
        flipped = [(b, a) for a, b in links]
        return [(u[2], u[3], u[0], u[1]) for u in _units(tgt, tw, sw, flipped)]
    return _units(src, sw, tw, links)


def _units(text: str, mine: list, other: list, links: Links) -> list[tuple]:
    units = []
    for a, (w0, w1) in enumerate(mine):
        word = text[w0:w1]
        if not word.isalpha() or len(word) < 2 or word.lower() in FUNCTION_WORDS:
            continue
        before = text[mine[a - 1][0] : mine[a - 1][1]].lower() if a else ""
        name = word[0].isupper() and a > 0
        if not _whole_word(text, w0, w1) or not (name or before in BEFORE_A_NOUN):
            continue
        linked = sorted(b for x, b in links if x == a)
        if not linked or linked != list(range(linked[0], linked[-1] + 1)):
            continue
        if any(x != a for x, b in links if b in linked):  # the other words say more than it
            continue
        first, last = _grown(linked[0], linked[-1], other, {b for _, b in links})
        units.append((w0, w1, other[first][0], other[last][1]))
    return units


def _aligned_phrases(src: str, tgt: str, links: Links) -> list[tuple]:
    """(s0, s1, t0, t1) of runs of one to three source words whose aligned target words form
    one contiguous run aligned to nothing outside them (a consistent phrase pair)."""
    sw, tw = words(src), words(tgt)
    phrases = []
    for a in range(len(sw)):
        for b in range(a, min(a + 3, len(sw))):
            if not any(src[x0:x1].isalnum() for x0, x1 in sw[a : b + 1]):
                continue
            linked = sorted({t for s, t in links if a <= s <= b})
            if not linked or linked != list(range(linked[0], linked[-1] + 1)):
                continue
            if any(not a <= s <= b for s, t in links if t in linked):
                continue
            if src[sw[b][0] : sw[b][1]] in END_PUNCT or tgt[tw[linked[-1]][0]] in END_PUNCT:
                continue
            if not _whole_word(src, sw[a][0], sw[b][1]):
                continue
            first, last = _grown(linked[0], linked[-1], tw, {t for _, t in links})
            phrases.append((sw[a][0], sw[b][1], tw[first][0], tw[last][1]))
    return phrases


def _grown(first: int, last: int, words_: list, aligned: set[int]) -> tuple[int, int]:
    """A run of words widened by an unaligned one-character word (CJK characters) beside
    it: Tom aligned to the 姆 of 汤姆, Italian to the 利 of 意大利人, take the whole word."""

    def loose(k: int) -> bool:
        return 0 <= k < len(words_) and k not in aligned and words_[k][1] - words_[k][0] == 1

    # one character each way at most: past it, an unaligned run is more often other words
    if loose(first - 1) and words_[first - 1][1] == words_[first][0]:
        first -= 1
    if loose(last + 1) and words_[last][1] == words_[last + 1][0]:
        last += 1
    return first, last


def _whole_word(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] begins and ends at word boundaries (not inside I'm or 3D): CJK
    characters are words each."""

    def joins(c: str) -> bool:
        return (c.isalnum() or c in "'’-") and not "\u3400" <= c <= "\u9fff"

    inside_start = start > 0 and joins(text[start - 1]) and joins(text[start])
    inside_end = end < len(text) and joins(text[end]) and joins(text[end - 1])
    return not (inside_start or inside_end)


def _numbered(edits: list[_Edit]) -> list[_Edit]:
    """Each edit numbered within its kind in source order; past PER_SENTENCE, left as text."""
    counts: dict[str, int] = {}
    out = []
    for e in sorted(edits, key=lambda e: e.s0):
        counts[e.kind] = counts.get(e.kind, 0) + 1
        if counts[e.kind] <= PER_SENTENCE:
            out.append(_Edit(e.s0, e.s1, e.t0, e.t1, e.kind, counts[e.kind]))
    return out


def _apply(src: str, tgt: str, edits: list[_Edit]) -> tuple[str, str]:
    """Both sides with every edit made, right to left so offsets stay true."""
    src_edits = sorted(((e.s0, e.s1, e) for e in edits), key=lambda x: -x[0])
    tgt_edits = sorted(((e.t0, e.t1, e) for e in edits), key=lambda x: -x[0])
    return _rewrite(src, src_edits), _rewrite(tgt, tgt_edits)


def _rewrite(text: str, edits: list) -> str:
    for start, end, e in edits:
        if e.kind == "tag":
            opening, closing = tag_pieces(e.n)
            text = text[:start] + opening + text[start:end] + closing + text[end:]
        else:
            text = text[:start] + span_piece(e.kind, e.n) + text[end:]
    return text


def _without_end_punct(src: str, tgt: str) -> tuple[str, str]:
    if src[-1:] in END_PUNCT and tgt[-1:] in END_PUNCT:
        return src.rstrip(END_PUNCT).rstrip(), tgt.rstrip(END_PUNCT).rstrip()
    return src, tgt


def _within(links: Links, src: str, tgt: str) -> Links:
    """The links between words both sides still have: stripping the final punctuation takes
    the last words away, and eflomal may have linked a kept word to one of them."""
    n_src, n_tgt = len(words(src)), len(words(tgt))
    return [(a, b) for a, b in links if a < n_src and b < n_tgt]


def _recased(src: str, tgt: str, upper: bool) -> tuple[str, str]:
    """Both sides upper-cased or title-cased outside the placeholder pieces (Chinese has no
    case, so a Chinese side stays as it is)."""
    from mtcli.data.placeholders import PIECE

    def recase(text: str) -> str:
        parts, at = [], 0
        for m in PIECE.finditer(text):
            parts += [_case(text[at : m.start()], upper), m.group()]
            at = m.end()
        return "".join(parts) + _case(text[at:], upper)

    return recase(src), recase(tgt)


def _case(text: str, upper: bool) -> str:
    if upper:
        return text.upper()
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
