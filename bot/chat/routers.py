"""aiogram routing: which updates the bot answers, and how a message becomes a turn.

Handlers stay small: a message for the model goes into the durable intake
(``intake``), anything answered locally goes through the ``notifier`` (both
injected through the dispatcher's data). The group gate is a filter, access
control an inner middleware (it runs only for messages some handler would
answer), and updates of types aiogram does not know end in an outer one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware, Bot, F, Router
from aiogram.enums import ChatType, ContentType
from aiogram.filters import Command, CommandStart, Filter
from aiogram.types import (
    BotCommand,
    CallbackQuery,
    Message,
    MessageGenerationStopped,
    TelegramObject,
    Update,
)
from aiogram.types.update import UpdateTypeLookupError

from transcript import StoreUnavailableError, TranscriptStore

from ..bus.albums import Albums
from ..bus.inbound import EDIT, MESSAGE, RETRY, Inbound, MediaRef
from ..bus.intake import Intake
from ..bus.relay import Relay
from ..i18n import N_, _
from ..payments import Stars
from ..settings import Settings
from ..telegram import guest
from ..telegram.notifier import Notifier
from ..usage.accounting import Accounting
from ..usage.reports import OWNER_ONLY_TEXT, stats_chart, stats_report, usage_report
from .buying import COMMANDS as BUY_COMMANDS
from .buying import buy_router, credit_lines, help_line, payment_router, stars_line
from .choices import COMMANDS as CHOICE_COMMANDS
from .choices import choices_router
from .messages import (
    Checked,
    command_target,
    inbound_of,
    is_group,
    media_of,
    mentions,
    notice,
    replied_id,
    sent_by,
    strip_mention,
    thread_of,
)
from .pictures import COMMANDS as PICTURE_COMMANDS
from .pictures import pictures_router
from .steering import RETRY_USAGE, steering_router, topic_router
from .style import COMMANDS as STYLE_COMMANDS
from .style import style_router
from .voice import COMMANDS as VOICE_COMMANDS
from .voice import voice_router

#: /voice and /image (their modules' menu entries).
OUTPUT_COMMANDS = (*VOICE_COMMANDS, *PICTURE_COMMANDS)

log = logging.getLogger("replychain.handlers")

#: The command menu: each command and its description (a message id).
COMMANDS = (
    ("start", N_("What this bot is and how threads work")),
    ("help", N_("How to continue, branch and start conversations")),
    ("usage", N_("Your tokens today and in total (reply: this chain)")),
    ("retry", N_("Reply to an answer: another answer to it")),
    ("tree", N_("Reply: the tree of this conversation")),
    ("export", N_("Reply: this branch as a Markdown file")),
    ("forget", N_("Erase everything stored about this chat")),
)


def command_menu(*, payments: bool = False) -> list[BotCommand]:
    """The command menu in the current language (``payments``: with /buy and /balance)."""
    listed = (
        *COMMANDS, *CHOICE_COMMANDS, *STYLE_COMMANDS, *OUTPUT_COMMANDS,
        *(BUY_COMMANDS if payments else ()),
    )  # fmt: skip
    return [BotCommand(command=name, description=_(text)) for name, text in listed]


HELP_TEXT = N_(
    "I am a chat bot for an AI model, and every reply chain is its own conversation.\n\n"
    "• Send a message that replies to nothing: a new conversation starts.\n"
    "• Reply to one of my answers (any part of it): the conversation continues.\n"
    "• Reply twice to the same answer: two branches that share everything above them "
    "and never see each other.\n\n"
    "Each answer starts with [depth:N], the number of messages in its conversation.\n"
    "In groups I answer when you reply to me, mention me or send a command.\n\n"
    "/usage shows your tokens today and in total; sent as a reply inside a conversation "
    "it also shows that conversation's.\n\n"
    "Edit a question I answered: its new wording is asked as a branch beside the first.\n"
    "Sent as a reply to a message of a conversation:\n"
    "/retry (to one of my answers) asks its question again, with the same history; "
    "both answers can be continued;\n"
    "/tree shows the conversation's tree (branches, depths, where you are);\n"
    "/export sends that branch, from its start to the message, as a Markdown file.\n\n"
    "/forget erases everything I stored about this chat (after you confirm).\n\n"
    "Seeing “message not supported”? /format plain makes every answer plain."
)

#: /help's line for a private chat with topics (TOPIC_THREADS, bot/turn/topics.py).
TOPICS_HELP = N_(
    "In a topic, a message that replies to nothing continues the topic's conversation; "
    "a new conversation outside topics opens a topic of its own."
)

UNSUPPORTED_TEXT = N_(
    "I read text, photos, voice notes, audio and documents (PDF, Word, HTML, Markdown, CSV "
    "and text files). Stickers, videos, video notes, locations and other media are not "
    "supported: send your question in one of those forms."
)
EMPTY_MENTION_TEXT = N_("Mention me together with a question, or reply to one of my answers.")
UNKNOWN_COMMAND_TEXT = N_("I don't know that command. Send /help to see how I work.")
REFUSAL_TEXT = N_("Sorry, this bot is private: it only answers the people its owner allowed.")
REFUSAL_EVERY = 3600.0
#: Refused users remembered before those refused more than REFUSAL_EVERY ago are dropped
#: (they would be told again anyway): strangers writing to a private bot are countless.
REFUSED_KEPT = 10_000

#: Content the bot cannot read but answers with a short note.
UNSUPPORTED = {
    ContentType.STICKER, ContentType.VIDEO, ContentType.ANIMATION, ContentType.VIDEO_NOTE,
    ContentType.LOCATION, ContentType.CONTACT, ContentType.POLL, ContentType.DICE,
    ContentType.VENUE,
}  # fmt: skip


class Addressed(Filter):
    """Private chats: always. Groups: replies to the bot, @mentions and commands."""

    async def __call__(self, message: Message, bot: Bot) -> bool:
        if message.chat.type == ChatType.PRIVATE:
            return True
        if not is_group(message):
            return False  # channels
        me = await bot.me()
        if sent_by(message.reply_to_message, me.id):
            return replied_id(message) is not None
        username = me.username or ""
        if not username:
            return False
        target = command_target(message)
        return mentions(message, username) or (target or "").lower() == username.lower()


class InAddressedAlbum(Filter):
    """Groups: a photo (or file) of an album whose first one was addressed to the bot
    (only that one carries the caption with the mention)."""

    async def __call__(self, message: Message, albums: Albums, stopping: asyncio.Event) -> bool:
        group = message.media_group_id
        return bool(group and is_group(message)) and await albums.started(
            message.chat.id, group or "", stopping
        )


class AccessControl(BaseMiddleware):
    """ALLOWED_USER_IDS: others get one polite refusal (per hour) and no model call."""

    def __init__(self, allowed: frozenset[int]) -> None:
        self.allowed = allowed
        self._refused: dict[int, float] = {}

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not self.allowed or not isinstance(event, Message):
            return await handler(event, data)
        user = event.from_user
        if user is not None and user.id in self.allowed:
            return await handler(event, data)
        key = user.id if user is not None else 0
        now = time.monotonic()
        if now - self._refused.get(key, -REFUSAL_EVERY) >= REFUSAL_EVERY:
            self._refused[key] = now
            if len(self._refused) > REFUSED_KEPT:
                self._refused = {
                    k: at for k, at in self._refused.items() if now - at < REFUSAL_EVERY
                }
            log.info("refused user %s (not in ALLOWED_USER_IDS)", key)
            notice(data["notifier"], event, _(REFUSAL_TEXT), personal=True)
        return None


#: aiogram memoises ``Update.event_type`` in an ``lru_cache`` of 128 entries, which keeps
#: the last 128 updates (each with its message, about 10 KB of pydantic objects) alive
#: long after they were handled. None if this aiogram does not.
_EVENT_TYPE_CACHE = getattr(vars(Update).get("event_type"), "fget", None)


class SkipUnknownUpdates(BaseMiddleware):
    """Updates of no type aiogram knows end here (aiogram would warn with their text);
    a handled update is let go (:data:`_EVENT_TYPE_CACHE`)."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Update):
            return await handler(event, data)
        try:
            try:
                event.event_type  # noqa: B018
            except UpdateTypeLookupError:
                log.info("ignored update %s of a type this bot does not know", event.update_id)
                return None
            return await handler(event, data)
        finally:
            # the cache buys nothing after this: updates still in flight compute theirs again
            clear = getattr(_EVENT_TYPE_CACHE, "cache_clear", None)
            if clear is not None:
                clear()


