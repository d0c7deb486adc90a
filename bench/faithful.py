"""Faithfulness on lines written for it: spans kept, sentences kept, and fluency around them.

    python bench/faithful.py [--en-zh models/en-zh-tiny] [--zh-en models/zh-en-tiny] [--name faithful]

bench/faithful/{en-zh,zh-en}.tsv hold lines with numbers, dates, phone numbers, prices, URLs,
e-mail addresses, software placeholders, code, model names, terms of the other script, inline
tags, casing and two- or three-sentence lines, each with a reference written for it and a
*plain twin* (the span replaced by ordinary words) with its own reference. Per direction:

- spans kept: lines whose translation holds every span of its source, as the target writes it
  (text/render.py), and every inline tag, none of them empty;
- sentences lost: lines whose translation holds fewer sentences than the source;
- chrF of the span lines with the spans cut out of hypothesis and reference, chrF of the twins,
  and the gap (twins minus span lines): what a kept span costs the sentence around it;
- time per line of span lines against their twins, translated one line at a time, interleaved
  in one process, and how many sentences were decoded a second time under constraints;
- tags placed: on bench/faithful/tags-{en-zh,zh-en}.tsv (lines with inline tags, and what each
  tag must enclose), how many tags enclose one of those translations, and how many come back
  empty, for each of the two ways a tag can travel: as the placeholder pieces the model learned
  (plain text) and projected through the cross-attention (`--html`).

Writes bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, write_result  # noqa: E402

TABLES = REPO / "bench" / "faithful"
TAG = re.compile(r"</?[A-Za-z][^<>]*>")


def read_table(direction: str) -> list[dict]:
    rows = []
    for line in (TABLES / f"{direction}.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            kind, src, ref, twin, twin_ref = line.split("\t")
            rows.append(dict(kind=kind, src=src, ref=ref, twin=twin, twin_ref=twin_ref))
    return rows


def read_tag_table(direction: str) -> list[tuple[str, list[list[str]]]]:
    """Each line with tags, and for each of its tags what it may enclose."""
    rows = []
    for line in (TABLES / f"tags-{direction}.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            src, *wants = line.split("\t")
            rows.append((src, [w.split("|") for w in wants]))
    return rows


def expected(src: str, src_lang: str, tgt_lang: str) -> list[str]:
    """What a faithful translation of `src` must hold: each span as the target writes it, and
    each tag."""
    from mtcli.text.render import render
    from mtcli.text.spans import find_spans

    tags = [(m.start(), m.end()) for m in TAG.finditer(src)]
    spans = [
        render(s, tgt_lang)
        for s in find_spans(src, src_lang)
        if not any(a <= s.start < b for a, b in tags)
    ]
    return spans + [src[a:b] for a, b in tags]


def cut(text: str, pieces: list[str]) -> str:
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, " ")
    return re.sub(r"\s+", " ", text).strip()


def translate_rows(model: str, rows: list[dict]) -> dict:
    """Each span line and its twin translated alone, interleaved, and timed."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    translator = build_translator([Path(model)], DecodeConfig(), EngineOptions())
    translator.translate_chunk([rows[0]["twin"]])  # warm up
    out: dict = {"hyps": [], "twin_hyps": [], "seconds": {"span": 0.0, "twin": 0.0}}
    for row in rows:  # interleaved: the same machine state for a line and its twin
        for key, name in (("src", "span"), ("twin", "twin")):
            started = time.perf_counter()
            text = translator.translate_chunk([row[key]])[0].text
            out["seconds"][name] += time.perf_counter() - started
            out["hyps" if key == "src" else "twin_hyps"].append(text)
    out["decoded_again"] = getattr(translator, "decoded_again", None)
    return out


def translate_tags(model: str, rows) -> dict:
    """The tag lines translated as plain text (the learned pieces) and as HTML (projected)."""
    from mtcli.config import DecodeConfig
    from mtcli.engines.build import EngineOptions, build_translator

    out = {}
    for way, as_html in (("learned", False), ("projected", True)):
        translator = build_translator([Path(model)], DecodeConfig(), EngineOptions(html=as_html))
        out[way] = [r.text for r in translator.translate_chunk([src for src, _ in rows])]
    return out


def tags_placed(rows, hyps: list[str]) -> dict:
    """How many tags enclose one of their accepted translations, and how many are empty."""
    placed = empty = total = 0
    for (_, wants), hyp in zip(rows, hyps, strict=True):
        inner = [m.group(2) for m in re.finditer(r"<([A-Za-z]+)[^<>]*>(.*?)</\1>", hyp)]
        inner += [""] * (len(wants) - len(inner))  # a tag lost counts as not placed
        for text, accepted in zip(inner, wants, strict=False):
            bare = re.sub(r"<[^<>]*>", "", text).strip(" ，。,.!?！？").lower()
            placed += bare in {a.lower() for a in accepted}
            empty += not bare
            total += 1
    return {"tags": total, "placed": placed, "empty": empty}


