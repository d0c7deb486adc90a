"""Published test sets through sacrebleu's own catalogue and cache (`mtcli eval --test-set wmt20
--langpair en-zh`): the same source and reference lines, processed by the same code, as the
scores papers and leaderboards print with sacrebleu, so mtcli's figures compare with theirs.

sacrebleu downloads a set once into $SACREBLEU (default ~/.sacrebleu: NAME/raw/ for what it
fetched, NAME/NAME.PAIR.src|ref for the lines) and reads it from there afterwards, offline.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from mtcli.errors import UserError


@dataclass
class PublishedSet:
    name: str
    langpair: str
    source: Path
    references: list[Path]

    @property
    def src_lang(self) -> str:
        return self.langpair.split("-")[0]

    @property
    def tgt_lang(self) -> str:
        return self.langpair.split("-")[1]


def published_set(name: str, langpair: str | None) -> PublishedSet:
    """The files of `name`/`langpair`, downloaded by sacrebleu if its cache lacks them; one
    line naming the option for an unknown set or pair, or a download that failed."""
    from sacrebleu.dataset import DATASETS
    from sacrebleu.utils import SACREBLEU_DIR

    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else " (sacrebleu --list lists them)"
        raise UserError(f"--test-set {name}: not in sacrebleu's catalogue{hint}")
    dataset = DATASETS[name]
    pairs = sorted(dataset.langpairs)
    if langpair is None:
        raise UserError(f"--test-set {name} needs --langpair: one of {', '.join(pairs)}")
    if langpair not in dataset.langpairs:
        raise UserError(f"--langpair {langpair}: {name} has {', '.join(pairs)}")
    try:
        source = Path(dataset.get_source_file(langpair))
        references = [Path(p) for p in dataset.get_reference_files(langpair)]
    except (OSError, SystemExit) as e:  # urllib's URLError is an OSError; a bad MD5 exits
        where = os.path.join(SACREBLEU_DIR, dataset.name.replace("/", "_"))
        raise UserError(
            f"--test-set {name}: not in sacrebleu's cache ({where}) and its download failed "
            f"({_reason(e)}); with internet, `sacrebleu -t {name} -l {langpair} --echo src` fetches it"
        ) from None
    if not references:
        raise UserError(
            f"--test-set {name} --langpair {langpair}: sacrebleu has no reference for it"
        )
    return PublishedSet(name, langpair, source, references)


def _reason(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return "a checksum or certificate error; sacrebleu logged it above"
    return str(getattr(e, "reason", None) or e).splitlines()[0][:120]
