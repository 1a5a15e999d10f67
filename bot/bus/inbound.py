"""A user's message as the message bus carries it: ids, text and file references,
nothing of aiogram."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import msgpack

#: Fields of an intake entry: chat, message, user, text, reply_to, thread, is_group,
#: reply_to_bot, kind, media, group, guest, language, reply_head, links (the layout's
#: version is rc:layout, bot/data/layout.py). An entry of the first 13 (written before
#: reply_head) reads with an empty one, and one of 14 (before links) without links;
#: fields after those known are ignored, so a later version's entries still read here,
#: and so is an entry of a kind this version does not know: it does not decode (the
#: runner parks it, docs/operating.md "Upgrading"), never is it answered as a message.
_OLDEST_FIELDS = 13
#: How much of the bot's message replied to an entry keeps (:attr:`Inbound.reply_head`).
REPLY_HEAD_CHARS = 24

#: A new message.
MESSAGE = ""
#: The user edited message ``message_id``; ``text`` is its new wording.
EDIT = "edit"
#: ``/retry`` (message ``message_id``) replying to ``reply_to``: ask that answer again.
RETRY = "retry"
#: ``/image <prompt>`` (:data:`IMAGE_COMMAND` and the prompt in ``text``): a picture, or,
#: replying to one, a picture made from it (bot/turn/pictures.py).
IMAGE = "image"
IMAGE_COMMAND = "/image "
#: A ``successful_payment`` in Telegram Stars (:attr:`Inbound.payment`): credit it, once.
PAYMENT = "payment"
_MESSAGE_KINDS: frozenset[str] = frozenset((MESSAGE, EDIT, RETRY, IMAGE, PAYMENT))

MediaKind = Literal["photo", "voice", "audio", "document"]
_KINDS: frozenset[str] = frozenset(("photo", "voice", "audio", "document"))


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A file of the message, as Telegram described it (downloaded by the turn).

    ``size`` is Telegram's ``file_size`` (0: not given); ``width``/``height``
    a photo's, ``duration`` (seconds) a voice note's or audio's; ``mime`` and
    ``name`` a document's or audio's.
    """

    kind: MediaKind
    file_id: str
    size: int = 0
    width: int = 0
    height: int = 0
    duration: int = 0
    mime: str = ""
    name: str = ""

    def encode(self) -> list[Any]:
        return [
            self.kind, self.file_id, self.size, self.width, self.height, self.duration,
            self.mime, self.name,
        ]  # fmt: skip

    @classmethod
    def decode(cls, raw: list[Any]) -> MediaRef:
        kind, file_id, size, width, height, duration, mime, name = raw
        if kind not in _KINDS or not isinstance(file_id, str):
            raise ValueError("media")
        return cls(kind, file_id, int(size), int(width), int(height), int(duration), mime, name)


@dataclass(frozen=True, slots=True)
class Paid:
    """A Telegram Stars payment as its ``successful_payment`` message told it (the credit
    it buys fixed when it was taken in: bot/payments/).

    It travels in the entry's list of files, tagged ``payment``: a process older than
    payments fails to decode that item and parks the entry (the runner's dead letters;
    ``dead-letters --replay`` once it is upgraded) instead of answering an empty message.
    """

    charge_id: str  # telegram_payment_charge_id
    stars: int
    credit: int  # nano-dollars
    at: int  # unix seconds

    def encode(self) -> list[Any]:
        return ["payment", self.charge_id, self.stars, self.credit, self.at]

    @classmethod
    def decode(cls, raw: list[Any]) -> Paid:
        _tag, charge_id, stars, credit, at = raw
        if not isinstance(charge_id, str) or not charge_id:
            raise ValueError("payment")
        return cls(charge_id, int(stars), int(credit), int(at))


def _is_payment(raw: Any) -> bool:
    return isinstance(raw, list) and bool(raw) and raw[0] == "payment"


