"""Sentencepiece BPE: train, load, encode, decode. Knows nothing about tensors.

A tokenizer directory holds `tokenizer.json` (joint or separate, file names) and either one
`spm.model` shared by both sides (joint) or `src.model` and `tgt.model` (separate).
The special ids are fixed here, once, and every other module imports them.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from mtcli.config import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID
from mtcli.data.language_codes import two_letter
from mtcli.data.placeholders import PIECE, all_pieces, extended_model
from mtcli.data.textio import read_json, read_lines
from mtcli.device import available_cpus
from mtcli.errors import UserError
from mtcli.files import built_aside, check_replaceable

META_FILE = "tokenizer.json"


@dataclass
class TokenizerOptions:
    """Sentencepiece training options exposed on the command line."""

    vocab_size: int = 8000
    joint: bool = True  # one model for both sides: lets source and target share embeddings
    character_coverage: float = 0.9995  # below 1.0 so rare CJK characters map to <unk>
    # sentences sentencepiece trains on: 0 = every one up to SAMPLE_PAST, a random sample of
    # SAMPLE_PAST past it (it holds every sentence in memory: ~10 GB for 25M WMT lines, and
    # a few million give the same merges); N = a sample of N
    input_sentence_size: int = 0
    seed: int = 1
    # the placeholder pieces (data/placeholders.py) as user-defined symbols: a model trained
    # with the placeholder pipeline carries spans and tags through them
    placeholders: bool = False


def _iter_lines(paths: Iterable[str | Path]) -> Iterator[str]:
    """Non-empty stripped lines; invalid UTF-8 stops training with file:line."""
    for path in paths:
        for line in read_lines(path):
            if line := line.strip():
                yield line


SAMPLE_PAST = 3_000_000  # sentences; past this many, a tokenizer trains on a sample by default


def _check_text(path: str | Path) -> int:
    """Read a training file once before sentencepiece does: it must be UTF-8 and hold text.
    Returns its number of non-empty lines.

    (sentencepiece would replace bad bytes silently, and say only `!sentences_.empty()`.)
    """
    if not (n := sum(1 for line in read_lines(path) if line.strip())):
        raise UserError(f"{path}: no text to train a tokenizer on (empty file)")
    return n


def sample_size(n_lines: int, opts: TokenizerOptions) -> int:
    """The sentences one model trains on (0: all of them)."""
    if opts.input_sentence_size:
        return opts.input_sentence_size if opts.input_sentence_size < n_lines else 0
    return SAMPLE_PAST if n_lines > SAMPLE_PAST else 0


_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")
# sentencepiece skips longer lines (its default); with none left it failed with an assertion
MAX_LINE_BYTES = 4192


def _train_one(
    lines: Iterator[str],
    prefix: Path,
    opts: TokenizerOptions,
    names: list[str | Path],
    sample: int = 0,
) -> None:
    """Train one BPE model to `prefix.model` with the fixed special ids on `lines`, the text
    of the files `names` (for messages); on a random `sample` of them when it is not 0."""
    kwargs = dict(
        sentence_iterator=lines,
        max_sentence_length=MAX_LINE_BYTES,
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=opts.vocab_size,
        character_coverage=opts.character_coverage,
        # sentencepiece's default NFKC would turn Chinese full-width punctuation (？，) into
        # ASCII, so outputs would never match references; text is NFC-normalised on the way in
        normalization_rule_name="identity",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        # a small corpus may not support the requested size; take what it supports
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=available_cpus(),
    )
    if opts.placeholders:
        kwargs.update(user_defined_symbols=all_pieces())
    if sample:
        kwargs.update(input_sentence_size=sample, shuffle_input_sentence=True)
    spm.set_random_generator_seed(opts.seed)  # input sampling is the only randomness
    try:
        spm.SentencePieceTrainer.train(**kwargs)
    except RuntimeError as e:
        if m := _TOO_SMALL.search(str(e)):
            raise UserError(
                f"--vocab-size {m[1]} is too small: the corpus needs {m[2]} pieces for its "
                f"characters at --character-coverage {opts.character_coverage}; raise "
                "--vocab-size or lower --character-coverage"
            ) from None
        if "sentences_.empty()" in str(e):
            raise UserError(
                f"{' and '.join(dict.fromkeys(map(str, names)))}: every line is longer than {MAX_LINE_BYTES:,} "
                "bytes, which sentencepiece skips; split the text into sentences"
            ) from None
        raise UserError(f"sentencepiece training failed: {str(e).splitlines()[0]}") from None


def train_tokenizer(
    src: str | Path,
    tgt: str | Path,
    out: str | Path,
    opts: TokenizerOptions,
    *,
    force: bool = False,
    say: Callable[[str], None] = lambda message: None,
) -> Tokenizer:
    """Train BPE on the training text and write a tokenizer directory to `out` atomically.

    `out` may be new, empty, or an earlier tokenizer directory; anything else needs `force`.
    A corpus past SAMPLE_PAST sentences trains on a sample (unless opts say how many), and
    `say` is told.
    """
    out = Path(out)
    check_replaceable(out, "tokenizer", "--out", force, reads=[src, tgt])
    n_src, n_tgt = _check_text(src), _check_text(tgt)
    counts = {"joint": n_src + n_tgt} if opts.joint else {"src": n_src, "tgt": n_tgt}
    samples = {name: sample_size(n, opts) for name, n in counts.items()}
    for name, n in samples.items():
        if n:
            which = "" if opts.joint else f" ({name})"
            say(
                f"tokenizer{which}: {counts[name]:,} sentences; training on a random sample of {n:,} "
                "(--input-sentence-size sets the number)"
            )
    with built_aside(out, META_FILE) as tmp:
        if opts.joint:
            _train_one(_iter_lines([src, tgt]), tmp / "spm", opts, [src, tgt], samples["joint"])
            meta = {"joint": True, "src_model": "spm.model", "tgt_model": "spm.model"}
        else:
            _train_one(_iter_lines([src]), tmp / "src", opts, [src], samples["src"])
            _train_one(_iter_lines([tgt]), tmp / "tgt", opts, [tgt], samples["tgt"])
            meta = {"joint": False, "src_model": "src.model", "tgt_model": "tgt.model"}
        if opts.placeholders:
            meta["placeholders"] = all_pieces()
        for vocab in tmp.glob("*.vocab"):
            vocab.unlink()  # the .model file holds the vocabulary too
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return Tokenizer.load(out)


class Tokenizer:
    """A pair of sentencepiece processors (the same object twice when joint)."""

    def __init__(
        self,
        src: spm.SentencePieceProcessor,
        tgt: spm.SentencePieceProcessor,
        joint: bool,
        placeholders: list[str] | None = None,
        target_tokens: list[str] | None = None,
        target_token: str | None = None,
    ):
        self.src, self.tgt, self.joint = src, tgt, joint
        self.placeholders = placeholders or []  # the placeholder pieces both sides hold
        # a multilingual-target model (OPUS-MT's >>cmn_Hans<<): every source starts with the
        # piece of the language to write, one of target_tokens (source pieces)
        self.target_tokens, self.target_token = target_tokens or [], target_token
        if missing := [t for t in self.target_tokens if src.piece_to_id(t) == src.unk_id()]:
            raise UserError(f"source tokenizer has no piece {missing[0]} of its target_tokens")
        self._prefix = [src.piece_to_id(target_token)] if target_token else []
        self._samplers: dict[str, BpeDropout] = {}  # built on first use of BPE-dropout
        for side, sp in (("source", src), ("target", tgt)):
            ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            if ids != SPECIAL_IDS:
                raise UserError(f"{side} tokenizer has special ids {ids}, expected {SPECIAL_IDS}")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        directory = Path(directory)
        meta = read_meta(directory)
        src = _load_processor(directory / meta["src_model"])
        tgt = src if meta["joint"] else _load_processor(directory / meta["tgt_model"])
        return cls(
            src,
            tgt,
            meta["joint"],
            meta.get("placeholders"),
            meta.get("target_tokens"),
            meta.get("target_token"),
        )

    def for_target(self, asked: str) -> Tokenizer:
        """This tokenizer writing `asked` (cmn_Hant, or >>cmn_Hant<<) where the model writes
        several languages; unchanged where it writes one, or `asked` is its default's language."""
        piece = chosen_target_token(self.target_tokens, self.target_token, asked)
        if piece == self.target_token:
            return self
        other = copy.copy(self)
        other.target_token, other._prefix = piece, [self.src.piece_to_id(piece)]
        return other

    @staticmethod
    def model_files(directory: str | Path) -> list[str]:
        """The files that make up a tokenizer directory (to copy into a model directory)."""
        meta = read_meta(Path(directory))
        return sorted({META_FILE, meta["src_model"], meta["tgt_model"]})

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, text: str) -> list[int]:
        return self._prefix + self.src.encode(text)

    def source_tokens(self, text: str) -> int:
        """The tokens a line takes of a batch's budget and of the model's positions."""
        return len(self.encode_src(text))

    def encode_tgt(self, text: str) -> list[int]:
        return self.tgt.encode(text)

    def sample_src(self, texts: list[str], dropout: float, rng: random.Random) -> list[list[int]]:
        """Source ids with BPE-dropout (see BpeDropout)."""
        return self._dropout("src").encode(texts, dropout, rng)

    def sample_tgt(self, texts: list[str], dropout: float, rng: random.Random) -> list[list[int]]:
        return self._dropout("tgt").encode(texts, dropout, rng)

    def _dropout(self, side: str) -> BpeDropout:
        if side not in self._samplers:
            sp = self.src if side == "src" else self.tgt
            shared = self.joint and self._samplers
            self._samplers[side] = next(iter(self._samplers.values())) if shared else BpeDropout(sp)
        return self._samplers[side]

    def extends(self, other: Tokenizer) -> bool:
        """Whether this vocabulary is `other`'s with pieces appended (add_placeholders): each
        id of `other` means the same piece here."""
        pairs = [(self.src, other.src), (self.tgt, other.tgt)]
        return self.joint == other.joint and all(
            mine.get_piece_size() >= theirs.get_piece_size()
            and all(
                mine.id_to_piece(i) == theirs.id_to_piece(i) for i in range(theirs.get_piece_size())
            )
            for mine, theirs in pairs
        )

    def src_pieces(self, text: str) -> list[str]:
        """The pieces encode_src gives ids of (the target token first, where there is one)."""
        return [self.target_token] * bool(self._prefix) + self.src.encode(text, out_type=str)

    def decode_tgt(self, ids: list[int]) -> str:
        """Detokenize target ids; special ids are dropped by sentencepiece itself."""
        return self.tgt.decode([i for i in ids if i not in SPECIAL_IDS])

    def tgt_id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.tgt.id_to_piece(i) for i in ids]


