"""Which languages a model from elsewhere reads and writes, from what its files say; never a
guess. Stdlib only: the MarianMT, CTranslate2 and hub imports all ask it before any weights load."""

from __future__ import annotations

import re
from pathlib import Path

from mtcli.data.language_codes import two_letter
from mtcli.data.textio import read_json_object
from mtcli.data.tokenizer import TARGET_TOKEN, chosen_target_token, code_language
from mtcli.errors import UserError

OPUS_NAME = re.compile(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$")  # Helsinki-NLP's repository names


def languages(src: Path, tokenizer: dict, name: str, given: dict) -> dict[str, str]:
    """The model's source and target languages (two-letter codes where mtcli knows them):
    `given` (--from/--to), else tokenizer_config.json's, else OPUS-MT's metadata.json's, else
    an OPUS-MT name (opus-mt-en-zh); a side none of them names is one line, never a guess."""
    meta_file = src / "metadata.json"
    meta = read_json_object(meta_file, "missing") if meta_file.is_file() else {}
    named = OPUS_NAME.search(name)
    sides = (("src_lang", "source_lang", "--from"), ("tgt_lang", "target_lang", "--to"))
    found = {}
    for n, (side, theirs, flag) in enumerate(sides):
        code = str(
            given.get(side)
            or tokenizer.get(theirs)
            or meta.get(f"{side[:3]}_alpha2")
            or (named.group(n + 1) if named else "")
        )
        if not code:
            raise UserError(
                f"{src}: neither tokenizer_config.json nor metadata.json says which language "
                f"the model {'reads' if n == 0 else 'writes'}; {flag} gives it"
            )
        found[side] = two_letter(code)
    return found


def language_tokens(vocab) -> list[str]:
    """The >>xx<< language tokens of a vocabulary (a multilingual-target Marian model's)."""
    return sorted(t for t in vocab if TARGET_TOKEN.fullmatch(t))


def target_token(tokens: list[str], langs: dict, src: Path) -> tuple[str | None, dict]:
    """(token, langs) of a multilingual-target model: the language token its sources start
    with by default, and `langs` with --to's language as the token's (--to cmn_Hant: zh).
    The token: the one --to names, else the first of its metadata.json's target languages it
    has; --to a language it lacks, or neither, is one line listing them, never a guess. (None,
    langs) for a model of one target language."""
    if not tokens:
        return None, langs
    meta_file = src / "metadata.json"
    meta = read_json_object(meta_file) if meta_file.is_file() else {}
    card = [f">>{code}<<" for code in meta.get("tgt_constituents") or []]
    default = next((t for t in card if t in tokens), None)
    asked = langs.get("tgt_lang")
    if asked:  # the same rule as translate --to (one place: chosen_target_token)
        token = chosen_target_token(tokens, default, asked)
        return token, {**langs, "tgt_lang": code_language(token)}
    if default:
        return default, langs
    codes = ", ".join(t[2:-2] for t in tokens[:8]) + (", ..." if len(tokens) > 8 else "")
    raise UserError(
        f"{src}: the model writes {len(tokens)} languages ({codes}); --to chooses the one "
        f"its sources ask for by default (e.g. --to {tokens[0][2:-2]})"
    )
