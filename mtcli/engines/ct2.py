"""Translate with a model exported to CTranslate2 (store/ct2_export.py): `mtcli translate --engine
ctranslate2`. Imports ctranslate2 and sentencepiece, never torch.

It gives the same lines-in, lines-out behaviour as mtcli's Translator (source pieces + </s>,
truncated to the model's positions; one result per line, in order; each line's own output
limit; never <pad> or <s>; special pieces dropped from the text) and honours what
CTranslate2 can do: beam size, n-best, length penalty (CTranslate2's n ** alpha, not GNMT's),
a prefix, sampling with its seed, --no-repeat-ngram, int8, and token-budgeted batches.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from mtcli.config import DecodeConfig
from mtcli.data.textio import read_json_object
from mtcli.data.tokenizer import chosen_target_token
from mtcli.device import available_cpus
from mtcli.engines.result import Translation
from mtcli.engines.routing import Truncator
from mtcli.errors import UserError
from mtcli.store.model_dir import generation_defaults, quantization

MARKER = "mtcli.json"


def check_ct2_dir(path: Path) -> dict:
    """What mtcli wrote beside a CTranslate2 model (languages, positions, how its source is
    fed); a directory that is not one is one line, for every caller (translate, eval, serve)."""
    if not ((path / MARKER).is_file() and (path / "model.bin").is_file()):
        raise UserError(
            f"{path}: not a CTranslate2 model of mtcli's (make one with `mtcli export --format "
            "ctranslate2`, or bring one with `mtcli import ctranslate2` or `mtcli import argos`)"
        )
    return read_json_object(path / MARKER)


@dataclass(frozen=True)
class Feeding:
    """How a model's pieces go in and come out, beyond its vocabulary (mtcli.json; an mtcli
    export's defaults): what is put before the source pieces and whether </s> ends them (a model
    whose CTranslate2 config adds </s> itself gets none from here), the target pieces every
    output starts with (an Argos package's target_prefix, removed from the text), and the pieces
    never to generate."""

    source_prefix: tuple[str, ...] = ()
    source_eos: bool = True
    target_prefix: tuple[str, ...] = ()
    never_generate: tuple[str, ...] = ("<pad>", "<s>")

    @classmethod
    def of(cls, meta: dict, config: dict) -> Feeding:
        """mtcli.json's fields; none of mtcli's </s> where CTranslate2's config adds its own."""
        known = {f.name for f in fields(cls)}
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in meta.items() if k in known}
        if config.get("add_source_eos"):
            given["source_eos"] = False
        return cls(**given)


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "--engine ctranslate2 needs ctranslate2: pip install 'mtcli[ct2]'"
        ) from None
    return ctranslate2


def ct2_device(asked: str) -> str:
    """CTranslate2's device for --device auto|cpu|cuda: cuda where CTranslate2 sees a GPU (auto
    takes it too), else cpu; --device cuda without one is one line saying why."""
    n_gpus = _import_ctranslate2().get_cuda_device_count()
    if asked == "cuda" and n_gpus == 0:
        raise UserError(
            "--device cuda: CTranslate2 sees no CUDA device (no GPU here, or a ctranslate2 build "
            "without CUDA); use --device cpu"
        )
    return "cuda" if asked in ("auto", "cuda") and n_gpus > 0 else "cpu"


