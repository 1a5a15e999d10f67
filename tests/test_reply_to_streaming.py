"""Replies to an answer still being written continue its thread (issue 36, found by chaos runs).

A reply whose ``reply_to_message`` is the bot's proves the message is ours, so it
must never start a new conversation: Telegram may deliver that reply before it
has answered the bot's ``sendMessage`` (the bot does not know the part's id yet),
or while the answer is held up by flood control. Each test lets the reply arrive
at such a moment and checks that it is answered once, as the next step of the
answer it replied to (``[depth:4]``, the whole answer in its history).

The real bot runs in process against the Bot API and OpenAI test servers and a
real Redis. A held Telegram answer stands for a slow network or a busy server:
it is released after a bounded time, or at once if the bot answered the reply
meanwhile (which is the defect).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from bot.app import App
from bot.data import keys
from bot.turn import notices

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram
from .harness import OTHER_USER, USER, BotFactory, answered_parts, answers_to, ask, said

GROUP = -100642
#: How long Telegram's answer to the send is held while the reply is on its way.
HELD = 2.0


def words(count: int) -> str:
    return " ".join(f"w{i:03d}" for i in range(count))


def streaming(llm: FakeOpenAI, first: str, *, delay: float) -> None:
    """The first answer is ``first`` streamed slowly; every later one echoes."""

    def respond(messages: list[dict[str, Any]]) -> str:
        asked = [m for m in messages if m["role"] == "user"]
        return first if len(asked) == 1 else f"echo: {asked[-1]['content']}"

    llm.responder = respond
    llm.chunk_chars = 8
    llm.chunk_delay = delay


def chat_of(call: Call) -> int | None:
    value = call.params.get("chat_id")
    return int(value) if value is not None else None


def reply_on_send(
    tg: FakeTelegram, chat: int, *, user: int, text: str, nth: int = 1, hold: float = HELD
) -> tuple[list[int], Callable[[Call], Awaitable[None]]]:
    """A hook that lets ``user`` reply to the ``nth`` message the bot sends to ``chat``
    the moment Telegram accepted it, then holds Telegram's answer to the bot for up
    to ``hold`` seconds (or until the bot answered the reply). Returns the list the
    reply's message id goes into, and the hook."""
    replies: list[int] = []
    seen = 0

    async def hook(call: Call) -> None:
        nonlocal seen
        if call.method != "sendMessage" or call.status != 200 or chat_of(call) != chat:
            return
        seen += 1
        if seen != nth:
            return
        part = call.result["message_id"]
        replies.append(tg.send_user_message(chat, user, text, reply_to=part)["message_id"])
        with contextlib.suppress(AssertionError):  # the bot answered it meanwhile: the defect
            await tg.wait_for(lambda: bool(answers_to(tg, chat, replies[0])), hold)

    return replies, hook


async def assert_continues(
    tg: FakeTelegram, llm: FakeOpenAI, app: App, chat: int, reply: int, answer: str
) -> None:
    """The reply was answered once, as the next step after the whole ``answer``."""
    parts = await answered_parts(tg, app, chat, reply, 2)
    assert len(llm.requests) == 2
    text = "".join(p.text or "" for p in parts)
    assert text.startswith("[depth:4] "), text[:80]
    history = said(llm, 1)
    assert [role for role, _ in history] == ["system", "user", "assistant", "user"]
    assert history[2][1] == answer  # the whole answer, not a part of it
    assert await app.store.resolve(str(chat), parts[0].message_id) is not None


async def test_a_group_reply_the_moment_a_part_appears_continues_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Seed 329's case: the reply reaches the bot before Telegram's answer to the send."""
    tg.add_group(GROUP, "Team")
    answer = words(60)  # 30 chunks 50 ms apart: the first part goes out mid-stream
    streaming(llm, answer, delay=0.05)
    replies, tg.after_call = reply_on_send(tg, GROUP, user=OTHER_USER, text="and then?")
    async with start_bot() as app:
        tg.send_user_message(GROUP, USER, "@replychain_bot count for me")
        await tg.wait_for(lambda: bool(replies), 30)
        await assert_continues(tg, llm, app, GROUP, replies[0], answer)


async def test_a_group_reply_two_seconds_into_a_flood_window_continues_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Seed 1330's cases: the answer is held up by per-chat flood control (its sends
    and edits get 429s), and the reply comes 2 s after the first part appeared."""
    tg.add_group(GROUP, "Team")
    answer = words(60)
    streaming(llm, answer, delay=0.05)
    tg.fail_next("sendMessage", retry_after=1, chat_id=GROUP)
    tg.fail_next("editMessageText", retry_after=3, count=2, chat_id=GROUP)
    first: list[int] = []

    async def hook(call: Call) -> None:
        if call.method == "sendMessage" and call.status == 200 and chat_of(call) == GROUP:
            first.append(call.result["message_id"])

    tg.after_call = hook
    async with start_bot() as app:
        tg.send_user_message(GROUP, USER, "@replychain_bot count for me")
        await tg.wait_for(lambda: bool(first), 30)
        await asyncio.sleep(2.0)  # the moment the user replies (the scenario, not a wait)
        reply = tg.send_user_message(GROUP, OTHER_USER, "and then?", reply_to=first[0])
        await assert_continues(tg, llm, app, GROUP, reply["message_id"], answer)


