"""One very long line against a file of ordinary lines: whole `mtcli translate` processes
(zh-en-tiny, Chinese, which is written without spaces), their time and peak resident memory.

    python bench/long_line.py [--rounds 1]

Inputs, made from the prepared Tatoeba test split's Chinese side:
- `2,000 lines`: the file of 2,000 test lines (about 24,000 characters);
- `200,000 characters`: those sentences joined into one line, repeated to 200,000 characters;
- `1 MB`: the same, to 1,000,000 UTF-8 bytes;
- `200,000 characters, no punctuation`: the same line with its punctuation taken out, so no
  sentence or clause ends anywhere in it and the text layer cuts it by tokens alone.
Each at translate's defaults (beam 5, the confidence on) and greedy. The ratio that matters
(issue 64): a long line's peak memory against the 2,000-line file's, at the same settings
(aim: 1.3x at most): a line is translated in bounded pieces, its memory set by the batch.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, write_result  # noqa: E402

PUNCTUATION = re.compile(r"[。？！，；：、.?!,;:\"'“”‘’（）()《》「」]")
SETTINGS = {"default": [], "greedy": ["--greedy"]}


def inputs(folder: Path) -> dict[str, Path]:
    """The four inputs above, written into `folder`."""
    lines = (REPO / "data" / "tatoeba" / "test.tgt").read_text(encoding="utf-8").splitlines()
    made = {"2,000 lines": "".join(line + "\n" for line in lines[:2000])}
    joined = "".join(lines)
    made["200,000 characters"] = _repeated(joined, lambda t: len(t) >= 200_000)[:200_000]
    one_mb = _repeated(joined, lambda t: len(t.encode()) >= 1_000_000)
    made["1 MB"] = one_mb.encode()[:1_000_000].decode(errors="ignore")
    bare = PUNCTUATION.sub("", joined)
    made["200,000 characters, no punctuation"] = _repeated(bare, lambda t: len(t) >= 200_000)[
        :200_000
    ]
    paths = {}
    for i, (name, text) in enumerate(made.items()):
        paths[name] = folder / f"input{i}.txt"
        paths[name].write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return paths


def _repeated(text: str, enough) -> str:
    out = text
    while not enough(out):
        out += text
    return out


def run(path: Path, flags: list[str]) -> dict:
    """One whole process over `path`: seconds, peak RSS (MiB), output lines."""
    mtcli = Path(sys.executable).parent / "mtcli"
    start = time.perf_counter()
    with path.open("rb") as stdin:
        proc = subprocess.Popen(
            [str(mtcli), "translate", "-m", "zh-en-tiny", *flags],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"mtcli translate failed on {path.name} ({flags})")
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "output_lines": out.count(b"\n"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    record: dict = {"model": "zh-en-tiny", "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        paths = inputs(Path(tmp))
        for setting, flags in SETTINGS.items():
            for name, path in paths.items():
                runs = [run(path, flags) for _ in range(args.rounds)]
                best = min(runs, key=lambda r: r["seconds"])
                best["peak_rss_mb"] = min(r["peak_rss_mb"] for r in runs)
                record[f"{setting}: {name}"] = best
                print(setting, name, best, flush=True)
            base = record[f"{setting}: 2,000 lines"]["peak_rss_mb"]
            record[f"{setting}: peak RSS of the 1 MB line / the 2,000 lines"] = round(
                record[f"{setting}: 1 MB"]["peak_rss_mb"] / base, 2
            )
    print(f"wrote {write_result('long_line', record)}")


if __name__ == "__main__":
    main()
