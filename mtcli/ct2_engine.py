"""Translate with a model exported to CTranslate2 (ct2_export.py): `mtcli translate --engine
ctranslate2`. Imports ctranslate2 and sentencepiece, never torch.

It gives the same lines-in, lines-out behaviour as mtcli's Translator (source pieces + </s>,
truncated to the model's positions; one result per line, in order) and honours what
CTranslate2 can do: beam size, n-best, length penalty (CTranslate2's n ** alpha, not GNMT's),
a prefix, sampling with its seed, --no-repeat-ngram, int8, and token-budgeted batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mtcli.config import DecodeConfig
from mtcli.device import available_cpus
from mtcli.errors import UserError
from mtcli.translation import Translation

MARKER = "mtcli.json"


def is_ct2_dir(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "model.bin").is_file()


class CT2Translator:
    """Lines -> Translations with CTranslate2, under the same DecodeConfig as mtcli's own."""

    def __init__(
        self,
        path: Path,
        cfg: DecodeConfig,
        *,
        threads: int = 0,
        quantize: str = "none",
        warn: Callable[[str], None] = lambda message: None,
    ):
        try:
            import ctranslate2
            import sentencepiece as spm
        except ImportError as e:
            raise UserError(
                f"--engine ctranslate2 needs {e.name}: pip install 'mtcli[ct2]'"
            ) from None
        if not is_ct2_dir(path):
            raise UserError(
                f"{path}: not a CTranslate2 export of mtcli (make one with `mtcli export --format ctranslate2`)"
            )
        meta = json.loads((path / MARKER).read_text(encoding="utf-8"))
        tok = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
        self.src = spm.SentencePieceProcessor(model_file=str(path / tok["src_model"]))
        self.tgt = spm.SentencePieceProcessor(model_file=str(path / tok["tgt_model"]))
        self.max_src_tokens = int(meta["max_positions"]) - 1
        self.cfg, self.warn = cfg, warn
        threads = threads or available_cpus()
        compute = "int8" if quantize == "int8" else "float32"
        self.translator = ctranslate2.Translator(
            str(path), device="cpu", compute_type=compute, inter_threads=1, intra_threads=threads
        )
        if cfg.sample:
            ctranslate2.set_random_seed(cfg.seed)
        self._warned = False

    def _source(self, line: str) -> list[str]:
        pieces = self.src.encode(line, out_type=str)
        if len(pieces) > self.max_src_tokens:
            pieces = pieces[: self.max_src_tokens]
            if not self._warned:
                self.warn(
                    f"an input line has more than {self.max_src_tokens} tokens; "
                    "long lines are truncated to the model's max positions"
                )
                self._warned = True
        return pieces + ["</s>"]

    def translate_chunk(
        self, lines: list[str], prefixes: list[str | None] | None = None
    ) -> list[Translation]:
        results = [Translation(line, "", 0.0) for line in lines]
        rows = [i for i, line in enumerate(lines) if line.strip()]
        if not rows:
            return results
        sources = [self._source(lines[i].strip()) for i in rows]
        cfg = self.cfg
        options = dict(
            beam_size=1 if cfg.sample else cfg.beam_size, num_hypotheses=cfg.nbest,
            length_penalty=cfg.length_penalty, return_scores=True,
            max_decoding_length=int(cfg.max_len_a * max(map(len, sources)) + cfg.max_len_b) + 1,
            no_repeat_ngram_size=cfg.no_repeat_ngram, max_batch_size=cfg.batch_tokens,
            batch_type="tokens",
        )  # fmt: skip
        if cfg.sample:
            options.update(
                sampling_topk=cfg.top_k or self.tgt.get_piece_size(),
                sampling_topp=cfg.top_p, sampling_temperature=cfg.temperature,
            )  # fmt: skip
        if prefixes and any(prefixes):
            options["target_prefix"] = [
                self.tgt.encode(prefixes[i], out_type=str) if prefixes[i] else None for i in rows
            ]
        for i, out in zip(rows, self.translator.translate_batch(sources, **options), strict=True):
            texts = [
                (self.tgt.decode([p for p in hyp if p != "</s>"]), float(score))
                for hyp, score in zip(out.hypotheses, out.scores, strict=True)
            ]
            results[i] = Translation(lines[i], texts[0][0], texts[0][1], texts)
        return results
