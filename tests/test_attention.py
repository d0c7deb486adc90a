"""Attention traces from decoding, their drawings, and word alignments."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from mtcli.cli import main
from mtcli.cli.heatmap import Heatmap, fits, render, save_png
from mtcli.config import BOS_ID, EOS_ID, PAD_ID
from mtcli.data.tokenizer import piece_words
from mtcli.decoding.alignment import align_words
from mtcli.decoding.search import beam_search, greedy
from mtcli.errors import UserError
from mtcli.model.kv_cache import AttentionRecord
from tests.conftest import REPO


def _padded_src(model):
    rows = [[5, 6, 7, 8, 9, 10, EOS_ID], [11, 12, EOS_ID]]
    src = torch.tensor([r + [PAD_ID] * (7 - len(r)) for r in rows])
    return src, src != PAD_ID


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_rows_sum_to_one_and_masked_positions_are_zero(tiny_model, search):
    """Every row sums to 1; source padding gets no weight; decoder future positions are exactly 0."""
    src, mask = _padded_src(tiny_model)
    if search == "greedy":
        hyps = [[h] for h in greedy(tiny_model, src, mask, with_attention=True)]
    else:
        hyps = beam_search(tiny_model, src, mask, beam_size=3, nbest=2, with_attention=True)
    for b, nbest in enumerate(hyps):
        for h in nbest:
            t = h.attention
            T, S = len(h.tokens) + 1, int(mask[b].sum())
            assert (
                t.cross.shape[2:] == (T, S)
                and t.encoder.shape[2:] == (S, S)
                and t.decoder.shape[2:] == (T, T)
            )
            for weights in (t.cross, t.encoder, t.decoder):
                torch.testing.assert_close(
                    weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5, rtol=0
                )
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            assert torch.all(t.decoder[:, :, future] == 0)
    # the short sentence's rows sum to 1 over its 3 real columns: padding columns held nothing


def test_beam_trace_equals_teacher_forced_attention(tiny_model):
    """The traced cross-attention of each n-best hypothesis equals a teacher-forced pass over it."""
    src, mask = _padded_src(tiny_model)
    results = beam_search(tiny_model, src, mask, beam_size=4, nbest=3, with_attention=True)
    for b, hyps in enumerate(results):
        one_src, one_mask = src[b : b + 1], mask[b : b + 1]
        for h in hyps:
            record = AttentionRecord()
            memory = tiny_model.encode(one_src, one_mask)
            tgt = torch.tensor([[BOS_ID, *h.tokens]])
            with torch.no_grad():
                tiny_model.decode(tgt, memory, one_mask, tiny_model.new_cache(32, record))
            S = int(one_mask.sum())
            for layer, (probs,) in record.layers.items():
                torch.testing.assert_close(
                    h.attention.cross[layer], probs[0, :, :, :S], atol=1e-5, rtol=0
                )


def test_terminal_heatmap_fits_80_columns():
    """A 20-token sentence renders within 80 columns (rich Console, width 80, recorded)."""
    pieces = [f"▁word{i}" for i in range(20)]
    weights = torch.softmax(torch.randn(22, 21), dim=-1)
    lines = fits(
        render(Heatmap(weights, pieces + ["."] + ["</s>"], pieces + ["</s>"], "cross"), width=80),
        width=80,
    )
    assert lines and max(len(line) for line in lines) <= 80
    assert sum("▁word19" in line for line in lines) >= 1  # every column is still labelled


def test_png_is_written_without_a_display(tmp_path):
    """`--png` in a subprocess with no DISPLAY gives a valid PNG of the expected pixel size."""
    code = (
        "import sys, torch; from mtcli.cli.heatmap import Heatmap, save_png;"
        "save_png(Heatmap(torch.full((3, 4), 0.25), ['a','b','c'], ['w','x','y','z'], 't'), sys.argv[1])"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND", "WAYLAND_DISPLAY")
    }
    png = tmp_path / "a.png"
    subprocess.run([sys.executable, "-c", code, str(png)], check=True, env=env, cwd=REPO)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (400, 300)  # figure size (4 x 3 inches, the minimum) at 100 dpi


def test_png_without_matplotlib_is_one_line(monkeypatch, tmp_path):
    """Without matplotlib, --png says how to install the extra."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"pip install 'mtcli\[plot\]'"):
        save_png(Heatmap(torch.ones(1, 1), ["a"], ["b"], "t"), tmp_path / "x.png")


