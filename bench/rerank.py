"""Is the search's first choice its best? The beam-5 n-best of each shipped model, chosen again
by the reverse model (noisy channel, Yee et al. 2019), by agreement between the candidates
(minimum Bayes risk with chrF, Freitag et al. 2022), by both, and by an oracle that knows the
reference (the ceiling). Weights fitted on the valid split (1,000 pairs), judged on test (2,000).

    python bench/rerank.py [--data data/tatoeba] [--directions en-zh,zh-en]

Features of a candidate y of source x: the search's own score (log P(y|x) over the length
penalty), the reverse model's mean log P(x|y) over x's pieces, and the log length ratio. The
noisy channel chooses argmax fwd + a·rev + b·lenratio, a and b by grid search for the valid
split's corpus BLEU; MBR chooses the candidate with the highest expected chrF against the
others, each weighted by softmax(fwd). Writes bench/results/rerank.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sacrebleu.metrics import BLEU, CHRF  # noqa: E402

from bench.common import REPO, RESULTS, read_lines, write_result  # noqa: E402

DIRECTIONS = {  # direction: (model, reverse model, source side, target side, BLEU tokenizer)
    "en-zh": ("en-zh-tiny", "zh-en-tiny", "src", "tgt", "zh"),
    "zh-en": ("zh-en-tiny", "en-zh-tiny", "tgt", "src", "13a"),
    "en-zh student": ("en-zh-tiny-student", "zh-en-tiny", "src", "tgt", "zh"),
}
BEAM = 5
A_GRID = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0]
B_GRID = [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0]
KEPT = (2, 3, 5)  # candidates the noisy channel chooses among (the search's first k)
# the candidates each shipped model weighs (--fit), within the time aim (the default path at
# most 1.3x its time without reranking, the confidence on in both; 2,000 test lines, whole
# processes): en-zh weighing 3 took 1.40x (a reverse pass for each, the confidence reusing the
# chosen one's), 2 is +2.06 BLEU of 3's +2.59; zh-en's fit gives the reverse model no weight
# at 2 or 3 (the length alone chooses, nothing is read back: 1.03-1.07x)
SHIPPED_CANDIDATES = {"en-zh": 2, "zh-en": 3, "en-zh student": 2}


def nbest_lists(model: str, sources: list[str]) -> list[list[tuple[str, float]]]:
    """The beam-5 5-best of each source (text, search score), duplicates of a text dropped."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    translator = build_translator(
        [REPO / "models" / model],
        DecodeConfig(beam_size=BEAM, nbest=BEAM, rerank=False),
        EngineOptions(device="cpu", text_layer=False),
    )
    lists = []
    for t in translator.translate_chunk(sources):
        seen, kept = set(), []
        for text, score in t.nbest:
            if text not in seen:
                seen.add(text)
                kept.append((text, score))
        lists.append(kept)
    return lists


def reverse_scores(reverse: str, sources: list[str], lists) -> list[np.ndarray]:
    """Each candidate's mean log P(source | candidate) under the reverse model."""
    from mtcli.engines.confidence import forced_pass
    from mtcli.engines.loading import ready_to_decode
    from mtcli.store.checkpoint import load_model

    loaded = ready_to_decode(load_model(REPO / "models" / reverse))
    tok = loaded.tokenizer
    pairs = [(i, text) for i, cands in enumerate(lists) for text, _ in cands]
    scores = forced_pass(
        loaded.model,
        [tok.encode_src(text) for _, text in pairs],
        [tok.encode_tgt(sources[i]) for i, _ in pairs],
        "cpu",
    )
    out = [np.zeros(len(c)) for c in lists]
    k = 0
    for i, cands in enumerate(lists):
        for j in range(len(cands)):
            out[i][j] = float(scores[k][0].mean())
            k += 1
    return out


def features(sources: list[str], lists, rev) -> list[np.ndarray]:
    """(candidates, 3): search score, reverse score, log length ratio (characters)."""
    return [
        np.array(
            [
                [s, r, math.log((len(t) + 1) / (len(src) + 1))]
                for (t, s), r in zip(c, rv, strict=True)
            ]
        )
        for src, c, rv in zip(sources, lists, rev, strict=True)
    ]


def choose(lists, feats, a: float, b: float) -> list[str]:
    return [
        c[int(np.argmax(f[:, 0] + a * f[:, 1] + b * f[:, 2]))][0]
        for c, f in zip(lists, feats, strict=True)
    ]


