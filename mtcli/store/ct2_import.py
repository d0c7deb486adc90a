"""CTranslate2 models made elsewhere, as mtcli's CTranslate2 engine runs them (`--engine
ctranslate2`: translate, eval and serve under mtcli's text layer):

- `mtcli import ctranslate2 DIR`: what ct2-transformers-converter and CTranslate2's other
  converters write (model.bin, config.json, shared_vocabulary.json or source_ and
  target_vocabulary.json, or the older .txt vocabularies) with the tokenizer files copied
  beside them (source.spm and target.spm, or one sentencepiece.model);
- `mtcli import argos FILE.argosmodel`: an Argos Translate package (a zip of one folder:
  metadata.json, model/ in CTranslate2's format, sentencepiece.model, optional stanza/).

The result is the CTranslate2 files as they were, the sentencepiece models, tokenizer.json, and
mtcli.json: languages, positions and how pieces go in (engines/ct2.py's Feeding). Those are
read from what each source says, never guessed:
- CTranslate2's `add_source_eos`: CTranslate2 adds </s> itself, mtcli adds none;
- otherwise a decoder that starts from </s> is Marian's and fairseq's convention, trained with
  </s> after the source (ct2-transformers-converter's MarianMT leaves that </s> to the caller's
  tokenizer), so mtcli adds it; one that starts from <s> is OpenNMT-py's (argos-train's),
  trained without; --source-eos / --no-source-eos overrides; an mtcli export keeps its own;
- an Argos package's `target_prefix`: every output starts with it, and it leaves the text as
  Argos removes it; its stanza/ sentence splitter is not taken (mtcli's text layer splits);
- positions: a CTranslate2 config does not say them; sources are cut at 512 pieces (Marian's
  and OpenNMT-py's usual) unless --max-positions says otherwise.
Not taken: Argos's BPE packages (bpe.model, subword-nmt and Moses): mtcli reads sentencepiece.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from mtcli import files
from mtcli.data.language_codes import two_letter
from mtcli.data.textio import read_json_object
from mtcli.errors import UserError
from mtcli.store.model_languages import language_tokens, languages, target_token

MARKER = "mtcli.json"  # as ct2_export.py writes it, and engines/ct2.py reads it
DEFAULT_POSITIONS = 512
# the sentencepiece models beside a CTranslate2 model, by layout: (source, target)
SPM_LAYOUTS = (
    ("source.spm", "target.spm"),  # ct2-transformers-converter --copy_files of a MarianMT
    ("sentencepiece.model", "sentencepiece.model"),  # Argos
    ("spm.model", "spm.model"),  # mtcli's own export, joint
    ("src.model", "tgt.model"),  # mtcli's own export, separate
)
PAD_PIECES = ("<pad>", "<blank>")  # OpenNMT-py calls its padding <blank>
MAX_PACKAGE_BYTES = 8 << 30  # unpacked; the largest Argos packages are about 1 GB
MAX_PACKAGE_RATIO = 200  # unpacked / packed: model weights never compress like that


def vocabulary_files(src: Path) -> list[Path]:
    """The vocabulary files of a CTranslate2 directory: one shared, or source and target
    (.json, else the .txt CTranslate2 wrote before 3.0)."""

    def one(stem: str) -> Path | None:
        return next((p for p in (src / f"{stem}.json", src / f"{stem}.txt") if p.is_file()), None)

    if shared := one("shared_vocabulary"):
        return [shared]
    sides = [one("source_vocabulary"), one("target_vocabulary")]
    if None in sides:
        raise UserError(
            f"{src}: no vocabulary (a CTranslate2 model has shared_vocabulary.json, or "
            "source_vocabulary.json and target_vocabulary.json)"
        )
    return sides


def read_vocabulary(path: Path) -> list[str]:
    """A CTranslate2 vocabulary: a JSON list of tokens, or one token a line (.txt)."""
    try:
        if path.suffix == ".json":
            tokens = json.loads(path.read_text(encoding="utf-8"))
        else:
            tokens = path.read_text(encoding="utf-8").split("\n")
            tokens = tokens[:-1] if tokens and tokens[-1] == "" else tokens
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: unreadable ({e})") from None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise UserError(f"{path}: a CTranslate2 vocabulary is a list of tokens")
    return tokens


def sentencepiece_files(src: Path) -> tuple[str, str]:
    """(source, target) sentencepiece model names beside the model; one line when none."""
    for source, target in SPM_LAYOUTS:
        if (src / source).is_file() and (src / target).is_file():
            return source, target
    if (src / "bpe.model").is_file():
        raise UserError(
            f"{src}: a BPE (subword-nmt) package; mtcli reads sentencepiece models only"
        )
    raise UserError(
        f"{src}: no sentencepiece model beside the model (source.spm and target.spm, or "
        "sentencepiece.model; ct2-transformers-converter --copy_files source.spm target.spm)"
    )


def _check_pieces(src: Path, name: str, vocab: list[str]) -> None:
    """The sentencepiece model is the vocabulary's: most of its pieces are tokens of it (a
    model from another directory would give <unk> for nearly every piece)."""
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(src / name))
    except (OSError, RuntimeError) as e:
        raise UserError(f"{src / name}: not a sentencepiece model ({e})") from None
    known = set(vocab)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if sum(p in known for p in pieces) < 0.5 * len(pieces):
        raise UserError(
            f"{src / name}: most of its pieces are not in the model's vocabulary; "
            "it is another model's tokenizer"
        )


def feeding(config: dict, target_vocab: list[str], source_eos: bool | None, own: dict) -> dict:
    """mtcli.json's Feeding fields for a model with this CTranslate2 config (see the module)."""
    eos = config.get("eos_token", "</s>")
    if config.get("add_source_eos"):
        adds = False  # CTranslate2 adds it
    elif source_eos is not None:
        adds = source_eos
    elif "source_eos" in own or own.get("exported_from"):  # mtcli's own export
        adds = bool(own.get("source_eos", True))
    else:
        adds = config.get("decoder_start_token") == eos
    start = config.get("decoder_start_token")
    never = [t for t in (*PAD_PIECES, config.get("bos_token", "<s>"), start) if t and t != eos]
    known = set(target_vocab)
    return {"source_eos": adds, "never_generate": [t for t in dict.fromkeys(never) if t in known]}


