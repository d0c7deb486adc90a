"""Placeholders a model is trained with: the tokenizer's pieces, word alignments, the training
pipeline that writes them (deterministic per seed, epoch and pair), and the text layer that
sends spans and tags as them and gives them back."""

from __future__ import annotations

import random

import pytest

from mtcli.data.alignment import LinkTable, align, grow_diag, save_links, words
from mtcli.data.placeholders import PIECE, all_pieces, span_piece, tag_pieces
from mtcli.data.tokenizer import BpeDropout, Tokenizer, add_placeholders
from mtcli.engines.result import Translation
from mtcli.errors import UserError
from mtcli.text.layer import TextLayer
from mtcli.text.placeholders import from_placeholders, inline_tags, to_placeholders
from mtcli.text.render import render, value_of
from mtcli.text.sentences import split_sentences
from mtcli.text.spans import find_spans
from mtcli.training.augment import Augmenter, Rates
from tests.conftest import REPO, run_mtcli

TATOEBA = REPO.parent / "shared" / "data" / "tatoeba-en-zh"


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """A BPE tokenizer trained here on Tatoeba's first lines, and the same with the
    placeholder pieces appended."""
    from mtcli.data.tokenizer import TokenizerOptions, train_tokenizer

    root = tmp_path_factory.mktemp("tok")
    en, zh = root / "a.en", root / "a.zh"
    en.write_text("\n".join(_lines(3000)[:3000]) + "\n", encoding="utf-8")
    zh.write_text("\n".join(_lines(3000)[3000:]) + "\n", encoding="utf-8")
    train_tokenizer(en, zh, root / "plain", TokenizerOptions(vocab_size=1500))
    add_placeholders(root / "plain", root / "ph")
    return Tokenizer.load(root / "plain"), Tokenizer.load(root / "ph"), root


def _lines(n: int = 2000) -> list[str]:
    en = (TATOEBA / "train.en").read_text(encoding="utf-8").splitlines()[:n]
    zh = (TATOEBA / "train.zh").read_text(encoding="utf-8").splitlines()[:n]
    return en + zh


# ---------------------------------------------------------------- tokenizer
def test_appended_pieces_change_no_other_split_and_are_one_token_each(extended):
    old, new, _ = extended
    assert new.src_vocab_size == old.src_vocab_size + len(all_pieces())
    assert new.placeholders == all_pieces() and new.extends(old) and not old.extends(new)
    assert all(new.encode_src(line) == old.encode_src(line) for line in _lines())
    for piece in all_pieces():
        assert new.src.encode(f"a {piece}b", out_type=str) == ["▁a", "▁", piece, "b"]
        assert new.src.id_to_piece(new.src.piece_to_id(piece)) == piece
    text = "Visit ｟url1｠ or ｟t1｠Save｟/t1｠ now."
    assert new.decode_tgt(new.encode_tgt(text)) == text


def test_bpe_dropout_keeps_a_piece_whole_and_at_p0_is_sentencepiece(extended):
    _, new, _ = extended
    sampler = BpeDropout(new.src)
    lines = [f"{line} ｟url1｠ x｟t1｠{line}｟/t1｠" for line in _lines(300)]
    assert sampler.encode(lines, 0.0, random.Random(1)) == [new.encode_src(s) for s in lines]
    ids = {new.src.piece_to_id(p) for p in ("｟url1｠", "｟t1｠", "｟/t1｠")}
    for row in sampler.encode(lines, 0.9, random.Random(2)):
        assert len(ids & set(row)) == 3  # never split however many merges are dropped


def test_add_placeholders_refuses_twice_and_a_foreign_out(extended, tmp_path):
    _, _, root = extended
    with pytest.raises(UserError, match="holds the placeholder pieces already"):
        add_placeholders(root / "ph", tmp_path / "again")
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    result = run_mtcli("tokenizer", "add-placeholders", str(root / "plain"), "--out", str(mine))
    assert result.returncode != 0 and "--force" in result.stderr
    assert (mine / "keep.txt").read_text() == "mine"