def mbr(lists, feats) -> list[str]:
    """The candidate with the highest expected chrF against the others (softmax(fwd) weights)."""
    chrf = CHRF()
    chosen = []
    for cands, f in zip(lists, feats, strict=True):
        if len(cands) == 1:
            chosen.append(cands[0][0])
            continue
        w = np.exp(f[:, 0] - f[:, 0].max())
        w /= w.sum()
        texts = [t for t, _ in cands]
        gains = [
            sum(w[k] * chrf.sentence_score(h, [texts[k]]).score for k in range(len(texts)))
            for j, h in enumerate(texts)
        ]
        chosen.append(texts[int(np.argmax(gains))])
    return chosen


def oracle(lists, refs: list[str]) -> list[str]:
    chrf = CHRF()
    return [
        max((t for t, _ in c), key=lambda t: chrf.sentence_score(t, [r]).score)
        for c, r in zip(lists, refs, strict=True)
    ]


def scores(hyps: list[str], refs: list[str], tokenize: str) -> dict:
    return {
        "bleu": round(BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score, 2),
        "chrf": round(CHRF().corpus_score(hyps, [refs]).score, 2),
    }


def split(data: Path, part: str, src_side: str, tgt_side: str):
    return read_lines(data / f"{part}.{src_side}"), read_lines(data / f"{part}.{tgt_side}")


def run_direction(direction: str, data: Path) -> dict:
    model, reverse, src_side, tgt_side, tokenize = DIRECTIONS[direction]
    prepared = {}
    for part in ("valid", "test"):
        sources, refs = split(data, part, src_side, tgt_side)
        start = time.perf_counter()
        lists = nbest_lists(model, sources)
        searched = time.perf_counter() - start
        rev = reverse_scores(reverse, sources, lists)
        prepared[part] = (
            sources,
            refs,
            lists,
            features(sources, lists, rev),
            searched,
            time.perf_counter() - start - searched,
        )
    _, vrefs, vlists, vfeats, _, _ = prepared["valid"]
    sources, refs, lists, feats, searched, reversed_s = prepared["test"]
    test = {
        "first choice": scores([c[0][0] for c in lists], refs, tokenize),
        "MBR chrF": scores(mbr(lists, feats), refs, tokenize),
        "oracle (knows the reference)": scores(oracle(lists, refs), refs, tokenize),
    }
    fitted = {}
    for k in KEPT:
        a, b = fit(_first(vlists, k), _first(vfeats, k), vrefs, tokenize)
        fitted[k] = {"a": a, "b": b}
        chosen = choose(_first(lists, k), _first(feats, k), a, b)
        test[f"noisy channel, first {k}"] = {
            **scores(chosen, refs, tokenize),
            "changed": sum(c != ls[0][0] for c, ls in zip(chosen, lists, strict=True)),
        }
    return {
        "model": model,
        "reverse": reverse,
        "fitted": fitted,
        "candidates_per_line": round(float(np.mean([len(c) for c in lists])), 2),
        "seconds": {"search": round(searched, 2), "reverse_pass": round(reversed_s, 2)},
        "test": test,
    }


def _first(lists, k: int):
    return [c[:k] for c in lists]


def fit(lists, feats, refs: list[str], tokenize: str) -> tuple[float, float]:
    """The (a, b) of the grid whose choices score the highest corpus BLEU on `refs`."""
    bleu = BLEU(tokenize=tokenize)
    return max(
        ((a, b) for a in A_GRID for b in B_GRID),
        key=lambda ab: bleu.corpus_score(choose(lists, feats, *ab), [refs]).score,
    )


def write_weights(model: str, fitted: dict, candidates: int) -> None:
    from mtcli.engines.rerank import RERANK_FILE

    weights = {"reverse": fitted["a"], "length": fitted["b"], "candidates": candidates}
    weights["fitted_on"] = (
        "data/tatoeba valid (1,000 pairs), corpus BLEU, python bench/rerank.py --fit"
    )
    path = REPO / "models" / model / RERANK_FILE
    path.write_text(json.dumps(weights, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / "data" / "tatoeba"))
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument(
        "--fit",
        action="store_true",
        help="Write each model's weights (rerank.json) for its SHIPPED_CANDIDATES.",
    )
    args = parser.parse_args()
    previous = RESULTS / "rerank.json"  # the directions not measured again keep their figures
    record = json.loads(previous.read_text()) if previous.is_file() else {}
    record |= {d: run_direction(d, Path(args.data)) for d in args.directions.split(",")}
    if args.fit:
        for d in args.directions.split(","):
            r, k = record[d], SHIPPED_CANDIDATES[d]
            write_weights(r["model"], r["fitted"][k], k)
    for d in args.directions.split(","):
        r = record[d]
        print(d, r["fitted"], r["seconds"])
        for name, s in r["test"].items():
            print(f"  {name:30} BLEU {s['bleu']:6.2f}  chrF {s['chrf']:6.2f}")
    print(f"wrote {write_result('rerank', record)}")


if __name__ == "__main__":
    main()
