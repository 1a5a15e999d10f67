"""Commands that steer a thread: /tree, /export, /retry and /forget; topic notes.

/retry goes into the durable intake like a message (a turn of kind ``retry``:
the engine asks the answer's question again and stores the new answer as a
sibling). /tree and /export are sent as a reply to a message of a
conversation and read it with the operator's renderers (:mod:`bot.ops.conversations`,
the same text ``python -m bot tree`` and ``export`` print; the one place this
edge reaches into ``bot.ops``). /forget asks for a confirmation button and, on
the asker's press, erases the chat (:mod:`bot.ops.forget`). A private-chat
topic created with a made-up name is noted for a title (``topic_router``, which
answers nothing). Local answers go out in the background through the
``notifier`` (the update handler never waits on Telegram); misuse gets a
one-line hint.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Protocol

from aiogram import Bot, F, Router
from aiogram.enums import ChatType
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from redis.asyncio import Redis

from transcript import StoreUnavailableError, TranscriptError, TranscriptStore

from ..bus.inbound import RETRY
from ..bus.intake import Intake
from ..catalogue import Catalogue
from ..i18n import N_, _
from ..ops import conversations
from ..ops.forget import forget_chat
from ..settings import Settings
from ..telegram.format import TELEGRAM_LIMIT, Chunk, escape_html
from ..telegram.notifier import Notifier
from .choices import retry_model
from .messages import NOT_A_THREAD, Checked, inbound_of, notice, replied_id, thread_of
from .viewer import open_tree_markup

log = logging.getLogger("replychain.handlers")

RETRY_USAGE = N_("Send /retry as a reply to one of my answers to get another answer to it.")
TREE_HINT = N_("Send /tree as a reply to a message of a conversation to see its tree.")
EXPORT_HINT = N_("Send /export as a reply to a message of a conversation to get it as a file.")
UNREADABLE = N_("That conversation cannot be read right now; try again in a moment.")
FORGET_ASK = N_(
    "Erase everything I stored about this chat: every conversation and its messages, "
    "queued messages, and the usage and audit detail? This cannot be undone."
)
FORGET_OWNERS_ONLY = N_("In groups only the bot's owner can erase what is stored about the chat.")
FORGET_CANCELLED = N_("Nothing was erased.")
FORGET_NOT_YOURS = N_("Only the person who sent /forget can confirm it.")
FORGET_EXPIRED = N_("This confirmation has expired; send /forget again.")
FORGET_FAILED = N_("Redis is unreachable: nothing (or not everything) was erased. Press again.")
#: How long a /forget confirmation button works.
FORGET_CONFIRM_SECONDS = 600
_FORGET = "forget"
#: Characters of a /tree answer (Telegram's limit, less the margin <pre> needs none of).
TREE_LIMIT = TELEGRAM_LIMIT


def steering_router() -> Router:
    router = Router(name="steering")
    router.message.register(on_tree, Command("tree"))
    router.message.register(on_retry, Command("retry"))
    router.message.register(on_export, Command("export"))
    router.message.register(on_forget, Command("forget"))
    router.callback_query.register(on_forget_pressed, Checked(F.data.startswith(f"{_FORGET}:")))
    return router


def topic_router() -> Router:
    """Service messages about private-chat topics: noted, never answered."""
    router = Router(name="topics")
    router.message.register(
        on_topic_created, Checked(F.forum_topic_created & (F.chat.type == ChatType.PRIVATE))
    )
    return router


class TopicNotes(Protocol):
    """Where a topic whose name Telegram made up is noted (:class:`bot.turn.topics.TopicTitles`)."""

    async def note(self, chat_id: int, thread_id: int) -> None: ...


async def on_topic_created(message: Message, *, topics: TopicNotes) -> None:
    created = message.forum_topic_created
    if created is None or not created.is_name_implicit or message.message_thread_id is None:
        return  # a topic its creator named keeps its name
    try:
        await topics.note(message.chat.id, message.message_thread_id)
    except StoreUnavailableError:
        log.warning(
            "could not note topic %s of chat %s", message.message_thread_id, message.chat.id
        )


async def on_tree(
    message: Message,
    *,
    notifier: Notifier,
    store: TranscriptStore,
    redis: Redis,
    settings: Settings,
) -> None:
    target = replied_id(message)
    if target is None:
        notice(notifier, message, _(TREE_HINT), personal=True)
        return
    chat = message.chat.id

    async def reply() -> int | None:
        text = await _read(
            notifier, message, conversations.tree(redis, store, chat, target, limit=TREE_LIMIT)
        )
        if text is None:
            return None
        chunk = Chunk(f"<pre>{escape_html(text.rstrip())}</pre>", text.rstrip())
        markup = await open_tree_markup(notifier.out.bot, settings, message, target)
        return await notifier.out.send(
            chat, chunk, reply_to=message.message_id, thread_id=thread_of(message), markup=markup
        )

    notifier.run(reply, name=f"tree-{chat}", chat_id=chat)


async def on_retry(
    message: Message,
    *,
    notifier: Notifier,
    intake: Intake,
    stopping: asyncio.Event,
    bot: Bot,
    catalogue: Catalogue,
    command: CommandObject | None = None,
) -> None:
    if replied_id(message) is None:
        notice(notifier, message, _(RETRY_USAGE), personal=True)
        return
    model, unknown = retry_model(command, catalogue)  # /retry <model>: that model answers
    if unknown:
        notice(notifier, message, unknown)
        return
    me = await bot.me()
    inbound = inbound_of(message, RETRY, text=model, bot_id=me.id)
    if not await intake.record(inbound, stopping):
        await asyncio.Event().wait()  # stopping before it was stored: never confirm it


async def on_export(
    message: Message,
    *,
    notifier: Notifier,
    store: TranscriptStore,
    redis: Redis,
    settings: Settings,
) -> None:
    target = replied_id(message)
    if target is None:
        notice(notifier, message, _(EXPORT_HINT), personal=True)
        return
    chat = message.chat.id

    async def reply() -> int | None:
        text = await _read(notifier, message, conversations.export(redis, store, chat, target))
        if text is None:
            return None
        return await notifier.out.send_document(
            chat,
            f"conversation-{abs(chat)}-{target}.md",
            text.encode(),
            caption=_("This branch of the conversation, from its root to that message."),
            reply_to=message.message_id,
            thread_id=thread_of(message),
            markup=await open_tree_markup(notifier.out.bot, settings, message, target),
        )

    notifier.run(reply, name=f"export-{chat}", chat_id=chat)


async def on_forget(message: Message, *, notifier: Notifier, settings: Settings) -> None:
    user = message.from_user.id if message.from_user else 0
    if message.chat.type != ChatType.PRIVATE and user not in settings.owner_user_ids:
        notice(notifier, message, _(FORGET_OWNERS_ONLY), personal=True)
        return
    markup = InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(
                    text=_("Erase everything"),
                    callback_data=f"{_FORGET}:{user}:{int(time.time())}",
                ),
                InlineKeyboardButton(text=_("Cancel"), callback_data=f"{_FORGET}:no"),
            ]
        ]
    )
    if message.chat.type == ChatType.PRIVATE:
        ask = notifier.out.send_buttons(
            message.chat.id, _(FORGET_ASK), markup, reply_to=message.message_id,
            thread_id=thread_of(message),
        )  # fmt: skip
    else:  # to the asker only (an ephemeral message, where the server has them)
        ask = notifier.out.send_personal(
            message.chat.id, _(FORGET_ASK), receiver=user, reply_to=message.message_id,
            thread_id=thread_of(message), markup=markup,
        )  # fmt: skip
    notifier.run(lambda: ask, name=f"forget-{message.chat.id}", chat_id=message.chat.id)


async def on_forget_pressed(
    query: CallbackQuery,
    *,
    notifier: Notifier,
    store: TranscriptStore,
    redis: Redis,
    settings: Settings,
) -> None:
    """The confirmation: erase (once the presser is the asker), then say what went."""
    message = query.message
    if not isinstance(message, Message):
        await query.answer(_(FORGET_EXPIRED))
        return
    _kind, who, *when = (query.data or "").split(":")
    chat = message.chat.id

    async def say(text: str) -> None:
        if message.ephemeral_message_id and message.receiver_user is not None:
            await notifier.out.edit_personal(
                chat, text, receiver=message.receiver_user.id,
                ephemeral_id=message.ephemeral_message_id,
            )  # fmt: skip
            return
        await notifier.out.edit(chat, message.message_id, Chunk(escape_html(text), text))

    if who == "no":
        await query.answer(_(FORGET_CANCELLED))
        await say(_(FORGET_CANCELLED))
        return
    if not who.isdigit() or query.from_user.id != int(who):
        await query.answer(_(FORGET_NOT_YOURS), show_alert=True)
        return
    if not when or time.time() - int(when[0]) > FORGET_CONFIRM_SECONDS:
        await query.answer(_(FORGET_EXPIRED))
        await say(_(FORGET_EXPIRED))
        return
    try:
        erased = await forget_chat(redis, store, chat, intake_shards=settings.intake_shards)
    except StoreUnavailableError:
        await query.answer(_(FORGET_FAILED), show_alert=True)
        return
    log.info("erased what was stored about chat %s (/forget)", chat)
    await query.answer(_("Erased."))
    await say(erased.summary())


async def _read(notifier: Notifier, message: Message, reading: Awaitable[str]) -> str | None:
    """Await a renderer; a message of no thread, or a damaged one, gets a one-line notice."""
    try:
        text = await reading
    except conversations.OpsError:
        notice(notifier, message, _(NOT_A_THREAD), personal=True)
        return None
    except TranscriptError as exc:
        log.warning("chat %s: a thread could not be read: %s", message.chat.id, exc)
        notice(notifier, message, _(UNREADABLE))
        return None
    return text
