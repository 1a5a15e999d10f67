"""What the bot reads off a Telegram message, in one place for every handler.

The message replied to, the topic to answer in, whether the chat is a group, who
is mentioned or commanded, the files and links it carries, and the :class:`Inbound` the
intake stores for it; plus :func:`notice`, the one way a handler answers locally.
"""

from __future__ import annotations

import re

from aiogram.enums import ChatType
from aiogram.filters import Filter
from aiogram.types import Message, TelegramObject
from aiogram.utils.magic_filter import MagicFilter

from ..bus.inbound import REPLY_HEAD_CHARS, Inbound, MediaRef
from ..i18n import N_
from ..telegram import guest
from ..telegram.format import Chunk, escape_html
from ..telegram.notifier import Notifier

#: A command sent as a reply to a message no conversation holds (/tree, /model …).
NOT_A_THREAD = N_(
    "That message belongs to no conversation I have stored: reply to one of my "
    "answers or to a message I answered."
)


class Checked(Filter):
    """A magic filter (``F.text | F.caption``) checked in the event loop: aiogram runs
    a plain one through ``asyncio.to_thread`` for every update it looks at, a thread
    hop each (``python -m bench process`` counts them)."""

    def __init__(self, check: MagicFilter) -> None:
        self._resolve = check.resolve

    async def __call__(self, event: TelegramObject) -> bool:
        return bool(self._resolve(event))


def is_group(message: Message) -> bool:
    """Whether the message was sent in a group or supergroup (not a channel, not a DM)."""
    return message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)


def thread_of(message: Message) -> int | None:
    """The topic to answer in (None in a forum's General topic and outside topics)."""
    return message.message_thread_id if message.is_topic_message else None


def replied_id(message: Message) -> int | None:
    """The message explicitly replied to (not a forum topic's implicit root)."""
    target = message.reply_to_message
    if target is None or target.forum_topic_created is not None:
        return None
    return target.message_id


def sent_by(message: Message | None, user_id: int) -> bool:
    """Whether ``message`` exists and user ``user_id`` sent it."""
    return message is not None and message.from_user is not None and message.from_user.id == user_id


def shown_head(message: Message | None) -> str:
    """The start of a message as the chat shows it (:data:`REPLY_HEAD_CHARS` at most):
    its text or caption, or a rich message's first text; "" for none."""
    if message is None:
        return ""
    head = message.text or message.caption or ""
    if not head and message.rich_message is not None:
        for block in message.rich_message.blocks:
            head = "".join(_runs(getattr(block, "text", None)))
            if head:
                break
    return head[:REPLY_HEAD_CHARS]


def _runs(text: object) -> list[str]:
    """The plain strings of a rich text (a string, a list, or a styled run), in order."""
    if isinstance(text, str):
        return [text]
    if isinstance(text, list):
        return [run for item in text for run in _runs(item)]
    inner = getattr(text, "text", None)
    return [] if inner is None else _runs(inner)


def mentions(message: Message, username: str) -> bool:
    """Whether the text or caption @mentions ``username``."""
    text = message.text or message.caption or ""
    entities = message.entities or message.caption_entities or []
    for entity in entities:
        if entity.type == "mention":
            mention = entity.extract_from(text)
            if mention.lower() == f"@{username.lower()}":
                return True
    return False


def command_target(message: Message) -> str | None:
    """The bot a command names (``/cmd@bot``: "bot"; a bare ``/cmd``: ""); None for no command."""
    text = message.text or ""
    if not text.startswith("/"):
        return None
    return text.split(maxsplit=1)[0].partition("@")[2]


def strip_mention(text: str, username: str | None) -> str:
    """``text`` without @``username`` (any case), trimmed."""
    if not username:
        return text.strip()
    return re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE).strip()


def media_of(message: Message, max_pixels: int) -> tuple[MediaRef, ...]:
    """The message's file: a photo's largest size within ``max_pixels`` on its long
    side (the smallest when none is), a voice note, an audio file or a document."""
    if message.photo:
        sizes = sorted(message.photo, key=lambda p: p.width * p.height)
        fitting = [p for p in sizes if max(p.width, p.height) <= max_pixels]
        best = fitting[-1] if fitting else sizes[0]
        return (MediaRef("photo", best.file_id, best.file_size or 0, best.width, best.height),)
    if message.voice:
        v = message.voice
        return (MediaRef("voice", v.file_id, v.file_size or 0, duration=v.duration,
                         mime=v.mime_type or ""),)  # fmt: skip
    if message.audio:
        a = message.audio
        return (MediaRef("audio", a.file_id, a.file_size or 0, duration=a.duration,
                         mime=a.mime_type or "", name=a.file_name or ""),)  # fmt: skip
    if message.document:
        d = message.document
        return (MediaRef("document", d.file_id, d.file_size or 0, mime=d.mime_type or "",
                         name=d.file_name or ""),)  # fmt: skip
    return ()


def links_of(message: Message) -> tuple[str, ...]:
    """The URLs behind the words of the text or caption (``text_link`` entities), in order."""
    entities = message.entities or message.caption_entities or []
    urls = (entity.url for entity in entities if entity.type == "text_link" and entity.url)
    return tuple(dict.fromkeys(urls))


def inbound_of(
    message: Message, kind: str, *, text: str, bot_id: int, media: tuple[MediaRef, ...] = ()
) -> Inbound:
    """The message as the intake stores it: ``kind`` (new, edited, /retry), ``text`` as the
    model reads it, ``media`` its files (an album's carry its ``media_group_id``);
    ``bot_id`` tells a reply to this bot from others."""
    to_bot = sent_by(message.reply_to_message, bot_id)
    return Inbound(
        chat_id=message.chat.id,
        message_id=message.message_id,
        user_id=message.from_user.id if message.from_user else 0,
        text=text,
        reply_to=replied_id(message),
        reply_to_bot=to_bot,
        reply_head=shown_head(message.reply_to_message) if to_bot else "",
        thread_id=thread_of(message),
        is_group=is_group(message),
        kind=kind,
        media=media,
        group=message.media_group_id if media else None,
        language=(message.from_user.language_code or "") if message.from_user else "",
        links=links_of(message),
    )


def notice(notifier: Notifier, message: Message, text: str, *, personal: bool = False) -> None:
    """Answer ``message`` locally with ``text``, in its topic, in the background: the
    update handler never waits on Telegram (the answer belongs to no conversation).
    A guest message is answered through its query (bot/telegram/guest.py); a
    ``personal`` notice in a group goes to the sender only (an ephemeral message)."""
    query = message.guest_query_id
    if query is not None:
        chunk = Chunk(escape_html(text), text)

        async def answer() -> None:
            await guest.post(notifier.out, query, chunk, name=None)

        notifier.run(answer, name=f"guest-notice-{message.chat.id}")
        return
    receiver = message.from_user.id if personal and message.from_user else None
    notifier.say(
        message.chat.id, text, reply_to=message.message_id, thread_id=thread_of(message),
        receiver=receiver if is_group(message) else None,
    )  # fmt: skip
