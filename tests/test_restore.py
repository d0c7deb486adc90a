"""A span a translation lost, put back where the search's attention places it: hand-built
readings (which source token each output token attended to most) over the shipped model's
tokenizer, the restored text worked out by hand; and the text layer, which decodes again
under constraints only where nothing could be put back."""

from __future__ import annotations

import pytest

from mtcli.data.tokenizer import Tokenizer
from mtcli.decoding.stepper import Reading
from mtcli.engines.restore import SpanRestorer
from mtcli.engines.result import SearchReading, Translation
from mtcli.text.glossary import target_phrases
from mtcli.text.layer import TextLayer
from tests.conftest import REPO


@pytest.fixture(scope="module")
def restorer() -> SpanRestorer:
    tokenizer = Tokenizer.load(REPO / "models" / "en-zh-tiny")
    return SpanRestorer(tokenizer, lambda strings: target_phrases(tokenizer, "zh", strings))


def _read(restorer: SpanRestorer, text: str, attended: list[int]) -> Translation:
    """The translation `text` as a search wrote it, its tokens attending to `attended`."""
    tokens = restorer.tokenizer.encode_tgt(text)
    assert len(tokens) == len(attended)
    reading = Reading([-0.1] * (len(tokens) + 1), [1.0], [*attended, 0])
    return Translation("", text, -0.1, reading=SearchReading(text, tokens, reading))


def test_a_number_the_model_wrote_as_a_numeral_is_replaced_where_it_attended(restorer):
    # source pieces: ▁I 0, ▁have 1, ▁3 2, ▁cats 3, . 4; output: ▁我有 三 只 猫 。
    free = _read(restorer, "我有三只猫。", [1, 2, 3, 3, 4])
    assert restorer("I have 3 cats.", ["3"], free) == "我有3只猫。"


def test_a_number_the_model_left_out_goes_after_what_attended_just_before_it(restorer):
    # ▁我有 attended to "have" (1), the word before 3 (2); 猫 to cats, 。 to the stop
    free = _read(restorer, "我有猫。", [1, 3, 4])
    assert restorer("I have 3 cats.", ["3"], free) == "我有3猫。"


def test_a_wrong_year_is_replaced_whole_and_a_second_span_stands_apart(restorer):
    """ "2013" (pieces 20 1 3) attended to 2023's pieces: replaced as a whole; 1,482 has no
    output token, so it goes after the one attending closest before it (看, to "saw"), and a
    space keeps it from running into another number."""
    # source: ▁In 0, ▁20 1, 2 2, 3 3, ▁we 4, ▁saw 5, ▁1 6, , 7, 4 8, 8 9, 2 10, ▁c 11 ...
    # output: ▁我们在 20 1 3 年 看 到了 病 例 。
    free = _read(restorer, "我们在2013年看到了病例。", [4, 1, 2, 3, 1, 5, 5, 12, 13, 14])
    restored = restorer("In 2023 we saw 1,482 cases.", ["2023", "1,482"], free)
    assert restored == "我们在2023年看到了1,482病例。"


def test_a_number_the_source_has_is_not_taken_for_a_lost_one(restorer):
    """1990 is the source's and is kept; 5 attended to the same place: it goes beside 1990, a
    space apart, not in its place."""
    # source: ▁He 0 ... the output's 1990 attended to 5's position
    source = "He was 5 in 1990."
    pieces = restorer.tokenizer.src.encode(source, out_type=str)
    five = pieces.index("▁5")
    text = "他1990年。"
    n = len(restorer.tokenizer.encode_tgt(text))
    free = _read(restorer, text, [0] + [five] * (n - 3) + [len(pieces) - 2, len(pieces) - 1])
    restored = restorer(source, ["5"], free)
    assert "1990" in restored and "5" in restored.replace("1990", "")