class CT2Translator:
    """Lines -> Translations with CTranslate2, under the same DecodeConfig as mtcli's own."""

    constrains = False  # no constrained search: a span a translation lost stays named

    def __init__(
        self,
        path: Path,
        cfg: DecodeConfig,
        *,
        threads: int = 0,
        quantize: str = "",
        device: str = "auto",
        warn: Callable[[str], None] = lambda message: None,
    ):
        import sentencepiece as spm

        ctranslate2 = _import_ctranslate2()
        self.device = ct2_device(device)
        meta = check_ct2_dir(path)
        tok = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
        self.src = spm.SentencePieceProcessor(model_file=str(path / tok["src_model"]))
        self.tgt = spm.SentencePieceProcessor(model_file=str(path / tok["tgt_model"]))
        self.feeding = Feeding.of(meta, read_json_object(path / "config.json"))
        self.target_tokens = list(meta.get("target_tokens", []))
        # the positions hold the source's pieces, what goes before them and its </s>
        self.max_src_tokens = (
            int(meta["max_positions"]) - len(self.feeding.source_prefix) - self.feeding.source_eos
        )
        self.src_lang, self.tgt_lang = meta["src_lang"], meta["tgt_lang"]
        self.generation = generation_defaults(meta, path / MARKER)
        self.cfg, self.warn = cfg.with_generation(self.generation), warn
        self.truncate = Truncator(self.max_src_tokens, warn)
        threads = threads or available_cpus()
        compute = "int8" if quantization(quantize, self.generation) == "int8" else "float32"
        self.translator = ctranslate2.Translator(
            str(path),
            device=self.device,
            compute_type=compute,
            inter_threads=1,
            intra_threads=threads,
        )
        if cfg.sample:
            ctranslate2.set_random_seed(cfg.seed)

    def configured(
        self, cfg: DecodeConfig, warn: Callable[[str], None] | None = None
    ) -> CT2Translator:
        """The same loaded model under other decode settings: a copy that shares the
        ctranslate2.Translator and the sentencepiece models (a server holds one model,
        whatever settings its requests bring)."""
        other = copy.copy(self)
        other.cfg, other.warn = cfg.with_generation(self.generation), warn or self.warn
        other.truncate = Truncator(self.max_src_tokens, other.warn)
        if cfg.sample:
            import ctranslate2

            ctranslate2.set_random_seed(cfg.seed)
        return other

    def for_target(self, asked: str) -> CT2Translator:
        """This model writing `asked` where it writes several languages (see Tokenizer.for_target)."""
        default = self.feeding.source_prefix[0] if self.target_tokens else None
        piece = chosen_target_token(self.target_tokens, default, asked)
        if piece == default:
            return self
        other = copy.copy(self)
        other.feeding = replace(self.feeding, source_prefix=(piece,))
        return other

    def source_tokens(self, line: str) -> int:
        """The tokens a line takes of a batch's budget (its pieces, before any prefix)."""
        return len(self.src.encode(line))

    def _source(self, line: str) -> list[str]:
        feed = self.feeding
        pieces = self.truncate(self.src.encode(line, out_type=str))[0]
        return [*feed.source_prefix, *pieces, *(["</s>"] if feed.source_eos else [])]

    def translate_chunk(
        self,
        lines: list[str],
        prefixes: list[str | None] | None = None,
        keep: list[list[list[int]]] | None = None,
    ) -> list[Translation]:
        """As mtcli's Translator; `keep` is not enforced (CTranslate2 has no constrained
        search): the text layer checks the outputs and names what was lost."""
        results = [Translation(line, "", 0.0) for line in lines]
        rows = [i for i, line in enumerate(lines) if line.strip()]
        if not rows:
            return results
        sources = [self._source(lines[i].strip()) for i in rows]
        # mtcli's output limit is each line's own (a x its source tokens + b); CTranslate2
        # takes one per call, so the call gets the longest line's and each output is cut to
        # its line's: exact for greedy search, whose tokens do not depend on the limit
        # (calling once per source length was 10-20% slower here)
        limits = [max_output_tokens(len(src), self.cfg, self.max_src_tokens) for src in sources]
        options = self._options(max(limits), [prefixes[i] if prefixes else None for i in rows])
        outputs = self.translator.translate_batch(sources, **options)
        for i, source, limit, out in zip(rows, sources, limits, outputs, strict=True):
            whole = [self._without_target_prefix(hyp) for hyp in out.hypotheses]
            hyps = [
                (hyp[:limit], float(score)) for hyp, score in zip(whole, out.scores, strict=True)
            ]
            # an output that reached its line's limit ends there with </s>, as in mtcli's search:
            # its score is what is kept's with that </s> (CTranslate2 scored the longer output,
            # or, stopped at its own limit, one without </s>)
            cut = [j for j, hyp in enumerate(whole) if len(hyp) >= limit]
            if cut:
                rescored = self._scores(source, [hyps[j][0] for j in cut])
                for j, score in zip(cut, rescored, strict=True):
                    hyps[j] = (hyps[j][0], score)
                hyps.sort(key=lambda h: -h[1])
            texts = [(self._detokenize(hyp), score) for hyp, score in hyps]
            results[i] = Translation(lines[i], texts[0][0], texts[0][1], texts)
        return results

    def _scores(self, source: list[str], kept: list[list[str]]) -> list[float]:
        """CTranslate2's score of each kept hypothesis, ended by </s> at its line's limit as
        mtcli's search ends it: summed log-probabilities (</s> included) / length ** penalty,
        its own normalisation (checked: its translate scores are exactly this)."""
        kept = [[*self.feeding.target_prefix, *hyp] for hyp in kept]
        scored = self.translator.score_batch([source] * len(kept), kept)
        alpha = self.cfg.length_penalty
        return [sum(s.log_probs) / len(s.log_probs) ** alpha for s in scored]

    def _options(self, limit: int, prefixes: list[str | None]) -> dict:
        """translate_batch's settings, with at most `limit` output tokens."""
        cfg = self.cfg
        options = dict(
            beam_size=1 if cfg.sample else cfg.beam_size,
            num_hypotheses=cfg.nbest,
            length_penalty=cfg.length_penalty,
            return_scores=True,
            max_decoding_length=limit + len(self.feeding.target_prefix),
            # an output may be empty (</s> first), as in mtcli's search and transformers';
            # CTranslate2's default (1) forbade it and wrote a piece where they write none
            min_decoding_length=0,
            # CTranslate2 counts padded source tokens; --batch-tokens counts them x the rows of
            # each line (beam or draws), so at beam 5 the same budget is a fifth of the tokens
            no_repeat_ngram_size=cfg.no_repeat_ngram,
            max_batch_size=cfg.source_tokens_per_batch,
            batch_type="tokens",
            # mtcli never produces <pad> or <s> (decode._mask_never_generated); untrained
            # or odd models otherwise gave them here
            suppress_sequences=[[piece] for piece in self.feeding.never_generate] or None,
        )
        if cfg.sample:
            options.update(
                sampling_topk=cfg.top_k or self.tgt.get_piece_size(),
                sampling_topp=cfg.top_p,
                sampling_temperature=cfg.temperature,
            )
        fixed = list(self.feeding.target_prefix)
        if any(prefixes) or fixed:
            options["target_prefix"] = [
                fixed + (self.tgt.encode(p, out_type=str) if p else []) or None for p in prefixes
            ]
        return options

    def _without_target_prefix(self, hyp: list[str]) -> list[str]:
        n = len(self.feeding.target_prefix)
        return hyp[n:] if n and tuple(hyp[:n]) == self.feeding.target_prefix else hyp

    def _detokenize(self, pieces: list[str]) -> str:
        """Pieces to text as mtcli's Tokenizer.decode_tgt does: special pieces dropped, and
        <unk>, and a piece the target model lacks (a vocabulary shared with the source's); by
        the model's own marks, as an imported model numbers its specials otherwise."""
        ids = map(self.tgt.piece_to_id, pieces)
        special = lambda i: self.tgt.is_control(i) or self.tgt.is_unknown(i)  # noqa: E731
        return self.tgt.decode([i for i in ids if not special(i)])


def max_output_tokens(src_tokens: int, cfg: DecodeConfig, limit: int) -> int:
    """The most output tokens before EOS for a source of `src_tokens` pieces (with </s>):
    a x n + b, at least 1, at most the positions; decode.max_output_lengths on plain ints."""
    return min(max(math.floor(cfg.max_len_a * src_tokens + cfg.max_len_b), 1), limit)