def test_attention_command(tmp_path, copy_model_dir, copy_lines):
    """`mtcli attention` prints the translation on stdout and writes a PNG; a bad layer is one line."""
    png = tmp_path / "h.png"
    result = CliRunner().invoke(
        main, ["attention", "-m", str(copy_model_dir), copy_lines[0], "--png", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == copy_lines[0] and png.read_bytes()[:4] == b"\x89PNG"
    bad = CliRunner().invoke(main, ["attention", "-m", str(copy_model_dir), "a b", "--layer", "7"])
    assert bad.exit_code == 2 and "--layer 7" in bad.output


def test_align_output(copy_model_dir, copy_lines):
    """--align: one alignment list per line, every index inside both sentences; empty lines get []."""
    lines = copy_lines[:6] + [""]
    result = CliRunner().invoke(
        main,
        ["translate", "-m", str(copy_model_dir), "--align", "--format", "jsonl"],
        input="\n".join(lines) + "\n",
    )
    records = [json.loads(r) for r in result.stdout.splitlines()]
    assert len(records) == len(lines)
    for rec in records:
        n_src, n_tgt = len(rec["source"].split()), len(rec["translation"].split())
        assert all(0 <= s < n_src and 0 <= t < n_tgt for s, t in rec["alignment"])
        assert {t for _, t in rec["alignment"]} == set(range(n_tgt))  # every target word is aligned
    assert records[-1]["alignment"] == []
    tsv = CliRunner().invoke(
        main, ["translate", "-m", str(copy_model_dir), "--align", "--format", "tsv", copy_lines[0]]
    )
    assert len(tsv.stdout.rstrip("\n").split("\t")) == 4


def test_piece_words_and_alignment_by_hand():
    """Pieces map to words at '▁'; argmax links follow the attention matrix."""
    assert piece_words(["▁The", "▁anim", "al", "."], by_space=True) == [0, 1, 1, 1]
    assert piece_words(["我", "们", "好"], by_space=False) == [0, 1, 2]
    cross = torch.tensor(
        [[0.1, 0.8, 0.1, 0.0], [0.7, 0.2, 0.1, 0.0], [0.0, 0.0, 0.1, 0.9]]
    )  # T=2+EOS, S=3+EOS
    words = piece_words(["▁a", "▁b", "c"], by_space=True), piece_words(["▁x", "▁y"], by_space=True)
    assert align_words(cross, *words) == [
        (1, 0),
        (0, 1),
    ]


def test_attention_command_draws_an_additive_model(tmp_path, copy_model_dir, copy_lines):
    """`mtcli attention` works for a model whose cross-attention is additive: each drawn row is
    a distribution over the source tokens."""
    from dataclasses import replace

    from mtcli.model.transformer import Seq2Seq
    from mtcli.store.checkpoint import SaveRequest, load_model, save_model

    loaded = load_model(copy_model_dir)
    torch.manual_seed(0)
    additive = Seq2Seq(replace(loaded.model.cfg, attention="additive"))
    save_model(additive, tmp_path / "additive", SaveRequest(tokenizer_dir=copy_model_dir))
    png = tmp_path / "h.png"
    result = CliRunner().invoke(
        main, ["attention", "-m", str(tmp_path / "additive"), copy_lines[0], "--png", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert "cross attention" in result.output and png.read_bytes()[:4] == b"\x89PNG"
    src, mask = _padded_src(additive)
    hyps = beam_search(additive.eval(), src, mask, beam_size=2, with_attention=True, max_len_b=5)
    for row, hyp in zip(mask, hyps, strict=True):
        cross = hyp[0].attention.cross[-1]  # (H, T, S real)
        torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]))
        assert cross.shape[-1] == int(row.sum())


def test_chinese_labels_are_drawn_in_a_font_that_has_them(tmp_path, monkeypatch):
    """Without a CJK font on the machine, --png draws Chinese labels in the carried subset font
    (every label character has a glyph there) and prints no glyph warnings; a system font
    with the characters is taken first where there is one."""
    import warnings

    from matplotlib import font_manager

    from mtcli.cli import heatmap

    labels = ["▁为什么", "我们", "工作", "？", "</s>"]
    monkeypatch.setattr(heatmap, "_system_font_with", lambda characters: None)
    families = heatmap.label_fonts(labels)
    assert families[0] == "sans-serif" and len(families) == 2
    path = font_manager.findfont(font_manager.FontProperties(family=[families[1]]))
    assert path == str(heatmap.CARRIED_FONT)
    cjk = {c for label in labels for c in label if "\u3000" <= c <= "\uffef"}
    assert cjk <= heatmap._characters(path)
    assert heatmap.label_fonts(["▁Why", "do"]) == ["sans-serif"]  # nothing missing: as before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_png(Heatmap(torch.full((5, 5), 0.2), labels, labels, "t"), tmp_path / "zh.png")
    assert not [w for w in caught if "Glyph" in str(w.message)]
    assert (tmp_path / "zh.png").read_bytes()[:4] == b"\x89PNG"


def test_the_carried_font_says_its_licence():
    """The subset font ships with its origin and licence beside it (Apache-2.0)."""
    from mtcli.cli.heatmap import CARRIED_FONT

    source = (CARRIED_FONT.parent / "SOURCE.md").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in source and CARRIED_FONT.stat().st_size < 1_500_000
