"""Steering a thread: /tree, /export (no model call), /retry, edits, /forget, topics.

End to end: the real bot against the Bot API and OpenAI test servers and real
Redis; the 300-node tree is built with the store directly (a focused step).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.bus.inbound import EDIT, RETRY, Inbound
from bot.bus.intake import Intake
from bot.chat.messages import NOT_A_THREAD
from bot.chat.routers import HELP_TEXT
from bot.chat.steering import (
    EXPORT_HINT,
    FORGET_ASK,
    FORGET_CANCELLED,
    FORGET_NOT_YOURS,
    FORGET_OWNERS_ONLY,
    RETRY_USAGE,
    TREE_HINT,
)
from bot.data import keys as bot_keys
from bot.ops import conversations
from bot.ops.forget import forget_chat
from bot.turn import notices
from transcript import ChatMessage, TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import OTHER_USER, ROOT, USER, BotFactory, answers_to, ask, turns_done

TIMEOUT = 15.0


async def command(tg: FakeTelegram, text: str, **kw: Any) -> StoredMessage:
    """Send a command as USER; the bot's one message replying to it."""
    sent = tg.send_user_message(USER, USER, text, **kw)
    await tg.wait_for(lambda: bool(answers_to(tg, USER, sent["message_id"])), TIMEOUT)
    [reply] = answers_to(tg, USER, sent["message_id"])
    return reply


async def three_branches(tg: FakeTelegram, app: Any) -> dict[str, int]:
    """hello → answer; three replies to that answer (three branches)."""
    hello, _ = await ask(tg, app, USER, "hello there")
    first = answers_to(tg, USER, hello)[-1].message_id
    ids = {"hello": hello, "first": first}
    for name in ("alpha question", "beta question", "gamma question"):
        asked, _ = await ask(tg, app, USER, name, reply_to=first)
        ids[name] = asked
        ids[name + " answer"] = answers_to(tg, USER, asked)[-1].message_id
    return ids


