"""A topic is a thread (TOPIC_THREADS): private chats with topics, Bot API 9.3 + 10.5.

End to end: the real bot against the Bot API and OpenAI test servers and real Redis.
In a private chat with topics a message replying to nothing continues its topic's
conversation; a new conversation outside topics opens a topic of its own; the topic's
newest answer is kept in Redis, so it holds after a kill -9 and with two processes.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.app import App
from bot.chat.routers import HELP_TEXT, TOPICS_HELP

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram, StoredMessage
from .harness import (
    USER,
    BotFactory,
    BotProcess,
    answers_to,
    ask,
    env_for,
    running_bot,
    said,
    settings_for,
)
from .redis_server import RedisServer

TIMEOUT = 15.0


def echo_or_title(llm: FakeOpenAI) -> None:
    """The model echoes; a title call gets a fixed title."""

    def respond(messages: list[dict[str, Any]]) -> str:
        if str(messages[0]["content"]).startswith("Give a short title"):
            return "Pancake talk"
        return "echo: " + str(messages[-1]["content"])

    llm.responder = respond


def in_topic(tg: FakeTelegram, topic: int) -> list[StoredMessage]:
    """The bot's answers in a topic (not its service messages), oldest first."""
    return [m for m in tg.bot_messages(USER) if m.thread_id == topic and m.text is not None]


def history(llm: FakeOpenAI, index: int = -1) -> list[str]:
    """What the model was sent for one answer, the system prompt left out."""
    return [content for role, content in said(llm, index) if role != "system"]


