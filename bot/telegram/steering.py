"""Commands that steer a thread: /tree, /export (no model call) and /retry.

/retry goes into the durable intake like a message (a turn of kind ``retry``:
the engine asks the answer's question again and stores the new answer as a
sibling). /tree and /export are sent as a reply to a message of a
conversation and read it with the operator's renderers (:mod:`bot.ops.threads`,
the same text ``python -m bot tree`` and ``export`` print). They answer in the
background through the ``notifier`` (the update handler never waits on
Telegram); misuse gets a one-line hint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from aiogram import Router
from aiogram.filters import Command
from aiogram.types import Message
from redis.asyncio import Redis

from transcript import TranscriptError, TranscriptStore

from ..bus.inbound import RETRY, Inbound
from ..bus.intake import Intake
from ..ops import threads
from ..turn.notices import RETRY_USAGE
from .format import TELEGRAM_LIMIT, Chunk, escape_html
from .out import Notifier

log = logging.getLogger("replychain.handlers")

TREE_HINT = "Send /tree as a reply to a message of a conversation to see its tree."
EXPORT_HINT = "Send /export as a reply to a message of a conversation to get it as a file."
NOT_A_THREAD = (
    "That message belongs to no conversation I have stored: reply to one of my "
    "answers or to a message I answered."
)
UNREADABLE = "That conversation cannot be read right now; try again in a moment."
#: Characters of a /tree answer (Telegram's limit, less the margin <pre> needs none of).
TREE_LIMIT = TELEGRAM_LIMIT


def replied(message: Message) -> int | None:
    """The message explicitly replied to (not a forum topic's implicit root)."""
    target = message.reply_to_message
    if target is None or target.forum_topic_created is not None:
        return None
    return target.message_id


def thread_of(message: Message) -> int | None:
    """The topic to answer in (None in the General topic and outside topics)."""
    return message.message_thread_id if message.is_topic_message else None


def notice(notifier: Notifier, message: Message, text: str) -> None:
    notifier.say(message.chat.id, text, reply_to=message.message_id, thread_id=thread_of(message))


def steering_router() -> Router:
    router = Router(name="steering")

    @router.message(Command("tree"))
    async def on_tree(
        message: Message, *, notifier: Notifier, store: TranscriptStore, redis: Redis
    ) -> None:
        target = replied(message)
        if target is None:
            notice(notifier, message, TREE_HINT)
            return
        chat = message.chat.id

        async def reply() -> None:
            text = await _read(
                notifier, message, threads.tree(redis, store, chat, target, limit=TREE_LIMIT)
            )
            if text is not None:
                chunk = Chunk(f"<pre>{escape_html(text.rstrip())}</pre>", text.rstrip())
                await notifier.out.send(
                    chat, chunk, reply_to=message.message_id, thread_id=thread_of(message)
                )

        notifier.run(reply, name=f"tree-{chat}")

    @router.message(Command("retry"))
    async def on_retry(
        message: Message, *, notifier: Notifier, intake: Intake, stopping: asyncio.Event
    ) -> None:
        target = replied(message)
        if target is None:
            notice(notifier, message, RETRY_USAGE)
            return
        reply_to = message.reply_to_message
        inbound = Inbound(
            chat_id=message.chat.id,
            message_id=message.message_id,
            user_id=message.from_user.id if message.from_user else 0,
            text="",
            reply_to=target,
            reply_to_bot=bool(reply_to and reply_to.from_user and reply_to.from_user.is_bot),
            thread_id=thread_of(message),
            is_group=message.chat.type in ("group", "supergroup"),
            kind=RETRY,
        )
        if not await intake.record(inbound, stopping):
            await asyncio.Event().wait()  # stopping before it was stored: never confirm it

    @router.message(Command("export"))
    async def on_export(
        message: Message, *, notifier: Notifier, store: TranscriptStore, redis: Redis
    ) -> None:
        target = replied(message)
        if target is None:
            notice(notifier, message, EXPORT_HINT)
            return
        chat = message.chat.id

        async def reply() -> None:
            text = await _read(notifier, message, threads.export(redis, store, chat, target))
            if text is not None:
                await notifier.out.send_document(
                    chat,
                    f"conversation-{abs(chat)}-{target}.md",
                    text.encode(),
                    caption="This branch of the conversation, from its root to that message.",
                    reply_to=message.message_id,
                    thread_id=thread_of(message),
                )

        notifier.run(reply, name=f"export-{chat}")

    return router


async def _read(notifier: Notifier, message: Message, reading: Awaitable[str]) -> str | None:
    """Await a renderer; a message of no thread, or a damaged one, gets a one-line notice."""
    try:
        text = await reading
    except threads.OpsError:
        notice(notifier, message, NOT_A_THREAD)
        return None
    except TranscriptError as exc:
        log.warning("chat %s: a thread could not be read: %s", message.chat.id, exc)
        notice(notifier, message, UNREADABLE)
        return None
    return text
