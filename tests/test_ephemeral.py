"""Ephemeral notices (Bot API 10.2): what concerns one person of a group goes to that
person only, where the server has ephemeral messages; elsewhere, as before, to everyone."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from bot.chat.routers import REFUSAL_TEXT, UNKNOWN_COMMAND_TEXT
from bot.chat.steering import TREE_HINT
from bot.turn.notices import DAILY_LIMIT

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import OTHER_USER, USER, BotFactory, answers_to, ask
from .test_usage import Clock

GROUP = -100700
TIMEOUT = 15.0


def ephemerals_to(tg: FakeTelegram, chat: int, message_id: int) -> list[StoredMessage]:
    """The ephemeral messages the bot sent in reply to ``message_id``."""
    return [m for m in tg.ephemerals if m.chat_id == chat and m.reply_to == message_id]


async def notice_for(tg: FakeTelegram, chat: int, user: int, text: str) -> StoredMessage:
    """``user`` writes ``text`` in the group; the one ephemeral reply to it."""
    sent = tg.send_user_message(chat, user, text)["message_id"]
    await tg.wait_for(lambda: bool(ephemerals_to(tg, chat, sent)), TIMEOUT)
    [notice] = ephemerals_to(tg, chat, sent)
    return notice


async def test_a_strangers_refusal_and_misused_commands_reach_only_that_person(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    async with start_bot(allowed_user_ids=frozenset({USER})):
        refusal = await notice_for(tg, GROUP, OTHER_USER, "@replychain_bot hi")
        hint = await notice_for(tg, GROUP, USER, "/tree")
        unknown = await notice_for(tg, GROUP, USER, "/nosuch@replychain_bot")
        usage = await notice_for(tg, GROUP, USER, "/usage")
    assert (refusal.text, refusal.raw["receiver_user"]["id"]) == (REFUSAL_TEXT, OTHER_USER)
    assert (hint.text, hint.raw["receiver_user"]["id"]) == (TREE_HINT, USER)
    assert unknown.text == UNKNOWN_COMMAND_TEXT
    assert usage.text is not None and "tokens" in usage.text
    assert usage.raw["receiver_user"]["id"] == USER
    assert not tg.bot_messages(GROUP)  # nothing the whole group sees
    seen_by_user = {m.text for m in tg.visible_to(GROUP, USER) if m.is_bot}
    assert REFUSAL_TEXT not in seen_by_user and TREE_HINT in seen_by_user
    assert not llm.requests


async def test_the_daily_limit_reaches_only_the_asker_and_the_question_is_kept(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    clock = Clock(datetime(2026, 3, 1, 22, 30, tzinfo=UTC))
    async with start_bot(clock=clock, user_daily_token_limit=20) as app:
        await ask(tg, app, GROUP, "@replychain_bot a first question that costs tokens")
        done = app.runner.completed + 1
        notice = await notice_for(tg, GROUP, USER, "@replychain_bot one more please")
        await tg.wait_for(lambda: app.runner.completed >= done, TIMEOUT)
    assert notice.text == DAILY_LIMIT.format(limit=20, reset="12:00\u202fAM", wait="1h 30m")
    assert notice.raw["receiver_user"]["id"] == USER
    assert len(tg.bot_messages(GROUP)) == 1  # the first answer; the notice is nobody else's
    assert len(llm.requests) == 1


async def test_a_private_chat_never_gets_an_ephemeral_message(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot():
        sent = tg.send_user_message(USER, USER, "/tree")["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, sent)), TIMEOUT)
    assert [m.text for m in answers_to(tg, USER, sent)] == [TREE_HINT]
    assert all("ephemeral_message_parameters" not in c.params for c in tg.calls_to("sendMessage"))


async def test_a_server_without_ephemeral_messages_gets_todays_notices_and_one_log_line(
    llm: FakeOpenAI, start_bot: BotFactory, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")
    tg.ephemeral = False  # an older server: it ignores ephemeral_message_parameters
    tg.add_group(GROUP, "Team")
    async with start_bot(allowed_user_ids=frozenset({USER})):
        hints = []
        for text in ("/tree", "/export", "/retry"):
            sent = tg.send_user_message(GROUP, USER, text)["message_id"]
            await tg.wait_for(lambda s=sent: bool(answers_to(tg, GROUP, s)), TIMEOUT)  # type: ignore[misc]
            hints.append(sent)
    assert not tg.ephemerals
    assert all(len(answers_to(tg, GROUP, sent)) == 1 for sent in hints)  # as before
    learned = [r for r in caplog.records if "ephemeral" in r.getMessage()]
    assert len(learned) == 1
    # once learned, the bot stops asking for ephemeral messages
    asked = ["ephemeral_message_parameters" in c.params for c in tg.calls_to("sendMessage")]
    assert asked[0] and not any(asked[1:])
