"""Drawing attention for `mtcli attention`: one layer, head and kind picked from a decoding
trace, as a shaded grid in the terminal (rich) or a PNG (matplotlib, optional). Never decodes:
it takes the AttentionTrace of a hypothesis.
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from mtcli.decoding.stepper import AttentionTrace
from mtcli.errors import UserError

SHADES = " ░▒▓█"  # five levels, readable without colour
LEVELS = (0.05, 0.15, 0.3, 0.5)  # weight thresholds between the shades: attention is rarely uniform


@dataclass
class Heatmap:
    """One matrix of weights with labels: rows attend to columns."""

    weights: torch.Tensor  # (rows, cols), each row sums to 1
    rows: list[str]
    cols: list[str]
    title: str


def select(trace: AttentionTrace, *, kind: str, layer: int, head: int | None) -> torch.Tensor:
    """(rows, cols) weights of one layer (negative = from the end), one head or the head mean."""
    stack = {"cross": trace.cross, "encoder": trace.encoder, "decoder": trace.decoder}[
        kind
    ]  # (L, H, R, C)
    n_layers, n_heads = stack.shape[:2]
    if not -n_layers <= layer < n_layers:
        raise UserError(f"--layer {layer}: the {kind} attention has layers 0..{n_layers - 1}")
    if head is not None and not 0 <= head < n_heads:
        raise UserError(f"--head {head}: the model has heads 0..{n_heads - 1}")
    per_layer = stack[layer]  # (H, R, C)
    return per_layer.mean(dim=0) if head is None else per_layer[head]


def heatmap_of(maps, *, kind: str, layer: int, head: int | None) -> Heatmap:
    """The Heatmap of one kind, layer and head (None: their mean) of a translation's AttentionMaps."""
    rows, cols = {
        "cross": (maps.target, maps.source),
        "encoder": (maps.source, maps.source),
        "decoder": (maps.target, maps.target),
    }[kind]
    weights = select(maps.trace, kind=kind, layer=layer, head=head)
    which = "mean of heads" if head is None else f"head {head}"
    return Heatmap(
        weights.to(torch.float32), rows, cols, f"{kind} attention, layer {layer}, {which}"
    )


def render(heatmap: Heatmap, width: int = 80) -> Group:
    """A shaded grid for the terminal; columns are cut into blocks so any sentence fits `width`."""
    label_width = min(max((len(r) for r in heatmap.rows), default=1), 12)
    cell = 3
    per_block = max(1, (width - label_width - 3) // cell)
    blocks = []
    for start in range(0, len(heatmap.cols), per_block):
        cols = list(range(start, min(start + per_block, len(heatmap.cols))))
        table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0), title=None)
        table.add_column("", width=label_width, no_wrap=True, overflow="ellipsis")
        for c in cols:
            table.add_column(Text(f"{c:>2} "), width=cell, no_wrap=True)
        for r, label in enumerate(heatmap.rows):
            cells = [_shade(float(heatmap.weights[r, c])) for c in cols]
            table.add_row(Text(label), *cells)
        blocks.append(table)
    legend = "  ".join(f"{i:>2}={_short(p)}" for i, p in enumerate(heatmap.cols))
    key = "shade: ' '<.05 ░<.15 ▒<.3 ▓<.5 █ (rows attend to columns)"
    return Group(Text(heatmap.title, style="bold"), *blocks, Text(legend), Text(key, style="dim"))


def _shade(weight: float) -> Text:
    level = sum(weight >= t for t in LEVELS)
    return Text(SHADES[level] * 2 + " ", style="cyan" if level else "")


def _short(piece: str, n: int = 10) -> str:
    return piece if len(piece) <= n else piece[: n - 1] + "…"


def fits(renderable, width: int = 80) -> list[str]:
    """Render to text at `width` and return the lines (for tests and for checking layout)."""
    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)  # noqa: SIM115
    console.print(renderable)
    return console.export_text().splitlines()


# carried for machines without a CJK font: Droid Sans Fallback (Apache-2.0) cut to GB2312's
# Hanzi and the shipped vocabularies' (fonts/SOURCE.md; `make font` makes it again)
CARRIED_FONT = Path(__file__).resolve().parent / "fonts" / "cjk-subset.ttf"
# families that hold CJK, asked about first (reading every font's character map is slow)
CJK_FAMILIES = re.compile(
    r"CJK|Han |Hei|Ming|Song|Kai|Gothic|WenQuanYi|Droid Sans Fallback|Unifont|Noto Sans SC|Noto Sans TC|Noto Sans JP"
)


def save_png(heatmap: Heatmap, path: str | Path) -> Path:
    """The heatmap as a PNG with labelled axes (needs the optional matplotlib extra); labels
    in Chinese or Japanese are drawn in a font that has them, never as boxes."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--png needs matplotlib: pip install 'mtcli[plot]'") from None
    with warnings.catch_warnings():
        # matplotlib warns once per glyph a font lacks (16 lines for one sentence); the
        # families below hold every glyph of the labels, and any left is not worth a line each
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        with plt.rc_context(
            {"font.family": label_fonts([*heatmap.rows, *heatmap.cols, heatmap.title])}
        ):
            return _draw(heatmap, path, plt)


def label_fonts(labels: list[str]) -> list[str]:
    """Font families for the labels: matplotlib's default, then one that has the characters
    it lacks (a system font where there is one, else the carried subset), as a fallback list
    (matplotlib takes each glyph from the first family that has it)."""
    from matplotlib import font_manager

    default = font_manager.FontProperties(family=["sans-serif"])
    first = font_manager.findfont(default, fallback_to_default=True)
    missing = {c for c in "".join(labels) if not c.isspace()} - _characters(first)
    if not missing:
        return ["sans-serif"]
    return ["sans-serif", _system_font_with(missing) or _carried_family()]


@functools.cache
def _carried_family() -> str:
    """The carried font, added to matplotlib's fonts once a process; its family name."""
    from matplotlib import font_manager

    font_manager.fontManager.addfont(str(CARRIED_FONT))
    return font_manager.FontProperties(fname=str(CARRIED_FONT)).get_name()


def _system_font_with(characters: set[str]) -> str | None:
    """The family of an installed font that has all of `characters`, CJK families first."""
    from matplotlib import font_manager

    fonts = sorted(font_manager.fontManager.ttflist, key=lambda f: not CJK_FAMILIES.search(f.name))
    for entry in fonts:
        if not CJK_FAMILIES.search(entry.name):
            break  # the rest would each have to be opened: the carried font is faster
        if characters <= _characters(entry.fname):
            return entry.name
    return None


@functools.cache
def _characters(font_path: str) -> frozenset[str]:
    """The characters a font file has glyphs for."""
    from matplotlib.ft2font import FT2Font

    try:
        return frozenset(map(chr, FT2Font(font_path).get_charmap()))
    except (OSError, RuntimeError, ValueError):  # a damaged or unreadable font file
        return frozenset()


def _draw(heatmap: Heatmap, path: str | Path, plt) -> Path:
    rows, cols = heatmap.weights.shape
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * cols + 2), max(3, 0.4 * rows + 1.5)), dpi=100)
    image = ax.imshow(heatmap.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(cols), heatmap.cols, rotation=60, ha="right")
    ax.set_yticks(range(rows), heatmap.rows)
    ax.set_xlabel("attended to")
    ax.set_ylabel("attending")
    ax.set_title(heatmap.title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return Path(path)