def build_router(allowed_user_ids: frozenset[int]) -> Router:
    """The bot's router; ``notifier``, ``intake`` and the rest come from the dispatcher's data."""
    root = Router(name="replychain")
    access = AccessControl(allowed_user_ids)
    root.include_router(payment_router())  # a payment is taken in whoever paid
    for child in (
        _usage_router(),
        steering_router(),
        choices_router(),
        style_router(),
        voice_router(),
        pictures_router(),
        buy_router(),
        _conversation_router(),
        _guest_router(),
    ):
        child.message.middleware(access)  # only for messages a handler would answer
        child.edited_message.middleware(access)
        child.guest_message.middleware(access)  # the person who summoned the bot
        root.include_router(child)
    root.include_router(topic_router())  # service messages: noted, never answered

    # a handler here also puts this update type into getUpdates' allowed_updates
    @root.stopped_message_generation()
    async def on_stop(event: MessageGenerationStopped, stops: Relay) -> None:
        """The stop button under a draft: end that answer, here or in the process
        writing it."""
        try:
            pressed = await stops.press(event.chat.id, event.draft_id)
        except StoreUnavailableError:
            log.warning("stop in chat %s not passed on: Redis is unreachable", event.chat.id)
            return
        if pressed:
            log.info("answer in chat %s stopped by the user", event.chat.id)
        else:
            log.info("stop for draft %s of chat %s: passed on to the other processes",
                     event.draft_id, event.chat.id)  # fmt: skip

    return root


