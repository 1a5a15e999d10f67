"""An answer's text as chunks: HTML or rich messages, and when an answer switches.

An answer is HTML chunks (:mod:`bot.telegram.format`), which every Telegram app shows,
unless it is rendered as rich messages (:mod:`bot.telegram.rich`: tables, formulas, up
to 32,768 characters in one message; drafts are rich drafts), which some apps (Telegram
Web, the Watch) show as "not supported". Its style (:func:`answer_style`: RICH_MESSAGES
and the asker's /format) says when: ``always``; ``never``; or ``auto``, from the moment
the text holds what HTML cannot show (a table, a formula, more than one HTML message
holds) to its end. The server decides too: without rich messages, and for the rest of
an answer Telegram refused a rich message of (or failed it), the answer is HTML.
"""

from __future__ import annotations

from typing import Literal

from .format import Chunk, render_chunks
from .out import TelegramOut
from .rich import needs_rich, render_rich

#: When an answer is rich messages: ``auto`` once it holds what HTML cannot show.
Style = Literal["auto", "always", "never"]


def answer_style(setting: str, choice: str | None) -> Style:
    """The style of an answer: the operator's RICH_MESSAGES (``auto``, ``always``, ``off``)
    and the asker's /format choice (``rich``, ``plain``, ``None``). ``off`` and ``plain``
    never send rich; ``rich`` sends it wherever ``auto`` would (``always`` stays so)."""
    if setting == "off" or choice == "plain":
        return "never"
    return "always" if setting == "always" else "auto"


class Rendering:
    """One answer's rendering: its chunks for a text, HTML or rich as the answer stands."""

    def __init__(self, out: TelegramOut, style: Style) -> None:
        """``style``: when the answer is rendered as rich messages (:func:`answer_style`);
        ``out``: whether the Bot API server has them still."""
        self._out = out
        #: The last rendering, by its input: the final text often equals the last
        #: draft's or edit's (a model ending right after its last delta).
        self._rendered: tuple[tuple[str, str, str, str, bool], list[Chunk]] | None = None
        #: False once Telegram refused a rich message of this answer: the rest is HTML.
        self.rich_ok = True
        self._style = style
        #: The answer is rich from here on (``auto``: since its text needed it).
        self._turned_rich = style == "always"

    @property
    def rich(self) -> bool:
        """Whether the answer is rendered as rich messages (else as HTML chunks)."""
        return self._turned_rich and self.rich_ok and self._out.rich

    def render(self, text: str, *, prefix: str, reasoning: str, thinking: str = "") -> list[Chunk]:
        """``text``'s chunks, ``prefix`` (``[depth:N] ``) before the first, ``reasoning``
        collapsed after it, a rich draft's live ``thinking``; the last rendering again
        when nothing changed."""
        rich = self.rich
        source = (text, prefix, reasoning, thinking, rich)
        if self._rendered is None or self._rendered[0] != source:
            if rich:
                chunks = render_rich(text, prefix=prefix, reasoning=reasoning, thinking=thinking)
            else:
                chunks = render_chunks(text, prefix=prefix, reasoning=reasoning)
                if self._turns_rich(text, chunks):
                    return self.render(text, prefix=prefix, reasoning=reasoning, thinking=thinking)
            self._rendered = (source, chunks)
        return self._rendered[1]

    def _turns_rich(self, text: str, html: list[Chunk]) -> bool:
        """``auto``: the answer turns rich, once and for good, as soon as its text holds
        what HTML cannot show (a table, a formula, more than one message)."""
        if self._style != "auto" or self._turned_rich or not (self.rich_ok and self._out.rich):
            return False
        self._turned_rich = len(html) > 1 or needs_rich(text)
        return self._turned_rich