def test_a_training_flag_needs_a_tokenizer_with_the_pieces(extended, tmp_path):
    _, _, root = extended
    src, tgt = tmp_path / "a.en", tmp_path / "a.zh"
    src.write_text("hello\n")
    tgt.write_text("你好\n")
    result = run_mtcli(
        "train", "--src", str(src), "--tgt", str(tgt), "--tokenizer", str(root / "plain"),
        "--placeholders", "0.3", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode != 0
    assert (
        "--placeholders 0.3: the tokenizer" in result.stderr and "add-placeholders" in result.stderr
    )
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
    bad = run_mtcli("train", "--src", str(src), "--tgt", str(tgt), "--tags", "1.5")
    assert bad.returncode != 0 and "tags" in bad.stderr


# ---------------------------------------------------------------- alignment
def test_grow_diag_by_hand():
    # intersection {(0,0)}; the union's neighbour (0,1) aligns target word 1, still unaligned
    assert grow_diag({(0, 0), (0, 1)}, {(0, 0), (2, 2)}) == [(0, 0), (0, 1)]
    # (1,1) is no neighbour of an agreed link's unaligned words once both are aligned
    assert grow_diag({(0, 0), (1, 1)}, {(0, 0), (1, 1)}) == [(0, 0), (1, 1)]
    assert words("I'm 25, 北京") == [(0, 1), (1, 2), (2, 3), (4, 6), (6, 7), (8, 9), (9, 10)]


def test_eflomal_aligns_a_made_up_dictionary(tmp_path):
    """Sentences of four words from a made-up dictionary, in shuffled order on the target
    side: the aligner must find each word's translation."""
    pytest.importorskip("eflomal")
    letters = "abcdefghijklmnopqrstuvwxyz"  # words of letters: a digit would be a word of its own
    lexicon = {
        f"s{c}{letters[i * 7 % 26]}": f"t{letters[i * 3 % 26]}{c}" for i, c in enumerate(letters)
    }
    rng = random.Random(0)
    src, tgt, truth = [], [], []
    for _ in range(600):
        chosen = rng.sample(sorted(lexicon), 4)
        order = list(range(4))
        rng.shuffle(order)
        src.append(" ".join(chosen))
        tgt.append(" ".join(lexicon[chosen[k]] for k in order))
        truth.append({(order[j], j) for j in range(4)})
    links = align(src, tgt)
    right = sum(len(set(found) & want) for found, want in zip(links, truth, strict=True))
    assert right / (4 * len(src)) > 0.95 and sum(map(len, links)) < 1.02 * 4 * len(src)
    save_links(tmp_path / "links.npz", links)
    table = LinkTable(tmp_path / "links.npz")
    assert len(table) == len(src) and table[7] == sorted(links[7])


# ---------------------------------------------------------------- the training pipeline
SRC, TGT = "Most boys like baseball in Boston.", "大部分男生在波士顿喜欢棒球。"
LINKS = [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (2, 8), (2, 9), (3, 10), (3, 11), (4, 5),
         (5, 6), (5, 7), (6, 12)]  # fmt: skip


def _pieces(text: str) -> list[str]:
    return sorted(PIECE.findall(text))


def test_the_pipeline_puts_the_same_pieces_on_both_sides_at_aligned_words():
    aug = Augmenter(Rates(placeholders=1.0, tags=1.0), [LINKS], "en", "zh", seed=3)
    seen = set()
    for epoch in range(40):
        src, tgt = aug(0, epoch, SRC, TGT)
        assert _pieces(src) == _pieces(tgt) and _pieces(src)
        for n in (1, 2, 3):
            opening, closing = tag_pieces(n)
            for side in (src, tgt):
                if opening in side:  # a tag pair around something, never empty
                    assert side.index(opening) + len(opening) < side.index(closing)
        seen.add((src, tgt))
        # what a piece replaced is one aligned unit: baseball with 棒球, Boston with 波士顿
        for word, chinese in (("baseball", "棒球"), ("Boston", "波士顿")):
            assert (word in src) == (chinese in tgt) or "｟t" in src
    assert len(seen) > 10  # drawn anew each epoch
    assert aug(0, 5, SRC, TGT) == aug(0, 5, SRC, TGT)  # the same pair, epoch and seed: the same


def test_shared_spans_become_their_kind_and_casing_needs_a_cased_source():
    aug = Augmenter(Rates(placeholders=1.0), [[]], "en", "zh", seed=1)
    src, tgt = aug(0, 0, "The bus left at 8:15 with 30 people.", "公共汽车8:15带着30个人开走了。")
    assert "｟time1｠" in src and "｟time1｠" in tgt and "｟num1｠" in src and "｟num1｠" in tgt
    upper = Augmenter(Rates(casing=1.0), [[]], "en", "zh", seed=1)
    assert upper(0, 0, "I like tea.", "我喜欢茶。")[1] == "我喜欢茶。"
    from_chinese = Augmenter(Rates(casing=1.0), [[]], "zh", "en", seed=1)
    assert from_chinese(0, 0, "我喜欢茶。", "I like tea.") == ("我喜欢茶。", "I like tea.")
    ends = Augmenter(Rates(end_punct=1.0), [[]], "en", "zh", seed=1)
    assert ends(0, 0, "I like tea.", "我喜欢茶。") == ("I like tea", "我喜欢茶")


def test_links_to_a_stripped_end_punctuation_are_left_out():
    # eflomal may link a word to the final 。 that RemoveEndPunct takes away: the pipeline once
    # looked that word up past the end of the shortened target (IndexError in `mtcli distill`)
    links = [(0, 0), (1, 1), (1, 2), (2, 3), (2, 4)]  # tea: 茶 and the 。 after it
    aug = Augmenter(Rates(placeholders=1.0, tags=1.0, end_punct=1.0), [links], "en", "zh", seed=1)
    for epoch in range(30):
        src, tgt = aug(0, epoch, "I like tea.", "我喜欢茶。")
        assert _pieces(src) == _pieces(tgt) and not src.endswith(".") and not tgt.endswith("。")


# ---------------------------------------------------------------- spans users have
@pytest.mark.parametrize(
    "line, language, found",
    [
        ("Meet me on 12/05/2024 at 3 pm.", "en", [("date", "12/05/2024"), ("time", "3 pm")]),
        ("The deadline is 2025-03-01.", "en", [("date", "2025-03-01")]),
        ("It opened on 5 March 2024.", "en", [("date", "5 March 2024")]),
        ("Call +49 30 1234567 or 555-0199.", "en", [("phone", "+49 30 1234567"), ("phone", "555-0199")]),
        ("It costs $1,299.99 or €49, not 20 EUR.", "en",
         [("price", "$1,299.99"), ("price", "€49"), ("price", "20 EUR")]),
        ("about 40 million dollars, up 15%", "en", [("num", "40 million"), ("pct", "15%")]),
        ("Only 3.5% of them, and %d more", "en", [("pct", "3.5%"), ("placeholder", "%d")]),
        ("Sony WH-1000XM5 and Python 3.11.2", "en", [("ver", "WH-1000XM5"), ("ver", "3.11.2")]),
        ("I like 北京烤鸭 and 火锅.", "en", [("term", "北京烤鸭"), ("term", "火锅")]),
        ("我用iPhone打010-12345678。", "zh", [("term", "iPhone"), ("phone", "010-12345678")]),
        ("售价4999元，赚了3亿。", "zh", [("price", "4999元"), ("num", "3亿")]),
        ("会议在2024年3月5日10:30开始。", "zh", [("date", "2024年3月5日"), ("time", "10:30")]),
        ("I have 3 children.", "en", [("number", "3")]),
    ],
)  # fmt: skip
def test_spans_users_have(line, language, found):
    assert [(s.kind, s.text) for s in find_spans(line, language)] == found


@pytest.mark.parametrize(
    "line, language, target, written",
    [
        ("40 million", "en", "zh", "4000万"),
        ("1.5 billion", "en", "zh", "15亿"),
        ("3亿", "zh", "en", "300 million"),
        ("5万", "zh", "en", "50,000"),
        ("350元", "zh", "en", "350 yuan"),
        ("3亿美元", "zh", "en", "$300 million"),
        ("2024年3月5日", "zh", "en", "March 5, 2024"),
        ("5 March 2024", "en", "zh", "2024年3月5日"),
        ("12/05/2024", "en", "zh", "12/05/2024"),  # day or month first: only as written
        ("$25.50", "en", "zh", "$25.50"),
    ],
)  # fmt: skip
def test_a_span_as_the_target_writes_it(line, language, target, written):
    (span,) = find_spans(line, language)
    assert render(span, target) == written
    assert value_of("1,299.99") == value_of("1299.99")


def test_a_sentence_is_never_cut_inside_a_span():
    from mtcli.text.sentences import _whole_spans

    text = "Visit www.example.com. Then call me."
    assert _whole_spans(text, ["Visit www.", "example.com.", "Then call me."], "en") == [
        "Visit www.example.com.", "Then call me.",
    ]  # fmt: skip
    assert split_sentences("Python 3.11.2 is out. Update now.", "en") == [
        "Python 3.11.2 is out.", "Update now.",
    ]  # fmt: skip


# ---------------------------------------------------------------- the text layer
KNOWN = set(all_pieces())


def test_spans_and_tags_go_as_pieces_and_come_back():
    text = 'Click <b>Save</b> or read <a href="https://x.org/a">this</a> at https://example.com.'
    assert inline_tags(text) == [(6, 9, 13, 17), (26, 52, 56, 60)]
    sent = to_placeholders(text, find_spans(text, "en"), KNOWN, "zh")
    assert sent.text == "Click ｟t1｠Save｟/t1｠ or read ｟t2｠this｟/t2｠ at ｟url1｠."
    assert from_placeholders(
        "点击｟t1｠保存｟/t1｠或在｟url1｠读｟t2｠这个｟/t2｠。", sent.given_back
    ) == ('点击<b>保存</b>或在https://example.com读<a href="https://x.org/a">这个</a>。')
    assert from_placeholders("A ｟URL1｠ ｟url3｠.", sent.given_back) == "A https://example.com ."
    assert from_placeholders("｟url1｠和｟url1｠", sent.given_back) == "https://example.com和"
    # two spans the model wrote side by side are set apart where their digits would touch
    times = to_placeholders("at 8:00 and 20:00", find_spans("at 8:00 and 20:00", "en"), KNOWN, "zh")
    assert from_placeholders("在｟time1｠｟time2｠开。", times.given_back) == "在8:00 20:00开。"
    assert from_placeholders("在｟time1｠，｟time2｠开。", times.given_back) == "在8:00，20:00开。"
    amounts = to_placeholders("about 40 million", find_spans("about 40 million", "en"), KNOWN, "zh")
    assert amounts.given_back == {span_piece("num", 1): "4000万"}


class _Pieces:
    """A translator that writes the pieces it is given, in reverse order, between words."""

    constrains = False

    def __init__(self):
        self.seen: list[str] = []

    def translate_chunk(self, lines, prefixes=None, constraints=None):
        self.seen += lines
        out = []
        for line in lines:
            text = "译" + "和".join(reversed(PIECE.findall(line))) + "。"
            out.append(Translation(line, text, 0.0, [(text, 0.0)]))
        return out


def test_a_model_with_placeholders_gets_pieces_and_one_without_gets_stand_ins():
    line = "Visit https://example.com or call 555-0199."
    inner = _Pieces()
    layer = TextLayer(inner, src_lang="en", tgt_lang="zh", can_write=lambda s: True,
                      count_tokens=len, max_tokens=1000, placeholders=all_pieces())  # fmt: skip
    (result,) = layer.translate_chunk([line])
    assert inner.seen == ["Visit ｟url1｠ or call ｟phone1｠."]
    assert result.text == "译555-0199和https://example.com。"
    plain = _Pieces()
    TextLayer(plain, src_lang="en", tgt_lang="zh", can_write=lambda s: True, count_tokens=len,
              max_tokens=1000).translate_chunk([line])  # fmt: skip
    assert plain.seen == ["Visit 7301 or call 7302."]


class _Forgets(_Pieces):
    """Writes only the first piece it is given: the rest of each sentence's spans are lost."""

    def translate_chunk(self, lines, prefixes=None, constraints=None):
        out = []
        for line in lines:
            text = "译" + "".join(PIECE.findall(line)[:1]) + "。"
            out.append(Translation(line, text, 0.0, [(text, 0.0)]))
        return out


@pytest.mark.parametrize("extra", [{"placeholders": all_pieces()}, {}])
def test_a_lost_span_is_named_in_the_sentence_the_user_wrote(extra):
    """The warning quotes the user's sentence, not the pieces or stand-ins the model was given
    (it read 'Visit ｟url1｠ or call ｟phone1｠.', or 'Visit 7301 or call 7302.')."""
    warned = []
    layer = TextLayer(_Forgets(), src_lang="en", tgt_lang="zh", can_write=lambda s: True,
                      count_tokens=len, max_tokens=1000, warn=warned.append, **extra)  # fmt: skip
    layer.translate_chunk(["Visit https://example.com or call 555-0199."])
    assert len(warned) == 1, warned
    quoted, lost = warned[0].split(" lost ")
    assert quoted == "the translation of 'Visit https://example.com or call 555-0199.'"
    assert "555-0199" in lost
