"""What the Transformer's choice of attention buys: the same model with scaled dot-product or
additive (Bahdanau) encoder-decoder attention, each trained for the same CPU minutes on
Tatoeba en->zh, then the test set with beam 5.

    python bench/attention.py [--minutes 10]

Writes bench/results/attention.json: BLEU, chrF2, steps reached and training tokens/s of each.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_result  # noqa: E402
from bench.quality import run_quality  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    args = ap.parse_args()
    results = {
        kind: run_quality("tatoeba-en-zh", args.minutes, 6000, args.precision, attention=kind)
        for kind in ("dot", "additive")
    }
    record = {
        "minutes": args.minutes,
        "precision": args.precision,
        "results": results,
        "additive_vs_dot_speed": round(
            results["additive"]["tgt_tokens_per_s"] / results["dot"]["tgt_tokens_per_s"], 3
        ),
    }
    write_result("attention", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
