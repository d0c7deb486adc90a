"""The speed-quality table of the distilled students: each teacher and its student on the
prepared Tatoeba test split (2,000 lines), whole `mtcli translate` processes, 2 threads.

    python bench/distill.py [--rounds 3] [--pairs en-zh,zh-en]

Rows per direction: the teacher at its defaults (beam 5), the teacher greedy, the teacher
through CTranslate2 (beam 5, exported here), the student at its defaults (its config.json's
"generation": the shipped en-zh student's are beam 3 with int8), the student greedy and at
beam 5 in fp32, and the student greedy and at beam 2 with int8 Linear layers. Each row is a fresh process that
reads the 2,000 lines and writes their translations (start-up included: what a user waits
for); the rows run interleaved over `rounds` and each keeps its fastest. BLEU and chrF2 by
sacrebleu against the references (BLEU tokenised as `mtcli eval` does: zh for Chinese, 13a
otherwise). Writes bench/results/distill.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sacrebleu.metrics import BLEU, CHRF  # noqa: E402

from bench.common import REPO, RESULTS, read_lines, write_result  # noqa: E402
from mtcli.config import DecodeConfig  # noqa: E402
from mtcli.store.model_dir import generation_defaults, quantization, read_config  # noqa: E402

TEST = REPO / "data" / "tatoeba"
PAIRS = {  # direction: (teacher, student, source file, reference file, target language)
    "en-zh": ("en-zh-tiny", "en-zh-tiny-student", "test.src", "test.tgt", "zh"),
    "zh-en": ("zh-en-tiny", "zh-en-tiny-student", "test.tgt", "test.src", "en"),
}


def student_dir(direction: str, name: str) -> str:
    """The shipped student, else what `make model-student` left in runs/ (one not shipped)."""
    shipped = REPO / "models" / name
    return str(shipped if shipped.is_dir() else REPO / "runs" / f"{direction}-student" / "model")


def defaults_of(model_dir: str) -> str:
    """A model's own decoding settings, read and checked as `mtcli translate` reads them."""
    generation = generation_defaults(read_config(model_dir))
    beam = generation.get("beam_size", DecodeConfig().beam_size)
    search = "greedy" if beam == 1 else f"beam {beam}"
    linear = quantization("", generation)
    return f"{search}, {'fp32' if linear == 'none' else linear}"


def rows_of(teacher: str, student: str, ct2_dir: Path) -> dict[str, list[str]]:
    """Row name -> the `mtcli translate` arguments that make it (besides -i/-o). The student's
    other rows name their settings in full, whatever its defaults are."""
    return {
        "teacher, beam 5 (its default)": ["-m", teacher],
        "teacher, greedy": ["-m", teacher, "--greedy"],
        "teacher through CTranslate2, beam 5": ["-m", str(ct2_dir), "--engine", "ctranslate2"],
        f"student at its defaults ({defaults_of(student)})": ["-m", student],
        "student, greedy": ["-m", student, "-b", "1", "--quantize", "none"],
        "student, beam 5": ["-m", student, "-b", "5", "--quantize", "none"],
        "student int8, greedy": ["-m", student, "-b", "1", "--quantize", "int8"],
        "student int8, beam 2": ["-m", student, "-b", "2", "--quantize", "int8"],
    }


def translate_seconds(args: list[str], src: Path, out: Path) -> float:
    """Wall time of one whole `mtcli translate` process over `src`."""
    command = [sys.executable, "-m", "mtcli", "translate", "-q", *args, "-i", str(src)]
    start = time.perf_counter()
    subprocess.run([*command, "-o", str(out), "--force"], check=True, cwd=REPO)
    return time.perf_counter() - start


def scores(hyp: Path, ref: Path, tgt_lang: str) -> dict:
    hyps, refs = read_lines(hyp), read_lines(ref)
    bleu = BLEU(tokenize="zh" if tgt_lang == "zh" else "13a").corpus_score(hyps, [refs])
    return {"bleu": round(bleu.score, 2), "chrf2": round(CHRF().corpus_score(hyps, [refs]).score, 2)}  # fmt: skip


def bench_pair(direction: str, rounds: int, tmp: Path) -> dict:
    teacher, student, src_name, ref_name, tgt_lang = PAIRS[direction]
    ct2_dir = tmp / f"{teacher}-ct2"
    export = ["export", "--format", "ctranslate2", f"models/{teacher}", "--out", str(ct2_dir)]
    subprocess.run([sys.executable, "-m", "mtcli", *export], check=True, cwd=REPO)
    rows = rows_of(teacher, student_dir(direction, student), ct2_dir)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for i, (name, args) in enumerate(rows.items()):
            times[name].append(translate_seconds(args, TEST / src_name, tmp / f"{direction}-{i}"))
    results = {}
    for i, name in enumerate(rows):
        results[name] = {
            "seconds": round(min(times[name]), 2),
            "all_seconds": [round(t, 2) for t in times[name]],
            **scores(tmp / f"{direction}-{i}", TEST / ref_name, tgt_lang),
        }
    base = results["teacher, beam 5 (its default)"]
    for r in results.values():
        r["speed_vs_teacher"] = round(base["seconds"] / r["seconds"], 2)
        r["bleu_vs_teacher"] = round(r["bleu"] - base["bleu"], 2)
    lines = len(read_lines(TEST / src_name))
    return {"teacher": teacher, "student": student, "lines": lines, "rows": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", default="en-zh,zh-en")
    args = parser.parse_args()
    record = {"rounds": args.rounds, "threads": 2, "directions": {}}
    previous = RESULTS / "distill.json"
    if previous.is_file():  # a direction not run again keeps its last figures
        record["directions"] = json.loads(previous.read_text())["directions"]
    with tempfile.TemporaryDirectory() as tmp:
        for direction in args.pairs.split(","):
            record["directions"][direction] = bench_pair(direction, args.rounds, Path(tmp))
            print(direction, record["directions"][direction]["rows"], file=sys.stderr)
    print(write_result("distill", record))


if __name__ == "__main__":
    main()
