"""Make cjk-subset.ttf: Droid Sans Fallback (Apache-2.0, Debian's fonts-droid-fallback) cut
to the characters mtcli's attention plots label: GB2312's 6,763 Hanzi, the Han characters of
the shipped tokenizers' pieces, CJK punctuation and full-width forms. Run by `make font`;
needs fontTools (matplotlib brings it) and the font file given as the first argument.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def gb2312_hanzi() -> set[str]:
    """Rows 0xB0-0xF7 of GB2312: its two levels of Hanzi, 6,763 characters."""
    out = set()
    for high in range(0xB0, 0xF8):
        for low in range(0xA1, 0xFF):
            with contextlib.suppress(UnicodeDecodeError):  # the rows' unassigned cells
                out.add(bytes([high, low]).decode("gb2312"))
    return out


def vocabulary_han() -> set[str]:
    import sentencepiece as spm

    out = set()
    for model in sorted((REPO / "models").glob("*/*.model")):
        sp = spm.SentencePieceProcessor(model_file=str(model))
        for i in range(sp.get_piece_size()):
            out |= set(HAN.findall(sp.id_to_piece(i)))
    return out


def main(font: str) -> None:
    chars = gb2312_hanzi() | vocabulary_han()
    chars |= {chr(c) for c in range(0x3000, 0x3040)} | {chr(c) for c in range(0xFF00, 0xFFF0)}
    text = HERE / "chars.tmp"
    text.write_text("".join(sorted(chars)), encoding="utf-8")
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fontTools.subset",
                font,
                f"--text-file={text}",
                f"--output-file={HERE / 'cjk-subset.ttf'}",
                "--no-hinting",
                "--layout-features=",
                "--name-IDs=*",
            ],
            check=True,
        )
    finally:
        text.unlink()
    print(f"{len(chars)} characters -> {HERE / 'cjk-subset.ttf'}")


if __name__ == "__main__":
    main(sys.argv[1])
