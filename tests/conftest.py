"""Shared fixtures: tiny corpora, tokenizers and models built in temporary folders."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mtcli.config import ModelConfig, TrainConfig
from mtcli.data.tokenizer import Tokenizer, TokenizerOptions, train_tokenizer
from mtcli.model.transformer import Seq2Seq

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
TATOEBA = SHARED / "tatoeba-en-zh"

# tiny models gain nothing from threads, and a second thread fights a parallel job for the cores
torch.set_num_threads(1)

EN_LINES = [
    "Why do we work?",
    "I love you.",
    "The cat sleeps on the mat.",
    "Where is the station?",
    "He reads a book every night.",
    "We are students.",
    "It is raining today.",
    "Open the door, please.",
] * 4
ZH_LINES = [
    "我们为什么工作？",
    "我爱你。",
    "猫在垫子上睡觉。",
    "车站在哪里？",
    "他每天晚上读一本书。",
    "我们是学生。",
    "今天下雨。",
    "请开门。",
] * 4


def pytest_ignore_collect(collection_path, config):
    """`make test` (-m 'not e2e') does not even import tests/e2e: its modules import the
    heavy extras (transformers alone takes a second) only for tests it would deselect."""
    markers = config.getoption("markexpr", "") or ""
    if collection_path.name == "e2e" and markers.replace(" ", "") == "note2e":
        return True
    return None


@pytest.fixture(scope="session")
def langid_cache(tmp_path_factory) -> list[Path]:
    """The language identifier's cached model, made once for the session (1 s each time)."""
    import os

    from mtcli.text import language

    folder = tmp_path_factory.mktemp("langid")
    old = os.environ.get("MTCLI_CACHE")
    os.environ["MTCLI_CACHE"] = str(folder)
    try:
        for languages in (language.LATIN_LANGUAGES, language.CYRILLIC_LANGUAGES):
            language._restricted_model(languages)
    finally:
        if old is None:
            os.environ.pop("MTCLI_CACHE")
        else:
            os.environ["MTCLI_CACHE"] = old
    return sorted(folder.glob("langid-*.npz"))


@pytest.fixture(autouse=True)
def download_cache(tmp_path, monkeypatch, langid_cache) -> Path:
    """Downloads go to a folder of the test's own, never to the user's ~/.cache (the language
    identifier's model, made once, is linked in)."""
    cache = tmp_path.parent / f"{tmp_path.name}-cache"  # beside: tests use tmp_path as an --out
    cache.mkdir()
    for made in langid_cache:
        os.link(made, cache / made.name)
    monkeypatch.setenv("MTCLI_CACHE", str(cache))
    return cache


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_mtcli(
    *args: str,
    input: str | bytes | None = None,
    timeout: float = 300,
    env: dict | None = None,
    binary: bool = False,
):
    """Run the real `mtcli` entry point in a subprocess (text, or bytes with `binary`)."""
    return subprocess.run(
        [sys.executable, "-m", "mtcli", *args],
        input=input,
        capture_output=True,
        text=not binary,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


@pytest.fixture(scope="session")
def training_forks():
    """`mtcli train` processes forked from a parent that imported torch once (tests/forked.py)."""
    from tests.forked import TRAINING, ForkServer

    server = ForkServer(TRAINING)
    yield server
    server.close()


@pytest.fixture
def enzh_files(tmp_path) -> tuple[Path, Path]:
    return write_lines(tmp_path / "train.en", EN_LINES), write_lines(
        tmp_path / "train.zh", ZH_LINES
    )


@pytest.fixture
def enzh_tokenizer(tmp_path, enzh_files) -> Path:
    src, tgt = enzh_files
    train_tokenizer(
        src, tgt, tmp_path / "tok", TokenizerOptions(vocab_size=120, character_coverage=1.0)
    )
    return tmp_path / "tok"


def tiny_config(vocab: int = 24, **overrides) -> ModelConfig:
    base = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=4,
        n_enc_layers=2,
        n_dec_layers=2,
        d_ff=64,
        dropout=0.0,
        max_positions=64,
    )
    return ModelConfig(**{**base, **overrides})


@pytest.fixture
def tiny_model() -> Seq2Seq:
    torch.manual_seed(0)
    return Seq2Seq(tiny_config()).eval()


# ---------------------------------------------------------------- a copy-task model, trained once
LETTERS = "abcdefghij"


def copy_sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 6))) for _ in range(n)]


def copy_train_config(tmp: Path, tok_dir: Path, **overrides) -> TrainConfig:
    lines = copy_sentences(32, seed=7)
    src = write_lines(tmp / "copy.src", lines)
    tgt = write_lines(tmp / "copy.tgt", lines)
    base = dict(
        src=str(src),
        tgt=str(tgt),
        valid_src=str(src),
        valid_tgt=str(tgt),
        tokenizer=str(tok_dir),
        out=str(tmp / "run"),
        max_tokens=2048,
        max_len=32,  # within the tiny model's 64 positions
        max_steps=300,
        lr_factor=0.15,
        warmup=30,
        label_smoothing=0.0,
        valid_every=100,
        valid_bleu_lines=32,
        log_every=1,
        threads=1,  # runs compared loss for loss: float sums depend on the thread count
        tgt_lang="en",
        model=tiny_config(vocab=0, d_model=64, d_ff=128),
    )
    return TrainConfig(**{**base, **overrides})


def copy_tokenizer(tmp: Path) -> Path:
    lines = write_lines(tmp / "letters.txt", copy_sentences(200, seed=1))
    train_tokenizer(
        lines, lines, tmp / "tok", TokenizerOptions(vocab_size=40, character_coverage=1.0)
    )
    return tmp / "tok"


@pytest.fixture(scope="session")
def copy_model_dir(tmp_path_factory) -> Path:
    """A tiny model trained to copy its 32 training sentences (the training smoke test's model):
    200 steps (its validation BLEU is 100 from step 100 on), validated every 50: four step
    checkpoints, of which --keep 3 keeps the last three."""
    from mtcli.training.loop import train

    tmp = tmp_path_factory.mktemp("copy")
    torch.manual_seed(0)
    cfg = copy_train_config(tmp, copy_tokenizer(tmp), max_steps=200, valid_every=50)
    train(cfg)
    return tmp / "run" / "best"


@pytest.fixture(scope="session")
def copy_lines() -> list[str]:
    return copy_sentences(32, seed=7)


def tokenizer_of(path: Path) -> Tokenizer:
    return Tokenizer.load(path)


def free_port() -> int:
    """A TCP port on localhost no process listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(client, tries: int = 200, pause: float = 0.05) -> bool:
    """Whether a server's /health answers 200 within `tries` polls (its models load in the
    background, slower beside other tests)."""
    for _ in range(tries):
        if client.get("/health").status_code == 200:
            return True
        time.sleep(pause)
    return False


def reference_translations(model_dir: Path, lines: list[str], **decode) -> list[str]:
    """What mtcli's Translator gives on the model directory under these settings, built here
    without the CLI, the server or a model's generation defaults: the truth they are held to."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.translator import Translator
    from mtcli.store.checkpoint import load_model

    loaded = load_model(model_dir)
    translator = Translator(loaded.model, loaded.tokenizer, DecodeConfig(**decode))
    return [t.text for t in translator.translate_chunk(lines)]
