"""The language of a line of text, and the language most lines of a text are in.

First the script, which settles most languages at no cost: kana is Japanese (with kanji or
without), Hangul Korean, Han without kana Chinese, and Greek, Arabic, Hebrew, Thai and
Devanagari each name their language. Latin and Cyrillic lines of three words or more go to
py3langid (langid.py's model, shipped in its wheel, offline), restricted to the languages it
tells apart on short lines; its answer replaces English only when it is confident, since
the cost of the two mistakes differs: an English line called German is not translated at
all, a German line called English is translated badly. A line without letters has no
language (it is left as it is).

py3langid decompresses its 4.6 MB model in ~0.5 s; the part mtcli asks about is kept in the
cache folder after the first use (~0.06 s to load), and is loaded only for a line that needs
it, so `mtcli translate "Hello."` never waits for it. Stdlib (and text/writing.py) only at import.
"""

from __future__ import annotations

import functools
import io
import re
import threading
import unicodedata
from collections.abc import Iterable

from mtcli.text.writing import HAN_WRITTEN

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")
CYRILLIC = re.compile(r"[\u0400-\u04ff]")
# scripts that name one language (the language most written in them)
SCRIPT_LANGUAGES = {
    "el": re.compile(r"[\u0370-\u03ff]"),
    "ar": re.compile(r"[\u0600-\u06ff]"),
    "he": re.compile(r"[\u0590-\u05ff]"),
    "th": re.compile(r"[\u0e00-\u0e7f]"),
    "hi": re.compile(r"[\u0900-\u097f]"),
}
# what py3langid is asked to choose among, per script: languages it tells apart on lines of a
# few words (measured on Tatoeba's and Multi30k's test lines, see tests/test_language.py)
LATIN_LANGUAGES = ("en", "de", "fr", "es", "it", "pt", "nl")
CYRILLIC_LANGUAGES = ("ru", "uk", "bg")
MIN_WORDS = 3  # shorter Latin lines stay English: "Hi.", "OK." and "Go." are anyone's
CONFIDENT = 0.9  # py3langid's probability needed to call a Latin line not English


def source_language(line: str) -> str | None:
    """The line's language code ('en', 'zh', 'de', 'ja', ...), None without letters. URLs,
    addresses, placeholders and code say nothing of it: they are left out first."""
    line = _without_spans(line)
    han, kana = len(HAN.findall(line)), len(KANA.findall(line))
    latin_words = LATIN_WORD.findall(line)
    if kana:
        return "ja"
    if HANGUL.search(line) and len(HANGUL.findall(line)) >= han:
        return "ko"
    if han and han > len(latin_words):
        return "zh"
    for language, script in SCRIPT_LANGUAGES.items():
        if len(script.findall(line)) > len("".join(latin_words)):
            return language
    if (cyrillic := len(CYRILLIC.findall(line))) and cyrillic > len("".join(latin_words)):
        return _identified(line, CYRILLIC_LANGUAGES, default="ru", confident=0.0)
    if han or any(unicodedata.category(c).startswith("L") for c in line):
        if len(latin_words) < MIN_WORDS:
            return "en"
        return _identified(line, LATIN_LANGUAGES, default="en", confident=CONFIDENT)
    return None


# languages that a script names on its own (the identifier never asks py3langid about them)
SCRIPT_DECIDED = frozenset({"zh", "ja", "ko", *SCRIPT_LANGUAGES})
# every language the identifier can name: a text claimed to be in one of these and surely in
# another is in the other; a claim outside it can be contradicted only by a script
IDENTIFIABLE = SCRIPT_DECIDED | set(LATIN_LANGUAGES) | set(CYRILLIC_LANGUAGES)


def sure_language(line: str) -> str | None:
    """The line's language where the identifier is sure of it: its script names it, or
    py3langid is confident on three words or more. None where it is only a guess (a short
    Latin line is English by default in `source_language`, not surely)."""
    language = source_language(line)
    if language is None or language in SCRIPT_DECIDED:
        return language
    text = _without_spans(line)
    candidates = CYRILLIC_LANGUAGES if language in CYRILLIC_LANGUAGES else LATIN_LANGUAGES
    if candidates is LATIN_LANGUAGES and len(LATIN_WORD.findall(text)) < MIN_WORDS:
        return None
    top, probability = _classified(text, candidates)  # source_language's own call, cached
    return top if top == language and probability >= CONFIDENT else None


def base_language(code: str) -> str:
    """The language part of a code: zh-Hans -> zh, pt_BR -> pt, EN -> en."""
    return re.split(r"[-_]", code.strip(), maxsplit=1)[0].lower()


def contradicts(claimed: str, identified: str | None) -> bool:
    """Whether text surely in `identified` cannot be in the `claimed` language: they differ,
    and the identifier could have named `claimed` (one it knows), or `identified` is one its
    script names alone. Japanese and Cantonese are written in Han too, so Han says nothing
    against them."""
    claimed = base_language(claimed)
    if identified is None or not claimed or claimed == identified:
        return False
    if identified == "zh" and claimed in HAN_WRITTEN:
        return False
    return claimed in IDENTIFIABLE or identified in SCRIPT_DECIDED