async def test_a_topic_is_one_conversation_and_a_reply_branches_it(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.private_topics(USER)
    async with start_bot() as app:
        topic = tg.add_topic(USER, "Pancakes")
        first, one = await ask(tg, app, USER, "one", thread_id=topic)
        _, two = await ask(tg, app, USER, "two", thread_id=topic)
        _, three = await ask(tg, app, USER, "three", thread_id=topic)
        assert [one, two, three] == [
            "[depth:2] echo: one",
            "[depth:4] echo: two",
            "[depth:6] echo: three",
        ]
        assert history(llm) == ["one", "echo: one", "two", "echo: two", "three"]

        # a reply to the first answer branches there; the topic goes on from the branch
        [first_answer] = [m.message_id for m in in_topic(tg, topic) if m.reply_to == first]
        _, branch = await ask(tg, app, USER, "four", thread_id=topic, reply_to=first_answer)
        assert branch == "[depth:4] echo: four"
        _, after = await ask(tg, app, USER, "five", thread_id=topic)
        assert after == "[depth:6] echo: five"
        assert history(llm) == ["one", "echo: one", "four", "echo: four", "five"]

        # another topic is another conversation; a reply keeps its chain wherever sent from
        other = tg.add_topic(USER, "Waffles")
        _, elsewhere = await ask(tg, app, USER, "six", thread_id=other)
        assert elsewhere == "[depth:2] echo: six"
        _, replied = await ask(tg, app, USER, "seven", reply_to=first_answer)
        assert replied == "[depth:4] echo: seven"
        assert tg.calls_to("createForumTopic") == []  # a reply is no new conversation


async def test_two_messages_sent_at_once_in_a_topic_are_answered_in_order(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.private_topics(USER)
    llm.gate = asyncio.Event()
    async with start_bot() as app:  # two turns of a user run at once (the default)
        topic = tg.add_topic(USER, "Quick")
        first = tg.send_user_message(USER, USER, "first", thread_id=topic)["message_id"]
        second = tg.send_user_message(USER, USER, "second", thread_id=topic)["message_id"]
        await llm.wait_for(lambda: len(llm.requests) == 1, TIMEOUT)
        # the second waits for the first's answer, not for the model
        await tg.wait_for(lambda: app.runner.in_flight_count == 2, TIMEOUT)
        assert len(llm.requests) == 1
        llm.gate.set()
        await tg.wait_for(lambda: len(in_topic(tg, topic)) == 2, TIMEOUT)
        await tg.wait_for(lambda: app.runner.completed == 2, TIMEOUT)
        answers = {m.reply_to: m.text for m in in_topic(tg, topic)}
        assert answers == {first: "[depth:2] echo: first", second: "[depth:4] echo: second"}
        assert history(llm) == ["first", "echo: first", "second"]


async def test_a_new_conversation_outside_topics_opens_a_topic_of_its_own(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    echo_or_title(llm)
    tg.private_topics(USER)
    async with start_bot() as app:
        tg.send_user_message(USER, USER, "how do I make fluffy pancakes at home?")
        await tg.wait_for(lambda: bool(tg.calls_to("editForumTopic")), TIMEOUT)
        [opened] = tg.calls_to("createForumTopic")
        assert opened.params["name"] == "how do I make fluffy pancakes…"
        topic = opened.result["message_thread_id"]
        [answer] = in_topic(tg, topic)
        assert answer.text == "[depth:2] echo: how do I make fluffy pancakes at home?"
        assert answer.reply_to is None  # the question is outside the topic
        [rename] = tg.calls_to("editForumTopic")
        assert (rename.params["message_thread_id"], rename.params["name"]) == (
            topic,
            "Pancake talk",
        )
        assert not [m for m in tg.bot_messages(USER) if m.thread_id is None]
        # the topic goes on from there
        _, more = await ask(tg, app, USER, "and syrup?", thread_id=topic)
        assert more == "[depth:4] echo: and syrup?"
        assert history(llm) == [
            "how do I make fluffy pancakes at home?",
            "echo: how do I make fluffy pancakes at home?",
            "and syrup?",
        ]

        # a user who turned topics off is answered in place, at once
        tg.private_topics(USER, on=False)
        plain, text = await ask(tg, app, USER, "no topics here")
        assert text == "[depth:2] echo: no topics here"
        assert len(tg.calls_to("createForumTopic")) == 2
        assert [m.thread_id for m in tg.bot_messages(USER) if m.reply_to == plain] == [None]


async def test_a_server_without_create_forum_topic_answers_in_place_and_asks_once(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")
    tg.private_topics(USER)
    tg.unsupported_methods.add("createForumTopic")
    tg.unsupported_answer = "emulator"  # a 500 naming the method
    async with start_bot() as app:
        _, one = await ask(tg, app, USER, "one")
        _, two = await ask(tg, app, USER, "two")
    assert (one, two) == ("[depth:2] echo: one", "[depth:2] echo: two")
    assert len(tg.calls_to("createForumTopic")) == 1
    assert sum("createForumTopic" in r.getMessage() for r in caplog.records) == 1


async def test_topic_threads_off_keeps_the_reply_chain_rules(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.private_topics(USER)
    async with start_bot(topic_threads=False) as app:
        topic = tg.add_topic(USER, "Pancakes")
        _, one = await ask(tg, app, USER, "one", thread_id=topic)
        _, two = await ask(tg, app, USER, "two", thread_id=topic)
        _, outside = await ask(tg, app, USER, "three")
    assert (one, two, outside) == (
        "[depth:2] echo: one",
        "[depth:2] echo: two",
        "[depth:2] echo: three",
    )
    assert tg.calls_to("createForumTopic") == [] and tg.calls_to("setMySettings") == []


async def test_a_kill_before_the_newest_answer_is_noted_loses_neither_topic_nor_thread(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """SIGKILL once the answer is on screen in the topic it opened, before the final write
    (which notes the topic's newest answer): the process after it finishes the turn in
    that topic, opening no other, and the topic's next message continues it."""
    words = " ".join(f"w{i}" for i in range(150))
    llm.responder = lambda m: words if m[-1]["content"] == "kill me" else "echo: and then?"
    llm.chunk_chars, llm.chunk_delay = 10, 0.02  # it streams: the final text is an edit
    tg.private_topics(USER)
    tg.unsupported_methods.add("sendMessageDraft")  # (drafts send the final text anew)
    # a short takeover: the next message waits for the dead run's turn, taken over once
    # its lease lapses (30 s by default)
    env = env_for(tg, llm, redis_server.url, TAKEOVER_SECONDS="4")
    first = BotProcess(env, tmp_path)

    async def kill_on_final_edit(call: Call) -> None:
        if call.method == "editMessageText" and call.params.get("text", "").endswith(words):
            tg.after_call = None
            await first.kill()  # the answer is stored and on screen; no final write

    tg.after_call = kill_on_final_edit
    await first.start()
    tg.send_user_message(USER, USER, "kill me")
    assert first.proc is not None
    await asyncio.wait_for(first.proc.wait(), timeout=30)
    [opened] = tg.calls_to("createForumTopic")
    topic = opened.result["message_thread_id"]
    assert not await redis.hexists(f"rc:{{{USER}}}:heads", str(topic))  # killed before it

    second = BotProcess(env, tmp_path)
    await second.start()
    try:
        await tg.wait_for(lambda: bool(in_topic(tg, topic)), 30)
        follow = tg.send_user_message(USER, USER, "and then?", thread_id=topic)["message_id"]
        await tg.wait_for(
            lambda: (
                [m.text for m in in_topic(tg, topic) if m.reply_to == follow]
                == ["[depth:4] echo: and then?"]
            ),
            30,
        )
    finally:
        await second.terminate()
    [answer, _] = in_topic(tg, topic)
    assert answer.text == f"[depth:2] {words}"  # shown again, never sent twice
    assert len(tg.calls_to("createForumTopic")) == 1
    assert history(llm) == ["kill me", words, "and then?"]


async def test_two_processes_answer_a_topic_in_order(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """The first message's turn runs in one process (full: one turn at a time), the
    second's in another, which waits for the first's answer in Redis."""
    tg.private_topics(USER)
    llm.gate = asyncio.Event()
    busy = settings_for(tg, llm, redis_server.url, bot_instance="a", max_concurrent_turns=1)
    other = settings_for(tg, llm, redis_server.url, bot_instance="b")
    async with running_bot(busy) as a:
        topic = tg.add_topic(USER, "Two of us")
        first = tg.send_user_message(USER, USER, "first", thread_id=topic)["message_id"]
        await llm.wait_for(lambda: len(llm.requests) == 1, TIMEOUT)
        async with running_bot(other) as b:
            second = tg.send_user_message(USER, USER, "second", thread_id=topic)["message_id"]
            await tg.wait_for(lambda: b.runner.in_flight_count == 1, TIMEOUT)
            llm.gate.set()
            await tg.wait_for(lambda: len(in_topic(tg, topic)) == 2, TIMEOUT)
            await tg.wait_for(lambda: b.runner.completed == 1, TIMEOUT)
    assert a.runner.completed == 1
    answers = {m.reply_to: m.text for m in in_topic(tg, topic)}
    assert answers == {first: "[depth:2] echo: first", second: "[depth:4] echo: second"}
    assert history(llm) == ["first", "echo: first", "second"]


async def started(tg: FakeTelegram, app: App) -> None:
    """The bot has answered a message (its set-up beside polling has run by then)."""
    _, text = await ask(tg, app, USER, "hello", thread_id=tg.add_topic(USER, "Hi"))
    assert text.startswith("[depth:2] ")
    await tg.wait_for(lambda: bool(tg.calls_to("getMyCommands")), TIMEOUT)


async def test_the_sidebar_is_turned_on_once_and_help_tells_of_topics(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.private_topics(USER)
    async with start_bot() as app:
        await tg.wait_for(lambda: bool(tg.calls_to("setMySettings")), TIMEOUT)
        await started(tg, app)
        asked = tg.send_user_message(USER, USER, "/help")["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, asked)), TIMEOUT)
        [help_text] = answers_to(tg, USER, asked)
        assert help_text.text == f"{HELP_TEXT}\n\n{TOPICS_HELP}"
    [turned_on] = tg.calls_to("setMySettings")
    assert turned_on.params == {"has_topic_sidebar": True} and turned_on.status == 200
    async with start_bot() as app:  # getMe says it is on: nothing to ask
        await started(tg, app)
    assert len(tg.calls_to("setMySettings")) == 1


async def test_a_server_without_set_my_settings_starts_as_before(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="replychain")
    tg.private_topics(USER)
    tg.unsupported_methods.add("setMySettings")
    async with start_bot() as app:
        await started(tg, app)
        await tg.wait_for(lambda: bool(tg.calls_to("setMySettings")), TIMEOUT)
    assert len(tg.calls_to("setMySettings")) == 1
    lines = [r.getMessage() for r in caplog.records if "setMySettings" in r.getMessage()]
    assert len(lines) == 1 and "sidebar" in lines[0]
