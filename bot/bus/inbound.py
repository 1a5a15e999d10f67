"""A user's message as the message bus carries it: ids and text, nothing of aiogram."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

_VERSION = 2
_FIELDS_OF = {1: 8, 2: 9}  # entries of an older version are still read


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

    @property
    def scope(self) -> str:
        """The transcript store's scope of this message: its chat."""
        return str(self.chat_id)

    def encode(self) -> bytes:
        """The msgpack form kept in the intake stream (versioned)."""
        data: bytes = msgpack.packb(
            [
                _VERSION,
                self.chat_id,
                self.message_id,
                self.user_id,
                self.text,
                self.reply_to,
                self.thread_id,
                self.is_group,
                self.reply_to_bot,
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
            return cls(chat, message, user, text, reply_to, thread, bool(group), to_bot)
        except Exception:  # a damaged entry must not stop the bus
            return None