async def test_a_private_reply_the_moment_the_final_message_appears_continues_it(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Drafts: the answer's only message is sent after it is stored; the reply reaches
    the bot before Telegram's answer to that send."""
    answer = words(40)
    streaming(llm, answer, delay=0.02)
    replies, tg.after_call = reply_on_send(tg, USER, user=USER, text="and then?")
    async with start_bot() as app:
        tg.send_user_message(USER, USER, "count for me")
        await tg.wait_for(lambda: bool(replies), 30)
        await assert_continues(tg, llm, app, USER, replies[0], answer)


async def test_a_private_reply_to_a_finished_part_while_the_next_one_drafts_continues(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Drafts, a long answer: its first part is sent as a message while the second one
    is still a draft; the reply to that part comes 1 ms and 2 s later (held answer)."""
    answer = words(1100)  # over 4096 characters: two parts
    streaming(llm, answer, delay=0.004)
    llm.chunk_chars = 40
    replies, tg.after_call = reply_on_send(tg, USER, user=USER, text="and then?")
    async with start_bot() as app:
        question = tg.send_user_message(USER, USER, "count for me")["message_id"]
        await tg.wait_for(lambda: bool(replies), 30)
        parts = await answered_parts(tg, app, USER, question, 1)
        assert len(parts) == 2 and replies[0] > parts[0].message_id
        await assert_continues(tg, llm, app, USER, replies[0], answer)


async def test_a_reply_to_a_message_of_the_bot_that_nothing_knows_gets_a_notice(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Never a silent new thread: the user hears that the thread is unknown, and a reply
    to that notice goes on from their message. A reply to a command's answer (a
    message of no conversation) still starts a new conversation."""
    async with start_bot() as app:
        _, _ = await ask(tg, app, USER, "hello")
        [answer] = tg.bot_messages(USER)
        await app.redis.hdel(f"rc:{{{USER}}}:a", str(answer.message_id))  # as if erased
        app.store.cache.forget_scope(str(USER))
        lost = tg.send_user_message(USER, USER, "still there?", reply_to=answer.message_id)
        await tg.wait_for(lambda: bool(answers_to(tg, USER, lost["message_id"])), 15)
        [notice] = answers_to(tg, USER, lost["message_id"])
        assert notice.text == notices.LOST_TRACK
        assert len(llm.requests) == 1  # no model call for it
        _, text = await ask(tg, app, USER, "yes, go on", reply_to=notice.message_id)
        assert text.startswith("[depth:3] ")
        assert said(llm)[1:] == [("user", "still there?"), ("user", "yes, go on")]

        help_message = tg.send_user_message(USER, USER, "/help")["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, help_message)), 15)
        [help_answer] = answers_to(tg, USER, help_message)
        await tg.wait_for(lambda: app.notifier.idle, 15)
        _, text = await ask(tg, app, USER, "a question", reply_to=help_answer.message_id)
        assert text.startswith("[depth:2] ")


async def test_a_reply_whose_part_is_aliased_between_two_lookups_continues_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, monkeypatch: Any
) -> None:
    """Chaos soak (issue 36 part 2): the reply's turn found no alias for the part, then
    the answer's final write aliased it, then the reply's turn asked whether the id is
    known at all; known, it took the id for a message of no conversation and started a
    new thread ([depth:2]). Telegram's answer to the send is held until the reply's
    turn asks; the test lets the answer's final write land just before that (real)
    lookup."""
    answer = words(40)
    streaming(llm, answer, delay=0.02)
    target: list[int] = []
    replies: list[int] = []
    asking = asyncio.Event()

    async def hook(call: Call) -> None:
        if call.method != "sendMessage" or call.status != 200 or chat_of(call) != USER:
            return
        if not target:
            target.append(call.result["message_id"])
            reply = tg.send_user_message(USER, USER, "and then?", reply_to=target[0])
            replies.append(reply["message_id"])
            await asyncio.wait_for(asking.wait(), 15)

    tg.after_call = hook
    async with start_bot() as app:
        known = app.store.known

        async def known_once_written(scope: str, message_id: int | str) -> bool:
            if target and int(message_id) == target[0]:
                asking.set()
                await tg.wait_for(lambda: app.runner.completed >= 1, 15)
            return await known(scope, message_id)

        monkeypatch.setattr(app.store, "known", known_once_written)
        tg.send_user_message(USER, USER, "count for me")
        await tg.wait_for(lambda: bool(replies), 30)
        await assert_continues(tg, llm, app, USER, replies[0], answer)


async def test_a_part_sent_as_the_answer_ends_is_recorded_before_the_final_edit(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """Soak seed 1 (3 min, 12 chats): a group answer's first part was sent mid-stream,
    and Telegram's answer came back after the model had finished. The part was left
    to the final write, which waits for the final edit's pace (the group's budget:
    seconds); a kill in that wait left the part unrecorded, and the restarted bot
    sent the answer again. The part must be recorded before the final edit goes out."""
    tg.add_group(GROUP, "Team")
    streaming(llm, words(60), delay=0.03)
    question: list[int] = []
    first: list[int] = []
    recorded_at_final_edit: list[Any] = []

    async def hook(call: Call) -> None:
        if chat_of(call) != GROUP or call.status != 200:
            return
        if call.method == "sendMessage" and not first:
            first.append(call.result["message_id"])
            # Telegram's answer arrives once the model has finished its stream
            await tg.wait_for(lambda: bool(llm.requests) and llm.requests[0].completed, 15)
        elif call.method == "editMessageText" and first and not recorded_at_final_edit:
            ledger = keys.pending_parts_key(str(GROUP))
            recorded_at_final_edit.append(await redis.hget(ledger, str(first[0])))

    tg.after_call = hook
    async with start_bot() as app:
        question.append(
            tg.send_user_message(GROUP, USER, "@replychain_bot count for me")["message_id"]
        )
        await tg.wait_for(lambda: app.runner.completed >= 1, 30)
    assert recorded_at_final_edit == [str(question[0]).encode()]