def test_into_english_a_number_goes_in_as_a_word_of_its_own():
    tokenizer = Tokenizer.load(REPO / "models" / "zh-en-tiny")
    restorer = SpanRestorer(tokenizer, lambda strings: target_phrases(tokenizer, "en", strings))
    # source: ▁我有 0, 3 1, 只 2, 猫 3, 。 4; output: ▁I ▁have ▁cats .
    free = _read(restorer, "I have cats.", [0, 0, 3, 4])
    assert restorer("我有3只猫。", ["3"], free) == "I have 3 cats."
    # two numbers lost at one place are two words: ▁3 ▁4, no space piece between them
    # source: ▁我有 0, 3 1, 只 2, 4 3, 只 4, 猫 5, 。 6
    free = _read(restorer, "I have cats.", [0, 0, 5, 6])
    assert restorer("我有3只4只猫。", ["3", "4"], free) == "I have 3 4 cats."


def test_a_number_the_model_wrote_in_words_gives_way_to_the_digits():
    tokenizer = Tokenizer.load(REPO / "models" / "zh-en-tiny")
    restorer = SpanRestorer(tokenizer, lambda strings: target_phrases(tokenizer, "en", strings))
    # source: ▁他有 0, 3 1, 个 2, 孩子 3, 。 4; output: ▁He ▁has ▁three ▁children .
    attended_three = _read(restorer, "He has three children.", [0, 0, 1, 3, 4])
    assert restorer("他有3个孩子。", ["3"], attended_three) == "He has 3 children."
    # "three" looked elsewhere: the 3 goes after ▁has, and the words beside it give way
    elsewhere = _read(restorer, "He has three children.", [0, 0, 0, 3, 4])
    assert restorer("他有3个孩子。", ["3"], elsewhere) == "He has 3 children."


def test_no_reading_of_that_text_is_no_restoring(restorer):
    free = _read(restorer, "我有三只猫。", [1, 2, 3, 3, 4])
    changed = Translation("", "我有四只猫。", -0.1, reading=free.reading)
    assert restorer("I have 3 cats.", ["3"], changed) is None
    assert restorer("I have 3 cats.", ["3"], Translation("", "我有三只猫。", -0.1)) is None
    assert restorer("I have 3 cats.", ["7"], free) is None  # not in the source: no place


class _Free:
    """A translator that writes a fixed free translation, and a fixed constrained one."""

    constrains = True

    def __init__(self, free: Translation, constrained: str):
        self.free, self.constrained, self.calls = free, constrained, []

    def translate_chunk(self, lines, prefixes=None, keep=None):
        self.calls.append(keep)
        if keep:
            return [Translation(line, self.constrained, -0.2) for line in lines]
        return [self.free for _ in lines]


@pytest.mark.parametrize("restores", [True, False])
def test_the_text_layer_decodes_again_only_what_could_not_be_put_back(restorer, restores):
    free = _read(restorer, "我有猫。", [1, 3, 4])
    inner = _Free(free, "我有3只猫。")
    layer = TextLayer(
        inner,
        src_lang="en",
        tgt_lang="zh",
        can_write=lambda s: True,
        count_tokens=len,
        max_tokens=100,
        to_phrases=restorer.to_phrases,
        restore=restorer if restores else None,
    )
    (result,) = layer.translate_chunk(["I have 3 cats."])
    if restores:
        assert result.text == "我有3猫。" and inner.calls == [None]
        assert (layer.restored, layer.decoded_again) == (1, 0)
    else:
        assert result.text == "我有3只猫。" and len(inner.calls) == 2
        assert (layer.restored, layer.decoded_again) == (0, 1)


def test_only_a_digit_beside_a_digit_is_set_apart(restorer):
    """3 then 7 would read 37: a space between; a date's piece beside a time's reads
    5月5日10:30, as Chinese writes it: nothing between."""
    sp = restorer.tokenizer.tgt
    three, seven = sp.piece_to_id("3"), sp.piece_to_id("7")
    date, time = sp.piece_to_id("｟date1｠"), sp.piece_to_id("｟time1｠")
    assert restorer._apart([three], [seven]) == [sp.piece_to_id("▁")]
    assert restorer._apart([date], [time]) == []
