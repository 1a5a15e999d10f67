"""A user's message as the message bus carries it: ids and text, nothing of aiogram."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgpack

_VERSION = 2
#: Entries of another kind than a new message (an edit, a /retry) carry the kind.
_KIND_VERSION = 3
_FIELDS_OF = {1: 8, 2: 9, 3: 10}  # entries of an older version are still read

#: A new message (the only kind before version 3).
MESSAGE = ""
#: The user edited message ``message_id``; ``text`` is its new wording.
EDIT = "edit"
#: ``/retry`` (message ``message_id``) replying to ``reply_to``: ask that answer again.
RETRY = "retry"


@dataclass(frozen=True, slots=True)
class Inbound:
    """A user's text message, stripped of everything Telegram-specific but ids."""

    chat_id: int
    message_id: int
    user_id: int
    text: str
    reply_to: int | None = None
    thread_id: int | None = None
    is_group: bool = False
    #: The message replied to is the bot's (it may be a part the bot lost track of).
    reply_to_bot: bool = False
    #: :data:`MESSAGE`, :data:`EDIT` or :data:`RETRY`.
    kind: str = MESSAGE

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
        """The transcript store's scope of this message: its chat."""
        return str(self.chat_id)

    def encode(self) -> bytes:
        """The msgpack form kept in the intake stream (versioned)."""
        extra = [self.kind] if self.kind != MESSAGE else []
        data: bytes = msgpack.packb(
            [
                _KIND_VERSION if extra else _VERSION,
                self.chat_id,
                self.message_id,
                self.user_id,
                self.text,
                self.reply_to,
                self.thread_id,
                self.is_group,
                self.reply_to_bot,
                *extra,
            ]
        )
        return data

    @classmethod
    def decode(cls, data: bytes) -> Inbound | None:
        """The inverse of :meth:`encode`; ``None`` for bytes that do not decode."""
        try:
            fields = msgpack.unpackb(data)
            if _FIELDS_OF.get(fields[0]) != len(fields):
                return None
            _, chat, message, user, text, reply_to, thread, group, *rest = fields
            to_bot = bool(rest[0]) if rest else False
            kind = str(rest[1]) if len(rest) > 1 else MESSAGE
            return cls(chat, message, user, text, reply_to, thread, bool(group), to_bot, kind)
        except Exception:  # a damaged entry must not stop the bus
            return None
