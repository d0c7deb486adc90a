"""Sentencepiece BPE: train, load, encode, decode. Knows nothing about tensors.

A tokenizer directory holds `tokenizer.json` (joint or separate, file names) and either one
`spm.model` shared by both sides (joint) or `src.model` and `tgt.model` (separate).
The special ids are fixed here, once, and every other module imports them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from mtcli.errors import UserError
from mtcli.files import replace_dir, temp_dir_beside

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
META_FILE = "tokenizer.json"


@dataclass
class TokenizerOptions:
    """Sentencepiece training options exposed on the command line."""

    vocab_size: int = 8000
    joint: bool = True  # one model for both sides: lets source and target share embeddings
    character_coverage: float = 0.9995  # below 1.0 so rare CJK characters map to <unk>
    input_sentence_size: int = 0  # sample this many sentences from big corpora; 0 = all
    seed: int = 1


def _iter_lines(paths: Iterable[str | Path]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line:
                    yield line


def _train_one(lines: Iterator[str], prefix: Path, opts: TokenizerOptions) -> None:
    """Train one BPE model to `prefix.model` with the fixed special ids."""
    kwargs = dict(
        sentence_iterator=lines,
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
        num_threads=os.cpu_count() or 1,
    )
    if opts.input_sentence_size:
        kwargs.update(input_sentence_size=opts.input_sentence_size, shuffle_input_sentence=True)
    spm.set_random_generator_seed(opts.seed)  # input sampling is the only randomness
    try:
        spm.SentencePieceTrainer.train(**kwargs)
    except RuntimeError as e:
        raise UserError(f"sentencepiece training failed: {e}") from None


def train_tokenizer(
    src: str | Path, tgt: str | Path, out: str | Path, opts: TokenizerOptions
) -> Tokenizer:
    """Train BPE on the training text and write a tokenizer directory to `out` atomically."""
    for path in (src, tgt):
        if not Path(path).is_file():
            raise UserError(f"{path}: no such file")
    out = Path(out)
    tmp = temp_dir_beside(out)
    if opts.joint:
        _train_one(_iter_lines([src, tgt]), tmp / "spm", opts)
        meta = {"joint": True, "src_model": "spm.model", "tgt_model": "spm.model"}
    else:
        _train_one(_iter_lines([src]), tmp / "src", opts)
        _train_one(_iter_lines([tgt]), tmp / "tgt", opts)
        meta = {"joint": False, "src_model": "src.model", "tgt_model": "tgt.model"}
    for vocab in tmp.glob("*.vocab"):
        vocab.unlink()  # the .model file holds the vocabulary too
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    replace_dir(tmp, out)
    return Tokenizer.load(out)


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Tokenizer:
    """A pair of sentencepiece processors (the same object twice when joint)."""

    def __init__(
        self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor, joint: bool
    ):
        self.src, self.tgt, self.joint = src, tgt, joint
        for side, sp in (("source", src), ("target", tgt)):
            ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            if ids != SPECIAL_IDS:
                raise UserError(f"{side} tokenizer has special ids {ids}, expected {SPECIAL_IDS}")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        directory = Path(directory)
        meta_path = directory / META_FILE
        if not meta_path.is_file():
            raise UserError(f"{directory}: not a tokenizer directory (no {META_FILE})")
        meta = json.loads(meta_path.read_text())
        src = _load_processor(directory / meta["src_model"])
        tgt = src if meta["joint"] else _load_processor(directory / meta["tgt_model"])
        return cls(src, tgt, meta["joint"])

    @staticmethod
    def model_files(directory: str | Path) -> list[str]:
        """The files that make up a tokenizer directory (to copy into a model directory)."""
        meta = json.loads((Path(directory) / META_FILE).read_text())
        return sorted({META_FILE, meta["src_model"], meta["tgt_model"]})

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, text: str) -> list[int]:
        return self.src.encode(text)

    def encode_tgt(self, text: str) -> list[int]:
        return self.tgt.encode(text)

    def sample_src(self, texts: list[str], dropout: float) -> list[list[int]]:
        """BPE-dropout (Provilkov et al. 2020): each merge is skipped with probability `dropout`,
        so one word is seen split in several ways. Seeded by `seed_sampling`."""
        return _sample(self.src, texts, dropout)

    def sample_tgt(self, texts: list[str], dropout: float) -> list[list[int]]:
        return _sample(self.tgt, texts, dropout)

    def src_pieces(self, text: str) -> list[str]:
        return self.src.encode(text, out_type=str)

    def decode_tgt(self, ids: list[int]) -> str:
        """Detokenize target ids; special ids are dropped by sentencepiece itself."""
        return self.tgt.decode([i for i in ids if i not in SPECIAL_IDS])

    def tgt_id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.tgt.id_to_piece(i) for i in ids]


def seed_sampling(seed: int) -> None:
    """Seed sentencepiece's sampler (one process-wide generator), so BPE-dropout repeats exactly."""
    spm.set_random_generator_seed(seed)


def _sample(sp: spm.SentencePieceProcessor, texts: list[str], dropout: float) -> list[list[int]]:
    # one thread: the sampler's generator is shared, and threads would take from it in any order
    return sp.encode(texts, enable_sampling=True, alpha=dropout, nbest_size=-1, num_threads=1)


def _load_processor(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise UserError(f"{path}: tokenizer model file is missing")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path}: not a sentencepiece model ({e})") from None
    return sp
