"""Rich answers (Bot API 10.1 rich messages) beside today's HTML, in the same run.

Rendering: a 3,000-character answer with a table, inline and display math, a list and
a code block, rendered by :func:`~bot.telegram.rich.render_rich` and by the HTML
chunker :func:`~bot.telegram.format.render_chunks` (the baseline): CPU per answer, and
per streamed answer (one rendering per second of streaming at 1,000 characters a second,
as the writer renders, plus the final text), and the bytes sent.

Streaming: the real :class:`~bot.telegram.writer.AnswerWriter` and ``TelegramOut``
(aiogram over HTTP) stream a 1,500-token (6,000-character) answer of the same kind into
the Bot API test server, in a private chat (drafts) and in a group (edits of messages,
under the group's message budget), as rich messages and as HTML (``RICH_MESSAGES=off``,
the baseline). Per answer: the Telegram calls made, the bytes of their parameters, the
messages the answer takes, and the time from the model's last token to the final text
on screen (the writer's :meth:`finish`; the answer's storing is not in it). The group
rows are the measurement behind streaming group edits as rich messages (see
docs/architecture.md, "Rendering").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from aiogram import Bot
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode

from bot.telegram.budget import ChatBudget
from bot.telegram.format import Chunk, render_chunks
from bot.telegram.out import TelegramOut
from bot.telegram.rich import render_rich
from bot.telegram.session import BotApiSession, FloodControl
from bot.telegram.writer import AnswerWriter
from bot.turn.engine import GROUP_EDIT_INTERVAL, PRIVATE_EDIT_INTERVAL
from tests.fakes.telegram import FakeTelegram

from .common import median, progress, sized, table

RENDER_CHARS = 3000
STREAM_TOKENS = 1500
TOKEN_CHARS = 4
PACE = 1000.0  # characters a second
TTFT = 0.3
PREFIX = "[depth:2] "
CHAT = 4242
GROUP = -100_4242


def answer(chars: int) -> str:
    """Markdown of about ``chars`` characters: prose with inline math, a table, display
    math, a list and a code block, repeated."""
    section = (
        "## Results {n}\n\n"
        "The fit gives $\\hat\\beta = (X^TX)^{{-1}}X^Ty$ with **small** residuals, "
        "and *every* estimate is within $\\pm 2\\sigma$ of the truth; costs stay at $5 each.\n\n"
        "| run | n | mean | sd |\n|:--|--:|--:|--:|\n"
        "| a{n} | 120 | 4.21 | 0.32 |\n| b{n} | 118 | 4.19 | 0.30 |\n"
        "| c{n} | 121 | 4.25 | 0.35 |\n\n"
        "$$\n\\sigma^2 = \\frac{{1}}{{n-1}}\\sum_{{i=1}}^n (x_i - \\bar x)^2\n$$\n\n"
        "- [x] data cleaned\n- [ ] outliers checked\n  - by hand\n\n"
        "```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```\n\n"
    )
    text, n = "", 0
    while len(text) < chars:
        text += section.format(n=n)
        n += 1
    return text[:chars].rstrip()


def _cpu_us(render: Callable[[str], list[Chunk]], text: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.process_time_ns()
        render(text)
        samples.append((time.process_time_ns() - started) / 1000)
    return median(samples)


def _renders(text: str) -> list[str]:
    """The texts a writer renders while streaming ``text``: one a second, and the final."""
    step = int(PACE * PRIVATE_EDIT_INTERVAL)
    return [text[:end] for end in range(step, len(text), step)] + [text]


def _rich(text: str) -> list[Chunk]:
    return render_rich(text, prefix=PREFIX)


def _html(text: str) -> list[Chunk]:
    return render_chunks(text, prefix=PREFIX)


def render_table(runs: int) -> str:
    text = answer(RENDER_CHARS)
    rows = []
    base = 0.0
    for name, render in (("HTML chunks (today)", _html), ("rich message", _rich)):
        progress(f"rich: rendering {name}")
        once = _cpu_us(render, text, runs)
        streamed = sum(_cpu_us(render, part, max(3, runs // 10)) for part in _renders(text))
        chunks = render(text)
        base = base or once
        rows.append(
            (name, len(chunks), sum(len(c.html.encode()) for c in chunks), once, once / base,
             streamed)
        )  # fmt: skip
    return table(
        f"Rendering a {len(text):,}-character answer with a table and math "
        f"(median of {runs} runs, CPU)",
        ("rendering", "messages", "bytes", "CPU per answer (µs)", "× HTML",
         "CPU per streamed answer (µs)"),
        rows,
    )  # fmt: skip


@dataclass
class Run:
    calls: Counter[str]
    sent_bytes: int
    messages: int
    last_to_final: float  # seconds from the model's last token to the final text


async def stream_once(chat: str, rendering: str) -> Run:
    text = answer(STREAM_TOKENS * TOKEN_CHARS)
    group = chat == "group"
    async with FakeTelegram() as tg:
        chat_id = GROUP if group else CHAT
        if group:
            tg.add_group(GROUP, "Team")
        else:
            tg.add_private_chat(CHAT, "Ada")
        question = tg.send_user_message(chat_id, CHAT, "report, please")["message_id"]
        session: AiohttpSession = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
        session.middleware(FloodControl())
        bot = Bot(
            tg.token, session=session, default=DefaultBotProperties(parse_mode=ParseMode.HTML)
        )
        try:
            writer = AnswerWriter(
                TelegramOut(bot, rich=rendering == "rich"),
                chat_id=chat_id,
                reply_to=question,
                thread_id=None,
                edit_interval=GROUP_EDIT_INTERVAL if group else PRIVATE_EDIT_INTERVAL,
                draft_of=None if group else question,
                budget=ChatBudget() if group else None,
            )
            writer.prefix = PREFIX
            skip = len(tg.calls)
            await writer.start()
            await asyncio.sleep(TTFT)
            first_token = time.monotonic()
            sent = 0
            while sent < len(text):  # whole tokens at the model's pace, however the loop lags
                due = TOKEN_CHARS * (1 + int((time.monotonic() - first_token) * PACE / TOKEN_CHARS))
                if due > sent:
                    sent = min(due, len(text))
                    writer.update(text[:sent])
                await asyncio.sleep(TOKEN_CHARS / PACE)
            last_token = time.monotonic()
            writer.ended()
            await writer.finish(text)
            final = time.monotonic()
            await writer.close()
        finally:
            await bot.session.close()
        calls = tg.calls[skip:]
        assert all(c.status == 200 for c in calls), [c.description for c in calls]
        assert not tg.violations
        messages = [m for m in tg.bot_messages(chat_id) if not m.deleted]
        size = sum(len(json.dumps(c.params, default=str).encode()) for c in calls)
        return Run(Counter(c.method for c in calls), size, len(messages), final - last_token)


async def stream_table(runs: int) -> str:
    rows = []
    for chat in ("private", "group"):
        for rendering in ("HTML", "rich"):
            progress(f"rich: streaming into a {chat} chat as {rendering} ({runs} runs)")
            results = [await stream_once(chat, rendering) for _ in range(runs)]
            run = results[-1]
            latency = median([r.last_to_final for r in results])
            c = run.calls
            drafts = c["sendMessageDraft"] + c["sendRichMessageDraft"]
            sends = c["sendMessage"] + c["sendRichMessage"]
            rows.append(
                (chat, rendering, sum(c.values()), drafts, sends, c["editMessageText"],
                 c["sendChatAction"], run.messages, run.sent_bytes, latency * 1000)
            )  # fmt: skip
    return table(
        f"Streaming a {STREAM_TOKENS:,}-token answer (table, math, code) at {PACE:.0f} "
        "characters/s (real writer, aiogram over HTTP, Bot API test server; drafts in private "
        "chats, edits under the group budget in groups; latency: median of "
        f"{runs} runs; in a group the final edit keeps 1 s from the previous one)",
        ("chat", "rendering", "Telegram calls", "drafts", "sends", "edits", "typing",
         "messages", "bytes sent", "last token -> final (ms)"),
        rows,
    )  # fmt: skip


async def run() -> str:
    return render_table(sized(200, 1000)) + "\n" + await stream_table(sized(3, 7))
