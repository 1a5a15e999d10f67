"""Fault injection end to end: the real bot against failing model and Telegram servers.

Every test asserts the exact outcome a user would see (one answer or one clear
notice, the chain intact in Redis) and how many calls it took to get there.

Answers here stream by editing messages: the Bot API server knows no drafts, like
an older one (the bot falls back on its first refusal). tests/test_drafts.py holds
the same faults met while streaming drafts.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.methods import Response
from aiogram.types import Message
from redis.asyncio import Redis

from bot.telegram.session import BotApiSession, FloodControl
from bot.turn.notices import MODEL_ERRORS as MODEL_ERROR_NOTICES
from bot.turn.notices import RETRY_HINT
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI, default_responder
from .fakes.telegram import Call, FakeTelegram
from .harness import OTHER_USER, ROOT_PROMPT, USER, BotFactory, answers_to, ask, said, turns_done

SYSTEM = ("system", ROOT_PROMPT)
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)


@pytest.fixture(autouse=True)
def edit_streaming(tg: FakeTelegram) -> None:
    """A server without ``sendMessageDraft``: private chats stream by edits, as groups do."""
    tg.unsupported_methods.add("sendMessageDraft")


def words(count: int) -> str:
    """``w000 w001 …``: every word 4 characters, so chunk boundaries fall between words."""
    return " ".join(f"w{i:03d}" for i in range(count))


def long_reply_to(question: str, reply: str) -> Any:
    """A responder giving ``reply`` to ``question`` and the default echo to anything else."""

    def responder(messages: list[dict[str, Any]]) -> str:
        if messages[-1]["content"] == question:
            return reply
        return default_responder(messages)

    return responder


def notice(kind: str) -> str:
    return f"⚠️ {MODEL_ERROR_NOTICES[kind]} {RETRY_HINT}"


def calls_to_chat(tg: FakeTelegram, chat_id: int, method: str | None = None) -> list[Call]:
    return [
        c
        for c in tg.calls
        if c.params.get("chat_id") == chat_id and (method is None or c.method == method)
    ]


async def test_stream_cut_midway_keeps_the_text_and_the_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    question = "tell me a long story"
    reply = words(60)
    llm.responder = long_reply_to(question, reply)
    llm.chunk_chars = 8  # two words a chunk
    llm.chunk_delay = 0.4  # the first part is shown before the cut
    llm.cut_stream_next(after_chunks=3)
    partial = reply[: 3 * 8].strip()  # "w000 w001 w002 w003 w004 w005"
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, question)
        assert text == f"[depth:2] {partial}\n\n{notice('unavailable')}"
        [part] = answers_to(tg, USER, first)
        assert part.edits >= 1  # the partial text was on screen before the notice
        assert part.history[0] is not None
        assert part.history[0].startswith("[depth:2] w000")
        assert len(calls_to_chat(tg, USER, "sendMessage")) == 1
        assert len(llm.requests) == 1  # text had arrived: the stream is not silently redone

        store = TranscriptStore(redis)
        node = await store.resolve(str(USER), first)
        assert node is not None
        history = await store.history(node)
        assert [(m.role, m.content) for m in history.messages] == [SYSTEM, ("user", question)]
        assert await store.resolve(str(USER), part.message_id) == node

        _, text = await ask(tg, app, USER, "try again", reply_to=part.message_id)
        assert text == "[depth:3] echo: try again"
        assert said(llm) == [SYSTEM, ("user", question), ("user", "try again")]
        assert len(llm.requests) == 2
    assert len(answers_to(tg, USER, first)) == 1


async def test_stream_cut_before_any_text_is_retried_silently(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.cut_stream_next(after_chunks=0)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "hello")
    assert text == "[depth:2] echo: hello"
    assert len(answers_to(tg, USER, first)) == 1
    assert len(llm.requests) == 2  # the cut stream and the bot's own retry
    assert not llm.requests[0].completed
    assert llm.requests[1].completed
    assert said(llm, 0) == said(llm, 1) == [SYSTEM, ("user", "hello")]
    assert len(calls_to_chat(tg, USER, "sendMessage")) == 1


async def test_stalled_stream_ends_with_a_timeout_notice(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    question = "think slowly"
    reply = words(40)
    llm.responder = long_reply_to(question, reply)
    llm.chunk_chars = 8
    llm.chunk_delay = 0.2
    llm.stall_stream_next(after_chunks=2, seconds=30)
    async with start_bot(openai_timeout=1.0) as app:
        first, text = await ask(tg, app, USER, question)
    partial = reply[: 2 * 8].strip()
    assert text == f"[depth:2] {partial}\n\n{notice('timeout')}"
    assert "took too long" in text
    [part] = answers_to(tg, USER, first)
    assert part.edits >= 1  # partial text first, the notice appended
    assert len(tg.bot_messages(USER)) == 1
    assert len(calls_to_chat(tg, USER, "sendMessage")) == 1
    assert len(llm.requests) == 1


async def test_model_429_waits_for_retry_after_and_answers(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.fail_next(429, retry_after=1)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "busy?")
    assert text == "[depth:2] echo: busy?"
    assert len(answers_to(tg, USER, first)) == 1
    assert [r.status for r in llm.requests] == [429, 200]
    assert llm.requests[1].at - llm.requests[0].at >= 1.0
    assert said(llm, 0) == said(llm, 1)


async def test_not_modified_during_streaming_is_not_an_error(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    reply = words(90)  # 45 chunks of 10 characters, 50 ms apart: ~2.3 s of streaming
    llm.responder = lambda _messages: reply
    llm.chunk_chars = 10
    llm.chunk_delay = 0.05
    tg.fail_next("editMessageText", status=400, description=NOT_MODIFIED)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "stream")
    assert text == f"[depth:2] {reply}"
    [part] = answers_to(tg, USER, first)
    edits = calls_to_chat(tg, USER, "editMessageText")
    assert [c.status for c in edits] == [400, *[200] * (len(edits) - 1)]
    assert len(edits) >= 2  # the failed edit was an intermediate one
    assert edits[0].params["text"] != edits[-1].params["text"]
    assert part.edits == len(edits) - 1
    assert "⚠️" not in text
    assert len(tg.bot_messages(USER)) == 1
    assert not tg.violations


async def test_answer_survives_the_user_deleting_the_question(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.gate = asyncio.Event()
    async with start_bot() as app:
        question = tg.send_user_message(USER, USER, "never mind")["message_id"]
        await llm.wait_for(lambda: len(llm.requests) == 1)
        tg.delete_message(USER, question)
        llm.gate.set()
        await turns_done(tg, app, 1)
        [answer] = tg.bot_messages(USER)  # not findable by reply_to: it replies to nothing
        assert answer.reply_to is None
        assert not answer.deleted
        assert answer.text == "[depth:2] echo: never mind"
        [send] = calls_to_chat(tg, USER, "sendMessage")
        assert send.params["reply_parameters"]["message_id"] == question

        _, text = await ask(tg, app, USER, "go on", reply_to=answer.message_id)
        assert text == "[depth:4] echo: go on"
        assert said(llm) == [
            SYSTEM,
            ("user", "never mind"),
            ("assistant", "echo: never mind"),
            ("user", "go on"),
        ]


async def test_blocked_chat_is_given_up_after_one_attempt(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.block_chat(OTHER_USER)
    async with start_bot() as app:
        tg.send_user_message(OTHER_USER, OTHER_USER, "bye forever")
        await turns_done(tg, app, 1)
        blocked = calls_to_chat(tg, OTHER_USER)
        # an instant answer goes out as the message alone: no draft first, no typing
        shown = sorted((c.method, c.status) for c in blocked if c.method != "sendChatAction")
        assert shown == [("sendMessage", 403)]
        assert [c.status for c in blocked if c.method == "sendChatAction"] in ([], [403])
        _, text = await ask(tg, app, USER, "still there?")
        assert text == "[depth:2] echo: still there?"
        assert app.runner.completed == 2
    assert calls_to_chat(tg, OTHER_USER) == blocked  # nothing more, not even later
    assert len(llm.requests) == 2  # the blocked chat's turn was not run again
    assert not tg.violations


async def test_blocked_chat_is_not_sent_to_again_while_streaming(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.responder = lambda _messages: words(60)
    llm.chunk_chars = 8
    llm.chunk_delay = 0.05  # ~1.5 s of streaming: the first part is sent while streaming
    tg.block_chat(OTHER_USER)
    async with start_bot() as app:
        tg.send_user_message(OTHER_USER, OTHER_USER, "bye forever")
        await turns_done(tg, app, 1)
    assert len(calls_to_chat(tg, OTHER_USER, "sendMessage")) == 1


async def test_telegram_429_on_the_first_part_is_waited_out(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=1, chat_id=USER)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "flood?")
    assert text == "[depth:2] echo: flood?"
    assert len(answers_to(tg, USER, first)) == 1
    sends = calls_to_chat(tg, USER, "sendMessage")
    assert [c.status for c in sends] == [429, 200]
    assert sends[1].at - sends[0].at >= 1.0
    assert not tg.violations


async def test_a_response_type_outlives_garbage_collection(tg: FakeTelegram) -> None:
    """aiogram parametrizes ``Response[T]`` on every call and pydantic holds such
    classes weakly: the session keeps them, so a collection never makes the next call
    build one again (regression: most calls of a turn rebuilt theirs, ~9 ms each)."""
    session = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
    bot = Bot(tg.token, session=session)
    try:
        await bot.send_message(USER, "hello")
    finally:
        await bot.session.close()
    built = weakref.ref(Response[Message])
    gc.collect()
    assert built() is not None


async def test_calls_to_one_chat_go_one_at_a_time_so_none_lands_inside_a_429_window(
    tg: FakeTelegram,
) -> None:
    """Three sends to one chat at once, the first answered 429: none of the others may
    reach Telegram inside the window it opened; another chat is not held up."""
    tg.add_private_chat(USER)
    tg.add_private_chat(OTHER_USER)
    session = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
    session.middleware(FloodControl())
    bot = Bot(tg.token, session=session)
    tg.fail_next("sendMessage", status=429, retry_after=1, chat_id=USER)
    started = asyncio.get_running_loop().time()
    try:

        async def send(chat: int, text: str) -> float:
            await bot.send_message(chat, text)
            return asyncio.get_running_loop().time() - started

        *held, other = await asyncio.gather(
            *(send(USER, f"part {i}") for i in range(3)), send(OTHER_USER, "elsewhere")
        )
    finally:
        await bot.session.close()
    assert not tg.violations
    assert sorted(m.text or "" for m in tg.messages(USER)) == ["part 0", "part 1", "part 2"]
    assert [c.status for c in calls_to_chat(tg, USER, "sendMessage")] == [429, 200, 200, 200]
    assert min(held) >= 1.0  # every send to the chat waited the window out
    assert other < 1.0


async def test_telegram_5xx_on_send_still_answers_once(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.fail_next("sendMessage", status=502, chat_id=USER)
    async with start_bot() as app:
        first = tg.send_user_message(USER, USER, "are you there?")["message_id"]
        await turns_done(tg, app, 1)
        [part] = answers_to(tg, USER, first)
        assert part.text == "[depth:2] echo: are you there?"
        _, text = await ask(tg, app, USER, "good", reply_to=part.message_id)
        assert text == "[depth:4] echo: good"
    sends = calls_to_chat(tg, USER, "sendMessage")
    assert [c.status for c in sends] == [502, 200, 200]
    assert len(llm.requests) == 2


async def test_hundred_concurrent_branches_stay_apart(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    count = 100
    async with start_bot() as app:
        root, _ = await ask(tg, app, USER, "shared root")
        [root_answer] = answers_to(tg, USER, root)
        sent = {
            f"branch {i}": tg.send_user_message(
                USER, USER, f"branch {i}", reply_to=root_answer.message_id
            )["message_id"]
            for i in range(count)
        }
        await turns_done(tg, app, count + 1, timeout=30)  # takes ~1 s
    prefix: list[dict[str, Any]] = [
        {"role": "system", "content": ROOT_PROMPT},
        {"role": "user", "content": "shared root"},
        {"role": "assistant", "content": "echo: shared root"},
    ]
    requests = llm.requests[1:]
    assert len(requests) == count
    asked = sorted(r.messages[-1]["content"] for r in requests)
    assert asked == sorted(sent)
    for request in requests:
        own = request.messages[-1]["content"]
        assert request.messages == [*prefix, {"role": "user", "content": own}]

    store = TranscriptStore(redis)
    leaves = set()
    for own, message_id in sent.items():
        parts = answers_to(tg, USER, message_id)
        assert [p.text for p in parts] == [f"[depth:4] echo: {own}"]
        node = await store.resolve(str(USER), parts[0].message_id)
        assert node is not None
        leaves.add(node)
        history = await store.history(node)
        assert [(m.role, m.content) for m in history.messages] == [
            SYSTEM,
            ("user", "shared root"),
            ("assistant", "echo: shared root"),
            ("user", own),
            ("assistant", f"echo: {own}"),
        ]
    assert len(leaves) == count


async def test_reply_to_a_part_still_streaming_continues_the_whole_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    question = "write a lot"
    reply = words(80)  # 40 chunks 50 ms apart: ~2 s of streaming
    llm.responder = long_reply_to(question, reply)
    llm.chunk_chars = 8
    llm.chunk_delay = 0.05
    async with start_bot() as app:
        first = tg.send_user_message(USER, USER, question)["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, first)))
        [part] = answers_to(tg, USER, first)
        shown = part.text or ""
        assert shown != f"[depth:2] {reply}"  # still growing
        assert not llm.requests[0].completed
        follow = tg.send_user_message(USER, USER, "and then?", reply_to=part.message_id)
        await tg.wait_for(lambda: tg.pending_updates == 0)  # the reply is in the intake stream
        assert not llm.requests[0].completed  # ... while the first answer is still streaming
        await turns_done(tg, app, 2)
        assert part.text == f"[depth:2] {reply}"
        [answer] = answers_to(tg, USER, follow["message_id"])
        assert answer.text == "[depth:4] echo: and then?"
    assert len(llm.requests) == 2
    assert said(llm) == [
        SYSTEM,
        ("user", question),
        ("assistant", reply),
        ("user", "and then?"),
    ]
