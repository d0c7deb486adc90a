"""`mtcli data get NAME... --out DIR`: parallel corpora from mtdata's catalogue (WMT's news
commentary and test sets, OPUS, Tatoeba, FLORES, ParaCrawl, ...; `mtdata list -l eng-zho`
names them), through mtdata itself: its index, its download cache ($MTDATA, else ~/.mtdata:
each file once, checked and resumable) and its parsers of every format those sources ship.
Own code here would be one parser per source and would age with them.

What lands in DIR is mtdata's own layout (train.eng and train.zho: every NAME merged, one
sentence a line; train-parts/ one pair of files per NAME; references.bib) plus get.json,
mtcli's record of what was fetched, which marks the directory as mtcli's to replace. The
next step is `mtcli data prepare --src DIR/train.eng --tgt DIR/train.zho`, which the command
prints. Built beside DIR and renamed into place: a kill leaves no half corpus.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mtcli import files
from mtcli.data.language_codes import two_letter
from mtcli.errors import UserError

MARKER = "get.json"


def _mtdata():
    """mtdata's modules, imported only here: mtdata sets up the root logger when imported."""
    try:
        import mtdata
        from mtdata.data import Dataset
        from mtdata.index import DatasetId
        from mtdata.iso.bcp47 import bcp47
    except ImportError:
        raise UserError("mtcli data get needs mtdata: pip install 'mtcli[data]'") from None
    return mtdata, Dataset, DatasetId, bcp47


def _dataset_ids(names: list[str], DatasetId) -> list:
    """Each NAME as mtdata's id (GROUP-NAME-VERSION-LANG1-LANG2), one line for one that is not."""
    ids = []
    for name in dict.fromkeys(names):
        try:
            did = DatasetId.parse(name)
        except Exception:  # mtdata raises a bare Exception for a malformed id
            did = None
        if did is None or len(did.langs) != 2:
            raise UserError(
                f"{name}: not an mtdata parallel dataset id (GROUP-NAME-VERSION-LANG1-LANG2, "
                "e.g. Statmt-news_commentary-16-eng-zho; `mtdata list -l eng-zho` lists them)"
            )
        ids.append(did)
    return ids


def _languages(langpair: str | None, first, bcp47) -> tuple:
    """The pair to write, source first: --langpair (en-zh), else the first NAME's order."""
    if not langpair:
        return tuple(bcp47(str(lang)) for lang in first.langs)
    parts = langpair.split("-")
    if len(parts) != 2 or not all(parts):
        raise UserError(f"--langpair {langpair}: expected SRC-TGT, e.g. en-zh")
    return tuple(bcp47(p) for p in parts)


def _short(tag) -> str:
    """mtdata's language tag (eng, zho_Hans) as mtcli names languages (en, zh)."""
    return two_letter(str(tag).split("_")[0])


def get_corpus(
    names: list[str], out: str | Path, langpair: str | None = None, force: bool = False
) -> dict:
    """Fetch the mtdata datasets `names` into `out` (see the module); returns get.json's record."""
    out = Path(out)
    files.check_replaceable(out, "mtdata", "--out", force)
    mtdata, Dataset, DatasetId, bcp47 = _mtdata()
    ids = _dataset_ids(names, DatasetId)
    langs = _languages(langpair, ids[0], bcp47)
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.CRITICAL)  # mtdata logs each step; errors are ours
    try:
        for entry in _entries(Dataset, ids):
            if not entry.is_compatible(langs):
                raise UserError(f"{entry.did}: not a {_short(langs[0])}-{_short(langs[1])} dataset")
        with files.built_aside(out, MARKER) as tmp:
            _prepare(Dataset, langs, tmp, ids, Path(mtdata.cache_dir))
            record = _record(tmp, ids, langs)
            files.write_json(tmp / MARKER, record)
    finally:
        logging.getLogger().setLevel(quiet)
    return record


def _entries(Dataset, ids: list) -> list:
    try:
        return Dataset.resolve_entries(ids)
    except Exception as e:  # mtdata's bare Exception for an id its index lacks
        raise UserError(f"{str(e).splitlines()[0]}") from None


def _prepare(Dataset, langs: tuple, tmp: Path, ids: list, cache: Path) -> None:
    """mtdata's own fetch, parse and merge into `tmp`; a failed download is one line."""
    try:
        Dataset.prepare(
            langs,
            tmp,
            dataset_ids={"train": ids},
            cache_dir=cache,
            merge_train=True,
            fail_on_error=True,
        )
    except UserError:
        raise
    except Exception as e:  # requests', mtdata's and the parsers' own errors
        cause = e.__cause__ or e
        raise UserError(
            f"mtdata could not get {', '.join(map(str, ids))} ({type(cause).__name__}: "
            f"{str(cause).splitlines()[0][:200] if str(cause) else 'no detail'}); offline, "
            f"it reads only what its cache ({cache}) already holds"
        ) from None


def _record(tmp: Path, ids: list, langs: tuple) -> dict:
    src, tgt = (f"train.{lang}" for lang in langs)
    for name in (src, tgt):
        if not (tmp / name).is_file():
            raise UserError(f"mtdata wrote no {name} for {', '.join(map(str, ids))}")
    with open(tmp / src, "rb") as f:
        pairs = sum(1 for _ in f)
    return {
        "datasets": [str(d) for d in ids],
        "src": src,
        "tgt": tgt,
        "pairs": pairs,
        "src_lang": _short(langs[0]),
        "tgt_lang": _short(langs[1]),
    }