def _read_config(src: Path) -> dict:
    return read_json_object(src / "config.json", "missing (a CTranslate2 model has it)")


def _check_loads(path: Path) -> None:
    """CTranslate2 itself reads the directory (model.bin's version and shapes, vocabulary sizes)."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "importing a CTranslate2 model needs ctranslate2: pip install 'mtcli[ct2]'"
        ) from None
    try:
        ctranslate2.Translator(str(path), device="cpu", intra_threads=1)
    except (RuntimeError, ValueError) as e:
        raise UserError(
            f"{path}: CTranslate2 cannot load it ({str(e).splitlines()[0][:200]})"
        ) from None


def write_ct2_model(
    src: Path, out: Path, marker: dict, where: str, source_eos: bool | None, own: dict
) -> None:
    """`src`'s CTranslate2 files and sentencepiece models as an mtcli CTranslate2 directory at
    `out`, built aside and checked by CTranslate2 before it takes `out`'s place; `marker`
    (languages, positions) and the feeding `feeding` finds (--source-eos, `own`: an mtcli
    export's mtcli.json) become mtcli.json; `where` is recorded as imported_from."""
    config = _read_config(src)
    if not (src / "model.bin").is_file():
        raise UserError(f"{src / 'model.bin'}: missing (a CTranslate2 model has it)")
    vocabs = vocabulary_files(src)
    source_spm, target_spm = sentencepiece_files(src)
    target_vocab = read_vocabulary(vocabs[-1])
    _check_pieces(src, source_spm, read_vocabulary(vocabs[0]))
    _check_pieces(src, target_spm, target_vocab)
    marker = {**marker, **feeding(config, target_vocab, source_eos, own)}
    with files.built_aside(out, MARKER) as tmp:
        for name in dict.fromkeys(
            ["model.bin", "config.json", *(v.name for v in vocabs), source_spm, target_spm]
        ):
            shutil.copyfile(src / name, tmp / name)
        tokenizer = {
            "joint": source_spm == target_spm,
            "src_model": source_spm,
            "tgt_model": target_spm,
        }
        files.write_json(tmp / "tokenizer.json", tokenizer)
        _check_loads(tmp)
        files.write_json(tmp / MARKER, {**marker, "imported_from": where})


def _positions(asked: int | None, own: dict) -> int:
    return asked or int(own.get("max_positions") or DEFAULT_POSITIONS)


def import_ctranslate2(
    src: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    langs: dict | None = None,
    source_eos: bool | None = None,
    max_positions: int | None = None,
) -> dict:
    """Write the CTranslate2 directory `src` as an mtcli CTranslate2 model at `out`; returns
    its mtcli.json. Languages: --from/--to, else an mtcli export's own, else what
    tokenizer_config.json, metadata.json or an OPUS-MT name says."""
    src, out = Path(src), Path(out)
    files.check_replaceable(out, "ct2", "--out", force, reads=[src])
    if not src.is_dir():
        raise UserError(f"{src}: not a directory (a CTranslate2 model is one)")
    own = read_json_object(src / MARKER) if (src / MARKER).is_file() else {}
    tok_file = src / "tokenizer_config.json"
    tokenizer = read_json_object(tok_file) if tok_file.is_file() else {}
    langs = {k: v for k, v in (langs or {}).items() if v}
    tokens = language_tokens(read_vocabulary(vocabulary_files(src)[0]))
    token, langs = target_token(tokens, langs, src)
    langs = languages(
        src,
        tokenizer,
        src.name,
        {**{k: own[k] for k in ("src_lang", "tgt_lang") if k in own}, **langs},
    )
    marker = {
        **langs,
        "max_positions": _positions(max_positions, own),
        "generation": own.get("generation", {}),
    }
    if token:  # a multilingual-target Marian's: each source starts with its language's token
        marker |= {"source_prefix": [token], "target_tokens": tokens}
    write_ct2_model(src, out, marker, str(src), source_eos, own)
    return written(out)


def import_argos(
    package: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    source_eos: bool | None = None,
    max_positions: int | None = None,
) -> dict:
    """Write the Argos package `package` as an mtcli CTranslate2 model at `out`; returns its
    mtcli.json. The zip is checked before anything is unpacked, and only what is used is."""
    package, out = Path(package), Path(out)
    files.check_replaceable(out, "ct2", "--out", force, reads=[package])
    members, root = _package_members(package)
    work = files.temp_dir_beside(out)
    try:
        with zipfile.ZipFile(package) as z:
            for name in members:
                target = work / _relative(PurePosixPath(name), root)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(name) as f, open(target, "wb") as w:
                    shutil.copyfileobj(f, w)
        meta = read_json_object(work / "metadata.json")
        model = work / "model"
        if not model.is_dir():
            raise UserError(
                f"{package}: no model/ folder (an Argos package holds its CTranslate2 model there)"
            )
        for name in ("sentencepiece.model", "bpe.model"):
            if (work / name).is_file():
                shutil.copyfile(work / name, model / name)
        own = read_json_object(model / MARKER) if (model / MARKER).is_file() else {}
        marker = {
            **_argos_languages(meta, package),
            "max_positions": _positions(max_positions, own),
            "generation": own.get("generation", {}),
            "target_prefix": [meta["target_prefix"]] if meta.get("target_prefix") else [],
        }
        write_ct2_model(model, out, marker, str(package), source_eos, own)
    except zipfile.BadZipFile as e:
        raise UserError(f"{package}: a damaged zip ({e})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return written(out)


def written(out: Path) -> dict:
    """The imported model's mtcli.json, and whether its sources end with </s> (mtcli's or
    CTranslate2's own)."""
    marker = read_json_object(out / MARKER)
    return {
        **marker,
        "ends_with_eos": marker["source_eos"] or bool(_read_config(out).get("add_source_eos")),
    }


def _argos_languages(meta: dict, package: Path) -> dict[str, str]:
    codes = {"src_lang": meta.get("from_code"), "tgt_lang": meta.get("to_code")}
    if not all(isinstance(c, str) and c for c in codes.values()):
        raise UserError(f"{package}: metadata.json names no from_code and to_code")
    return {k: two_letter(v) for k, v in codes.items()}


def _package_members(package: Path) -> tuple[list[str], str]:
    """The package's files that mtcli uses (metadata.json, model/, the sentencepiece model), and
    the one folder they are in; a zip that is not a package, has names outside its folder, or
    would unpack beyond any real package's size is one line, before anything is written."""
    if not zipfile.is_zipfile(package):
        what = "missing" if not package.exists() else "not a zip (an .argosmodel package is one)"
        raise UserError(f"{package}: {what}")
    try:
        with zipfile.ZipFile(package) as z:
            infos = z.infolist()
    except zipfile.BadZipFile as e:
        raise UserError(f"{package}: a damaged zip ({e})") from None
    metas = [i.filename for i in infos if PurePosixPath(i.filename).name == "metadata.json"]
    roots = sorted(str(PurePosixPath(m).parent) for m in metas)
    if not roots:
        raise UserError(f"{package}: no metadata.json (not an Argos package)")
    root = roots[0]
    wanted = [i for i in infos if not i.is_dir() and _wanted(PurePosixPath(i.filename), root)]
    for info in wanted:
        parts = PurePosixPath(info.filename).parts
        if info.filename.startswith("/") or ".." in parts:
            raise UserError(f"{package}: {info.filename!r} lies outside the package's folder")
    total = sum(i.file_size for i in wanted)
    packed = sum(i.compress_size for i in wanted) or 1
    if total > MAX_PACKAGE_BYTES or total > MAX_PACKAGE_RATIO * packed:
        raise UserError(
            f"{package}: would unpack to {total / 1e6:,.0f} MB from {packed / 1e6:,.1f} MB; "
            "not a real package (refused before unpacking)"
        )
    return [i.filename for i in wanted], root


def _relative(name: PurePosixPath, root: str) -> PurePosixPath | None:
    """`name` below the package's folder `root` ("." for a zip without one), else None."""
    if root == ".":
        return name
    try:
        return name.relative_to(root)
    except ValueError:
        return None


def _wanted(name: PurePosixPath, root: str) -> bool:
    rel = _relative(name, root)
    top = rel.parts[0] if rel and rel.parts else ""
    return top in ("metadata.json", "model", "sentencepiece.model", "bpe.model")
