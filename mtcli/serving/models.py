"""The models a server holds: loaded once, in the background (so /health can say when), each
with its direction, how to make a translator of it for given settings (through
engines.build_translator), and how to count a line's tokens for the batch budget.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mtcli.config import DecodeConfig
from mtcli.data.language_codes import LANGUAGE_NAMES
from mtcli.engines.build import EngineOptions, build_translator, ct2_cannot
from mtcli.engines.loading import ready_to_decode
from mtcli.engines.result import Translation
from mtcli.serving.requests import ApiError
from mtcli.text.language import source_language

KEPT_TRANSLATORS = 4  # (model, settings) pairs whose translators are kept for the next batch


@dataclass(frozen=True)
class Wanted:
    """What a request asks of a translator beyond its decode settings."""

    align: bool = False  # word alignments (and attention maps)
    html: bool = False  # each line an HTML document: tags kept (text/markup_layer.py)
    confidence: bool = False  # a calibrated confidence per line (engines/confidence.py)

    def options(self, **engine) -> EngineOptions:
        """The engine's options for this, on `engine`'s (engine, device, threads)."""
        return EngineOptions(**engine, align=self.align, html=self.html, confidence=self.confidence)


@dataclass(frozen=True)
class TranslatorKey:
    """The translator a batch job needs: a served model, decode settings, what is wanted of
    it. Jobs of one key can share a batch; hashable, so the server keeps a few translators."""

    name: str
    settings: tuple  # DecodeConfig's fields as (name, value) pairs
    wanted: Wanted

    @classmethod
    def of(cls, name: str, decode: DecodeConfig, wanted: Wanted) -> TranslatorKey:
        return cls(name, tuple(asdict(decode).items()), wanted)

    def decode(self) -> DecodeConfig:
        return DecodeConfig(**dict(self.settings))


@dataclass
class Served:
    """One loaded model, the direction it translates, and how to make a translator of it
    for given settings (mtcli's Translator, or CTranslate2's for an exported model)."""

    name: str
    src_lang: str
    tgt_lang: str
    make_translator: Callable[[DecodeConfig, Wanted], object]
    count_tokens: Callable[[str], int]  # source tokens of a line, for the batch budget
    path: Path | None = None  # the model's directory, where mtcli's engine runs it (/explain)


class Models:
    """The models of this server, loaded once, in the background (so /health can say when)."""

    def __init__(self, load: Callable[[], list[Served]]):
        self.served, self.error = [], None
        self.ready = threading.Event()
        # translators for the latest few (model, settings) pairs: settings travel with each
        # request, and a translator over a loaded model is cheap to make, so memory does not
        # grow with the settings clients send (it grew by one translator per setting before)
        self._translators: collections.OrderedDict[tuple, object] = collections.OrderedDict()
        threading.Thread(target=self._load, args=(load,), daemon=True).start()

    def _load(self, load) -> None:
        try:
            self.served = load()
        except Exception as e:  # reported by /health and every request
            self.error = str(e)
        self.ready.set()

    def check_ready(self) -> None:
        if self.error:
            raise ApiError(500, f"models failed to load: {self.error}")
        if not self.ready.is_set():
            raise ApiError(503, "models are still loading", {"Retry-After": "1"})

    def languages(self) -> list[dict]:
        """LibreTranslate's /languages: each source language and the targets it reaches."""
        targets: dict[str, set[str]] = {}  # a set: two models of one pair (a student) list it once
        for s in self.served:
            targets.setdefault(s.src_lang, set()).add(s.tgt_lang)
        return [
            {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": sorted(to)}
            for code, to in sorted(targets.items())
        ]

    def for_pair(self, source: str, target: str | None) -> Served:
        if (served := self.find_pair(source, target)) is not None:
            return served
        pairs = ", ".join(f"{s.src_lang}->{s.tgt_lang}" for s in self.served)
        raise ApiError(400, f"no model translates {source}->{target or '*'} (served: {pairs})")

    def find_pair(self, source: str, target: str | None) -> Served | None:
        for s in self.served:
            if s.src_lang == source and (target is None or s.tgt_lang == target):
                return s
        return None

    def by_name(self, name: str) -> Served:
        for s in self.served:
            if s.name == name:
                return s
        raise ApiError(
            400, f"no model named {name!r} (served: {', '.join(s.name for s in self.served)})"
        )

    def translate(self, key: TranslatorKey, lines: list[str]) -> list[Translation]:
        """Decode `lines` with the translator `key` names (called by the batch worker)."""
        if key not in self._translators:
            make = self.by_name(key.name).make_translator
            self._translators[key] = make(key.decode(), key.wanted)
            while len(self._translators) > KEPT_TRANSLATORS:
                self._translators.popitem(last=False)
        self._translators.move_to_end(key)
        return self._translators[key].translate_chunk(lines)

    def picker(self, source: str, target: str | None, model: str | None = None):
        """How each line finds its model: by name, by the pair, or by its language (auto: a
        line already in the target language, or in one no served model translates, passes
        through as it was)."""
        if model:
            served = self.by_name(model)
            return lambda line: served
        if source != "auto":
            served = self.for_pair(source, target)
            return lambda line: served

        def by_language(line: str):
            language = source_language(line)
            if language is None or language == target:
                return None
            return self.find_pair(language, target)

        return by_language


def mtcli_served(name: str, loaded, device) -> Served:
    """A model of mtcli's own, decoded by its Translator."""

    def make(cfg: DecodeConfig, wanted: Wanted):
        return build_translator([loaded], cfg, wanted.options(device=device))

    return Served(
        name,
        loaded.src_lang,
        loaded.tgt_lang,
        make,
        loaded.tokenizer.source_tokens,
        loaded.path,
    )


def ct2_served(path: Path, threads: int, device: str = "auto") -> Served:
    """A CTranslate2 export, loaded once and decoded by CTranslate2 under each request's
    settings (no alignments or attention there)."""
    options = EngineOptions(engine="ctranslate2", threads=threads, device=device)
    loaded = build_translator([path], DecodeConfig(), replace(options, text_layer=False))

    def make(cfg: DecodeConfig, wanted: Wanted):
        # no confidence here: CTranslate2 gives no forced scores (its replies have none)
        asked = replace(wanted, confidence=False).options(engine="ctranslate2")
        if cannot := ct2_cannot([loaded], asked):
            raise ApiError(400, f"the CTranslate2 engine cannot do {', '.join(cannot)}")
        return build_translator([loaded], cfg, options)

    return Served(path.name, loaded.src_lang, loaded.tgt_lang, make, loaded.source_tokens)


def loader(
    paths: list[Path], engine: str, device: str, threads: int, ready: Callable[[str], None]
) -> Callable[[], list[Served]]:
    """Checks the model directories now (one line for a bad one, before torch) and returns
    what loads them, in the background of a starting server; `ready` hears when it is done."""
    if engine == "ctranslate2":
        from mtcli.engines.ct2 import check_ct2_dir, ct2_device

        for path in paths:
            check_ct2_dir(path)
        ct2_device(device)  # --device cuda without a GPU: one line before the server starts
    else:
        from mtcli.engines.build import check_models_early, prepare_decoding

        check_models_early(paths)
        torch_device = prepare_decoding(device, threads)

    def load() -> list[Served]:
        if engine == "ctranslate2":
            served = [ct2_served(path, threads, device) for path in paths]
        else:
            from mtcli.store.checkpoint import load_model

            served = [
                mtcli_served(p.name, ready_to_decode(load_model(p, torch_device)), torch_device)
                for p in paths
            ]
        ready(f"ready: {', '.join(f'{s.name} ({s.src_lang}->{s.tgt_lang})' for s in served)}")
        return served

    return load