def _conversation_router() -> Router:
    router = Router(name="conversation")

    @router.message(CommandStart())
    @router.message(Command("help"))
    async def on_help(
        message: Message, *, notifier: Notifier, bot: Bot, settings: Settings, stars: Stars | None
    ) -> None:
        text = _(HELP_TEXT) + help_line(stars)
        if settings.topic_threads and not is_group(message) and (await bot.me()).has_topics_enabled:
            text += "\n\n" + _(TOPICS_HELP)
        notice(notifier, message, text)

    @router.message(Checked(F.text.startswith("/")), Addressed())
    async def on_unknown_command(message: Message, notifier: Notifier, bot: Bot) -> None:
        target = command_target(message)
        me = await bot.me()
        if target and target.lower() != (me.username or "").lower():
            return  # a command for another bot in this group
        notice(notifier, message, _(UNKNOWN_COMMAND_TEXT), personal=True)

    @router.message(Checked(F.photo | F.document | F.audio), InAddressedAlbum())
    @router.message(Checked(F.photo | F.voice | F.audio | F.document), Addressed())
    @router.message(Checked(F.text | F.caption), Addressed())
    async def on_text(
        message: Message,
        *,
        notifier: Notifier,
        intake: Intake,
        stopping: asyncio.Event,
        bot: Bot,
        settings: Settings,
        albums: Albums,
    ) -> None:
        await _take_in(
            message, MESSAGE, notifier=notifier, intake=intake, stopping=stopping, bot=bot,
            media=media_of(message, settings.image_max_pixels), albums=albums,
        )  # fmt: skip

    @router.edited_message(Checked(F.text), Addressed())
    async def on_edit(
        message: Message, *, notifier: Notifier, intake: Intake, stopping: asyncio.Event, bot: Bot
    ) -> None:
        """An edited question is asked again as a sibling (the turn decides if it is new)."""
        if not (message.text or "").startswith("/"):
            await _take_in(
                message, EDIT, notifier=notifier, intake=intake, stopping=stopping, bot=bot
            )

    @router.message(Checked(F.content_type.in_(UNSUPPORTED)), Addressed())
    async def on_unsupported(message: Message, notifier: Notifier) -> None:
        notice(notifier, message, _(UNSUPPORTED_TEXT))

    return router


async def _take_in(
    message: Message,
    kind: str,
    *,
    notifier: Notifier,
    intake: Intake,
    stopping: asyncio.Event,
    bot: Bot,
    media: tuple[MediaRef, ...] = (),
    albums: Albums | None = None,
) -> None:
    """Record a message for the model in the durable intake (``kind``: new or edited)."""
    me = await bot.me()
    text = message.text or message.caption or ""
    if is_group(message):
        text = strip_mention(text, me.username)
    if not text.strip() and not media:
        if kind == MESSAGE:
            notice(notifier, message, _(EMPTY_MENTION_TEXT))
        return
    inbound = inbound_of(message, kind, text=text, bot_id=me.id, media=media)
    # an album's photo is noted in its album before it enters the intake
    noted = inbound.group is None or albums is None or await albums.note(inbound, stopping)
    if not noted or not await intake.record(inbound, stopping):
        # stopping before it was stored: never let aiogram confirm this update
        await asyncio.Event().wait()


