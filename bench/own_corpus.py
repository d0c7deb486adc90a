"""Your own corpus at a fixed budget: the README's routes from the same raw files, test BLEU/chrF.

    python bench/own_corpus.py --corpus multi30k-en-de --pairs 5000 --minutes 10 --route auto
    python bench/own_corpus.py --short        # make bench's version: 2,000 pairs, 2 minutes

The raw files are the first N training pairs of ../shared/data/CORPUS; the test set is the
corpus's own (Multi30k's test2016, Tatoeba's test split). Each route runs the commands a user
types, as subprocesses:
  quick     `data prepare` (5% held out each for valid and test), `train --preset quick`
  defaults  the same split, `train` with no preset and no other flag
  auto      `train --src RAW --tgt RAW --max-time M` alone (it sizes itself and holds out its
            own validation set), then `translate -m OUT`
then translate the test sources (beam 5) and score them with sacrebleu. `--flags` adds train
flags for a tuning run, recorded as its own row. `--busy` keeps one
core busy with another process for the whole run. Each result is appended to
bench/results/own_corpus.json under its key (corpus, pairs, minutes, route, busy).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, RESULTS, SHARED  # noqa: E402

MTCLI = [sys.executable, "-m", "mtcli"]
TEST = {
    "multi30k-en-de": ("test.en", "test.de", "13a"),
    "tatoeba-en-zh": ("test.en", "test.zh", "zh"),
}
TRAIN = {"multi30k-en-de": ("train.en", "train.de"), "tatoeba-en-zh": ("train.en", "train.zh")}


def raw_subset(corpus: str, pairs: int, work: Path) -> tuple[Path, Path]:
    """The first `pairs` training pairs of the corpus, as two raw files a user would bring."""
    out = []
    for name in TRAIN[corpus]:
        lines = (SHARED / corpus / name).read_text(encoding="utf-8").splitlines()[:pairs]
        path = work / f"raw.{name.split('.')[-1]}"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(path)
    return out[0], out[1]


def mtcli(*args: str) -> str:
    done = subprocess.run([*MTCLI, *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"mtcli {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def train_route(
    route: str, src: Path, tgt: Path, minutes: float, work: Path, flags: list[str]
) -> str:
    """Train as the route does (with `flags` added to train); the model to translate with."""
    run = work / "run"
    budget = ["--max-time", f"{minutes:g}", "--out", str(run), *flags]
    if route == "auto":
        mtcli("train", "--src", str(src), "--tgt", str(tgt), *budget)
        return str(run)
    prep = work / "prep"
    mtcli("data", "prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(prep))
    preset = ["--preset", "quick"] if route == "quick" else []
    mtcli(
        "train",
        *preset,
        "--src",
        str(prep / "train.src"),
        "--tgt",
        str(prep / "train.tgt"),
        *budget,
    )
    return str(run / "best")


def test_scores(corpus: str, model: str, work: Path) -> dict:
    src_name, ref_name, tokenize = TEST[corpus]
    refs = (SHARED / corpus / ref_name).read_text(encoding="utf-8").splitlines()
    hyps = mtcli("translate", "-m", model, "-i", str(SHARED / corpus / src_name)).splitlines()
    (work / "test.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize)
    chrf = sacrebleu.corpus_chrf(hyps, [refs])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2), "first": hyps[:5]}


def _spin() -> None:
    while True:
        pass


def run_once(
    corpus: str, pairs: int, minutes: float, route: str, busy: bool, flags: list[str]
) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"mtcli-own-{route}-"))
    src, tgt = raw_subset(corpus, pairs, work)
    spinner = multiprocessing.Process(target=_spin, daemon=True) if busy else None
    if spinner:
        spinner.start()
    started = time.monotonic()
    try:
        model = train_route(route, src, tgt, minutes, work, flags)
    finally:
        if spinner:
            spinner.terminate()
    seconds = time.monotonic() - started
    if flags:  # a tuning run: recorded apart from the route's own row
        route = f"{route} {' '.join(flags)}"
    record = {"corpus": corpus, "pairs": pairs, "minutes": minutes, "route": route, "busy": busy}
    record |= {"seconds": round(seconds), **test_scores(corpus, model, work), "work": str(work)}
    return record


def save(record: dict) -> None:
    path = RESULTS / "own_corpus.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    key = [record[k] for k in ("corpus", "pairs", "minutes", "route", "busy")]
    rows = [
        r for r in rows if [r[k] for k in ("corpus", "pairs", "minutes", "route", "busy")] != key
    ]
    rows.append({k: v for k, v in record.items() if k != "work"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="multi30k-en-de", choices=sorted(TEST))
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--route", default="auto", choices=("quick", "defaults", "auto"))
    ap.add_argument("--busy", action="store_true", help="another process holds one core")
    ap.add_argument("--short", action="store_true", help="2,000 pairs, 2 minutes, auto")
    ap.add_argument("--flags", default="", help="added to train, for tuning: '--lr-factor 1'")
    args = ap.parse_args()
    if args.short:
        args.pairs, args.minutes, args.route = 2000, 2.0, "auto"
    flags = args.flags.split()
    record = run_once(args.corpus, args.pairs, args.minutes, args.route, args.busy, flags)
    save(record)
    print(json.dumps(record, ensure_ascii=False))


if __name__ == "__main__":
    main()
