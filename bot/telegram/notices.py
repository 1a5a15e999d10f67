"""Notices: short plain-text messages, buttons under them, a group member's own.

:class:`Notices` sends what the bot says outside an answer (a command's reply, a
refusal): plain text, never parsed; with inline buttons; to one person of a group as a
Bot API 10.2 ephemeral message where the server has them, else to everyone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from aiogram.exceptions import TelegramBadRequest
from aiogram.types import EphemeralMessageParameters, InlineKeyboardMarkup, Message

from .calls import TelegramCalls, as_reply, sent_id
from .errors import UnknownMethodError
from .format import Chunk
from .outcomes import AnswerRejectedError
from .session import UnreadableResultError

log = logging.getLogger("replychain.telegram")


class Notices(TelegramCalls):
    """Plain-text notices, with buttons, or for one person of a group."""

    #: Whether notices for one person of a group go to that person only (Bot API 10.2
    #: ephemeral messages); the first server that sends one to everyone turns it off.
    ephemeral = True

    async def send_text(
        self, chat_id: int, text: str, *, reply_to: int | None, thread_id: int | None
    ) -> int:
        """A short notice (plain text, never parsed)."""
        return await self.send(chat_id, Chunk(text, text), reply_to=reply_to, thread_id=thread_id)

    async def send_personal(
        self, chat_id: int, text: str, *, receiver: int, reply_to: int | None,
        thread_id: int | None, markup: InlineKeyboardMarkup | None = None,
    ) -> int:  # fmt: skip
        """A notice for one person of a group (plain text, buttons under it if given): an
        ephemeral message to ``receiver`` where the server has them (0: it has no message
        id; edit it with :meth:`edit_personal`), else a reply everyone sees, as before
        (its id)."""

        async def to_everyone() -> int:
            if markup is None:
                return await self.send_text(chat_id, text, reply_to=reply_to, thread_id=thread_id)
            return await self.send_buttons(
                chat_id, text, markup, reply_to=reply_to, thread_id=thread_id
            )

        if not self.ephemeral:
            return await to_everyone()
        try:
            message = await self._call(
                self._plain(
                    chat_id,
                    text,
                    reply_to=reply_to,
                    thread_id=thread_id,
                    markup=markup,
                    receiver=receiver,
                )
            )
        except TelegramBadRequest as exc:  # not to this person, here: to everyone, as before
            log.info("ephemeral notice in chat %s refused (%s)", chat_id, exc.message)
            return await to_everyone()
        if not isinstance(message, Message):
            return 0
        if message.ephemeral_message_id is None:
            if self.ephemeral:  # one line, however many notices were on their way
                log.warning(
                    "the Bot API server sent an ephemeral notice to everyone (no Bot API "
                    "10.2 ephemeral messages); notices in groups go to everyone from now on"
                )
            self.ephemeral = False
            return message.message_id
        return 0

    def _plain(
        self, chat_id: int, text: str, *, reply_to: int | None, thread_id: int | None,
        markup: InlineKeyboardMarkup | None, receiver: int | None = None,
    ) -> Awaitable[Any]:  # fmt: skip
        """sendMessage with plain text (never parsed), as a reply, buttons under it if
        given; to one person of a group (an ephemeral message) with ``receiver``."""
        personal = EphemeralMessageParameters(receiver_user_id=receiver) if receiver else None
        return self.bot.send_message(
            chat_id=chat_id,
            text=text,
            parse_mode=None,
            ephemeral_message_parameters=personal,
            reply_parameters=as_reply(reply_to),
            message_thread_id=thread_id,
            reply_markup=markup,
        )

    async def edit_personal(
        self, chat_id: int, text: str, *, receiver: int, ephemeral_id: int
    ) -> None:
        """Replace an ephemeral notice's text (its buttons go); best effort: it may be gone."""
        try:
            await self._call(
                self.bot.edit_ephemeral_message_text(
                    chat_id=chat_id,
                    receiver_user_id=receiver,
                    ephemeral_message_id=ephemeral_id,
                    text=text,
                    parse_mode=None,
                )
            )
        except (TelegramBadRequest, UnreadableResultError, UnknownMethodError) as exc:
            log.info("could not edit an ephemeral notice in chat %s: %s", chat_id, exc.message)

    async def send_buttons(
        self,
        chat_id: int,
        text: str,
        markup: InlineKeyboardMarkup,
        *,
        reply_to: int | None,
        thread_id: int | None,
    ) -> int:
        """A plain-text notice with inline buttons under it."""
        try:
            message = await self._call(
                self._plain(chat_id, text, reply_to=reply_to, thread_id=thread_id, markup=markup)
            )
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            return sent_id(exc) or 0
        return message.message_id if isinstance(message, Message) else 0
