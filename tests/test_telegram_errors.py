"""Telegram's refusals as typed errors (bot/telegram/errors.py) and what the edge makes
of them: the real aiogram Bot on the bot's session against the strict test server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiogram import Bot
from aiogram.client.default import DefaultBotProperties
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode
from aiogram.exceptions import TelegramBadRequest

from bot.telegram.errors import (
    DraftPeerInvalidError,
    EditTargetGoneError,
    EntitiesRejectedError,
    NotModifiedError,
    OversizeFileError,
    ThreadGoneError,
    UnknownMethodError,
)
from bot.telegram.format import Chunk
from bot.telegram.out import TelegramOut
from bot.telegram.outcomes import DraftsUnavailableError, MessageGoneError
from bot.telegram.session import BotApiSession

from .fakes.telegram import FakeTelegram
from .harness import USER

GROUP = -100777
#: HTML Telegram cannot parse (an unclosed tag), and the text it stands for.
BROKEN = Chunk("<b>bold", "bold")


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    session = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
    bot = Bot(tg.token, session=session, default=DefaultBotProperties(parse_mode=ParseMode.HTML))
    yield bot
    await bot.session.close()


async def test_each_refusal_arrives_as_its_typed_error(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_group(GROUP, "Team", forum=True)
    sent = await bot.send_message(USER, "hello")
    with pytest.raises(EntitiesRejectedError):
        await bot.send_message(USER, BROKEN.html)
    with pytest.raises(NotModifiedError):
        await bot.edit_message_text("hello", chat_id=USER, message_id=sent.message_id)
    with pytest.raises(DraftPeerInvalidError):
        await bot.send_message_draft(chat_id=GROUP, draft_id=1, text="hi")
    with pytest.raises(ThreadGoneError):
        await bot.send_message(GROUP, "hi", message_thread_id=999)
    big = tg.send_user_message(USER, USER, None, document=True, file_size=21 * 1024 * 1024)
    with pytest.raises(OversizeFileError):
        await bot.get_file(big["document"]["file_id"])
    tg.delete_message(USER, sent.message_id)
    with pytest.raises(EditTargetGoneError):
        await bot.edit_message_text("bye", chat_id=USER, message_id=sent.message_id)
    with pytest.raises(TelegramBadRequest) as other:
        await bot.get_file("nope")
    assert type(other.value) is TelegramBadRequest  # a refusal no type names stays aiogram's
    tg.unsupported_methods.add("sendMessageDraft")
    with pytest.raises(UnknownMethodError):
        await bot.send_message_draft(chat_id=USER, draft_id=1, text="hi")


async def test_html_refused_falls_back_to_plain_text_for_sends_edits_and_drafts(
    tg: FakeTelegram, bot: Bot
) -> None:
    out = TelegramOut(bot)
    message_id = await out.send(USER, BROKEN, reply_to=None, thread_id=None)
    sent = tg.message(USER, message_id)
    assert (sent.text, sent.parse_mode) == ("bold", None)

    await out.edit(USER, message_id, Chunk("<i>it", "it"))
    edited = tg.message(USER, message_id)
    assert (edited.text, edited.parse_mode, edited.edits) == ("it", None, 1)

    await out.draft(USER, 5, Chunk("<code>x", "x"), thread_id=None)
    shown = tg.current_draft(USER)
    assert shown is not None and (shown.text, shown.html) == ("x", "x")
    refused = [c for c in tg.calls if c.params.get("parse_mode") == "HTML"]
    assert [c.method for c in refused] == ["sendMessage", "editMessageText", "sendMessageDraft"]


async def test_the_edge_turns_typed_refusals_into_outcomes(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_group(GROUP, "Team", forum=True)
    out = TelegramOut(bot)
    message_id = await out.send(USER, Chunk("same", "same"), reply_to=None, thread_id=None)
    await out.edit(USER, message_id, Chunk("same", "same"))  # not modified: done
    tg.delete_message(USER, message_id)
    with pytest.raises(MessageGoneError):
        await out.edit(USER, message_id, Chunk("new", "new"))
    with pytest.raises(DraftsUnavailableError):
        await out.draft(GROUP, 1, None, thread_id=None)
    outside = await out.send(GROUP, Chunk("hi", "hi"), reply_to=None, thread_id=999)
    assert tg.message(GROUP, outside).thread_id is None  # the topic is gone: outside it
    assert out.drafts  # a group's refusal leaves drafts on for private chats
