"""Which models are installed, where they are found, and which one a name or a direction means.

Models are found by name in the folders of $MTCLI_MODEL_PATH (colon-separated, searched
first), then among the pulled ones (`mtcli models pull`, user_models_dir), then among the
shipped models, which travel inside the package (mtcli/models in a wheel; the top-level
models/ of a source checkout). Which language a line is in is mtcli.text.language's to say.

Stdlib only: listing models and choosing one reads config.json and the model card, no weights.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mtcli.errors import UserError
from mtcli.store.model_dir import CONFIG_FILE, WEIGHTS_FILE, read_safetensors_header

CARD_FILE = "README.md"


def shipped_models_dir() -> Path:
    """mtcli/models inside an installed wheel, else the top-level models/ of a checkout."""
    package = Path(__file__).resolve().parents[1]  # mtcli/
    inside = package / "models"
    return inside if inside.is_dir() else package.parent / "models"


def user_models_dir() -> Path:
    """Where `mtcli models pull` puts the models it brings: $XDG_DATA_HOME/mtcli/models, else
    ~/.local/share/mtcli/models (data the user keeps, unlike the cache beside it)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "mtcli" / "models"


def search_path() -> list[Path]:
    """Folders holding model directories: $MTCLI_MODEL_PATH's, the pulled ones, the shipped ones."""
    extra = [Path(p) for p in os.environ.get("MTCLI_MODEL_PATH", "").split(os.pathsep) if p]
    return [*extra, user_models_dir(), shipped_models_dir()]


@dataclass
class ModelInfo:
    """What `mtcli models` shows of one installed model, read without loading its weights."""

    name: str
    path: Path
    src_lang: str
    tgt_lang: str
    card: dict  # key: value lines of the model card's front matter (scores, data)

    @property
    def direction(self) -> str:
        return f"{self.src_lang}->{self.tgt_lang}"

    @property
    def size_mb(self) -> float:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file()) / 1e6

    @property
    def parameters(self) -> int:
        """Parameters counted from the weights file's header (tied weights are stored once)."""
        header = read_safetensors_header(self.path / WEIGHTS_FILE)
        total = 0
        for entry in header.values():
            count = 1
            for dim in entry.get("shape", []):
                count *= dim
            total += count
        return total


def read_card(path: Path) -> dict:
    """The `key: value` lines between the two `---` lines that open a model card (as on model
    hubs), e.g. `test_bleu: 36.46`; {} when the card has none."""
    card = path / CARD_FILE
    if not card.is_file():
        return {}
    lines = card.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def describe(path: Path) -> ModelInfo | None:
    """A model directory's info, or None when `path` is not one."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not (path / WEIGHTS_FILE).is_file():
        return None
    src, tgt = str(config.get("src_lang", "")), str(config.get("tgt_lang", ""))
    return ModelInfo(path.name, path, src, tgt, read_card(path))


def installed() -> list[ModelInfo]:
    """Every model on the search path; a name found twice is the first one's (path order)."""
    found: dict[str, ModelInfo] = {}
    for folder in search_path():
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.is_dir() and path.name not in found and (info := describe(path)):
                found[path.name] = info
    return list(found.values())


def find(name_or_path: str, option: str = "-m") -> Path:
    """-m NAME or -m DIR: a directory as given, else an installed model of that name."""
    path = Path(name_or_path)
    if path.exists() or path.with_name(path.name + ".old").exists():
        return path
    if os.sep not in name_or_path:
        for info in installed():
            if info.name == name_or_path:
                return info.path
    names = ", ".join(i.name for i in installed()) or "none"
    raise UserError(
        f"{option} {name_or_path}: no such model directory or installed model ({names})"
    )


def for_direction(src: str | None, tgt: str | None) -> ModelInfo | None:
    """The installed model from `src` to `tgt` (either may be None: any); see `choose`."""
    return choose(src, tgt).model


@dataclass
class Choice:
    """The model chosen for a direction, and the others that could serve it when one of them
    is the user's (empty when only shipped models do)."""

    model: ModelInfo | None
    others: list[ModelInfo]

    def note(self) -> str | None:
        """One line saying which model was used when a user's model could have served too."""
        if self.model is None or not self.others:
            return None
        chosen, src = self.model, self.model.src_lang
        ranked = sorted(self.others, key=is_shipped)  # the user's first: the likely surprise
        others = ", ".join(f"{o.name} ({o.direction})" for o in ranked)
        hint = ranked[0]
        how = f"-m {hint.name}"
        if hint.tgt_lang != chosen.tgt_lang:
            how = f"--to {hint.tgt_lang} or {how}"
        return f"{src}: used {chosen.name} ({chosen.direction}); also from {src}: {others}; {how} chooses"


def choose(src: str | None, tgt: str | None) -> Choice:
    """The installed model from `src` to `tgt`, and the others that also would do.

    With no target named, the shipped models come first: they are the routes the README
    describes (English -> en-zh-tiny, Chinese -> zh-en-tiny), so a model added to
    $MTCLI_MODEL_PATH never changes what language plain input comes out in. With a target
    named, the search path's order holds (the user's folders first). Among the shipped models
    of one direction (a teacher and its student) the first by name is the default.
    """
    found = [
        info
        for info in installed()
        if (src is None or info.src_lang == src) and (tgt is None or info.tgt_lang == tgt)
    ]
    if tgt is None:
        found.sort(key=lambda info: not is_shipped(info))  # stable: path order otherwise
    if not found:
        return Choice(None, [])
    # the shipped models of one direction (a teacher and its student) are a documented choice;
    # a user's model beside them is not, and is named
    users = any(not is_shipped(info) for info in found)
    return Choice(found[0], found[1:] if users else [])


def is_shipped(info: ModelInfo) -> bool:
    return info.path.parent.resolve() == shipped_models_dir().resolve()


# a published model for a pair, as `mtcli models pull` takes it: OPUS-MT's, which cover most
# pairs (Helsinki-NLP/opus-mt-en-zh, opus-mt-zh-en)
PUBLISHED = "Helsinki-NLP/opus-mt-{src}-{tgt}"
# the shipped models know 25k short Tatoeba sentences: when more than this share of a run's
# lines are flagged (and at least MOSTLY_FLAGGED_LINES), the text is not theirs
MOSTLY_FLAGGED = 0.5
MOSTLY_FLAGGED_LINES = 5


def bigger_model_hint(path: Path | None, language: str, flagged: int, lines: int) -> str | None:
    """Where most of a run's lines were flagged and a shipped model translated them (`path`,
    or the one from `language` where none was chosen), the line naming the command that gets a
    published model for that pair; else None."""
    if lines < MOSTLY_FLAGGED_LINES or flagged <= MOSTLY_FLAGGED * lines:
        return None
    info = for_direction(language, None) if path is None else describe(Path(path))
    if info is None or not is_shipped(info):
        return None
    pair = f"{info.src_lang}->{info.tgt_lang}"
    repo = PUBLISHED.format(src=info.src_lang, tgt=info.tgt_lang)
    return (
        f"{flagged} of {lines} lines flagged: {info.name} is small and knows short everyday "
        f"sentences; for text like yours, `mtcli models pull {repo}` gets a published "
        f"{pair} model (it needs the network), then -m {repo.split('/')[1]}"
    )