def _without_spans(line: str) -> str:
    if not any(c in line for c in "/@`{%<"):  # the usual line: no pattern can match
        return line
    from mtcli.text.spans import find_spans

    spans = [s for s in find_spans(line) if s.kind != "number"]
    for span in reversed(spans):
        line = line[: span.start] + " " + line[span.end :]
    return line


def _identified(line: str, languages: tuple[str, ...], *, default: str, confident: float) -> str:
    """py3langid's choice among `languages`, when its probability reaches `confident`."""
    language, probability = _classified(line, languages)
    return language if language != default and probability >= confident else default


def detect(text: str) -> tuple[str | None, float]:
    """The language of a text (the one most of its lines are in) and a confidence in percent:
    the share of lines in it, times py3langid's probability where it was asked (Latin and
    Cyrillic lines), for LibreTranslate's /detect and detectedLanguage."""
    lines = [line for line in text.splitlines() if line.strip()]
    languages = [source_language(line) for line in lines]
    top, share = majority_language(languages)
    if top is None:
        return None, 0.0
    ours = [line for line, lang in zip(lines, languages, strict=True) if lang == top]
    probabilities = [_probability(line, top) for line in ours]
    return top, round(100 * share * sum(probabilities) / len(probabilities), 1)


@functools.lru_cache(maxsize=256)
def _classified(line: str, languages: tuple[str, ...]) -> tuple[str, float]:
    """py3langid's most probable language among `languages` and its probability (kept for
    the few lines just asked about: sure_language asks again what source_language did)."""
    language, probability = _identifier(languages).classify(line)
    return language, float(probability)


def _probability(line: str, language: str) -> float:
    """How sure the identifier is that `line` is in `language`: 1.0 where the script decides."""
    for candidates in (LATIN_LANGUAGES, CYRILLIC_LANGUAGES):
        if language in candidates:
            ranked = dict(_identifier(candidates).rank(_without_spans(line)))
            return float(ranked.get(language, 0.0))
    return 1.0


def majority_language(languages: Iterable[str | None]) -> tuple[str | None, float]:
    """The language most of `languages` name (None ignored), and the share of them it holds;
    (None, 0.0) when none names one. A tie goes to the language named first."""
    named = [language for language in languages if language]
    if not named:
        return None, 0.0
    top = max(dict.fromkeys(named), key=named.count)
    return top, named.count(top) / len(named)


# ---------------------------------------------------------------- py3langid, loaded once
_loading = threading.Lock()


@functools.cache
def _identifier(languages: tuple[str, ...]):
    """py3langid's identifier over `languages`, from the cache folder when it is there."""
    from py3langid.langid import LanguageIdentifier

    with _loading:
        arrays = _restricted_model(languages)
    return LanguageIdentifier(
        arrays["ptc"],
        arrays["pc"],
        arrays["classes"].tolist(),
        _array(arrays["nextmove"]),
        arrays["out_feat"].tolist(),
        norm_probs=True,
        tk_row=_array(arrays["nextmove_row"]),
    )


def _restricted_model(languages: tuple[str, ...]) -> dict:
    """The model's arrays for `languages` only: read from the cache, or made from py3langid's
    compressed model and written there (atomically; an unwritable cache is only slower)."""
    import numpy as np
    import py3langid
    from py3langid.langid import MODEL_DIR, MODEL_FILE
    from py3langid.modelio import load_model

    from mtcli.files import cache_dir, write_file_atomic

    try:
        path = cache_dir() / f"langid-{py3langid.__version__}-{'-'.join(languages)}.npz"
        with np.load(path, allow_pickle=False) as cached:  # plain arrays: no code in it
            arrays = {name: cached[name] for name in cached.files}
        if set(arrays) == {"ptc", "pc", "classes", "nextmove", "nextmove_row", "out_feat"}:
            return arrays
    except Exception:  # missing, or damaged (a truncated zip, a bad header): made again
        pass
    ptc, pc, classes, nextmove, row, output = load_model(MODEL_DIR / MODEL_FILE)
    keep = [classes.index(language) for language in languages]
    arrays = {
        "ptc": np.ascontiguousarray(ptc[:, keep]),
        "pc": pc[keep],
        "classes": np.array(languages),
        "nextmove": np.frombuffer(nextmove, dtype=f"u{nextmove.itemsize}"),
        "nextmove_row": np.frombuffer(row, dtype=f"u{row.itemsize}"),
        "out_feat": np.asarray(output, dtype=np.int32),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    try:
        path = cache_dir() / f"langid-{py3langid.__version__}-{'-'.join(languages)}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, buffer.getvalue())
    except (OSError, RuntimeError):  # no cache folder to be had (RuntimeError: no home)
        pass
    return arrays


def _array(values):
    """A numpy array of unsigned ints as the stdlib array py3langid's automaton reads."""
    from array import array

    out = array({2: "H", 4: "I", 8: "L"}[values.dtype.itemsize])
    out.frombytes(values.tobytes())
    return out
