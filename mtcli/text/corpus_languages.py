"""The languages of a parallel corpus: what its prepared manifest says (`mtcli data prepare`
writes one beside the splits), else what its text is in; and a language the user names,
checked against them.

A model's languages are labels everything downstream believes (eval's BLEU tokenizer, the
routing of plain input, the exports), so they come from the corpus, never from a default: a
flag that the text contradicts is refused in one line naming both. Torch-free: runs before
anything is trained. Lives in text/, beside the identifier it asks (data/ may not import text/).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from mtcli.config import LANGUAGE
from mtcli.data.parallel_text import read_corpus
from mtcli.errors import UserError
from mtcli.text.language import (
    base_language,
    contradicts,
    majority_language,
    source_language,
    sure_language,
)

SAMPLE_PAIRS = 1000  # pairs read from the top of a corpus to identify its languages
SIDES = ("src", "tgt")


@dataclass(frozen=True)
class SideLanguage:
    """What is known of one side's language, and from where (for the messages)."""

    language: str | None  # None: no letters in the sample, or no file to read
    where: str  # "data/mine/manifest.json", or "the text of data/mine/train.tgt"
    sure: bool  # from a manifest, or identified surely (by script, or py3langid confident)


def corpus_languages(src: str, tgt: str | None) -> dict[str, SideLanguage]:
    """Each side's language: from the prepared corpus's manifest.json beside the files, else
    identified from the text of its first SAMPLE_PAIRS pairs (`tgt` None: a TSV file)."""
    if (manifest := prepared_manifest(src, tgt)) is not None:
        path, record = manifest
        # a prepared folder's train.tgt given as --src (zh-en from an en-zh corpus) is its
        # target side: the manifest's languages swap with the files
        swapped = Path(src).suffix == ".tgt" and (tgt is None or Path(tgt).suffix == ".src")
        of = {"src": "tgt", "tgt": "src"} if swapped else {"src": "src", "tgt": "tgt"}
        return {side: SideLanguage(record[f"{of[side]}_lang"], str(path), True) for side in SIDES}
    pairs = list(itertools.islice(read_corpus(src, tgt), SAMPLE_PAIRS))
    names = {"src": src, "tgt": tgt or src}
    column = {"src": 1, "tgt": 2}
    found = {}
    for side in SIDES:
        lines = [pair[column[side]] for pair in pairs if pair[column[side]].strip()]
        found[side] = identified_language(lines, f"the text of {names[side]}")
    return found


def identified_language(lines: list[str], where: str) -> SideLanguage:
    """The language most lines are surely in; else the one most are guessed to be in."""
    sure, share = majority_language(map(sure_language, lines))
    if sure is not None and share >= 0.5:
        return SideLanguage(sure, where, True)
    return SideLanguage(majority_language(map(source_language, lines))[0], where, False)


def prepared_manifest(src: str, tgt: str | None) -> tuple[Path, dict] | None:
    """(path, manifest) of the `mtcli data prepare` folder holding both files, if they lie in
    one and its manifest names the languages."""
    folder = Path(src).parent
    if tgt is not None and Path(tgt).parent.resolve() != folder.resolve():
        return None
    path = folder / "manifest.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    labels = [record.get(f"{side}_lang") if isinstance(record, dict) else None for side in SIDES]
    if not all(isinstance(code, str) and code and not LANGUAGE.why_not(code) for code in labels):
        return None  # not a prepared corpus's, or hand-edited: the text decides
    return path, record


def settle_languages(
    known: dict[str, SideLanguage], asked: dict[str, tuple[str, str]]
) -> dict[str, str]:
    """Each side's language: the one asked for (`asked[side]` = (code, how it was asked, e.g.
    "--tgt-lang de")) unless what is known of the corpus contradicts it, else the corpus's.
    A contradiction is one UserError naming both; a side nothing names is one too."""
    settled = {}
    for side in SIDES:
        what = known.get(side)
        if side in asked:
            code, how = asked[side]
            if what is not None and what.sure and _disagrees(code, what):
                says = "says" if what.where.endswith("manifest.json") else "is in"
                raise UserError(
                    f"{how}, but {what.where} {says} {what.language}: give --{side}-lang "
                    f"{what.language} (or leave it out), or the corpus in {code}"
                )
            settled[side] = code
        elif what is not None and what.language:
            settled[side] = what.language
        else:
            where = what.where if what else "the corpus"
            raise UserError(f"cannot tell the language of {where}: give --{side}-lang")
    return settled


def _disagrees(code: str, what: SideLanguage) -> bool:
    """A manifest's label against a flag is compared as codes; identified text, by what the
    identifier can tell (a language it does not know is contradicted only by a script)."""
    if what.where.endswith("manifest.json"):
        return base_language(code) != base_language(what.language or "")
    return contradicts(code, what.language)


def describe(settled: dict[str, str], known: dict[str, SideLanguage], asked: dict) -> str:
    """One line on where the languages came from, for stderr at the start of a run."""
    parts = []
    for side in SIDES:
        if side in asked:
            parts.append(f"{settled[side]} ({asked[side][1]})")
        else:
            what = known[side]
            guessed = not what.sure and what.where.startswith("the text")
            guess = f", a guess: set it with --{side}-lang" if guessed else ""
            parts.append(f"{settled[side]} (from {what.where}{guess})")
    return f"languages: {parts[0]} -> {parts[1]}"


def languages_of_corpus(
    src: str, tgt: str | None, asked: dict[str, str]
) -> tuple[dict[str, str], str]:
    """A corpus's languages (`asked`: side -> the code a flag gave, checked against the text),
    and the line saying where they came from; flags named --src-lang and --tgt-lang."""
    how = {side: (code, f"--{side}-lang {code}") for side, code in asked.items() if code}
    known = corpus_languages(src, tgt)
    settled = settle_languages(known, how)
    return settled, describe(settled, known, how)
