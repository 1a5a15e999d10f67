"""End to end: the real bot (aiogram, openai SDK, redis-py) against the test servers.

Each test drives Telegram traffic into the Bot API test server and asserts what
the bot sent back, what the model was asked, and what Redis holds.
"""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from aiogram.types import Chat, Message, Update, User
from redis.asyncio import Redis

from bot.chat import routers
from bot.chat.routers import HELP_TEXT, REFUSAL_TEXT, UNKNOWN_COMMAND_TEXT, UNSUPPORTED_TEXT
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import (
    OTHER_USER,
    ROOT_PROMPT,
    USER,
    BotFactory,
    answers_to,
    ask,
    running_bot,
    said,
    settings_for,
    turns_done,
)
from .redis_server import RedisServer

GROUP = -100500


async def test_first_answer_is_a_reply_at_depth_2(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        message_id, text = await ask(tg, app, USER, "hello")
    assert text == "[depth:2] echo: hello"
    [part] = answers_to(tg, USER, message_id)
    assert part.parse_mode == "HTML"
    assert said(llm) == [("system", ROOT_PROMPT), ("user", "hello")]
    assert llm.requests[-1].stream


async def test_a_handled_update_is_let_go(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """aiogram memoises Update.event_type in an lru_cache of 128: without the bot
    clearing it, the last 128 updates and their messages stayed in memory. (Polling
    holds the latest batch until the next one: hence a second message.)"""

    def kept() -> list[Update]:
        return [
            o
            for o in gc.get_objects()
            if type(o) is Update and o.message is not None and o.message.text == "let go"
        ]

    async with start_bot() as app:
        await ask(tg, app, USER, "let go")
        await ask(tg, app, USER, "next")
        await tg.wait_for(lambda: not kept(), 5, what="the handled update let go")


async def test_reply_continues_and_standalone_starts_over(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, "hello")
        [bot_msg] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, "more", reply_to=bot_msg.message_id)
        assert text == "[depth:4] echo: more"
        assert said(llm) == [
            ("system", ROOT_PROMPT),
            ("user", "hello"),
            ("assistant", "echo: hello"),
            ("user", "more"),
        ]
        _, text = await ask(tg, app, USER, "fresh start")
        assert text == "[depth:2] echo: fresh start"
        assert said(llm) == [("system", ROOT_PROMPT), ("user", "fresh start")]


async def test_two_replies_to_one_answer_branch(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, "root question")
        [bot_msg] = answers_to(tg, USER, first)
        left, text_left = await ask(tg, app, USER, "left", reply_to=bot_msg.message_id)
        right, text_right = await ask(tg, app, USER, "right", reply_to=bot_msg.message_id)
        assert (text_left, text_right) == ("[depth:4] echo: left", "[depth:4] echo: right")
        assert ("user", "left") not in said(llm)
        [left_answer] = answers_to(tg, USER, left)
        _, text = await ask(tg, app, USER, "deeper", reply_to=left_answer.message_id)
        assert text == "[depth:6] echo: deeper"
        contents = [c for _, c in said(llm)]
        assert "left" in contents
        assert "right" not in contents
        assert right != left


async def test_long_answer_is_split_and_any_part_continues(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    paragraph = "word " * 150  # ~750 characters
    long_text = "\n\n".join(f"{i}: {paragraph.strip()}" for i in range(14))  # ~10.5k
    llm.responder = lambda messages: long_text if messages[-1]["content"] == "long" else "ok"
    llm.chunk_chars = 2000
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "long")
        parts = answers_to(tg, USER, first)
        assert len(parts) >= 3
        assert all(len((p.text or "").encode("utf-16-le")) // 2 <= 4096 for p in parts)
        assert (parts[0].text or "").startswith("[depth:2] 0: word")
        assert (parts[-1].text or "").endswith("word")
        _, text = await ask(tg, app, USER, "and?", reply_to=parts[1].message_id)
        assert text == "[depth:4] ok"
        assert said(llm)[2] == ("assistant", long_text)


async def test_same_message_ids_in_two_chats_never_mix(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        a_first, _ = await ask(tg, app, USER, "secret of A", user=USER)
        b_first, _ = await ask(tg, app, OTHER_USER, "question of B", user=OTHER_USER)
        assert a_first == b_first  # ids are per chat: both chats start at 1
        [b_answer] = answers_to(tg, OTHER_USER, b_first)
        [a_answer] = answers_to(tg, USER, a_first)
        assert a_answer.message_id == b_answer.message_id
        _, text = await ask(
            tg, app, OTHER_USER, "go on", user=OTHER_USER, reply_to=b_answer.message_id
        )
        assert text == "[depth:4] echo: go on"
        contents = [c for _, c in said(llm)]
        assert "question of B" in contents
        assert "secret of A" not in contents


async def test_group_answers_only_when_addressed(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    async with start_bot() as app:
        ignored = tg.send_user_message(GROUP, USER, "just chatting among humans")
        other_bot = tg.send_user_message(GROUP, USER, "/help@some_other_bot")
        mention, text = await ask(tg, app, GROUP, "@replychain_bot what is 2+2?", user=OTHER_USER)
        assert text == "[depth:2] echo: what is 2+2?"
        [answer_msg] = answers_to(tg, GROUP, mention)
        _, text = await ask(tg, app, GROUP, "and 3+3?", reply_to=answer_msg.message_id)
        assert text == "[depth:4] echo: and 3+3?"
        help_msg = tg.send_user_message(GROUP, USER, "/help")
        await tg.wait_for(lambda: bool(answers_to(tg, GROUP, help_msg["message_id"])))
        unknown = tg.send_user_message(GROUP, USER, "/nosuch@replychain_bot")["message_id"]
        # a misused command's hint goes to its sender only (an ephemeral message)
        await tg.wait_for(lambda: any(m.reply_to == unknown for m in tg.ephemerals))
        assert [m.text for m in tg.ephemerals if m.reply_to == unknown] == [UNKNOWN_COMMAND_TEXT]
        # a reply to a human's message is not addressed to the bot
        human_reply = tg.send_user_message(
            GROUP, OTHER_USER, "agreed", reply_to=ignored["message_id"]
        )
        _, _ = await ask(tg, app, GROUP, "@replychain_bot ping")
    assert len(llm.requests) == 3
    for silent in (ignored, other_bot, human_reply):
        assert not answers_to(tg, GROUP, silent["message_id"])


async def test_forum_topic_answers_stay_in_the_topic(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Forum", forum=True)
    topic = tg.add_topic(GROUP, "Ideas")
    async with start_bot() as app:
        in_topic, _ = await ask(tg, app, GROUP, "@replychain_bot in a topic", thread_id=topic)
        [part] = answers_to(tg, GROUP, in_topic)
        assert part.thread_id == topic
        _, text = await ask(tg, app, GROUP, "continue", thread_id=topic, reply_to=part.message_id)
        assert text == "[depth:4] echo: continue"
        general, _ = await ask(tg, app, GROUP, "@replychain_bot in general")
        [part] = answers_to(tg, GROUP, general)
        assert part.thread_id is None
    sends = [c for c in tg.calls if c.method == "sendMessage" and c.params["chat_id"] == GROUP]
    general_send = sends[-1]
    assert "message_thread_id" not in general_send.params


async def test_commands_are_answered_locally(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot():
        for command in ("/start", "/help"):
            message_id = tg.send_user_message(USER, USER, command)["message_id"]

            def answered(message_id: int = message_id) -> bool:
                return bool(answers_to(tg, USER, message_id))

            await tg.wait_for(answered)
            [reply] = answers_to(tg, USER, message_id)
            assert reply.text == HELP_TEXT
        await tg.wait_for(lambda: bool(tg.calls_to("setMyCommands")))  # beside polling
        registered = tg.calls_to("setMyCommands")
        assert {c["command"] for c in registered[-1].params["commands"]} >= {"start", "help"}
    assert not llm.requests


async def test_stickers_get_a_clear_answer_and_captions_count_as_text(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        sticker = tg.send_user_message(USER, USER, sticker=True)
        await tg.wait_for(lambda: bool(answers_to(tg, USER, sticker["message_id"])))
        assert answers_to(tg, USER, sticker["message_id"])[0].text == UNSUPPORTED_TEXT
        assert not llm.requests
        _, text = await ask(tg, app, USER, None, photo=True, caption="what is this?")
        assert text == "[depth:2] echo: what is this?"


async def test_model_outage_then_recovery_keeps_the_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    llm.fail_next(500, count=10)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "are you there?")
        assert "not reachable" in text
        assert "reply to it again" in text
        assert len(llm.requests) == 2  # one call and one SDK retry (OPENAI_MAX_RETRIES=1)
        llm.clear_faults()
        _, text = await ask(tg, app, USER, "retry please", reply_to=first)
        assert text == "[depth:3] echo: retry please"
        assert said(llm)[1:] == [("user", "are you there?"), ("user", "retry please")]
        [notice] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, "again via notice", reply_to=notice.message_id)
        assert text == "[depth:3] echo: again via notice"
    store = TranscriptStore(redis)
    node = await store.resolve(str(USER), first)
    assert node is not None
    assert (await store.history(node)).messages[-1].content == "are you there?"


async def test_model_timeout_gives_a_clear_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.hang_next(count=5, seconds=30)
    async with start_bot(openai_timeout=0.5, openai_max_retries=0) as app:
        _, text = await ask(tg, app, USER, "slow?")
    assert "took too long" in text


async def test_telegram_429_during_streaming_is_honoured(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.responder = lambda _messages: " ".join(f"w{i}" for i in range(120))
    llm.chunk_chars = 20
    llm.chunk_delay = 0.05
    tg.unsupported_methods.add("sendMessageDraft")  # edit streaming (tests/test_drafts.py: drafts)
    tg.fail_next("editMessageText", status=429, retry_after=1)
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "stream please")
    assert text == "[depth:2] " + " ".join(f"w{i}" for i in range(120))
    assert not tg.violations
    statuses = [c.status for c in tg.calls if c.method == "editMessageText"]
    assert 429 in statuses
    assert statuses[-1] == 200


async def test_formatting_is_accepted_and_falls_back_to_plain_text(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.responder = lambda _m: "**Bold** a < b && c > d\n\n```python\nif x < 3: print('&')\n```"
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "format")
        [part] = answers_to(tg, USER, first)
        assert part.parse_mode == "HTML"
        assert text == "[depth:2] Bold a < b && c > d\n\nif x < 3: print('&')"
        assert {e["type"] for e in part.entities} >= {"bold", "pre"}
        tg.fail_next(
            "sendMessage", status=400, description="Bad Request: can't parse entities: boom"
        )
        second, text = await ask(tg, app, USER, "format again")
        [part] = answers_to(tg, USER, second)
        assert part.parse_mode is None
        assert text == "[depth:2] Bold a < b && c > d\n\nif x < 3: print('&')"


async def test_typing_is_shown_while_waiting_for_the_model(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.gate = asyncio.Event()
    tg.unsupported_methods.add("sendMessageDraft")  # drafts show "Thinking…" (test_drafts.py)
    async with start_bot() as app:
        message = tg.send_user_message(USER, USER, "think hard")
        await tg.wait_for(lambda: any(c.method == "sendChatAction" for c in tg.calls))
        action = next(c for c in tg.calls if c.method == "sendChatAction")
        assert action.params["action"] == "typing"
        assert not answers_to(tg, USER, message["message_id"])
        llm.gate.set()
        await turns_done(tg, app, 1)
        assert answers_to(tg, USER, message["message_id"])[0].text == "[depth:2] echo: think hard"


async def test_a_slow_chat_never_delays_another(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.hang_next(count=1, seconds=20)
    async with start_bot(openai_timeout=30) as app:
        slow = tg.send_user_message(USER, USER, "slow one")
        await llm.wait_for(lambda: len(llm.requests) == 1)
        _, text = await ask(tg, app, OTHER_USER, "fast one", user=OTHER_USER)
        assert text == "[depth:2] echo: fast one"
        assert not answers_to(tg, USER, slow["message_id"])
        await llm.stop()  # ends the hanging call: the slow chat gets its notice


async def test_allowed_user_ids_refuse_others_without_a_model_call(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(allowed_user_ids=frozenset({USER})) as app:
        refused = tg.send_user_message(OTHER_USER, OTHER_USER, "let me in")
        await tg.wait_for(lambda: bool(answers_to(tg, OTHER_USER, refused["message_id"])))
        assert answers_to(tg, OTHER_USER, refused["message_id"])[0].text == REFUSAL_TEXT
        _, text = await ask(tg, app, USER, "I am allowed")
        assert text == "[depth:2] echo: I am allowed"
    assert len(llm.requests) == 1


async def test_refused_users_are_remembered_within_a_bound_and_told_once_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refusal once an hour per stranger holds, while the strangers remembered stay
    bounded: beyond REFUSED_KEPT, those refused over an hour ago (who would be told
    again anyway) are dropped."""
    clock = [10_000.0]
    told: list[int] = []
    monkeypatch.setattr(routers, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(routers, "REFUSED_KEPT", 50)
    monkeypatch.setattr(
        routers, "notice", lambda _n, event, _t, personal: told.append(event.chat.id)
    )
    access = routers.AccessControl(frozenset({USER}))

    async def write(user: int) -> None:
        sender = User(id=user, is_bot=False, first_name="x")
        chat = Chat(id=user, type="private")
        message = Message(
            message_id=1, date=datetime.now(UTC), chat=chat, from_user=sender, text="let me in"
        )
        handled = await access(_never_handled, message, {"notifier": None})
        assert handled is None

    for user in range(1, 41):  # 40 strangers, then 20 more half an hour later
        await write(10_000 + user)
    clock[0] += 1800
    for user in range(41, 61):
        await write(10_000 + user)
    for user in range(1, 61):  # within the hour nobody is told twice, even beyond the bound
        await write(10_000 + user)
    assert told == [10_000 + user for user in range(1, 61)]
    clock[0] += 1800  # the first 40 were told an hour ago: told again; the others are not
    for user in range(1, 61):
        await write(10_000 + user)
    assert told[60:] == [10_000 + user for user in range(1, 41)]
    clock[0] += 3600  # all of them an hour ago: the next stranger drops them all
    await write(20_000)
    assert list(access._refused) == [20_000]


async def _never_handled(_event: object, _data: dict[str, object]) -> None:
    raise AssertionError("a stranger's message reached a handler")


async def test_over_long_input_gets_a_clear_answer_and_is_kept(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(max_input_chars=100) as app:
        first, text = await ask(tg, app, USER, "x" * 150)
        assert "too long" in text
        assert not llm.requests
        # replying to the notice continues without the over-long message
        [notice] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, "shorter", reply_to=notice.message_id)
        assert text == "[depth:2] echo: shorter"
        assert "x" * 150 not in [c for _, c in said(llm)]
        # the message itself was kept: replying to it continues from it
        _, text = await ask(tg, app, USER, "short", reply_to=first)
        assert text == "[depth:3] echo: short"


async def test_streaming_edits_stay_within_one_per_second(
    llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    words = " ".join(f"w{i}" for i in range(200))
    llm.responder = lambda _m: words
    llm.chunk_chars = 12
    llm.chunk_delay = 0.03  # ~2.5 s of streaming
    # edit streaming, on a server without drafts (tests/test_drafts.py paces drafts)
    async with FakeTelegram(
        flood_edits_per_second=1, unsupported_methods=("sendMessageDraft",)
    ) as tg:
        tg.add_private_chat(USER, "Ada")
        async with running_bot(settings_for(tg, llm, redis_server.url)) as app:
            first, text = await ask(tg, app, USER, "stream")
        assert text == f"[depth:2] {words}"
        edits = [c for c in tg.calls if c.method == "editMessageText"]
        assert len(edits) >= 2  # it streamed
        assert not tg.violations
        assert all(c.status == 200 for c in edits)
        [part] = answers_to(tg, USER, first)
        assert part.edits == len(edits)
