"""Streaming one answer into a private chat: drafts against today's edits.

The real :class:`~bot.telegram.writer.AnswerWriter` and :class:`TelegramOut`
(aiogram over HTTP) stream a 3,000-character answer into the Bot API test
server, fed token by token (4 characters) at a model's pace after its time to
first token. Per answer: the Telegram calls made (by method), and the time from
the model's first token to the first text the user can see (a draft with text,
or the first message). Rows: today's edit streaming (the baseline), drafts, and
drafts on a server without ``sendMessageDraft`` (the first refusal switches to
edits); all HTML (rich answers are bench/rich_bench.py's).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

from aiogram import Bot
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode

from bot.telegram.out import TelegramOut
from bot.telegram.session import BotApiSession, FloodControl
from bot.telegram.writer import AnswerWriter
from bot.turn.engine import PRIVATE_EDIT_INTERVAL
from tests.fakes.telegram import FakeTelegram

from .common import progress, sized, table

ANSWER_CHARS = 3000
TOKEN_CHARS = 4
CHAT = 4242
#: (time to first token in s, characters per second): a fast hosted model, a slow local one.
PACES_QUICK = ((0.3, 1000.0), (1.5, 1000.0))
PACES_FULL = ((0.3, 1000.0), (1.5, 1000.0), (0.3, 200.0), (3.0, 200.0))


def _answer() -> str:
    words = " ".join(f"word{i:04d}" for i in range(ANSWER_CHARS // 9 + 1))
    return words[:ANSWER_CHARS]


@dataclass
class Run:
    calls: Counter[str]
    first_visible: float  # seconds from the first token to the first visible text
    total: float  # seconds from the first token to the final message


async def _stream_once(mode: str, ttft: float, rate: float) -> Run:
    old_server = mode == "drafts, server without drafts"
    unsupported = ("sendMessageDraft",) if old_server else ()
    async with FakeTelegram(unsupported_methods=unsupported) as tg:
        tg.add_private_chat(CHAT, "Ada")
        question = tg.send_user_message(CHAT, CHAT, "write me 3,000 characters")["message_id"]
        session: AiohttpSession = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
        session.middleware(FloodControl())
        bot = Bot(
            tg.token, session=session, default=DefaultBotProperties(parse_mode=ParseMode.HTML)
        )
        try:
            writer = AnswerWriter(
                TelegramOut(bot, rich=False),  # (rich answers: bench/rich_bench.py)
                chat_id=CHAT,
                reply_to=question,
                thread_id=None,
                edit_interval=PRIVATE_EDIT_INTERVAL,
                draft_of=None if mode == "edits (today)" else question,
            )
            writer.prefix = "[depth:2] "
            text = _answer()
            skip = len(tg.calls)
            await writer.start()
            await asyncio.sleep(ttft)
            first_token = time.monotonic()
            sent = 0
            while sent < len(text):  # whole tokens at the model's pace, however the loop lags
                due = TOKEN_CHARS * (1 + int((time.monotonic() - first_token) * rate / TOKEN_CHARS))
                if due > sent:
                    sent = min(due, len(text))
                    writer.update(text[:sent])
                await asyncio.sleep(TOKEN_CHARS / rate)
            await writer.finish(text)
            done = time.monotonic()
        finally:
            await bot.session.close()
        calls = tg.calls[skip:]
        visible = [
            c.at
            for c in calls
            if c.status == 200
            and (
                c.method == "sendMessage"
                or (c.method == "sendMessageDraft" and c.params.get("text"))
            )
        ]
        assert [m.text for m in tg.bot_messages(CHAT)] == [f"[depth:2] {text}"]
        assert not tg.violations
        return Run(Counter(c.method for c in calls), min(visible) - first_token, done - first_token)


async def run() -> str:
    paces = sized(PACES_QUICK, PACES_FULL)
    modes = ("edits (today)", "drafts", "drafts, server without drafts")
    rows = []
    for ttft, rate in paces:
        for mode in modes:
            progress(f"streaming: {mode}, first token after {ttft}s, {rate:.0f} chars/s")
            result = await _stream_once(mode, ttft, rate)
            c = result.calls
            rows.append(
                (
                    f"{ttft:.1f}s / {rate:.0f} c/s",
                    mode,
                    sum(c.values()),
                    c["sendMessageDraft"],
                    c["sendMessage"],
                    c["editMessageText"],
                    c["sendChatAction"],
                    result.first_visible,
                    result.total,
                )
            )
    return table(
        f"Streaming a {ANSWER_CHARS:,}-character answer into a private chat (real writer, "
        "aiogram over HTTP, Bot API test server; pacing 1 call/s)",
        (
            "model (ttft / pace)",
            "streaming",
            "Telegram calls",
            "drafts",
            "sends",
            "edits",
            "typing",
            "first token -> visible (s)",
            "first token -> final (s)",
        ),
        rows,
    )
