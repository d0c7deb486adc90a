"""A kept span as the target language writes it, where a verbatim copy would change or hide the
fact: an amount with a magnitude word is converted by value (40 million -> 4000万, 3亿 -> 300
million: a small model wrote 40 million dollars as 40美元), a Chinese price names its currency
in English (350元 -> 350 yuan: the model wrote 350 dollars), and a date with its month in words
is written in the target's order (2024年3月5日 -> March 5, 2024; 5 March 2024 -> 2024年3月5日;
May 5 -> 5月5日).

Every other span is copied as written: a numeric date such as 12/05/2024 is ambiguous (day or
month first), so only the writer's own form keeps its meaning.
"""

from __future__ import annotations

import re
from decimal import Decimal

from mtcli.text.spans import MONTH_NUMBER, Span

EN_MAGNITUDES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
ZH_MAGNITUDES = {"万": 10**4, "亿": 10**8}
MONTH_NAMES = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
# Chinese currency words and how an English sentence writes the amount
ZH_CURRENCIES = {
    "美元": "${} ",
    "欧元": "€{} ",
    "英镑": "£{} ",
    "日元": "{} yen",
    "港元": "HK${} ",
    "港币": "HK${} ",
    "人民币": "{} yuan",
    "块钱": "{} yuan",
    "元": "{} yuan",
}


def render(span: Span, tgt_lang: str) -> str:
    """`span` as a sentence in `tgt_lang` writes it."""
    to_chinese = tgt_lang == "zh"
    if span.kind == "num":
        return _amount_zh(span.text) if to_chinese else _amount_en(span.text)
    if span.kind == "price" and not to_chinese and (money := _price_en(span.text)):
        return money
    if span.kind == "date":
        return _date_zh(span.text) if to_chinese else _date_en(span.text)
    return span.text


def value_of(text: str) -> Decimal | None:
    """The value an amount writes: 40 million, 1.5 billion, 3亿, 4000万, 1,299.99."""
    m = re.fullmatch(r"(\d[\d,]*(?:\.\d+)?) ?(thousand|million|billion|trillion|万|亿)?", text)
    if not m:
        return None
    scale = EN_MAGNITUDES.get(m[2] or "") or ZH_MAGNITUDES.get(m[2] or "") or 1
    return Decimal(m[1].replace(",", "")) * scale


def _amount_zh(text: str) -> str:
    value = value_of(text)
    if value is None or re.search(r"[万亿]", text):
        return text
    for unit, scale in (("亿", 10**8), ("万", 10**4)):
        if value >= scale:
            return _plain(value / scale) + unit
    return _plain(value)


def _amount_en(text: str) -> str:
    value = value_of(text)
    if value is None or not re.search(r"[万亿]", text):
        return text
    for word, scale in (("trillion", 10**12), ("billion", 10**9), ("million", 10**6)):
        if value >= scale:
            return f"{_plain(value / scale)} {word}"
    return f"{value:,.0f}" if value == value.to_integral_value() else _plain(value)


def _plain(value: Decimal) -> str:
    """A decimal without exponent or trailing zeros: 4000, 1.5."""
    text = format(value.normalize(), "f")
    return text


def _price_en(text: str) -> str | None:
    m = re.fullmatch(
        r"(\d[\d,]*(?:\.\d+)?(?:万|亿)?)(美元|欧元|英镑|日元|港元|港币|人民币|块钱|元)", text
    )
    if not m:
        return None
    amount = _amount_en(m[1]) if re.search(r"[万亿]", m[1]) else m[1]
    return ZH_CURRENCIES[m[2]].format(amount).strip()


def _date_en(text: str) -> str:
    m = re.fullmatch(r"(?:(\d{4})年)?(\d{1,2})月(\d{1,2})[日号]", text)
    if not m or not 1 <= int(m[2]) <= 12:
        return text
    day = f"{MONTH_NAMES[int(m[2]) - 1]} {int(m[3])}"
    return f"{day}, {m[1]}" if m[1] else day


def _date_zh(text: str) -> str:
    """5 March 2024, March 5, 2024, May 5 or 5 May as Chinese writes it: 2024年3月5日, 5月5日."""
    m = re.fullmatch(
        r"(\d{1,2})(?:st|nd|rd|th)? ([A-Za-z]+)\.?(?:,? (\d{4}))?", text
    ) or re.fullmatch(r"([A-Za-z]+)\.? (\d{1,2})(?:st|nd|rd|th)?(?:,? (\d{4}))?", text)
    if not m:
        return text
    parts = m.groups()
    day, month = (parts[0], parts[1]) if parts[0].isdigit() else (parts[1], parts[0])
    if month not in MONTH_NUMBER:
        return text
    year = f"{parts[2]}年" if parts[2] else ""
    return f"{year}{MONTH_NUMBER[month]}月{int(day)}日"
