"""How languages are written: the facts the sentence splitter, the spans, the language
identifier and the translator read, kept in one place so that they cannot drift apart."""

from __future__ import annotations

# written without spaces, between words or between sentences
UNSPACED = frozenset({"zh", "ja", "th"})
# written in Han characters (too): a line of Han alone does not rule them out, and a term of
# the other script inside their text is a Latin one (iPhone in Chinese)
HAN_WRITTEN = frozenset({"zh", "ja", "yue", "wuu", "lzh", "cmn", "gan", "hak", "nan"})