def score(direction: str, rows: list[dict], done: dict) -> dict:
    """The measures of one direction's translations (see the module's docstring)."""
    from sacrebleu.metrics import CHRF

    from mtcli.text.sentences import split_sentences
    from mtcli.text.spans import lost_spans

    src_lang, tgt_lang = direction.split("-")
    hyps, n = done["hyps"], len(rows)
    lines, kept, lost_sentence = [], 0, 0
    for row, hyp in zip(rows, hyps, strict=True):
        lost = lost_spans(hyp, expected(row["src"], src_lang, tgt_lang))
        empty = re.findall(r"<([A-Za-z]+)[^<>]*></\1>", hyp)
        whole = len(split_sentences(hyp, tgt_lang)) >= len(split_sentences(row["src"], src_lang))
        kept += not lost and not empty
        lost_sentence += not whole
        lines.append(dict(kind=row["kind"], src=row["src"], hyp=hyp, lost=lost, empty_tags=empty,
                          sentences_kept=whole))  # fmt: skip
    wants = [expected(r["src"], src_lang, tgt_lang) for r in rows]
    cut_hyps = [cut(h, w) for h, w in zip(hyps, wants, strict=True)]
    cut_refs = [cut(r["ref"], w) for r, w in zip(rows, wants, strict=True)]
    chrf_spans = CHRF().corpus_score(cut_hyps, [cut_refs]).score
    chrf_twins = CHRF().corpus_score(done["twin_hyps"], [[r["twin_ref"] for r in rows]]).score
    seconds = done["seconds"]
    return {
        "lines": n, "spans_kept": kept, "sentences_lost": lost_sentence,
        "chrf_span_lines_cut": round(chrf_spans, 2), "chrf_twins": round(chrf_twins, 2),
        "gap": round(chrf_twins - chrf_spans, 2),
        "seconds_per_line": {k: round(v / n, 4) for k, v in seconds.items()},
        "time_ratio": round(seconds["span"] / seconds["twin"], 2),
        "decoded_again": done["decoded_again"], "translations": lines, "twins": done["twin_hyps"],
    }  # fmt: skip


def _shown(model: str) -> str:
    """A model's path as a result file records it: relative to the repository when inside it
    (no path of this machine in a tracked file), else its folder's name."""
    path = Path(model).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--en-zh", default=str(REPO / "models" / "en-zh-tiny"))
    parser.add_argument("--zh-en", default=str(REPO / "models" / "zh-en-tiny"))
    parser.add_argument("--name", default="faithful")
    # translations made elsewhere (an older mtcli: `--translate-only`), scored by this one
    parser.add_argument("--translate-only", help="Write the raw translations to this JSON file.")
    parser.add_argument("--translations", help="Score the raw translations of this JSON file.")
    args = parser.parse_args()
    models = {"en-zh": args.en_zh, "zh-en": args.zh_en}
    tables = {d: read_table(d) for d in models}
    if args.translations:
        done = json.loads(Path(args.translations).read_text(encoding="utf-8"))
    else:
        done = {d: translate_rows(models[d], tables[d]) for d in models}
        for d in models:
            done[d]["tag_hyps"] = translate_tags(models[d], read_tag_table(d))
    if args.translate_only:
        Path(args.translate_only).write_text(json.dumps(done, ensure_ascii=False), encoding="utf-8")
        return
    record = {d: {"model": _shown(models[d]), **score(d, tables[d], done[d])} for d in models}
    for d in models:
        tag_rows = read_tag_table(d)
        hyps = done[d].get("tag_hyps", {})
        record[d]["tags"] = {way: {**tags_placed(tag_rows, h), "translations": h}
                             for way, h in hyps.items()}  # fmt: skip
    for direction, r in record.items():
        print(
            f"{direction}: {r['spans_kept']}/{r['lines']} lines keep every span, "
            f"{r['sentences_lost']} lose a sentence; chrF span lines (spans cut) "
            f"{r['chrf_span_lines_cut']:.2f}, twins {r['chrf_twins']:.2f}, gap {r['gap']:+.2f}; "
            f"time {r['time_ratio']:.2f}x the twins', {r['decoded_again']} sentences decoded again"
        )
        for way, t in r["tags"].items():
            print(f"  tags {way}: {t['placed']}/{t['tags']} placed, {t['empty']} empty")
    print(f"wrote {write_result(args.name, record)}")


if __name__ == "__main__":
    main()