def read_meta(directory: Path) -> dict:
    """tokenizer.json, checked: {"joint": bool, "src_model": file name, "tgt_model": file name}."""
    path = directory / META_FILE
    if not directory.is_dir():
        raise UserError(f"{directory}: no such tokenizer or model directory")
    if not path.is_file():
        raise UserError(f"{directory}: not a tokenizer directory (no {META_FILE})")
    meta = read_json(path)
    names_ok = isinstance(meta, dict) and all(
        isinstance(meta.get(k), str) and meta[k] and "/" not in meta[k] and meta[k] != ".."
        for k in ("src_model", "tgt_model")
    )
    if not names_ok or not isinstance(meta.get("joint"), bool):
        raise UserError(
            f'{path}: expected {{"joint": true|false, "src_model": FILE, "tgt_model": FILE}}'
        )
    placeholders = meta.get("placeholders", [])
    if not isinstance(placeholders, list) or not all(
        isinstance(p, str) and PIECE.fullmatch(p) for p in placeholders
    ):
        raise UserError(f'{path}: "placeholders" must be a list of pieces such as "｟url1｠"')
    tokens = meta.get("target_tokens", [])
    if not isinstance(tokens, list) or not all(
        isinstance(t, str) and TARGET_TOKEN.fullmatch(t) for t in tokens
    ):
        raise UserError(f'{path}: "target_tokens" must be a list of pieces such as ">>cmn_Hans<<"')
    if meta.get("target_token") is not None and meta["target_token"] not in tokens:
        raise UserError(f'{path}: "target_token" must be one of "target_tokens"')
    return meta


