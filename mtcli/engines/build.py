"""The one place a translator is made, for every command, the server and validation.

`build_translator(models, cfg, options)` takes model directories (several: an ensemble), models
already loaded (validation's, the server's), or [None] (each line to the installed model for its
language), the engine, the decode settings, int8, alignments, tracing and a glossary, and returns
an object with `translate_chunk(lines, prefixes)`. What an engine cannot do is refused here, in
one line, before anything loads. Also here: which installed model a command uses, and setting up
the process to decode (torch's threads, the allocator, oneDNN's caches).

Imports no torch at module level: the CTranslate2 engine never needs it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mtcli.config import UNK_ID, DecodeConfig
from mtcli.engines.calibration import Calibration
from mtcli.engines.loading import ready_to_decode
from mtcli.engines.restore import SpanRestorer
from mtcli.engines.routing import ChunkTranslator, Router
from mtcli.errors import UserError
from mtcli.store import registry
from mtcli.text.glossary import Glossary, target_phrases
from mtcli.text.language import majority_language, source_language
from mtcli.text.language_check import LanguageCheck
from mtcli.text.layer import TextLayer
from mtcli.text.markup_layer import MarkupLayer

if TYPE_CHECKING:
    import torch


def _quiet(message: str) -> None:
    pass


@dataclass
class EngineOptions:
    """How to translate, beyond the models and the decode settings (defaults: mtcli's engine)."""

    # "mtcli", or "ctranslate2": a model exported with `mtcli export --format ctranslate2`
    engine: str = "mtcli"
    device: str | torch.device = "auto"  # auto | cpu | cuda; loaded models: the one they are on
    threads: int = 0  # CPU threads (0 = all available)
    # int8: dynamic quantization of the Linear layers; none: fp32; "": what each model's
    # config.json recommends (generation.quantize), fp32 where it recommends nothing
    quantize: str = ""
    align: bool = False  # word alignments (and attention maps) from cross-attention
    trace: bool = False  # record every step of the search
    glossary: Glossary | None = None  # terms each translation must contain
    warn: Callable[[str], None] = _quiet  # one-line warnings (truncation, pass-through)
    # real text around the model (text/layer.py): sentences, kept spans, casing; off where the
    # model's own view of the exact input is wanted (attention maps, validation)
    text_layer: bool = True
    html: bool = False  # each line an HTML document: tags kept around the aligned words
    # a calibrated confidence for each line (engines/confidence.py): the search's own scores
    # and a forced pass of the reverse model (`mtcli translate` has it on by default); asked:
    # by the user, so a model that has none says so
    confidence: bool = False
    confidence_asked: bool = True
    # --to: the language a multilingual-target model writes (its >>cmn_Hant<< token); "" or the
    # model's own target language: its default
    target_language: str = ""
    # --to without --from: a line surely in target_language already passes through as it is
    # (no model translates zh->zh; the model for --to would read it as its own source)
    pass_target: bool = False


def build_translator(
    models: list, cfg: DecodeConfig, options: EngineOptions | None = None
) -> ChunkTranslator:
    """A translator for `models` (see the module's docstring) under `cfg`."""
    options = options or EngineOptions()
    if options.engine == "ctranslate2":
        return _target_passes(_ct2_translator(models, cfg, options), options)
    device = options.device
    if any(m is None or isinstance(m, Path) for m in models):  # loaded here, on a device set up now
        check_models_early(models)
        device = prepare_decoding(options.device, options.threads)
    if models[0] is None:
        return _router(cfg, options, device)
    return _target_passes(_own_translator(models, cfg, options, device, chosen=True), options)


def _target_passes(translator: ChunkTranslator, options: EngineOptions) -> ChunkTranslator:
    """`translator`, but where options.pass_target asks, a line surely in the target language
    already passes through unchanged (said once) rather than going through a model from
    another language."""
    target = options.target_language
    if not (options.pass_target and target):
        return translator

    def language_of(line: str) -> str | None:
        return "target" if source_language(line) == target else "other"

    return Router(
        language_of,
        lambda key: None if key == "target" else translator,
        chunk_lines=1 << 30,  # the chunks are the caller's
        warn=options.warn,
        passes=lambda key: (
            f"a line already in {target} (the language --to asks for) passes through unchanged"
        ),
    )


def _language_check(model, src_lang: str, options: EngineOptions) -> LanguageCheck:
    """The check that flags lines in another language than a chosen model's source."""
    name = Path(model if isinstance(model, Path) else getattr(model, "path", "the model")).name
    return LanguageCheck(src_lang, name, options.warn, _remedy)


def _remedy(language: str) -> str:
    """What a user can do about a line in `language`."""
    if registry.for_direction(language, None) is not None:
        return f"--from {language} picks a model for it"
    return f"no installed model translates from {language}"


def _router(cfg: DecodeConfig, options: EngineOptions, device: torch.device) -> Router:
    """Each line to the installed model for its language, loaded when a line first needs it."""

    def for_language(language: str):
        choice = registry.choose(language, None)
        if choice.model is None:
            return None
        if note := choice.note():
            options.warn(note)
        return _own_translator([choice.model.path], cfg, options, device)

    return Router(source_language, for_language, cfg.chunk_lines, options.warn)


def _own_translator(
    models: list, cfg: DecodeConfig, options: EngineOptions, device, chosen: bool = False
):
    """mtcli's Translator over one model or an ensemble (loaded here when given as paths);
    `chosen`: by the user, not by each line's language (its lines' languages are checked)."""
    from mtcli.engines.translator import Translator, quantize_int8
    from mtcli.store.checkpoint import load_ensemble
    from mtcli.store.model_dir import generation_defaults

    loaded_here = isinstance(models[0], Path)  # for this translator alone: nothing else reads them
    if loaded_here:
        loaded = [ready_to_decode(m, options.quantize) for m in load_ensemble(models, device)]
        nets = [m.model for m in loaded]
    else:  # loaded by a caller, who made them ready to decode (a server does, once)
        loaded = list(models)
        nets = [quantize_int8(m.model) if options.quantize == "int8" else m.model for m in loaded]
    tokenizer, first = loaded[0].tokenizer.for_target(options.target_language), loaded[0]
    cfg = cfg.with_generation(generation_defaults(first.config))  # an ensemble: the first's
    confidence = _confidence(first, device, options) if options.text_layer else None
    translator = Translator(
        nets,
        tokenizer,
        cfg,
        device=device,
        warn=options.warn,
        align=options.align or options.html,
        trace=options.trace,
        constraints=_constraints(options.glossary, first),
        reading=options.text_layer,  # the confidence and SpanRestorer read it
        rerank=_reranker(loaded, cfg, device, options.quantize),
    )
    if not options.text_layer:
        return translator
    to_phrases = functools.partial(target_phrases, tokenizer, first.tgt_lang)
    layer = TextLayer(
        translator,
        src_lang=first.src_lang,
        tgt_lang=first.tgt_lang,
        can_write=lambda s: writes_exactly(tokenizer, s),
        count_tokens=tokenizer.source_tokens,
        max_tokens=translator.truncate.limit,
        to_phrases=to_phrases,
        warn=options.warn,
        language_check=_language_check(models[0], first.src_lang, options) if chosen else None,
        placeholders=[p for p in first.placeholders if all(p in m.placeholders for m in loaded)],
        confidence=confidence,
        restore=_restorer(translator, tokenizer, to_phrases),
    )
    return MarkupLayer(layer) if options.html else layer


def _restorer(translator, tokenizer, to_phrases) -> SpanRestorer | None:
    """What puts a lost span back where the search's attention places it: where the search
    kept its reading, and no word alignment or attention map is asked for (those describe
    the search's own output, which a restored span changes). Otherwise (an ensemble, a draw,
    --align, --html), and where it cannot place a span, the sentence is decoded again under
    constraints."""
    if not translator.reading or translator.align:
        return None
    return SpanRestorer(tokenizer, to_phrases)


def _reranker(loaded: list, cfg: DecodeConfig, device, quantize: str):
    """The noisy-channel reranker of one model (engines/rerank.py), where asked (--no-rerank:
    not), the model has fitted weights and the model the other way is installed; None else
    (an ensemble: its members' candidates are one search's)."""
    if not cfg.rerank or len(loaded) != 1:
        return None
    from mtcli.engines.confidence import reverse_for
    from mtcli.engines.rerank import Reranker, RerankWeights

    weights = RerankWeights.load(Path(loaded[0].path))
    reverse = reverse_for(loaded[0], device, quantize) if weights is not None else None
    return Reranker(weights, reverse, device) if reverse is not None else None


def confidence_column(paths: list, options: EngineOptions) -> bool:
    """Whether a run over `paths` ([None]: each line's installed model) may give its lines a
    confidence: it is wanted, and a model the run may use has fitted weights. Known before the
    first line, so a tsv output has the column on every line (empty where a line has none)."""
    if not options.confidence or options.engine != "mtcli":
        return False
    dirs = [paths[0]] if paths[0] is not None else [m.path for m in registry.installed()]
    return any(Calibration.load(Path(d)) is not None for d in dirs)


def _confidence(loaded, device, options: EngineOptions):
    """The confidence estimator of a model, where wanted; a model without fitted weights or
    without a reverse model installed translates without (saying so once where it was asked)."""
    if not options.confidence:
        return None
    from mtcli.engines.confidence import estimator_for

    estimator = estimator_for(loaded, device, options.quantize)
    if estimator is None and options.confidence_asked:
        options.warn(
            f"{Path(loaded.path).name}: no confidence (it needs fitted weights, confidence.json, "
            f"and an installed {loaded.tgt_lang or '?'}->{loaded.src_lang or '?'} model)"
        )
    return estimator


def writes_exactly(tokenizer, text: str) -> bool:
    """Whether the target vocabulary writes `text` back exactly (no piece unknown to it)."""
    ids = tokenizer.encode_tgt(text)
    return UNK_ID not in ids and tokenizer.decode_tgt(ids) == text


def _constraints(glossary: Glossary | None, loaded) -> Callable[[str], list[list[int]]] | None:
    """A line -> the token-id phrases of the glossary terms its translation must contain."""
    if glossary is None:
        return None
    tokenizer, tgt_lang = loaded.tokenizer, loaded.tgt_lang
    return lambda line: target_phrases(tokenizer, tgt_lang, glossary.targets_for(line))


CT2_CANNOT = {  # what CTranslate2's engine cannot do, as the user asked for it
    "--glossary": lambda models, o: o.glossary is not None,
    "--trace": lambda models, o: o.trace,
    "--align": lambda models, o: o.align,
    "--html (it gives no word alignments)": lambda models, o: o.html,
    "an ensemble (-m twice)": lambda models, o: len(models) > 1,
    "--confidence (it gives no forced scores)": lambda models, o: o.confidence,
}


def ct2_cannot(models: list, options: EngineOptions) -> list[str]:
    """What of `options` CTranslate2's engine cannot do, as the user asked for it."""
    return [name for name, asked in CT2_CANNOT.items() if asked(models, options)]


def _ct2_translator(models: list, cfg: DecodeConfig, options: EngineOptions) -> ChunkTranslator:
    """CTranslate2's translator for one exported model; what it cannot do is one line."""
    from mtcli.engines.ct2 import CT2Translator

    if wanted := ct2_cannot(models, options):
        raise UserError(f"--engine ctranslate2 cannot do {', '.join(wanted)}")
    if models[0] is None:
        raise UserError(
            "--engine ctranslate2 needs -m DIR (a model exported with `mtcli export --format ctranslate2`)"
        )
    if isinstance(models[0], CT2Translator):  # loaded already (a server's): other settings
        translator = models[0].configured(cfg, options.warn)
    else:
        translator = CT2Translator(
            Path(models[0]),
            cfg,
            threads=options.threads,
            quantize=options.quantize,
            device=str(options.device),
            warn=options.warn,
        )
    translator = translator.for_target(options.target_language)
    if not options.text_layer:
        return translator
    # no constrained search here: spans go through as they are, and the layer names any lost
    return TextLayer(
        translator,
        src_lang=translator.src_lang,
        tgt_lang=translator.tgt_lang,
        can_write=lambda s: True,
        count_tokens=translator.source_tokens,
        max_tokens=translator.max_src_tokens,
        warn=options.warn,
        language_check=_language_check(models[0], translator.src_lang, options),
    )


# ---------------------------------------------------------------- which model
def chosen_model(
    model: str | None, src: str | None = None, tgt: str | None = None, warn=_quiet
) -> Path | None:
    """The one model a command uses: -m NAME|DIR, else $MTCLI_MODEL, else the installed model
    for --from/--to (`warn` names it when a user's model could have served too). None when
    nothing names one: then the language of each line decides."""
    if model:
        return _best_of_run(registry.find(model, "-m"), "-m", warn)
    if env := os.environ.get("MTCLI_MODEL"):
        return _best_of_run(registry.find(env, "$MTCLI_MODEL"), "$MTCLI_MODEL", warn)
    if src or tgt:
        choice = registry.choose(src, tgt)
        if choice.model is None:
            wanted = f"{src or '*'}->{tgt or '*'}"
            raise UserError(f"no installed model translates {wanted} (`mtcli models` lists them)")
        if note := choice.note():
            warn(note)
        return choice.model.path
    return None


def _best_of_run(path: Path, option: str, warn) -> Path:
    """`path`, or its best checkpoint where it is a training run's folder (said on stderr)."""
    from mtcli.store.model_dir import best_in_run

    if (best := best_in_run(path)) is None:
        return path
    what = "the model it ended with" if best.name == "model" else "its best validation checkpoint"
    warn(f"{option} {path} is a training run: using {best}, {what}")
    return best


def model_for_text(model: str | None, lines: list[str], warn=_quiet) -> Path:
    """chosen_model, else the installed model for the language most of `lines` are in."""
    if (path := chosen_model(model, warn=warn)) is not None:
        return path
    language = majority_language(map(source_language, lines))[0] or "en"
    info = registry.for_direction(language, None)  # the shipped route first, as translate's
    if info is None:
        raise UserError(
            f"no installed model translates from {language} (`mtcli models` lists them)"
        )
    return info.path


# ---------------------------------------------------------------- the process
def check_models_early(paths: list) -> None:
    """Each model directory's files, checked before torch is imported (see mtcli.store.model_dir):
    a damaged one is one line at once rather than after torch's second of start-up. Loading
    checks them again, with the tensor shapes; None (a model chosen per line) is skipped."""
    from mtcli.store.model_dir import check_model_files

    for path in paths:
        if isinstance(path, Path):
            check_model_files(path)


def prepare_decoding(device: str, threads: int) -> torch.device:
    """The torch device to decode on; on CPU, torch gets `threads` (0 = all available cores)
    and freed memory is kept for the next step's tensors (see mtcli.device)."""
    from mtcli.device import (
        import_torch,
        keep_freed_memory,
        limit_kernel_caches,
        pick_device,
        use_cores,
    )

    limit_kernel_caches()  # before torch: oneDNN reads it when it first runs
    import_torch()
    chosen = pick_device(device)
    if chosen.type == "cpu":
        use_cores(threads)
        keep_freed_memory()
    return chosen
