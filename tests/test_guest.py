"""Guest mode end to end (Bot API 10.0): the bot summoned in chats it is not in.

The real bot against the Bot API test server's guest mode: a ``guest_message`` is
answered once with ``answerGuestQuery``, the answer posted into the guest chat carries
its name in its button, and a reply to it (a ``guest_message`` whose
``reply_to_message`` is that answer) continues its thread, in the guest chat's own scope.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis.asyncio import Redis

from bot.app import App
from bot.chat.routers import REFUSAL_TEXT
from bot.i18n import I18N, _
from bot.telegram import guest
from bot.turn.parts import PartLedger
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram, StoredMessage
from .harness import OTHER_USER, ROOT_PROMPT, USER, BotFactory, BotProcess, ask, env_for, said
from .redis_server import RedisServer

FRIENDS = 777  # a private chat of USER with a friend: the bot is not in it
GROUP = -100900  # a group the bot is not in
TIMEOUT = 15.0
SYSTEM = ("system", ROOT_PROMPT)


def answer_to(tg: FakeTelegram, chat: int, message_id: int) -> StoredMessage:
    """The bot's one guest answer to message ``message_id`` of guest chat ``chat``
    (LookupError, "not yet" to ``wait_for``, until there is exactly one)."""
    found = [m for m in tg.guest_answers(chat) if m.reply_to == message_id]
    if len(found) != 1:
        raise LookupError(f"{len(found)} answers to message {message_id}")
    return found[0]


async def summon(
    tg: FakeTelegram,
    app: App,
    chat: int,
    text: str,
    *,
    user: int = USER,
    reply_to: int | None = None,
) -> tuple[int, StoredMessage]:
    """Mention the bot in a guest chat; wait for its turn; (the message's id, the answer)."""
    done = app.runner.completed + 1
    sent = tg.summon(chat, user, f"@{tg.username} {text}", reply_to=reply_to)
    asked = sent["message_id"]
    await tg.wait_for(
        lambda: app.runner.completed >= done and bool(answer_to(tg, chat, asked)),
        TIMEOUT,
    )
    return asked, answer_to(tg, chat, asked)


async def test_summoned_the_bot_answers_in_the_chat_with_the_guest_fields(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(FRIENDS)
    async with start_bot() as app:
        asked, answer = await summon(tg, app, FRIENDS, "hello")
    assert answer.text == "[depth:2] echo: hello"
    [[button]] = (answer.reply_markup or {})["inline_keyboard"]
    assert button == {"text": guest.BUTTON_TEXT, "callback_data": f"guest:{asked}"}
    assert answer.raw["guest_bot_caller_user"]["id"] == USER
    assert answer.raw["from"]["id"] == tg.bot_id and answer.reply_to == asked
    assert said(llm) == [SYSTEM, ("user", "hello")]
    # answered once, by the query, never by sendMessage (the bot is not in the chat)
    assert len(tg.calls_to("answerGuestQuery")) == 1
    assert not tg.calls_to("sendMessage") and not tg.calls_to("sendChatAction")
    assert tg.guest_queries[next(iter(tg.guest_queries))].answered is not None


async def test_a_reply_to_the_answer_continues_and_two_replies_branch(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(GROUP, "supergroup")
    async with start_bot() as app:
        _, first = await summon(tg, app, GROUP, "root question")
        _, left = await summon(tg, app, GROUP, "left", reply_to=first.message_id)
        assert left.text == "[depth:4] echo: left"
        assert said(llm) == [
            SYSTEM, ("user", "root question"), ("assistant", "echo: root question"),
            ("user", "left"),
        ]  # fmt: skip
        # another person replies to the same answer: a branch that never sees "left"
        _, right = await summon(tg, app, GROUP, "right", reply_to=first.message_id, user=OTHER_USER)
        assert right.text == "[depth:4] echo: right"
        assert ("user", "left") not in said(llm)
        _, deeper = await summon(tg, app, GROUP, "deeper", reply_to=left.message_id)
        assert deeper.text == "[depth:6] echo: deeper"
        contents = [c for _, c in said(llm)]
        assert "left" in contents and "right" not in contents
        # a mention replying to nothing starts over
        _, fresh = await summon(tg, app, GROUP, "fresh")
        assert fresh.text == "[depth:2] echo: fresh"


async def test_a_mention_replying_to_somebodys_message_quotes_it(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(GROUP, "supergroup")
    tg.add_user(OTHER_USER, "Bob")
    said_by_bob = tg.post_in_guest_chat(GROUP, OTHER_USER, "the meeting moved to 5 pm")
    async with start_bot() as app:
        _, answer = await summon(tg, app, GROUP, "when is it?", reply_to=said_by_bob)
    question = said(llm)[-1][1]
    assert question == "[quoted message from Bob]\n> the meeting moved to 5 pm\n\nwhen is it?"
    assert answer.text is not None and answer.text.startswith("[depth:2] ")


async def test_a_guest_chat_with_the_id_of_a_private_chat_stays_apart(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """Telegram: a guest chat "may not coincide" with a bot chat of the same id."""
    tg.add_guest_chat(USER)  # the same id as USER's private chat with the bot
    async with start_bot() as app:
        private, _ = await ask(tg, app, USER, "private hello")
        asked, answer = await summon(tg, app, USER, "guest hello")
        # the message ids coincide too: each chat numbers its own
        assert asked == private
        assert answer.text == "[depth:2] echo: guest hello"
        _, more = await summon(tg, app, USER, "more", reply_to=answer.message_id)
        assert more.text == "[depth:4] echo: more"
        assert ("user", "private hello") not in said(llm)
        # the private chat's thread never saw the guest chat
        [private_answer] = tg.bot_messages(USER)
        _, text = await ask(tg, app, USER, "go on", reply_to=private_answer.message_id)
        assert text == "[depth:4] echo: go on"
        assert ("user", "guest hello") not in said(llm) and ("user", "more") not in said(llm)
    store = TranscriptStore(redis)
    private_node = await store.resolve(str(USER), private)
    guest_node = await store.resolve(f"g{USER}", asked)
    assert private_node is not None and guest_node is not None
    assert private_node.scope != guest_node.scope


async def test_a_stranger_is_refused_through_the_query(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(GROUP, "group")
    async with start_bot(allowed_user_ids=frozenset({USER})) as app:
        tg.summon(GROUP, OTHER_USER, f"@{tg.username} hi")
        await tg.wait_for(lambda: bool(tg.guest_answers(GROUP)), TIMEOUT)
        assert app.runner.completed == 0
    [refusal] = tg.guest_answers(GROUP)
    assert refusal.text == REFUSAL_TEXT
    assert not llm.requests


async def test_guest_mode_off_ignores_guest_messages(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(FRIENDS)
    async with start_bot(guest_mode=False) as app:
        tg.summon(FRIENDS, USER, f"@{tg.username} hello")
        await tg.wait_for(lambda: tg.pending_updates == 0, TIMEOUT)
        _, text = await ask(tg, app, USER, "still here?")  # the bot is alive and polling
        assert text == "[depth:2] echo: still here?"
    assert not tg.calls_to("answerGuestQuery") and not tg.guest_answers(FRIENDS)


async def test_a_redelivered_guest_update_is_answered_once(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(FRIENDS)
    async with start_bot() as app:
        update = tg.summon(FRIENDS, USER, f"@{tg.username} only once")
        for _ in range(3):  # the same guest message again, in updates with new ids
            tg.push_update({"guest_message": update})
        await tg.wait_for(lambda: app.runner.completed >= 4, TIMEOUT)
        tg.push_update({"guest_message": update})  # and once more after it was answered
        await tg.wait_for(lambda: app.runner.completed >= 5, TIMEOUT)
    [answer] = tg.guest_answers(FRIENDS)
    assert answer.text == "[depth:2] echo: only once"
    assert len(llm.requests) == 1
    assert [c.status for c in tg.calls_to("answerGuestQuery")] == [200]


async def test_kill_after_the_answer_was_posted_before_it_was_recorded(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """SIGKILL between Telegram posting the answer and the bot recording it: the run
    after the restart finds the query answered, posts nothing, and records the answer,
    so a reply to it continues its thread."""
    tg.add_guest_chat(FRIENDS)
    env = env_for(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)

    async def kill_once_posted(call: Call) -> None:
        if call.method == "answerGuestQuery":
            tg.after_call = None
            await first.kill()  # the answer is in the chat; the bot never heard back

    tg.after_call = kill_once_posted
    await first.start()
    asked = tg.summon(FRIENDS, USER, f"@{tg.username} kill me")["message_id"]
    assert first.proc is not None
    await asyncio.wait_for(first.proc.wait(), timeout=30)
    shown = answer_to(tg, FRIENDS, asked)
    assert shown.text == "[depth:2] echo: kill me"
    second = BotProcess(env, tmp_path)
    await second.start()
    try:
        store = TranscriptStore(redis)
        await tg.wait_for(lambda: len(tg.calls_to("answerGuestQuery")) == 2, 30)
        # the second run's call was refused (answered already), and nothing else posted
        assert [c.status for c in tg.calls_to("answerGuestQuery")] == [200, 400]
        assert [m.text for m in tg.guest_answers(FRIENDS)] == ["[depth:2] echo: kill me"]
        assert len(llm.requests) == 1  # the stored answer, not asked for again
        follow = tg.summon(FRIENDS, USER, f"@{tg.username} and then?", reply_to=shown.message_id)
        await tg.wait_for(
            lambda: (
                answer_to(tg, FRIENDS, follow["message_id"]).text == "[depth:4] echo: and then?"
            ),
            30,
        )
        assert await store.resolve(f"g{FRIENDS}", guest.part_of(asked)) is not None
    finally:
        await second.terminate()


async def test_kill_while_the_model_answers_gives_one_answer_after_restart(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    # (``redis`` empties the shared server first: an earlier test's turns left in its
    # intake would be run before this one's)
    tg.add_guest_chat(GROUP, "supergroup")
    llm.chunk_chars, llm.chunk_delay = 5, 0.2  # a slow stream: the kill lands inside it
    env = env_for(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)
    await first.start()
    asked = tg.summon(GROUP, USER, f"@{tg.username} a long question")["message_id"]
    await tg.wait_for(lambda: bool(llm.requests), 30)
    await first.kill()
    assert not tg.guest_answers(GROUP)
    llm.chunk_delay = 0.0
    second = BotProcess(env, tmp_path)
    await second.start()
    try:
        await tg.wait_for(lambda: bool(tg.guest_answers(GROUP)), 30)
        assert [m.text for m in tg.guest_answers(GROUP)] == ["[depth:2] echo: a long question"]
        assert answer_to(tg, GROUP, asked).reply_to == asked
        assert [c.status for c in tg.calls_to("answerGuestQuery")] == [200]
    finally:
        await second.terminate()


async def test_a_query_too_old_to_answer_keeps_the_message_and_the_bot_goes_on(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    tg.add_guest_chat(FRIENDS)
    llm.chunk_chars, llm.chunk_delay = 3, 0.05
    async with start_bot() as app:
        update = tg.summon(FRIENDS, USER, f"@{tg.username} too late")
        await tg.wait_for(lambda: bool(llm.requests), TIMEOUT)
        tg.expire_guest_query(update["guest_query_id"])  # the bot took too long
        await tg.wait_for(lambda: app.runner.completed >= 1, TIMEOUT)
        assert not tg.guest_answers(FRIENDS)
        llm.chunk_delay = 0.0
        _, answer = await summon(tg, app, FRIENDS, "again")
        assert answer.text == "[depth:2] echo: again"
    store = TranscriptStore(redis)
    assert await store.resolve(f"g{FRIENDS}", update["message_id"]) is not None  # kept


async def test_usage_is_counted_to_the_summoner_and_the_guest_chat(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    tg.add_guest_chat(USER)  # the guest chat shares the id of USER's private chat
    async with start_bot() as app:
        asked, _ = await summon(tg, app, USER, "count me", user=OTHER_USER)
        assert (await app.accounting.user_today(OTHER_USER)).calls == 1
        assert (await app.accounting.user_today(USER)).calls == 0
        assert (await app.accounting.turn(f"g{USER}", asked)).calls == 1
        assert (await app.accounting.turn(USER, asked)).calls == 0  # the private chat's
    detail = [k async for k in redis.scan_iter(match="rc:{*}:u:*") if b"{usage:" not in k]
    assert detail and all(k.startswith(f"rc:{{g{USER}}}:".encode()) for k in detail)


async def test_the_answers_button_says_how_to_continue(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(FRIENDS)
    async with start_bot() as app:
        asked, answer = await summon(tg, app, FRIENDS, "hello")
        query = tg.press_guest_button(FRIENDS, answer.message_id, OTHER_USER, f"guest:{asked}")
        await tg.wait_for(lambda: query in tg.query_answers, TIMEOUT)
    assert tg.query_answers[query] == guest.HOW_TO_CONTINUE.format(bot=tg.username)


async def test_commands_where_the_bot_is_a_guest(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(GROUP, "supergroup")
    async with start_bot() as app:
        _, answer = await summon(tg, app, GROUP, "pick a number")
        # /retry replying to the answer: another answer to the same question, a sibling
        _, again = await summon(tg, app, GROUP, "/retry", reply_to=answer.message_id)
        assert again.text == "[depth:2] echo: pick a number"
        assert said(llm, -1) == said(llm, -2)
        _, deeper = await summon(tg, app, GROUP, "and then?", reply_to=again.message_id)
        assert deeper.text == "[depth:4] echo: and then?"
        # what needs the bot's own chat gets a one-line hint, never silence
        for command in ("/tree", "/export", "/usage", "/forget"):
            sent = tg.summon(GROUP, USER, f"@{tg.username} {command}", reply_to=answer.message_id)
            await tg.wait_for(lambda s=sent: bool(answer_to(tg, GROUP, s["message_id"])), TIMEOUT)  # type: ignore[misc]
            assert answer_to(tg, GROUP, sent["message_id"]).text == guest.COMMAND_HINT
        help_ = tg.summon(GROUP, USER, f"@{tg.username} /help")
        await tg.wait_for(lambda: bool(answer_to(tg, GROUP, help_["message_id"])), TIMEOUT)
        assert answer_to(tg, GROUP, help_["message_id"]).text == guest.HELP
        empty = tg.summon(GROUP, USER, f"@{tg.username}")
        await tg.wait_for(lambda: bool(answer_to(tg, GROUP, empty["message_id"])), TIMEOUT)
    assert len(llm.requests) == 3


async def test_a_long_answer_is_one_message_cut_with_a_note_and_stored_whole(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_guest_chat(FRIENDS)
    words = " ".join(f"word{i}" for i in range(1500))  # about 12,000 characters
    llm.responder = lambda m: words if m[-1]["content"] == "tell me a lot" else "echo: ok"
    async with start_bot() as app:
        _, answer = await summon(tg, app, FRIENDS, "tell me a lot")
        assert answer.text is not None and answer.text.endswith(guest.CUT)
        assert len(answer.text) <= 4096
        _, more = await summon(tg, app, FRIENDS, "go on", reply_to=answer.message_id)
    assert more.text == "[depth:4] echo: ok"
    assert ("assistant", words) in said(llm)  # the model sees all it said


async def test_a_photo_that_mentions_the_bot_is_read_and_stored_in_the_guest_scope(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    tg.add_guest_chat(FRIENDS)
    async with start_bot() as app:
        done = app.runner.completed + 1
        sent = tg.summon(FRIENDS, USER, f"@{tg.username} what is this?", photo=True)
        await tg.wait_for(lambda: app.runner.completed >= done, TIMEOUT)
        answer = answer_to(tg, FRIENDS, sent["message_id"])
    assert answer.text == "[depth:2] echo: what is this?"
    [user] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
    [text, image] = user["content"]
    assert text == {"type": "text", "text": "what is this?"}
    assert image["type"] == "image_url"
    blobs = [k async for k in redis.scan_iter(match="rc:*:b:*")]
    assert blobs and all(k.startswith(f"rc:{{g{FRIENDS}}}:".encode()) for k in blobs)


def test_a_guest_answer_announced_and_not_yet_recorded_is_waited_for() -> None:
    """A reply to a guest answer posted a moment ago (or by a run that died before
    recording it) waits for that turn: the ledger's announcement of turn m is part -m."""
    ledger = PartLedger(parts={}, announced={"5": 0})
    assert ledger.may_be_sending(guest.part_of(5))
    assert not ledger.may_be_sending(guest.part_of(6))
    assert not PartLedger(parts={}, announced={}).may_be_sending(guest.part_of(5))


async def test_a_guest_is_answered_in_their_own_language(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    """The answer's button, the hint to a command and the button's answer follow the
    language of whoever wrote (the summoner's, the presser's)."""
    tg.add_guest_chat(GROUP, "supergroup")
    tg.set_language(USER, "de")
    tg.set_language(OTHER_USER, "fr")
    async with start_bot() as app:
        asked, answer = await summon(tg, app, GROUP, "hallo")
        sent = tg.summon(GROUP, USER, f"@{tg.username} /tree", reply_to=answer.message_id)
        await tg.wait_for(lambda: bool(answer_to(tg, GROUP, sent["message_id"])), TIMEOUT)
        query = tg.press_guest_button(GROUP, answer.message_id, OTHER_USER, f"guest:{asked}")
        await tg.wait_for(lambda: query in tg.query_answers, TIMEOUT)
    with I18N.use_locale("de"):
        button, hint = _(guest.BUTTON_TEXT), _(guest.COMMAND_HINT)
    with I18N.use_locale("fr"):
        how = _(guest.HOW_TO_CONTINUE).format(bot=tg.username)
    assert button != guest.BUTTON_TEXT and how != guest.HOW_TO_CONTINUE.format(bot=tg.username)
    [[shown]] = (answer.reply_markup or {})["inline_keyboard"]
    assert shown["text"] == button
    assert answer_to(tg, GROUP, sent["message_id"]).text == hint
    assert tg.query_answers[query] == how