TARGET_TOKEN = re.compile(r">>[A-Za-z0-9_-]+<<")  # Marian's multilingual models' language tokens


def chosen_target_token(tokens: list[str], default: str | None, asked: str) -> str | None:
    """The language token --to `asked` names among a model's `tokens` (cmn_Hant or
    >>cmn_Hant<<); `default` for no --to, no tokens, or --to the default's own language; one
    line listing them for any other."""
    if not tokens or not asked:
        return default
    piece = asked if asked.startswith(">>") else f">>{asked}<<"
    if piece in tokens:
        return piece
    if default and asked == code_language(default):
        return default
    codes = ", ".join(t[2:-2] for t in tokens)
    raise UserError(f"--to {asked}: the model writes {codes} (its target tokens)")


def code_language(token: str) -> str:
    """The language a target token writes, as mtcli names it: >>cmn_Hans<< -> zh."""
    return two_letter(token[2:-2].split("_")[0])


def add_placeholders(directory: str | Path, out: str | Path, *, force: bool = False) -> Tokenizer:
    """A copy of a tokenizer directory whose vocabulary also holds the placeholder pieces,
    appended after its last id: every line without them splits exactly as before, and a model
    of the old tokenizer grows its embeddings for the new ids (training --init)."""
    directory, out = Path(directory), Path(out)
    meta = read_meta(directory)
    if meta.get("placeholders"):
        raise UserError(f"{directory}: its vocabulary holds the placeholder pieces already")
    check_replaceable(out, "tokenizer", "--out", force, reads=[directory])
    with built_aside(out, META_FILE) as tmp:
        for name in {meta["src_model"], meta["tgt_model"]}:
            model = (directory / name).read_bytes()
            (tmp / name).write_bytes(extended_model(model, all_pieces()))
        meta = {**meta, "placeholders": all_pieces()}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return Tokenizer.load(out)