async def test_tree_and_export_of_a_thread_with_three_branches(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        ids = await three_branches(tg, app)
        calls = len(llm.requests)

        tree = await command(tg, "/tree", reply_to=ids["beta question answer"])
        lines = (tree.text or "").splitlines()
        assert "9 nodes, 3 branches" in lines[0]
        assert lines[1].startswith("system prompt: You are a test assistant.")
        assert lines[2].startswith("[depth:1] user: hello there")
        assert lines[4].startswith("├─ [depth:3] user: alpha question")
        assert lines[6].startswith("├─ [depth:3] user: beta question")
        assert lines[7].startswith("│  [depth:4] bot: ")
        assert lines[7].endswith("◀ this message")
        assert lines[8].startswith("└─ [depth:3] user: gamma question")
        assert sum("◀" in line for line in lines) == 1
        assert tree.raw["entities"][0]["type"] == "pre"  # monospace, as the CLI shows it

        export = await command(tg, "/export", reply_to=ids["gamma question"])
        assert export.document is not None
        name, data = export.document
        assert name == f"conversation-{USER}-{ids['gamma question']}.md"
        md = data.decode()
        headings = [line for line in md.splitlines() if line.startswith("## ")]
        assert headings == ["## System prompt", "## User", "## Assistant", "## User"]
        assert "## System prompt\n\nYou are a test assistant.\n" in md
        assert "## User\n\ngamma question\n" in md
        assert "alpha question" not in md and "beta question" not in md  # only that branch
        assert len(llm.requests) == calls  # neither command reached the model


async def test_misplaced_tree_and_export_get_a_one_line_hint(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello")
        assert (await command(tg, "/tree")).text == TREE_HINT
        assert (await command(tg, "/export")).text == EXPORT_HINT
        hint = await command(tg, "/tree")
        stray = await command(tg, "/export", reply_to=hint.message_id)  # in no thread
        assert stray.text == NOT_A_THREAD
        assert hello
        assert len(llm.requests) == 1  # hello, never a command


async def test_a_300_node_tree_fits_one_message_around_the_marked_path(
    redis: Redis, store: TranscriptStore
) -> None:
    root = await store.start("77", [ChatMessage("system", "You are a test assistant.")])
    spine = [root.id]
    node = root
    for i in range(60):  # a 120-node spine
        node = await store.append(node.id, [ChatMessage("user", f"spine question {i} " * 3)])
        node = await store.append(node.id, [ChatMessage("assistant", f"spine answer {i} " * 3)])
        spine.append(node.id)
    count = 121
    for i in range(90):  # 90 side branches of two nodes hanging off the spine
        at = spine[(i * 7) % len(spine)]
        side = await store.append(at, [ChatMessage("user", f"side question {i} " * 3)])
        await store.append(side.id, [ChatMessage("assistant", f"side answer {i} " * 3)])
        count += 2
    assert count >= 300
    marked = spine[40]
    await store.alias("77", [5000], marked)
    full = await conversations.tree(redis, store, 77, 5000)
    assert len(full) > 4096 and full.count("\n") == count + 1
    short = await conversations.tree(redis, store, 77, 5000, limit=4096)
    assert len(short) <= 4096
    lines = short.splitlines()
    assert f"{count} nodes" in lines[0]
    assert lines[1].startswith("system prompt:")
    [mark] = [line for line in lines if "◀" in line]
    assert "spine answer 39" in mark
    assert any("spine question 39" in line for line in lines)  # its question, above it
    assert any("spine question 40" in line for line in lines)  # the reply below it
    assert any("… " in line and " more" in line for line in lines)


# ---------------------------------------------------------------------- /retry


def numbered(llm: FakeOpenAI) -> None:
    """Each answer differs: "answer N to: <last user text>"."""

    def respond(messages: list[dict[str, Any]]) -> str:
        last = [m for m in messages if m["role"] == "user"][-1]["content"]
        return f"answer {len(llm.requests)} to: {last}"

    llm.responder = respond


def sent_texts(llm: FakeOpenAI, index: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.requests[index].messages]


async def test_retry_asks_again_with_the_same_history_as_a_sibling(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    numbered(llm)
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello")
        first = answers_to(tg, USER, hello)[-1].message_id
        joke, joke_answer = await ask(tg, app, USER, "tell me a joke", reply_to=first)
        assert joke_answer == "[depth:4] answer 2 to: tell me a joke"
        joke_part = answers_to(tg, USER, joke)[-1].message_id
        before = llm.requests[-1].messages

        retry, again = await ask(tg, app, USER, "/retry", reply_to=joke_part)
        assert again == "[depth:4] answer 3 to: tell me a joke"  # a sibling: the same depth
        assert llm.requests[-1].messages == before  # byte-identical history

        # both answers continue apart
        again_part = answers_to(tg, USER, retry)[-1].message_id
        _, old = await ask(tg, app, USER, "and then?", reply_to=joke_part)
        assert old.startswith("[depth:6] ")
        assert "answer 2 to: tell me a joke" in sent_texts(llm)
        assert "answer 3 to: tell me a joke" not in sent_texts(llm)
        _, new = await ask(tg, app, USER, "and then?", reply_to=again_part)
        assert new.startswith("[depth:6] ")
        assert "answer 3 to: tell me a joke" in sent_texts(llm)
        assert "answer 2 to: tell me a joke" not in sent_texts(llm)

        # the same /retry update delivered again is the same turn: nothing new
        calls, done = len(llm.requests), app.runner.completed + 1
        tg.push_update({"message": tg.message(USER, retry).raw})
        await turns_done(tg, app, done)
        assert len(llm.requests) == calls and len(answers_to(tg, USER, retry)) == 1


async def test_retry_of_any_part_of_a_split_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.responder = lambda messages: f"{len(llm.requests)} " + "long answer words. " * 400
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "write a lot")
        parts = answers_to(tg, USER, hello)
        assert len(parts) >= 2
        retry, again = await ask(tg, app, USER, "/retry", reply_to=parts[0].message_id)
        assert again.startswith("[depth:2] 2 long answer")
        assert llm.requests[-1].messages == llm.requests[0].messages
        assert len(answers_to(tg, USER, retry)) >= 2


async def test_misplaced_retry_gets_a_one_line_hint(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello")
        hint = await command(tg, "/retry")
        assert hint.text == RETRY_USAGE
        _, stray = await ask(tg, app, USER, "/retry", reply_to=hint.message_id)
        assert stray == notices.RETRY_NOT_AN_ANSWER
        assert len(llm.requests) == 1 and hello


# ---------------------------------------------------------------------- edits


async def test_an_edited_question_is_asked_again_as_a_sibling(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    numbered(llm)
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello")
        first = answers_to(tg, USER, hello)[-1].message_id
        joke, _ = await ask(tg, app, USER, "tell me a joke", reply_to=first)
        old_part = answers_to(tg, USER, joke)[-1].message_id

        done = app.runner.completed + 1
        tg.edit_user_message(USER, joke, "tell me a pun")
        await tg.wait_for(lambda: len(answers_to(tg, USER, joke)) == 2, TIMEOUT)
        await turns_done(tg, app, done)
        new = answers_to(tg, USER, joke)[-1]
        assert new.text == "[depth:4] answer 3 to: tell me a pun"  # same depth, replies to it
        assert "tell me a joke" not in sent_texts(llm)

        # an edit delivered twice, or back to the first wording: nothing new is asked
        for text in ("tell me a pun", "tell me a joke"):
            done = app.runner.completed + 1
            tg.edit_user_message(USER, joke, text)
            await turns_done(tg, app, done)
        # the edited_message update delivered again: the same turn, nothing new
        done = app.runner.completed + 1
        tg.push_update({"edited_message": {**tg.message(USER, joke).raw, "text": "tell me a pun"}})
        await turns_done(tg, app, done)
        assert len(llm.requests) == 3 and len(answers_to(tg, USER, joke)) == 2

        _, old = await ask(tg, app, USER, "more", reply_to=old_part)
        assert old.startswith("[depth:6] ")
        assert "tell me a joke" in sent_texts(llm) and "tell me a pun" not in sent_texts(llm)
        _, fresh = await ask(tg, app, USER, "more", reply_to=new.message_id)
        assert fresh.startswith("[depth:6] ")
        assert "tell me a pun" in sent_texts(llm) and "tell me a joke" not in sent_texts(llm)


async def test_an_edit_while_the_first_answer_streams(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.responder = lambda messages: "word " * 60 + str(messages[-1]["content"])
    llm.chunk_delay = 0.05
    async with start_bot() as app:
        done = app.runner.completed + 2
        sent = tg.send_user_message(USER, USER, "first wording")
        asked = sent["message_id"]
        # the answer is on screen and still growing
        await tg.wait_for(
            lambda: (
                bool(answers_to(tg, USER, asked))
                and app.runner.in_flight.get((str(USER), asked)) is not None
            ),
            TIMEOUT,
        )
        tg.edit_user_message(USER, asked, "second wording")
        await turns_done(tg, app, done)
        await tg.wait_for(lambda: len(answers_to(tg, USER, asked)) == 2, TIMEOUT)
        first, second = answers_to(tg, USER, asked)
        assert (first.text or "").startswith("[depth:2] word")
        assert (first.text or "").endswith("first wording")
        assert (second.text or "").startswith("[depth:2] word")
        assert (second.text or "").endswith("second wording")
        assert len(llm.requests) == 2
        assert "first wording" not in sent_texts(llm)


def test_intake_entries_carry_their_kind() -> None:
    plain = Inbound(5, 10, 7, "hello")
    assert Inbound.decode(plain.encode()) == plain and plain.turn == "10"
    edit = Inbound(5, 10, 7, "hello again", reply_to=3, kind=EDIT)
    assert Inbound.decode(edit.encode()) == edit
    again = Inbound(5, 10, 7, "hello again", kind=EDIT)
    other = Inbound(5, 10, 7, "hello, once more", kind=EDIT)
    # an edit is a turn of its own; the same wording twice is the same turn
    assert edit.turn == again.turn != other.turn and edit.turn.startswith("10:e")
    retry = Inbound(5, 11, 7, "", reply_to=4, kind=RETRY)
    assert Inbound.decode(retry.encode()) == retry and retry.turn == "11"


# ---------------------------------------------------------------------- /forget


async def stored_bytes(redis: Redis) -> dict[bytes, bytes]:
    """Every key in Redis with everything it holds, as bytes (to search for a marker)."""
    found: dict[bytes, bytes] = {}
    async for name in redis.scan_iter(count=1000):
        kind = await redis.type(name)
        if kind == b"string":
            value: Any = await redis.get(name)
        elif kind == b"hash":
            value = await redis.hgetall(name)
        elif kind == b"stream":
            value = await redis.xrange(name)
        elif kind == b"zset":
            value = await redis.zrange(name, 0, -1, withscores=True)
        elif kind == b"list":
            value = await redis.lrange(name, 0, -1)
        else:
            value = await redis.smembers(name)
        found[name] = repr(value).encode() + b"|" + name
    return found


def holding(found: dict[bytes, bytes], marker: str) -> list[bytes]:
    return [name for name, value in found.items() if marker.encode() in value]


async def test_forget_erases_every_key_holding_the_chats_text_and_nothing_else(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello MARKER-A")
        first = answers_to(tg, USER, hello)[-1].message_id
        await ask(tg, app, USER, "more MARKER-A", reply_to=first)
        await ask(tg, app, OTHER_USER, "hello MARKER-B", user=OTHER_USER)
        for chat in (USER, OTHER_USER):  # a parked message of each chat
            parked = Inbound(chat, 999, chat, f"parked MARKER-{'A' if chat == USER else 'B'}")
            await redis.xadd(bot_keys.DEAD_LETTER_STREAM, {b"m": parked.encode(), b"why": b"x"})
        before = await stored_bytes(redis)
        assert holding(before, "MARKER-A") and holding(before, "MARKER-B")
        audit = bot_keys.chat_usage_key(USER, "a").encode()
        assert any(name.startswith(audit) for name in before)

        # asked first; cancelling erases nothing
        ask_message = await command(tg, "/forget")
        assert ask_message.text == FORGET_ASK
        tg.press_button(USER, ask_message.message_id, USER, "forget:no")
        await tg.wait_for(lambda: tg.message(USER, ask_message.message_id).edits == 1, TIMEOUT)
        assert tg.message(USER, ask_message.message_id).text == FORGET_CANCELLED
        assert holding(await stored_bytes(redis), "MARKER-A")

        confirm = await command(tg, "/forget")
        [[erase, _]] = (confirm.reply_markup or {})["inline_keyboard"]
        query = tg.press_button(USER, confirm.message_id, USER, erase["callback_data"])
        await tg.wait_for(lambda: tg.message(USER, confirm.message_id).edits == 1, TIMEOUT)
        said_text = tg.message(USER, confirm.message_id).text or ""
        assert said_text.startswith("Erased everything I stored about this chat: 1 conversation")
        assert "1 queued or parked message," in said_text
        assert tg.message(USER, confirm.message_id).reply_markup is None  # the buttons are gone
        assert query in tg.query_answers

        after = await stored_bytes(redis)
        assert holding(after, "MARKER-A") == []
        assert holding(after, "MARKER-B")  # the other chat is untouched
        assert len(holding(after, "MARKER-B")) == len(holding(before, "MARKER-B"))
        for kind in ("a", "t", "n"):  # the chat's usage detail and audit are gone
            assert not any(bot_keys.chat_usage_key(USER, kind).encode() in n for n in after)
            assert any(bot_keys.chat_usage_key(OTHER_USER, kind).encode() in n for n in after)

        # a reply to an erased answer starts fresh
        _, fresh = await ask(tg, app, USER, "again", reply_to=first)
        assert fresh.startswith("[depth:2] ")
        assert not any("MARKER-A" in text for text in sent_texts(llm))
        assert len(llm.requests) == 4


async def test_forget_erases_queued_messages_in_the_chats_intake_shard(
    redis: Redis, store: TranscriptStore
) -> None:
    """With INTAKE_SHARDS > 1 a chat's queued messages live in its own stream."""
    intake = Intake(redis, "test", shards=4)
    chats = [USER, OTHER_USER, *range(2000, 2010)]  # some land in shards other than 0
    assert len({intake.stream_of(chat) for chat in chats}) > 1
    for chat in chats:
        await intake.record(Inbound(chat, 7, chat, f"queued MARKER-{chat}"), asyncio.Event())
    gone = next(chat for chat in chats if intake.stream_of(chat) != intake.streams[0])
    erased = await forget_chat(redis, store, gone, intake_shards=4)
    assert erased.queued == 1
    found = await stored_bytes(redis)
    assert holding(found, f"MARKER-{gone}") == []
    assert all(holding(found, f"MARKER-{chat}") for chat in chats if chat != gone)


# ---------------------------------------------------------------------- private topics


def titling(llm: FakeOpenAI) -> None:
    def respond(messages: list[dict[str, Any]]) -> str:
        if str(messages[0]["content"]).startswith("Give a short title"):
            return '"Pancakes for Beginners."'
        return "echo: " + str(messages[-1]["content"])

    llm.responder = respond


async def test_private_topics_keep_their_answers_and_implicit_names_get_a_title(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    titling(llm)
    tg.private_topics(USER)
    async with start_bot() as app:
        unnamed = tg.add_topic(USER, "New chat", implicit=True)
        named = tg.add_topic(USER, "Recipes")
        asked, answer = await ask(tg, app, USER, "how do I make pancakes", thread_id=unnamed)
        assert answer == "[depth:2] echo: how do I make pancakes"  # replies to nothing: new
        assert {m.thread_id for m in answers_to(tg, USER, asked)} == {unnamed}
        await tg.wait_for(lambda: bool(tg.calls_to("editForumTopic")), TIMEOUT)
        [rename] = tg.calls_to("editForumTopic")
        assert rename.params["message_thread_id"] == unnamed
        assert rename.params["name"] == "Pancakes for Beginners"
        assert rename.status == 200
        # the title call is counted like any other
        await tg.wait_for(lambda: len(llm.requests) == 2, TIMEOUT)
        total = await app.accounting.user_all_time(USER)
        assert total.calls == 2

        # a second message in the topic replying to nothing goes on (tests/test_topic_threads.py),
        # with no new title
        again, second = await ask(tg, app, USER, "and waffles?", thread_id=unnamed)
        assert second == "[depth:4] echo: and waffles?"
        first_part = answers_to(tg, USER, asked)[-1].message_id
        _, more = await ask(tg, app, USER, "with syrup?", reply_to=first_part)
        assert more.startswith("[depth:4] ")
        # a topic its creator named is never renamed
        _, in_named = await ask(tg, app, USER, "hello", thread_id=named)
        assert in_named == "[depth:2] echo: hello"
        assert len(tg.calls_to("editForumTopic")) == 1
        assert len(llm.requests) == 5 and again
        # service messages (the topics' creation, the rename) were never answered
        assert not answers_to(tg, USER, unnamed) and not answers_to(tg, USER, named)
        assert len(tg.bot_messages(USER)) == 4 + 1  # four answers and the rename's notice


async def test_topic_titles_can_be_turned_off(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    titling(llm)
    tg.private_topics(USER)
    async with start_bot(topic_titles=False) as app:
        unnamed = tg.add_topic(USER, "New chat", implicit=True)
        await ask(tg, app, USER, "how do I make pancakes", thread_id=unnamed)
        await ask(tg, app, USER, "and waffles?", thread_id=unnamed)
        assert tg.calls_to("editForumTopic") == [] and len(llm.requests) == 2


# ---------------------------------------------------------------------- groups, registration

GROUP = -100777


async def group_reply(tg: FakeTelegram, text: str, user: int, **kw: Any) -> StoredMessage:
    sent = tg.send_user_message(GROUP, user, text, **kw)
    await tg.wait_for(lambda: bool(answers_to(tg, GROUP, sent["message_id"])), TIMEOUT)
    [reply] = answers_to(tg, GROUP, sent["message_id"])
    return reply


async def test_forget_in_a_group_is_the_owners_and_only_the_asker_confirms(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """On a server without ephemeral messages the confirmation is the group's to see: only
    the asker's press counts."""
    tg.ephemeral = False
    tg.add_group(GROUP, "Team")
    async with start_bot(owner_user_ids=str(USER)) as app:
        await ask(tg, app, GROUP, "@replychain_bot remember MARKER-G", user=OTHER_USER)
        refused = await group_reply(tg, "/forget@replychain_bot", OTHER_USER)
        assert refused.text == FORGET_OWNERS_ONLY
        confirm = await group_reply(tg, "/forget@replychain_bot", USER)
        [[erase, _]] = (confirm.reply_markup or {})["inline_keyboard"]
        query = tg.press_button(GROUP, confirm.message_id, OTHER_USER, erase["callback_data"])
        await tg.wait_for(lambda: query in tg.query_answers, TIMEOUT)
        assert tg.query_answers[query] == FORGET_NOT_YOURS  # shown to the presser only
        assert tg.message(GROUP, confirm.message_id).edits == 0
        assert holding(await stored_bytes(redis), "MARKER-G")  # nothing erased
        tg.press_button(GROUP, confirm.message_id, USER, erase["callback_data"])
        await tg.wait_for(lambda: tg.message(GROUP, confirm.message_id).edits == 1, TIMEOUT)
        assert holding(await stored_bytes(redis), "MARKER-G") == []


async def test_forget_in_a_group_asks_the_owner_alone_with_an_ephemeral_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    tg.add_group(GROUP, "Team")
    async with start_bot(owner_user_ids=str(USER)) as app:
        await ask(tg, app, GROUP, "@replychain_bot remember MARKER-E", user=OTHER_USER)
        asked = tg.send_user_message(GROUP, OTHER_USER, "/forget@replychain_bot")["message_id"]
        # the refusal goes to the asker only (test_ephemeral.py)
        await tg.wait_for(lambda: any(m.reply_to == asked for m in tg.ephemerals), TIMEOUT)
        [refused] = [m for m in tg.ephemerals if m.reply_to == asked]
        assert refused.text == FORGET_OWNERS_ONLY
        asked = tg.send_user_message(GROUP, USER, "/forget@replychain_bot")["message_id"]
        await tg.wait_for(lambda: any(m.reply_to == asked for m in tg.ephemerals), TIMEOUT)
        [confirm] = [m for m in tg.ephemerals if m.reply_to == asked]
        assert confirm.raw["receiver_user"]["id"] == USER and confirm.text == FORGET_ASK
        [[erase, _]] = (confirm.reply_markup or {})["inline_keyboard"]
        ephemeral = confirm.raw["ephemeral_message_id"]
        with pytest.raises(ValueError, match="sees no button"):  # nobody else sees it
            tg.press_ephemeral_button(GROUP, ephemeral, OTHER_USER, erase["callback_data"])
        tg.press_ephemeral_button(GROUP, ephemeral, USER, erase["callback_data"])
        await tg.wait_for(lambda: confirm.edits == 1, TIMEOUT)
        assert holding(await stored_bytes(redis), "MARKER-E") == []
        assert confirm.text is not None and "rased" in confirm.text


async def test_group_edits_count_only_for_messages_the_bot_answers(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    async with start_bot() as app:
        chatter = tg.send_user_message(GROUP, USER, "just humans talking")
        tg.edit_user_message(GROUP, chatter["message_id"], "still just humans")
        asked, _ = await ask(tg, app, GROUP, "@replychain_bot what is 2+2?")
        done = app.runner.completed + 1
        tg.edit_user_message(GROUP, asked, "@replychain_bot what is 3+3?")
        await turns_done(tg, app, done)
        assert len(llm.requests) == 2  # the chatter and its edit were never taken in
        assert "what is 3+3?" in sent_texts(llm)
        assert answers_to(tg, GROUP, chatter["message_id"]) == []


async def test_every_command_is_registered_and_described(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot():
        await tg.wait_for(lambda: bool(tg.calls_to("setMyCommands")), TIMEOUT)
    registered = {c["command"] for c in tg.calls_to("setMyCommands")[-1].params["commands"]}
    assert {"tree", "export", "retry", "forget"} <= registered
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("tree", "export", "retry", "forget"):
        assert f"/{name}" in HELP_TEXT and f"`/{name}`" in readme
