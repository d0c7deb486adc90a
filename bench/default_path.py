"""The command every user runs, as it runs by default, beside CTranslate2 on the same weights:
whole `mtcli translate` processes over the 2,000 Tatoeba test lines.

    python bench/default_path.py [--rounds 2]

mtcli: `mtcli translate -m en-zh-tiny` (beam 5, the text layer, the confidence on) and with
`--greedy`; CTranslate2: the same model exported (`mtcli export --format ctranslate2`) and run
by `mtcli translate --engine ctranslate2` (the same text layer; no confidence, which it cannot
give), beam 5 and greedy. Whole processes, start-up included, interleaved over `rounds`, the
fastest of each; peak RSS from the kernel (wait4). The ratios (issue 64's aims): CTranslate2's
seconds over mtcli's, at least 0.8 at beam 5 and 0.7 greedy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, SHARED, SHIPPED, write_result  # noqa: E402


def run(args: list[str], stdin: Path, code: Path = REPO) -> tuple[float, int]:
    """(seconds, peak RSS in MB) of one whole process reading `stdin`, importing mtcli from
    the checkout `code`."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)}
    with stdin.open("rb") as source:
        proc = subprocess.Popen(
            args,
            stdin=source,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=code,
            env=env,
        )
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"failed: {' '.join(args)}")
    return time.perf_counter() - start, round(usage.ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="Another checkout of mtcli (git worktree add DIR COMMIT), run beside this one.",
    )
    args = parser.parse_args()
    from mtcli.store.ct2_export import export_ctranslate2

    work = Path(tempfile.mkdtemp(prefix="mtcli-bench-default-"))
    prepared = REPO / "data" / "tatoeba" / "test.src"
    source = prepared if prepared.is_file() else SHARED / "tatoeba-en-zh" / "test.en"
    lines = source.read_text(encoding="utf-8").splitlines()[:2000]
    src = work / "test.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    exported = export_ctranslate2(SHIPPED, work / "en-zh-tiny-ct2")
    mtcli = [sys.executable, "-m", "mtcli", "translate"]
    runs = {
        "mtcli beam 5": ([*mtcli, "-m", str(SHIPPED)], REPO),
        "mtcli greedy": ([*mtcli, "-m", str(SHIPPED), "--greedy"], REPO),
        "ctranslate2 beam 5": ([*mtcli, "--engine", "ctranslate2", "-m", str(exported)], REPO),
        "ctranslate2 greedy": (
            [*mtcli, "--engine", "ctranslate2", "-m", str(exported), "--greedy"],
            REPO,
        ),
    }
    if args.baseline:
        runs["baseline beam 5"] = (runs["mtcli beam 5"][0], args.baseline.resolve())
        runs["baseline greedy"] = (runs["mtcli greedy"][0], args.baseline.resolve())
    best = {name: (float("inf"), 0) for name in runs}
    for _ in range(args.rounds):
        for name, (argv, code) in runs.items():
            seconds, mb = run(argv, src, code)
            best[name] = min(best[name], (seconds, mb))
    record: dict = {"lines": len(lines), "rounds": args.rounds}
    for name, (seconds, mb) in best.items():
        record[name] = {"seconds": round(seconds, 2), "peak_rss_mb": mb}
    for who in ("mtcli", "baseline") if args.baseline else ("mtcli",):
        for search in ("beam 5", "greedy"):
            ratio = best[f"ctranslate2 {search}"][0] / best[f"{who} {search}"][0]
            record[f"{who} speed vs ctranslate2, {search}"] = round(ratio, 2)
    print(record)
    print(f"wrote {write_result('default_path', record)}")


if __name__ == "__main__":
    main()
