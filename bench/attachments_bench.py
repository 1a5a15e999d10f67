"""Voice and image turns: Telegram calls and Redis round trips, beside a text turn.

Drives :class:`bot.turn.engine.Engine` along the bot's own path (the update handler's
XADD, the worker's XREADGROUP, the turn, its acknowledgement) against a real
redis-server, an instant Telegram that counts each call by method, and the OpenAI test
server for the speech and image calls (real OGG/Opus and PNG bytes over HTTP; its
latency is not what is measured). Every turn continues a warm chain in a private
chat. A voice turn is a text turn whose answer is then read aloud (the asker's
``/voice on``); an image turn is ``/image``, or ``/image`` replying to a picture (an
edit). With ``USER_DAILY_BUDGET_USD`` each speech and image call is preceded by a read
of the user's day.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis

from bot.bus.inbound import IMAGE, Inbound
from bot.bus.intake import Intake
from bot.catalogue import Prices
from bot.data.connection import connect
from bot.data.userprefs import set_voice
from bot.model.images import ImageMaker
from bot.model.speech import Speaker
from bot.telegram.format import Chunk
from bot.telegram.uploads import Attachment
from bot.turn.engine import Engine
from bot.turn.limits import Spending
from bot.turn.pictures import PictureAttachments, Pictures
from bot.turn.speaking import VoiceAnswers
from tests.fakes.model import FakeOpenAI
from tests.fakes.stub_model import StubModel

from .bot_bench import ANSWER, QUESTION, InstantTelegram, RoundTrips, _engine
from .common import progress, redis_server, table

#: An answer read aloud in three voice notes (about 10,000 characters).
LONG = "\n\n".join(f"Paragraph {i}. " + "word " * 240 for i in range(8))


class CountingTelegram(InstantTelegram):
    """An instant Telegram that counts the calls a turn makes, by method."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        #: The newest message id of each chat (the last part of the last answer).
        self.newest: dict[int, int] = {}

    def next_id(self, chat_id: int) -> int:
        self.newest[chat_id] = made = super().next_id(chat_id)
        return made

    async def send(self, chat_id: int, chunk: Chunk, **options: Any) -> int:
        self.calls["sendMessage"] += 1
        return await super().send(chat_id, chunk, **options)

    async def edit(self, chat_id: int, message_id: int, chunk: Chunk) -> None:
        self.calls["editMessageText"] += 1

    async def draft(
        self, chat_id: int, draft_id: int, chunk: Chunk | None, *, thread_id: int | None
    ) -> None:
        self.calls["sendMessageDraft"] += 1

    async def send_attachment(
        self, chat_id: int, attachment: Attachment, *, reply_to: int | None,
        thread_id: int | None, ready: Callable[[bool], Awaitable[None]],
    ) -> int:  # fmt: skip
        await ready(False)
        self.calls["sendVoice" if attachment.kind == "voice" else "sendPhoto"] += 1
        return self.next_id(chat_id)


def _equip(engine: Engine, llm: FakeOpenAI, budget: float) -> list[Speaker | ImageMaker]:
    """Speech and pictures for ``engine``, through the OpenAI test server."""
    endpoint: dict[str, Any] = {
        "api_key": "sk-test", "base_url": llm.base_url, "timeout": 10.0, "max_retries": 0,
    }  # fmt: skip
    speaker = Speaker(model=llm.speech_model, voice="alloy", **endpoint)
    maker = ImageMaker(model=llm.image_model, **endpoint)
    accounting = engine.accounting
    engine.limits.rules = replace(engine.limits.rules, user_daily_dollars=budget)
    spending = Spending(accounting, daily_tokens=0, daily_dollars=budget)
    voice = VoiceAnswers(
        speaker, accounting=accounting, prices=Prices(per_1m_chars=15.0), spending=spending
    )
    engine.outputs = (PictureAttachments(engine.store), voice)
    engine.pictures = Pictures(
        maker, store=engine.store, accounting=accounting, prices=Prices(per_image=0.04),
        spending=spending,
    )  # fmt: skip
    return [speaker, maker]


async def _rows(redis: Redis, llm: FakeOpenAI, budget: float) -> list[tuple[object, ...]]:
    telegram = CountingTelegram()
    engine = _engine(redis, telegram)
    clients = _equip(engine, llm, budget)
    model = engine.model
    assert isinstance(model, StubModel)
    intake = Intake(redis, "bench")
    await intake.ensure_group()
    never = asyncio.Event()
    meter = RoundTrips()
    chat = 41_000 + int(budget)

    async def one(text: str, reply_to: int | None, kind: str = "") -> tuple[int, int, int]:
        """A turn: (round trips, Telegram calls, its last part's id)."""
        inbound = Inbound(chat, telegram.next_id(chat), chat, text, reply_to, kind=kind)
        before, calls = meter.count, sum(telegram.calls.values())
        with meter.counting():
            assert await intake.record(inbound, never)
            [entry] = await intake.read_new(1, 100)
            assert await engine.run(inbound, lambda pipe: Intake.queue_ack(pipe, entry.id))
        last = telegram.newest[chat]
        assert await engine.store.resolve(str(chat), last) is not None  # aliased
        return meter.count - before, sum(telegram.calls.values()) - calls, last

    rows: list[tuple[object, ...]] = []
    _, _, answer = await one(QUESTION, None)
    _, _, answer = await one(QUESTION, answer)  # warm: a continued chain
    trips, calls, answer = await one(QUESTION, answer)
    rows.append(("text (continued)", trips, calls, 0, 0))
    await set_voice(redis, chat, "on")
    spoken = len(llm.speeches)
    trips, calls, answer = await one(QUESTION, answer)
    rows.append(("voice on: text + 1 voice note", trips, calls, 1, len(llm.speeches) - spoken))
    model.answer = LONG
    spoken = len(llm.speeches)
    trips, calls, answer = await one(QUESTION, answer)
    rows.append(("voice on: long (3 voice notes)", trips, calls, 3, len(llm.speeches) - spoken))
    await set_voice(redis, chat, "off")
    model.answer = ANSWER
    trips, calls, picture = await one("/image a red cube", answer, IMAGE)
    rows.append(("/image (reply: thread in the prompt)", trips, calls, 1, 1))
    trips, calls, _ = await one("/image make it blue", picture, IMAGE)
    rows.append(("/image replying to a picture (edit)", trips, calls, 1, 1))
    for client in clients:
        await client.close()
    return rows


async def run() -> str:
    with redis_server() as server:
        redis = connect(server.url)
        try:
            async with FakeOpenAI() as llm:
                progress("attachments: turns without a budget")
                plain = await _rows(redis, llm, 0.0)
                progress("attachments: turns with USER_DAILY_BUDGET_USD")
                budgeted = await _rows(redis, llm, 100.0)
        finally:
            await redis.aclose()
    header = ("turn", "Redis round trips", "Telegram calls", "attachments", "model calls")
    out = table(
        "Voice and image turns, intake to acknowledgement (private chat, warm chain; "
        "model calls: speech or image)",
        header,
        plain,
    )
    out += "\n" + table("The same with USER_DAILY_BUDGET_USD set", header, budgeted)
    return out
