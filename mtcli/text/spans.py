"""Spans of a line that a translation must keep: text in backticks, URLs, e-mail addresses, the
placeholders of software strings, dates, phone numbers, prices with their currency, percentages,
times, version and model numbers, amounts with a magnitude word, terms of the other script,
and numbers as written. Each is kept byte for byte, except where render.py writes it the
target's way (3亿 -> 300 million).

Found by patterns, most specific first, never overlapping. Also here: stand-ins for the spans a
model's vocabulary cannot write (a `%s` where the tokenizer has no `%`), so the translator can
be made to keep the stand-in and the span goes back in its place afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mtcli.text.writing import HAN_WRITTEN

MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec"
)
_FULL_MONTHS = MONTHS.split("|")[:12]
MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_FULL_MONTHS)}
MONTH_NUMBER |= {name[:3]: i + 1 for i, name in enumerate(_FULL_MONTHS)} | {"Sept": 9}
_AMOUNT = r"\d+(?:,\d{3})*(?:\.\d+)?"  # 1,299.99
_ZH_MONEY = "美元|欧元|英镑|日元|港元|港币|人民币|块钱|元"
_SIGNS = "$€£¥￥"
_CJK = "\u3000-\u9fff\uff00-\uffef"  # CJK characters and full-width punctuation
_CODES = "USD|EUR|GBP|CNY|RMB|JPY|HKD|CHF|CAD|AUD"

# a software string's placeholders: what a translation must hold exactly as the source does
# (the text layer keeps them as spans, documents/segments.py checks each translated string).
# No space flag in printf's: "100% of" and "the % of" are prose, not "% o".
SOFTWARE_PLACEHOLDER = re.compile(
    r"\{\{\s*[\w.]+\s*\}\}"  # {{name}}
    r"|\$\{[\w.]+\}"  # ${name}
    r"|\{[\w.$-]*\}"  # {name}, {0}, {}, {$count}
    r"|%(?:\d+\$)?[-+0#]*\d*(?:\.\d+)?[sdifuxXoeEgGc%@]"  # printf: %s, %1$s, %.2f, %@
    r"|%\(\w+\)[sdif]"  # python: %(name)s
    r"|</?\d+/?>"  # <0>, </0>, <1/>
)


# most specific first: a URL's digits are the URL's, a placeholder's braces are not a number's,
# a date's or a phone number's digits are one span (12/05/2024 was three numbers, and cut)
PATTERNS = [
    ("code", re.compile(r"`[^`\n]+`")),
    # a URL or an address ends where Chinese text goes on (访问https://example.com了解)
    (
        "url",
        re.compile(
            rf"(?<![A-Za-z0-9])(?:https?://|www\.)[^\s<>\"'`{_CJK}]+[^\s<>\"'`.,;:!?)\]}}{_CJK}]"
        ),
    ),
    (
        "email",
        re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?![A-Za-z0-9-])"
        ),
    ),
    # before the placeholders: 3.5% of is a percentage, not 3.5 and a printf "% o"
    ("pct", re.compile(rf"(?<![A-Za-z0-9_.,]){_AMOUNT} ?%")),
    ("placeholder", SOFTWARE_PLACEHOLDER),
    (
        "date",
        re.compile(
            r"(?<![\d/.-])(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}\.\d{1,2}\.\d{4})(?![\d/.-]?\d)"
            rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:{MONTHS})\.?,? \d{{4}}\b"  # 5 March 2024
            rf"|\b(?:{MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b"  # March 5, 2024
            r"|(?<!\d)\d{4}年\d{1,2}月\d{1,2}[日号]|(?<!\d)\d{1,2}月\d{1,2}[日号]"  # 2024年3月5日
            # without a year: May 5, Jan. 5th, 5 May (May and March only beside the day)
            rf"|\b(?:{MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?\b(?![:.,]?\d)"
            rf"|(?<![\d.,:])\b\d{{1,2}}(?:st|nd|rd|th)? (?:{MONTHS})\b"
        ),
    ),
    (
        "phone",
        re.compile(
            r"(?<![A-Za-z0-9+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\d])"  # +49 30 1234567
            r"|\(\d{3}\) ?\d{3}-\d{4}\b|(?<![\d-])\d{3}-\d{3}-\d{4}(?![\d-])"  # (555) 123-4567
            r"|(?<![\d-])(?:\d{3}-\d{4}|0\d{2,3}-\d{7,8})(?![\d-])"  # 555-0199, 010-12345678
        ),
    ),
    (
        "price",
        re.compile(
            rf"[{_SIGNS}] ?{_AMOUNT}(?: ?(?:million|billion|thousand)\b)?"  # $1,299.99, € 49
            rf"|\b(?:{_CODES}) ?{_AMOUNT}|(?<![A-Za-z0-9_.,]){_AMOUNT} ?(?:{_CODES})\b"  # USD 20, 20 EUR
            rf"|(?<![\d.,:]){_AMOUNT}(?:万|亿)?(?:{_ZH_MONEY})"  # 350元, 5万元
        ),
    ),
    (
        "time",
        re.compile(
            r"(?<![\d:.])\d{1,2}:\d{2}(?::\d{2})?(?: ?(?:[ap]\.m\.|[AaPp][Mm]\b))?(?![\d:])"
            r"|(?<![\d.,])\d{1,2} ?(?:[ap]\.m\.|[AaPp][Mm]\b)"  # 3 pm, 10 a.m.
        ),
    ),
    (
        "ver",
        re.compile(
            r"\b[vV]\d+(?:\.\d+)+\b|(?<![\d.])\d+\.\d+\.\d+(?:\.\d+)?(?![\d.]?\d)"  # v2.1, 3.11.2
            r"|\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+\b"  # WH-1000XM5
            r"|\b[A-Z]{1,4}\d+[A-Za-z0-9]*\b"  # XM5, A4, MP3
            r"|\b[a-z]+[A-Z][A-Za-z]+(?: \d+)?(?: (?:Pro|Max|Plus|Mini|Ultra|Air|SE))*\b"  # iPhone 15 Pro
        ),
    ),
    # a number with its magnitude word: translated by value (40 million -> 4000万, 3亿 -> 300 million)
    (
        "num",
        re.compile(
            r"(?<![A-Za-z0-9_.,])\d+(?:\.\d+)? (?:million|billion|trillion)\b|(?<![\d.,])\d+(?:\.\d+)?(?:万|亿)"
        ),
    ),
    # digits not inside a Latin word (mp3, 3D); beside Chinese characters they count
    ("number", re.compile(r"(?<![A-Za-z0-9_.,:])\d+(?:[.,:]\d+)*(?![A-Za-z0-9_])")),
]
# a term of the other script kept as written: Chinese inside English, Latin names inside Chinese
TERMS = {
    "cjk": re.compile(r"[\u3400-\u9fff]+(?:[·・][\u3400-\u9fff]+)*"),
    "latin": re.compile(
        r"[A-Za-z][A-Za-z0-9'’.&+-]*(?: [A-Za-z0-9][A-Za-z0-9'’.&+-]*)*(?<![.'’-])"
    ),
}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: (
        str  # code, url, email, placeholder, date, phone, price, pct, time, ver, num, term, number
    )
    text: str


def find_spans(line: str, language: str = "") -> list[Span]:
    """The spans of `line` to keep, in order, none overlapping another. Knowing the line's
    `language`, a term of the other script counts too (北京烤鸭 in English, iPhone in Chinese)."""
    patterns = list(PATTERNS)
    # a term is one inside text of the line's own script: a line of English given to a Chinese
    # model is the wrong language (text/language_check.py), not one long term
    if language and (language not in HAN_WRITTEN or TERMS["cjk"].search(line)):
        other = "latin" if language in HAN_WRITTEN else "cjk"
        patterns.insert(-1, ("term", TERMS[other]))
    taken: list[Span] = []
    for kind, pattern in patterns:
        for m in pattern.finditer(line):
            if not any(m.start() < s.end and s.start < m.end() for s in taken):
                taken.append(Span(m.start(), m.end(), kind, m.group()))
    return sorted(taken, key=lambda s: s.start)


def stand_in(index: int, line: str) -> str:
    """A number for span `index` that the line does not hold: models copy digits (both sides
    write them alike) and every vocabulary has them, so a `%s` the tokenizer cannot write
    travels as 7301 and goes back in its place."""
    number = 7301 + index
    while str(number) in line:
        number += 100
    return str(number)


NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def renumbered(translation: str, source_numbers: list[str]) -> str:
    """The translation with each number it wrote wrongly replaced by the source's number it
    stands for. A wrong number that starts or ends with a lost one is that one (a forced 165 the
    model went on to write as 1650, 4,646 as 4444,646); the rest pair up in order, only one to one (a small model
    writes 1987 as 198, or 42.50 as 1200, in the right place)."""
    lost = lost_spans(translation, source_numbers)
    wrong = [m for m in NUMBER.finditer(translation) if m.group() not in source_numbers]
    fixes: dict[int, str] = {}
    for m in wrong:
        # a forced number the model wrote more digits before or after: 4,646 as 4444,646
        stuck = [n for n in lost if m.group().startswith(n) or m.group().endswith(n)]
        if heads := [n for n in stuck if n not in fixes.values()]:
            fixes[m.start()] = max(heads, key=len)
    rest = [m for m in wrong if m.start() not in fixes]
    unmatched = [n for n in lost if n not in fixes.values()]
    if rest and len(rest) == len(unmatched):
        fixes.update({m.start(): n for m, n in zip(rest, unmatched, strict=True)})
    out, at = [], 0
    for m in wrong:
        if m.start() in fixes:
            out += [translation[at : m.start()], fixes[m.start()]]
            at = m.end()
    return "".join(out) + translation[at:]


# number words a translation may write as digits (three hours -> 3小时, 八十 -> 80, a thousand
# -> 1000): their values count as the source's, so those digits are not taken for invented
_EN_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
EN_NUMBERS = {w: i for i, w in enumerate(_EN_UNITS)} | {
    w: 20 + 10 * i for i, w in enumerate(_EN_TENS)
}
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "dozen": 12}
ZH_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2, "俩": 2}
ZH_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10_000}
_ZH_RUN = re.compile(f"[{''.join(ZH_DIGITS)}{''.join(ZH_SCALES)}]+")


def _word_values(text: str) -> set[int]:
    """The values number words in `text` stand for: each word, and a word with its scale."""
    values: set[int] = set()
    previous = None
    for word in re.findall(r"[A-Za-z]+", text.lower()):
        value = EN_NUMBERS.get(word)
        if word in EN_SCALES:
            value = EN_SCALES[word] * (previous if previous is not None else 1)
        if value is not None:
            values.add(value)
        previous = value if word in EN_NUMBERS else None
    for run in _ZH_RUN.findall(text):
        values.add(_chinese_value(run))
        values.update(ZH_DIGITS[c] for c in run if c in ZH_DIGITS)
    return values


def _chinese_value(run: str) -> int:
    """A run of Chinese numerals as a number: 八十 80, 三百五十 350, 十二 12, 两千 2000, and 万
    multiplying all before it (一百万 1,000,000, 三万五千 35,000)."""
    total = section = current = 0
    for c in run:
        if c in ZH_DIGITS:
            digit = ZH_DIGITS[c]
            current = current * 10 + digit if current and not (section or total) else digit
        elif c == "万":
            total += (section + current or 1) * ZH_SCALES[c]
            section = current = 0
        else:
            section += (current or 1) * ZH_SCALES[c]
            current = 0
    return total + section + current


# a Chinese number the translation writes in words: a numeral, then a scale (五十, 三百, 一百万);
# a lone 一 or 十 is more often a word (一起 together, 十分 very) than a number
_ZH_WRITTEN = re.compile(
    f"[{''.join(ZH_DIGITS)}]{_ZH_RUN.pattern[:-1]}*[{''.join(ZH_SCALES)}]{_ZH_RUN.pattern[:-1]}*"
)


# a measure word a Chinese count puts between the number and the noun (三个兄弟, 两只猫)
_MEASURE_WORDS = "个只本位张辆件条双台家间次岁名把杯块支首"


def said_once(translation: str, numbers: dict[str, str]) -> str:
    """The translation with a number it wrote twice side by side, in words and then as a span
    (the placeholder model writes 三个｟num1｠兄弟, which read 三个3兄弟), written once: the span
    where the words were (｟num1｠个兄弟; three ｟num1｠ brothers becomes ｟num1｠ brothers).
    `numbers`: each span as the model writes it (a piece, a stand-in, the digits) -> the whole
    number it stands for; only those count, and only where the values agree."""
    given = {k.lower(): int(v) for k, v in numbers.items() if v.isdigit()}
    if not given:
        return translation
    spans = "|".join(re.escape(k) for k in sorted(given, key=len, reverse=True))
    after = r"(?![\d.,:])"  # 3.5 or 3:30 is another number than 3

    def zh(m: re.Match) -> str:
        words, measure, span = m.groups()
        return span + measure if _chinese_value(words) == given[span.lower()] else m.group()

    def en(m: re.Match) -> str:
        word, span = m.groups()
        return span if EN_NUMBERS.get(word.lower()) == given[span.lower()] else m.group()

    zh_twice = re.compile(f"({_ZH_RUN.pattern})([{_MEASURE_WORDS}]?)({spans}){after}", re.I)
    en_twice = re.compile(rf"\b([A-Za-z]+) ({spans}){after}", re.I)
    return en_twice.sub(en, zh_twice.sub(zh, translation))


def invented_numbers(source: str, translation: str) -> list[str]:
    """The numbers a translation writes that its source holds nowhere, as digits or as Chinese
    number words ("12 euros" came out as 12：30岁, "five patients" as 50, "one million" as 五十):
    a sign it made up a fact. Compared by value, so 06 is 6; a time's :00 is not a number of its
    own (9点 is 9:00)."""
    have = {int(n) for n in re.findall(r"\d+", source)} | _word_values(source)
    digits = [
        m.group()
        for m in re.finditer(r"\d+", translation)
        if int(m.group()) not in have and not _minutes_of_the_hour(translation, m)
    ]
    words = [
        m.group()
        for m in _ZH_WRITTEN.finditer(translation)
        if _chinese_value(m.group()) not in have
    ]
    return list(dict.fromkeys(digits + words))


def _minutes_of_the_hour(text: str, match: re.Match) -> bool:
    return int(match.group()) == 0 and text[match.start() - 1 : match.start()] == ":"


def lost_spans(translation: str, spans: list[str]) -> list[str]:
    """The spans the translation lost: a span that occurs twice must occur twice, and a number
    counts only where no digit touches it (165 is not in 1650)."""
    return list(dict.fromkeys(missing_spans(translation, spans)))


def missing_spans(translation: str, spans: list[str]) -> list[str]:
    """lost_spans, each as many times as the translation lacks it (6 twice where the source
    has 6 twice and the translation none)."""
    return [
        text
        for text in dict.fromkeys(spans)
        for _ in range(spans.count(text) - len(re.findall(_alone(text), translation)))
    ]


def _alone(text: str) -> str:
    before = r"(?<!\d)" if text[:1].isdigit() else ""
    after = r"(?!\d)" if text[-1:].isdigit() else ""
    return before + re.escape(text) + after
