"""Voice answers: the CPU of making an answer's text ready to be read aloud.

:func:`~bot.model.speech.spoken_parts` (parse the Markdown, say code, tables and formulas
by a phrase, cut into parts of at most 4,096 characters) runs once per voice answer, after
the text answer is on screen. Beside it, in the same run: parsing the same Markdown alone
(its floor: the parser both renderers use) and the HTML rendering every answer already
pays for its final text (:func:`~bot.telegram.format.render_chunks`). Answers of the kind
``python -m bench rich`` renders (prose, inline and display math, a table, a list, code).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.markdown import MARKDOWN
from bot.model.speech import Unread, spoken_parts
from bot.telegram.format import render_chunks

from .common import median, progress, sized, table
from .rich_bench import answer

SIZES = (3_000, 10_000, 30_000)
UNREAD = Unread("See the code.", "See the table.", "See the formula.")


def _cpu_us(work: Callable[[str], object], text: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.process_time_ns()
        work(text)
        samples.append((time.process_time_ns() - started) / 1000)
    return median(samples)


def _spoken(text: str) -> list[str]:
    return spoken_parts(text, UNREAD)


def speech_table(runs: int) -> str:
    rows = []
    for chars in SIZES:
        progress(f"speech: an answer of {chars:,} characters")
        text = answer(chars)
        parts = _spoken(text)
        spoken = _cpu_us(_spoken, text, runs)
        html = _cpu_us(render_chunks, text, runs)
        parse = _cpu_us(MARKDOWN.parse, text, runs)
        rows.append(
            (f"{len(text):,}", len(parts), sum(map(len, parts)), spoken, parse, html,
             spoken / html)
        )  # fmt: skip
    return table(
        f"Making an answer ready to be read aloud (median of {runs} runs, CPU)",
        ("answer chars", "parts", "spoken chars", "spoken_parts (µs)", "parse only (µs)",
         "HTML rendering (µs)", "× HTML"),
        rows,
    )  # fmt: skip


async def run() -> str:
    return speech_table(sized(20, 200))