class BpeDropout:
    """BPE-dropout (Provilkov et al. 2020) over a sentencepiece BPE model.

    BPE splits a word into characters and repeatedly merges the adjacent pair whose merged
    piece ranks highest (sentencepiece's score); BPE-dropout skips each candidate merge with
    probability p, so the same word is seen split in several ways during training. With p = 0
    this is exactly sentencepiece's own encoding (a test checks every Tatoeba line).

    It is written out here, not taken from sentencepiece's sampler, because that sampler draws
    from a generator it seeds by itself: the same seed gave other splits in another process,
    and a resumed run could not repeat the epoch it was killed in. Here the caller's seeded
    `random.Random` decides every drop.
    """

    def __init__(self, sp: spm.SentencePieceProcessor):
        self.sp = sp
        self.rank = {
            sp.id_to_piece(i): sp.get_score(i)
            for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))
        }

    def encode(self, texts: list[str], p: float, rng: random.Random) -> list[list[int]]:
        return [
            [
                self.sp.piece_to_id(piece)
                for word in self._words(t)
                for piece in ([word] if PIECE.fullmatch(word) else self._merge(word, p, rng))
            ]
            for t in texts
        ]

    def _words(self, text: str) -> list[str]:
        """The normalised text cut into words, each starting with ▁ (sentencepiece's own cut);
        a placeholder piece is a word of its own, never split (a user-defined piece)."""
        words: list[str] = []
        glued = False  # whether the next piece may join the last word
        for piece in self.sp.encode(text, out_type=str):
            atomic = PIECE.fullmatch(piece) is not None and piece in self.rank
            if piece.startswith("▁") or not glued or atomic:
                words.append(piece)
            else:
                words[-1] += piece
            glued = not atomic
        return words

    def _merge(self, word: str, p: float, rng: random.Random) -> list[str]:
        symbols = list(word)
        while len(symbols) > 1:
            best, at = None, -1
            for i in range(len(symbols) - 1):
                rank = self.rank.get(symbols[i] + symbols[i + 1])
                # a candidate that would win is dropped with probability p (one that cannot
                # win needs no draw: the best of the survivors is the same either way)
                if (
                    rank is not None
                    and (best is None or rank > best)
                    and not (p and rng.random() < p)
                ):
                    best, at = rank, i
            if at < 0:
                break
            symbols[at : at + 2] = [symbols[at] + symbols[at + 1]]
        # characters outside the vocabulary: a run of them is one <unk>, as in sentencepiece
        pieces: list[str] = []
        for s in symbols:
            if pieces and s not in self.rank and pieces[-1] not in self.rank:
                pieces[-1] += s
            else:
                pieces.append(s)
        return pieces


def _load_processor(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise UserError(f"{path}: tokenizer model file is missing")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path}: not a sentencepiece model ({e})") from None
    return sp


def piece_words(pieces: list[str], by_space: bool) -> list[int]:
    """Word index of each piece: '▁' starts a word; without spaces every piece is a word."""
    index, out = -1, []
    for i, piece in enumerate(pieces):
        if not by_space or piece.startswith("▁") or i == 0:
            index += 1
        out.append(index)
    return out


def word_count(pieces: list[str], by_space: bool) -> int:
    """How many words `pieces` hold, as piece_words counts them."""
    return piece_words(pieces, by_space)[-1] + 1 if pieces else 0
