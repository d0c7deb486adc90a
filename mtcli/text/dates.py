"""Months and weekdays a translation names that its source does not: "May 2" came out as 2月21日
(February), and the invented 21 was named but the changed month was not. Compared by number
(May and 5月 are both month 5; Monday and 周一 both day 1), in English and Chinese. Pure
functions over strings; text/layer.py marks a line that has one, as it marks an invented number.
"""

from __future__ import annotations

import re

from mtcli.text.spans import MONTH_NUMBER, ZH_DIGITS

# English month names as words; May and March are also a verb, so those two count only
# beside a day or a year (May 5, 5 May, March 2024)
_MONTH_WORD = re.compile(r"\b(" + "|".join(sorted(MONTH_NUMBER, key=len, reverse=True)) + r")\b\.?")
_AMBIGUOUS = {"May", "March", "Mar"}
_ZH_MONTH = re.compile(r"(?<!\d)(\d{1,2}|十[一二]?|[一二三四五六七八九])月")
_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_EN_WEEKDAY = re.compile(r"\b(" + "|".join(_WEEKDAYS) + r")s?\b")
_ZH_WEEKDAY = re.compile(r"(?:星期|礼拜|周)([一二三四五六日天])")
_ZH_DAY_NUMBER = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "日": 7, "天": 7}
# a numeric date (05/03/2024, 2024-05-03) names its month by a number whose place is the
# writer's convention: a source with one is not checked for months
_NUMERIC_DATE = re.compile(r"\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}")


def invented_dates(source: str, translation: str) -> list[str]:
    """The months and weekdays `translation` names that `source` does not, as written there."""
    made_up = []
    if not _NUMERIC_DATE.search(source):
        have = {n for n, _ in _months(source)}
        made_up += [text for n, text in _months(translation) if n not in have]
    have_days = {n for n, _ in _weekdays(source)}
    made_up += [text for n, text in _weekdays(translation) if n not in have_days]
    return list(dict.fromkeys(made_up))


def _months(text: str) -> list[tuple[int, str]]:
    """(month number, as written) of each month `text` names."""
    found = []
    for m in _MONTH_WORD.finditer(text):
        word = m.group(1)
        if word in _AMBIGUOUS and not _beside_a_number(text, m):
            continue
        found.append((MONTH_NUMBER[word], word))
    for m in _ZH_MONTH.finditer(text):
        number = _zh_month_number(m.group(1))
        if 1 <= number <= 12:
            found.append((number, m.group()))
    return found


def _beside_a_number(text: str, m: re.Match) -> bool:
    """Whether a digit stands right before or after the match (a few spaces apart at most)."""
    before, after = text[max(0, m.start() - 4) : m.start()], text[m.end() : m.end() + 4]
    return bool(re.search(r"\d\s*$", before) or re.match(r"\s*\d", after))


def _zh_month_number(written: str) -> int:
    """5 -> 5, 十二 -> 12, 三 -> 3."""
    if written.isdigit():
        return int(written)
    if written.startswith("十"):
        return 10 + (ZH_DIGITS[written[1]] if len(written) > 1 else 0)
    return ZH_DIGITS[written]


def _weekdays(text: str) -> list[tuple[int, str]]:
    """(day number, Monday = 1, as written) of each weekday `text` names."""
    found = [(_WEEKDAYS.index(m.group(1)) + 1, m.group(1)) for m in _EN_WEEKDAY.finditer(text)]
    found += [(_ZH_DAY_NUMBER[m.group(1)], m.group()) for m in _ZH_WEEKDAY.finditer(text)]
    return found