@dataclass(frozen=True, slots=True)
class Inbound:
    """A user's message, stripped of everything Telegram-specific but ids.

    ``text`` is the text or a file's caption (may be empty beside media);
    ``media`` the files, in order (several for an album: ``group`` is its
    ``media_group_id``).
    """

    chat_id: int
    message_id: int
    user_id: int
    text: str
    reply_to: int | None = None
    thread_id: int | None = None
    is_group: bool = False
    #: The message replied to is the bot's (it may be a part the bot lost track of).
    reply_to_bot: bool = False
    #: :data:`MESSAGE`, :data:`EDIT`, :data:`RETRY`, :data:`IMAGE` or :data:`PAYMENT`.
    kind: str = MESSAGE
    media: tuple[MediaRef, ...] = ()
    group: str | None = None
    #: A guest message (Bot API 10.0): its ``guest_query_id``, which the answer is
    #: posted with (once); ``None`` for a message of a chat the bot is in.
    guest: str | None = None
    #: The sender's Telegram ``language_code`` ("" unknown): the turn's notices are in it.
    language: str = ""
    #: The start of the bot's message replied to, as the chat shows it (at most
    #: :data:`REPLY_HEAD_CHARS` characters; "" when the reply is not to the bot or that
    #: message shows no text): what tells whose part a message the bot lost track of is.
    reply_head: str = ""
    #: The URLs behind the words of the text (``text_link`` entities, not in ``text``
    #: itself): the links a message's reader may read too.
    links: tuple[str, ...] = ()
    #: The payment of a :data:`PAYMENT` (``user_id`` paid it).
    payment: Paid | None = None

    @property
    def turn(self) -> str:
        """The id of this message's turn in the chat.

        A message's id, except for an edit: the same message edited to a new
        wording is a turn of its own (the wording's digest tells them apart, so
        the same edit delivered twice is still one turn).
        """
        if self.kind == EDIT:
            digest = hashlib.sha256(self.text.encode()).hexdigest()[:12]
            return f"{self.message_id}:e{digest}"
        return str(self.message_id)

    @property
    def scope(self) -> str:
        """The transcript store's scope of this message: its chat, and for a guest
        message the guest chat ("g<chat>"), which Telegram says "may not coincide" with
        a chat of the bot's sharing its id: their threads, turns and ledgers never mix."""
        return f"g{self.chat_id}" if self.guest is not None else str(self.chat_id)

    @property
    def private_topic(self) -> int | None:
        """The topic of a private chat (Bot API 9.3) the message was sent in; ``None``
        outside topics, in groups (their forum topics are not one conversation each) and
        in guest chats."""
        return None if self.is_group or self.guest is not None else self.thread_id

    def encode(self) -> bytes:
        """The msgpack form kept in the intake stream: an array of the fields in order."""
        data: bytes = msgpack.packb(
            [
                self.chat_id,
                self.message_id,
                self.user_id,
                self.text,
                self.reply_to,
                self.thread_id,
                self.is_group,
                self.reply_to_bot,
                self.kind,
                [m.encode() for m in self.media]
                + ([self.payment.encode()] if self.payment is not None else []),
                self.group,
                self.guest,
                self.language,
                self.reply_head,
                list(self.links),
            ]
        )
        return data

    @classmethod
    def decode(cls, data: bytes) -> Inbound | None:
        """The inverse of :meth:`encode`; ``None`` for bytes that do not decode."""
        try:
            fields = msgpack.unpackb(data)
            if len(fields) < _OLDEST_FIELDS:
                return None
            head = fields[_OLDEST_FIELDS] if len(fields) > _OLDEST_FIELDS else ""
            links = fields[_OLDEST_FIELDS + 1] if len(fields) > _OLDEST_FIELDS + 1 else ()
            (
                chat,
                message,
                user,
                text,
                reply_to,
                thread,
                group,
                to_bot,
                kind,
                media,
                album,
                guest,
                lang,
            ) = fields[:_OLDEST_FIELDS]
            paid = [Paid.decode(m) for m in media if _is_payment(m)]
            if str(kind) not in _MESSAGE_KINDS or (str(kind) == PAYMENT) != bool(paid):
                return None  # a kind of a later version (or a payment without its kind)
            return cls(
                chat, message, user, text, reply_to, thread, bool(group), bool(to_bot),
                str(kind), tuple(MediaRef.decode(m) for m in media if not _is_payment(m)),
                album, None if guest is None else str(guest), str(lang), str(head),
                tuple(str(url) for url in links), paid[0] if paid else None,
            )  # fmt: skip
        except Exception:  # a damaged entry must not stop the bus
            return None
