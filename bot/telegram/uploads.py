"""Uploads: what goes to Telegram as a file, not as text.

An answer's attachments (:class:`Attachment`: a voice note, a picture), sent as its parts
are (flood windows waited out by the sender, the part ledger told before each try); a
chart; a document with a caption.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiogram.exceptions import TelegramBadRequest
from aiogram.methods import SendPhoto, SendVoice
from aiogram.types import BufferedInputFile, InlineKeyboardMarkup, Message

from .calls import SentMessage, TelegramCalls, as_reply, sent_id
from .outcomes import AnswerRejectedError
from .session import CallerWaits, UnreadableResultError

#: The most characters of a caption (a voice note's, a picture's).
CAPTION_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Attachment:
    """A part of an answer that is not text: a voice note (OGG/Opus bytes, ``sendVoice``)
    or a picture (PNG, JPEG or WebP bytes, ``sendPhoto``), with a plain-text caption of
    at most :data:`CAPTION_LIMIT` characters ("": none)."""

    kind: Literal["voice", "photo"]
    data: bytes
    caption: str = ""
    #: The picture's type (the upload's file name says it).
    mime: str = "image/png"

    @property
    def filename(self) -> str:
        if self.kind == "voice":
            return "answer.ogg"
        return "picture." + {"image/jpeg": "jpg"}.get(self.mime, self.mime.rpartition("/")[2])


class _SendVoicePart(SendVoice, CallerWaits):
    """A voice note of an answer (as :class:`~bot.telegram.calls._SendPart`)."""

    __returning__ = SentMessage  # type: ignore[assignment]


class _SendPhotoPart(SendPhoto, CallerWaits):
    """A picture of an answer (as :class:`~bot.telegram.calls._SendPart`)."""

    __returning__ = SentMessage  # type: ignore[assignment]


class Uploads(TelegramCalls):
    """Files sent to a chat: an answer's attachments, a chart, a document."""

    async def send_attachment(
        self,
        chat_id: int,
        attachment: Attachment,
        *,
        reply_to: int | None,
        thread_id: int | None,
        ready: Callable[[bool], Awaitable[None]],
    ) -> int:
        """Send an answer's attachment (``sendVoice``, ``sendPhoto``) as
        :meth:`~bot.telegram.out.TelegramOut.send_part` sends a part: ``ready(again)``
        just before each try, flood windows waited out here.

        Raises :class:`AnswerRejectedError` when Telegram refuses it (a user who takes no
        voice messages: ``VOICE_MESSAGES_FORBIDDEN``), and the errors of any call.
        """
        voice = attachment.kind == "voice"

        def sending(reply_to: int | None, thread_id: int | None) -> Awaitable[Any]:
            upload = BufferedInputFile(attachment.data, filename=attachment.filename)
            fields: dict[str, Any] = {
                "chat_id": chat_id, "caption": attachment.caption or None, "parse_mode": None,
                "reply_parameters": as_reply(reply_to), "message_thread_id": thread_id,
            }  # fmt: skip
            if voice:
                return self._call(self.bot(_SendVoicePart(voice=upload, **fields)))
            return self._call(self.bot(_SendPhotoPart(photo=upload, **fields)))

        name = "sendVoice" if voice else "sendPhoto"
        return await self._caller_waits(
            chat_id, ready, lambda: self._message_id(chat_id, sending, (reply_to, thread_id), name)
        )

    async def send_photo(
        self,
        chat_id: int,
        png: bytes,
        *,
        caption: str,
        reply_to: int | None,
        thread_id: int | None,
    ) -> int:
        """An image (uploaded) with a plain-text caption, as a reply."""
        message = await self._call(
            self.bot.send_photo(
                chat_id=chat_id,
                photo=BufferedInputFile(png, filename="chart.png"),
                caption=caption,
                parse_mode=None,
                reply_parameters=as_reply(reply_to),
                message_thread_id=thread_id,
            )
        )
        return message.message_id if isinstance(message, Message) else 0

    async def send_document(
        self,
        chat_id: int,
        name: str,
        data: bytes,
        *,
        caption: str,
        reply_to: int | None,
        thread_id: int | None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> int:
        """Upload ``data`` as a file called ``name`` (multipart), with a plain caption."""
        try:
            message = await self._call(
                self.bot.send_document(
                    chat_id=chat_id,
                    document=BufferedInputFile(data, filename=name),
                    caption=caption,
                    parse_mode=None,
                    reply_parameters=as_reply(reply_to),
                    message_thread_id=thread_id,
                    reply_markup=markup,
                )
            )
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:  # it was sent; its id may be unknown
            return sent_id(exc) or 0
        return message.message_id if isinstance(message, Message) else 0
