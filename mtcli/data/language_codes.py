"""Language codes as other tools write them (ISO 639-3: OPUS-MT's files, mtdata's tags) and as
mtcli names languages (the two letters of ISO 639-1, where mtcli's text layer knows the language)."""

from __future__ import annotations

ALPHA3 = {"eng": "en", "zho": "zh", "cmn": "zh", "deu": "de", "fra": "fr", "spa": "es",
          "jpn": "ja", "rus": "ru", "ara": "ar", "por": "pt", "ita": "it", "kor": "ko"}  # fmt: skip


def two_letter(code: str) -> str:
    """`code` as mtcli names the language: eng -> en; a code it does not know, unchanged."""
    return ALPHA3.get(code, code)


# a language's name in English, as LibreTranslate's /languages and Argos's packages show it
LANGUAGE_NAMES = {
    "en": "English",
    "zh": "Chinese",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian",
    "it": "Italian",
    "pt": "Portuguese",
}
