"""Input in another language than the model translates from: flagged, never silently trusted.

A model chosen by hand (-m, --from, $MTCLI_MODEL) translates whatever it is given, and on a
line in the wrong language it writes confident nonsense ("我们为什么工作？" through an en->de
model came out as "."). The line is still translated (the user chose the model), but its
result says which language the line was identified in (`wrong_language`), and one warning
names it. Only a sure identification counts (language.py's `sure_language`): a short Latin
line is anyone's. The text layer asks this of each line it is given; imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mtcli.text.language import contradicts, sure_language


class LanguageCheck:
    """Marks the results of lines surely in another language than `src_lang`, the source of
    the model `name`; warns once. `remedy(language)` says what the user can do about one."""

    def __init__(
        self,
        src_lang: str,
        name: str,
        warn: Callable[[str], None],
        remedy: Callable[[str], str] = lambda language: f"--from {language} picks a model for it",
    ):
        self.src_lang, self.name, self.warn, self.remedy = src_lang, name, warn, remedy
        self.lines_seen, self.warned = 0, False

    def mark(self, lines: list[str], results: list) -> list:
        """`results` (Translations of `lines`, in order), those of wrong-language lines marked."""
        marked = [
            self._checked(self.lines_seen + i + 1, line, result)
            for i, (line, result) in enumerate(zip(lines, results, strict=True))
        ]
        self.lines_seen += len(lines)
        return marked

    def _checked(self, number: int, line: str, result):
        """`result` marked when its line (number `number` of the input, from 1) is surely in
        another language than the model's source."""
        if not self.src_lang or result.passthrough or not line.strip():
            return result
        identified = sure_language(line)
        if not contradicts(self.src_lang, identified):
            return result
        if not self.warned:
            self.warned = True
            self.warn(
                f"input line {number} is in {identified}, but {self.name} translates from "
                f"{self.src_lang}: translated anyway ({self.remedy(identified)})"
            )
        return replace(
            result, wrong_language={"identified": identified, "model_source": self.src_lang}
        )