def _guest_router() -> Router:
    """Guest messages (Bot API 10.0): the bot was mentioned in a chat it is not in."""
    router = Router(name="guest")

    @router.guest_message()
    async def on_guest(
        message: Message,
        *,
        notifier: Notifier,
        intake: Intake,
        stopping: asyncio.Event,
        bot: Bot,
        settings: Settings,
    ) -> None:
        if not settings.guest_mode:
            log.debug("guest message in chat %s ignored (GUEST_MODE=false)", message.chat.id)
            return
        me = await bot.me()
        text = strip_mention(message.text or message.caption or "", me.username)
        command = text.split(maxsplit=1)[0].partition("@")[0].lower() if text else ""
        if message.content_type in UNSUPPORTED:
            notice(notifier, message, _(UNSUPPORTED_TEXT))
            return
        if command in ("/start", "/help"):
            notice(notifier, message, _(guest.HELP))
            return
        answer = guest.replied_answer(message, me.id)
        kind = MESSAGE
        if command == "/retry":
            if answer is None:
                notice(notifier, message, _(RETRY_USAGE))
                return
            kind = RETRY
        elif command.startswith("/"):
            notice(notifier, message, _(guest.COMMAND_HINT))
            return
        if answer is None and not sent_by(message.reply_to_message, me.id):
            text = guest.quoted(message) + text  # somebody's message, given as context
        media = media_of(message, settings.image_max_pixels)
        if not text.strip() and not media:
            notice(notifier, message, _(EMPTY_MENTION_TEXT))
            return
        inbound = Inbound(
            chat_id=message.chat.id, message_id=message.message_id,
            user_id=message.from_user.id if message.from_user else 0, text=text,
            reply_to=answer, reply_to_bot=answer is not None, is_group=is_group(message),
            kind=kind, media=media, guest=message.guest_query_id,
            language=(message.from_user.language_code or "") if message.from_user else "",
        )  # fmt: skip
        if not await intake.record(inbound, stopping):
            await asyncio.Event().wait()  # stopping before it was stored: never confirm it

    @router.callback_query(Checked(F.data.startswith(guest.answer_data(0)[:-1])))
    async def on_how_to_continue(query: CallbackQuery, bot: Bot) -> None:
        """The button under a guest answer (it names the answer for replies)."""
        me = await bot.me()
        await query.answer(_(guest.HOW_TO_CONTINUE).format(bot=me.username or "me"))

    return router


def _usage_router() -> Router:
    """/usage for everyone, /stats for the owners."""
    router = Router(name="usage")

    @router.message(Command("usage"))
    async def on_usage(
        message: Message,
        *,
        notifier: Notifier,
        accounting: Accounting,
        store: TranscriptStore,
        settings: Settings,
        stars: Stars | None,
    ) -> None:
        user = message.from_user.id if message.from_user else 0
        replied = replied_id(message)

        async def reply() -> None:
            text = await usage_report(
                accounting,
                store,
                chat_id=message.chat.id,
                user_id=user,
                replied_to=replied,
                daily_limit=settings.user_daily_token_limit,
            )
            text = "\n".join([text, *await credit_lines(stars, user)])
            notice(notifier, message, text, personal=True)

        notifier.run(reply, name=f"usage-{message.chat.id}")

    @router.message(Command("stats"))
    async def on_stats(
        message: Message, *, notifier: Notifier, accounting: Accounting, settings: Settings,
        stars: Stars | None,
    ) -> None:  # fmt: skip
        user = message.from_user.id if message.from_user else 0
        if user not in settings.owner_user_ids:
            notice(notifier, message, _(OWNER_ONLY_TEXT), personal=True)
            return

        async def reply() -> list[int]:
            chat, thread = message.chat.id, thread_of(message)
            text = "\n".join([await stats_report(accounting), *await stars_line(stars)])
            report = await notifier.out.send_text(
                chat, text, reply_to=message.message_id, thread_id=thread
            )
            png, caption = await stats_chart(accounting)  # the text first: this takes a moment
            chart = await notifier.out.send_photo(
                chat, png, caption=caption, reply_to=message.message_id, thread_id=thread
            )
            return [report, chart]

        notifier.run(reply, name=f"stats-{message.chat.id}", chat_id=message.chat.id)

    return router
