"""Sending to Telegram: answer parts and notices, as typed outcomes the turn can act on.

Every Telegram failure a turn may meet becomes one of six errors (the
session, :mod:`bot.telegram.session`, has already classified odd answers,
typed refusals by their description (:mod:`bot.telegram.errors`) and waited
out flood control)::

    ChatUnavailableError      the bot may not write to this chat any more (403)
    AnswerRejectedError       a 400 that retrying will not fix
    MessageGoneError          the message to edit was deleted
    DraftsUnavailableError    this chat, or this Bot API server, takes no drafts (or
                              its drafts failed with server errors: for this answer)
    RichUnavailableError      this Bot API server knows no rich messages, Telegram
                              refused this one, or it failed with server errors after
                              flood control's tries: render the answer as HTML instead
    TelegramUnavailableError  5xx, network, flood control past its bound, an answer
                              that cannot be read: try the turn again later

Messages, edits and drafts go out through one wrapper, :meth:`TelegramOut._formatted`,
for all three: a rich chunk (:mod:`bot.telegram.rich`) as a Bot API 10.1 rich message
(``sendRichMessage``, ``editMessageText`` with ``rich_message``, ``sendRichMessageDraft``);
any other as HTML (the bot's default parse mode), sent again without formatting when
Telegram still rejects the entities. A rich message has no such fallback of its own: it
may be split differently from HTML, so the writer renders the answer again as HTML. No
newer method holds an answer back: a server that lacks one (the session notes it, once)
or keeps failing it with server errors gets the older way at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import (
    EditMessageText,
    SendMessage,
    SendPhoto,
    SendRichMessage,
    SendVoice,
    TelegramMethod,
)
from aiogram.types import (
    BufferedInputFile,
    EphemeralMessageParameters,
    ForumTopic,
    InlineKeyboardMarkup,
    InputRichMessage,
    Message,
    ReplyParameters,
)
from aiogram.types.base import TelegramObject
from pydantic import ConfigDict

from .errors import (
    DraftPeerInvalidError,
    EditTargetGoneError,
    EntitiesRejectedError,
    NotModifiedError,
    RichRejectedError,
    ThreadGoneError,
    UnknownMethodError,
)
from .format import Chunk
from .session import AGAIN, BadResponseError, CallerWaits, FloodControl, UnreadableResultError

log = logging.getLogger("replychain.telegram")

#: The empty draft Telegram shows as "Thinking…" (no entities: never refused as HTML).
_THINKING = Chunk("", "")
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


class ChatUnavailableError(Exception):
    """The bot may not write to this chat any more (blocked, kicked, chat gone)."""


class AnswerRejectedError(Exception):
    """Telegram refused a message for a reason retrying will not fix (a 400)."""


class MessageGoneError(Exception):
    """The message to edit no longer exists (the user deleted it)."""


class DraftsUnavailableError(Exception):
    """No drafts here: the chat takes none, or the Bot API server knows no ``sendMessageDraft``."""


class RichUnavailableError(Exception):
    """No rich message here: the Bot API server knows no rich messages (then they are
    off for the rest of the process), or Telegram refused this one (its content, a
    limit). Nothing was sent or changed: the answer goes on as HTML."""


class TelegramUnavailableError(Exception):
    """Telegram failed, could not be reached or answered unreadably: try the turn later.

    ``server``: the server answered, with errors (5xx, an answer that is no Bot API
    response), as against no answer at all (the network, flood control past its bound).
    """

    def __init__(self, message: str, *, server: bool = False) -> None:
        super().__init__(message)
        self.server = server


class SentMessage(TelegramObject):
    """What the writer reads of a message it sent or edited: its id.

    aiogram validates the whole :class:`~aiogram.types.Message` a call returns, the
    message it replies to included, for every answer part; the writer needs only the
    id. The methods below are aiogram's own, with this as their result.
    """

    model_config = ConfigDict(extra="ignore")

    message_id: int


class _SendMessage(SendMessage):
    __returning__ = SentMessage  # type: ignore[assignment]


class _SendRichMessage(SendRichMessage):
    __returning__ = SentMessage  # type: ignore[assignment]


class _EditMessageText(EditMessageText):
    __returning__ = SentMessage | bool


class _SendPart(_SendMessage, CallerWaits):
    """A new answer part: its caller waits out flood windows (:meth:`TelegramOut.send_part`)."""


class _SendRichPart(_SendRichMessage, CallerWaits):
    """A new answer part as a rich message (as :class:`_SendPart`)."""


class _SendVoicePart(SendVoice, CallerWaits):
    """A voice note of an answer (as :class:`_SendPart`)."""

    __returning__ = SentMessage  # type: ignore[assignment]


class _SendPhotoPart(SendPhoto, CallerWaits):
    """A picture of an answer (as :class:`_SendPart`)."""

    __returning__ = SentMessage  # type: ignore[assignment]


def _calling(bot: Bot, method: type[TelegramMethod[Any]]) -> Callable[..., Awaitable[Any]]:
    """``bot``'s call of ``method`` built from keyword fields (as ``Bot.send_message`` is)."""

    def call(**fields: Any) -> Awaitable[Any]:
        return bot(method(**fields))

    return call


def _sent_id(exc: UnreadableResultError) -> int | None:
    """The id of a message the server sent but described unreadably, if it named one."""
    result = exc.result
    message_id = result.get("message_id") if isinstance(result, dict) else None
    return message_id if isinstance(message_id, int) and message_id > 0 else None


class _Typing:
    """Sends the typing action every ``interval`` seconds until the context ends.

    Ending never waits for a chat action in flight: it may be sitting out a
    flood-control window for minutes, and the answer it decorates must be
    recorded now (aiogram's ChatActionSender waits for it). A failed action
    ends the typing quietly: it is cosmetic.
    """

    def __init__(self, bot: Bot, chat_id: int, thread_id: int | None, interval: float) -> None:
        self.bot, self.chat_id, self.thread_id, self.interval = bot, chat_id, thread_id, interval
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Typing:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # (a cancellation of the caller still propagates)

    async def _run(self) -> None:
        while True:
            try:
                await self.bot.send_chat_action(
                    chat_id=self.chat_id, action="typing", message_thread_id=self.thread_id
                )
            except Exception as exc:
                log.debug("typing in chat %s stopped: %s", self.chat_id, type(exc).__name__)
                return
            await asyncio.sleep(self.interval)


class TelegramOut:
    """Sends, edits and deletes messages; the only place the turn flow talks to Telegram."""

    #: Whether answers stream as drafts in private chats; the first server that knows no
    #: ``sendMessageDraft`` turns it off for the life of the process.
    drafts = True
    #: Whether notices for one person of a group go to that person only (Bot API 10.2
    #: ephemeral messages); the first server that sends one to everyone turns it off.
    ephemeral = True
    #: Whether answers go out as rich messages (RICH_MESSAGES=auto); the first server that
    #: knows none turns it off for the life of the process.
    rich = True

    #: The session's flood control, which :meth:`send_part` waits on (None: a 429 is
    #: waited out as it asks).
    floods: FloodControl | None = None

    def __init__(self, bot: Bot, *, rich: bool = True, floods: FloodControl | None = None) -> None:
        """``rich``: answers may go out as rich messages (RICH_MESSAGES is not ``off``)
        until the first Bot API server that knows none turns them off for the life of
        the process. ``floods``: the session's flood control (see :meth:`send_part`)."""
        self.bot = bot
        self.rich = rich
        self.floods = floods

    async def send(
        self,
        chat_id: int,
        chunk: Chunk,
        *,
        reply_to: int | None,
        thread_id: int | None,
        markup: InlineKeyboardMarkup | None = None,
        part: bool = False,
    ) -> int:
        """Send one part as a reply (kept even if the replied message is gone).

        ``part``: a new answer part whose caller waits out flood windows itself
        (:meth:`send_part`): a window raises ``TelegramRetryAfter`` instead of waiting.
        """

        def sending(reply_to: int | None, thread_id: int | None) -> Awaitable[Any]:
            return self._formatted(
                _calling(self.bot, _SendPart if part else _SendMessage),
                chunk,
                rich=_calling(self.bot, _SendRichPart if part else _SendRichMessage),
                chat_id=chat_id,
                reply_parameters=_reply(reply_to),
                message_thread_id=thread_id,
                reply_markup=markup,
            )

        return await self._message_id(chat_id, sending, (reply_to, thread_id), "sendMessage")

    async def _message_id(
        self, chat_id: int, send: Callable[[int | None, int | None], Awaitable[Any]],
        where: tuple[int | None, int | None], method: str,
    ) -> int:  # fmt: skip
        """The id of the message ``send(reply_to, thread_id)`` sent, its refusals typed: a
        forum topic deleted meanwhile gets it outside the topic instead (``where``: the
        message replied to and the topic)."""
        thread_id = where[1]
        try:
            message = await send(*where)
        except ThreadGoneError as exc:
            if thread_id is None:
                raise AnswerRejectedError(exc.message) from exc
            # the forum topic was deleted meanwhile: answer in the chat instead
            log.info("topic %s of chat %s is gone; answering outside it", thread_id, chat_id)
            return await self._message_id(chat_id, send, (None, None), method)
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            sent = _sent_id(exc)
            if sent is None:
                raise TelegramUnavailableError(exc.message) from exc
            log.warning("chat %s: %s; using its message id %s", chat_id, exc.message, sent)
            return sent
        if not isinstance(message, SentMessage):
            # {"ok": true, "result": null}: sent or not, nobody can tell; try again later
            raise TelegramUnavailableError(f"{method} succeeded without the message")
        return message.message_id

    async def send_part(
        self,
        chat_id: int,
        chunk: Chunk,
        *,
        reply_to: int | None,
        thread_id: int | None,
        ready: Callable[[bool], Awaitable[None]],
        markup: InlineKeyboardMarkup | None = None,
    ) -> int:
        """Send a new answer part, ``ready(again)`` awaited just before each try: a part
        is noted (the part ledger) right before it leaves, never flood seconds before
        (``markup``: buttons under it).

        A flood window (open before the call or opened by its 429) is waited out here,
        then the part is noted again (``again``) and sent; for at most the flood
        control's ``max_wait`` in all, then it counts as an outage.
        """
        return await self._caller_waits(
            chat_id, ready,
            lambda: self.send(
                chat_id, chunk, reply_to=reply_to, thread_id=thread_id, markup=markup, part=True
            ),
        )  # fmt: skip

    async def send_attachment(
        self,
        chat_id: int,
        attachment: Attachment,
        *,
        reply_to: int | None,
        thread_id: int | None,
        ready: Callable[[bool], Awaitable[None]],
    ) -> int:
        """Send an answer's attachment (``sendVoice``, ``sendPhoto``) as :meth:`send_part`
        sends a part: ``ready(again)`` just before each try, flood windows waited out here.

        Raises :class:`AnswerRejectedError` when Telegram refuses it (a user who takes no
        voice messages: ``VOICE_MESSAGES_FORBIDDEN``), and the errors of any call.
        """
        voice = attachment.kind == "voice"

        def sending(reply_to: int | None, thread_id: int | None) -> Awaitable[Any]:
            upload = BufferedInputFile(attachment.data, filename=attachment.filename)
            fields: dict[str, Any] = {
                "chat_id": chat_id, "caption": attachment.caption or None, "parse_mode": None,
                "reply_parameters": _reply(reply_to), "message_thread_id": thread_id,
            }  # fmt: skip
            if voice:
                return self._call(self.bot(_SendVoicePart(voice=upload, **fields)))
            return self._call(self.bot(_SendPhotoPart(photo=upload, **fields)))

        name = "sendVoice" if voice else "sendPhoto"
        return await self._caller_waits(
            chat_id, ready, lambda: self._message_id(chat_id, sending, (reply_to, thread_id), name)
        )

    async def _caller_waits(
        self, chat_id: int, ready: Callable[[bool], Awaitable[None]],
        send: Callable[[], Awaitable[int]],
    ) -> int:  # fmt: skip
        """``send()`` (a request marked :class:`CallerWaits`), ``ready(again)`` awaited
        just before each try; a flood window is waited out here (see :meth:`send_part`)."""
        floods = self.floods
        deadline = time.monotonic() + (floods.max_wait if floods is not None else 600.0)
        again = False
        while True:
            if floods is not None:
                await floods.clear(chat_id)
            await ready(again)
            retried = AGAIN.set(lambda: ready(True))  # a 5xx's next try: announced anew
            try:
                return await send()
            except TelegramRetryAfter as exc:
                if time.monotonic() >= deadline:
                    raise TelegramUnavailableError(exc.message) from exc
                if floods is None:
                    await asyncio.sleep(exc.retry_after)  # a rate Telegram set, not a retry
                else:
                    floods.metrics.telegram_retry("flood_control")  # as its own retries count
                again = True
            finally:
                AGAIN.reset(retried)

    async def edit(self, chat_id: int, message_id: int, chunk: Chunk) -> None:
        """Replace a part's text; "not modified" counts as done.

        Raises :class:`MessageGoneError` when the message was deleted.
        """
        try:
            edit = _calling(self.bot, _EditMessageText)
            await self._formatted(
                edit,
                chunk,
                rich=edit,
                chat_id=chat_id,
                message_id=message_id,
            )
        except NotModifiedError:
            pass
        except EditTargetGoneError as exc:
            raise MessageGoneError(exc.message) from exc
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            log.info("chat %s: %s; the edit counts as done", chat_id, exc.message)

    async def draft(
        self, chat_id: int, draft_id: int, chunk: Chunk | None, *, thread_id: int | None
    ) -> None:
        """Show ``chunk`` as the chat's draft with a stop button (None: "Thinking…").

        Raises :class:`DraftsUnavailableError` when the chat takes no drafts or the
        server does not know the method; the latter also turns drafts off for good.
        """
        try:
            await self._formatted(
                self.bot.send_message_draft,
                chunk or _THINKING,
                rich=self.bot.send_rich_message_draft,
                chat_id=chat_id,
                draft_id=draft_id,
                message_thread_id=thread_id,
                # the stop button; the partial text stays until the final message replaces it
                can_stop=True,
                keep_on_stop=True,
            )
        except UnknownMethodError as exc:  # (the session logged it, once)
            self.drafts = False
            raise DraftsUnavailableError(exc.message) from exc
        except (DraftPeerInvalidError, ThreadGoneError) as exc:
            # the answer goes on by sending messages, which handle both cases
            raise DraftsUnavailableError(exc.message) from exc
        except TelegramUnavailableError as exc:
            if not exc.server:
                raise
            # drafts are a nicety: an answer never waits for a server failing them
            log.warning("drafts in chat %s failed (%s); this answer goes on by editing",
                        chat_id, exc)  # fmt: skip
            raise DraftsUnavailableError(str(exc)) from exc
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            log.info("chat %s: %s; the draft counts as shown", chat_id, exc.message)

    def typing(
        self, chat_id: int, thread_id: int | None, interval: float
    ) -> AbstractAsyncContextManager[object]:
        """Shows "typing…" in the chat until the context ends."""
        return _Typing(self.bot, chat_id, thread_id, interval)

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
            reply_parameters=_reply(reply_to),
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
                reply_parameters=_reply(reply_to),
                message_thread_id=thread_id,
            )
        )
        return message.message_id if isinstance(message, Message) else 0

    async def rename_topic(self, chat_id: int, thread_id: int, name: str) -> None:
        """Rename a topic (``editForumTopic``); a refusal is raised as Telegram's error."""
        await self._call(
            self.bot.edit_forum_topic(chat_id=chat_id, message_thread_id=thread_id, name=name)
        )

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
            return _sent_id(exc) or 0
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
                    reply_parameters=_reply(reply_to),
                    message_thread_id=thread_id,
                    reply_markup=markup,
                )
            )
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:  # it was sent; its id may be unknown
            return _sent_id(exc) or 0
        return message.message_id if isinstance(message, Message) else 0

    async def delete(self, chat_id: int, message_id: int) -> None:
        """Best effort: a message that cannot be deleted is left as it is."""
        try:
            await self._call(self.bot.delete_message(chat_id=chat_id, message_id=message_id))
        except (TelegramBadRequest, UnreadableResultError) as exc:
            log.info("could not delete message %s: %s", message_id, exc.message)

    async def _formatted(
        self,
        method: Callable[..., Awaitable[Any]],
        chunk: Chunk,
        *,
        rich: Callable[..., Awaitable[Any]],
        **fields: Any,
    ) -> Any:
        """The chunk with ``fields``: a rich chunk through ``rich`` as a rich message;
        any other through ``method`` with its HTML (the bot's default parse mode), and
        when Telegram rejects the HTML's entities, once more with the text unformatted.

        Raises :class:`RichUnavailableError` when the server knows no ``rich`` method
        (rich messages are then off for good), refuses the rich message
        (:class:`~bot.telegram.errors.RichRejectedError`: its content, a limit) or fails
        it with server errors after flood control's tries (this answer goes out as HTML).
        Any other refusal is a refusal of any message (the chat, the topic, an edit).
        """
        if chunk.rich:
            return await self._rich(rich, chunk, **fields)
        try:
            return await self._call(method(text=chunk.html, **fields))
        except EntitiesRejectedError as exc:
            log.warning("Telegram rejected formatting (%s); sending plain text", exc.message)
            return await self._call(method(text=chunk.plain, parse_mode=None, **fields))

    async def _rich(
        self, method: Callable[..., Awaitable[Any]], chunk: Chunk, **fields: Any
    ) -> Any:
        if not self.rich:  # turned off by another answer meanwhile
            raise RichUnavailableError("rich messages are off")
        try:
            return await self._call(
                method(rich_message=InputRichMessage(html=chunk.html), **fields)
            )
        except UnknownMethodError as exc:  # (the session logged it, once)
            self.rich = False
            raise RichUnavailableError(exc.message) from exc
        except RichRejectedError as exc:
            log.warning("Telegram refused a rich message (%s); sending it as HTML", exc.message)
            raise RichUnavailableError(exc.message) from exc
        except TelegramUnavailableError as exc:
            if not exc.server:
                raise
            # failed with server errors after flood control's tries: an answer never
            # waits behind a newer method (the older way may fail too: then it waits)
            log.warning("a rich message failed (%s); this answer goes out as HTML", exc)
            raise RichUnavailableError(str(exc)) from exc

    @staticmethod
    async def _call(request: Any) -> Any:
        try:
            return await request
        except TelegramRetryAfter as exc:
            if isinstance(exc.method, CallerWaits):
                raise  # its caller waits and calls again (send_part)
            raise TelegramUnavailableError(exc.message) from exc
        except TelegramForbiddenError as exc:
            raise ChatUnavailableError(exc.message) from exc
        except (TelegramBadRequest, UnreadableResultError, UnknownMethodError):
            raise  # the caller decides
        except (TelegramServerError, BadResponseError) as exc:
            raise TelegramUnavailableError(exc.message, server=True) from exc
        except TelegramNetworkError as exc:
            raise TelegramUnavailableError(exc.message) from exc
        except TelegramAPIError as exc:
            # any other status (404, 409, an error without a description): not ours to fix
            raise TelegramUnavailableError(exc.message or type(exc).__name__) from exc

    async def open_topic(self, chat_id: int, name: str) -> int:
        """A new topic of a private chat with topics (``createForumTopic``, Bot API 9.4):
        its ``message_thread_id``.

        Raises :class:`UnknownMethodError` for a server without the method (the session
        logs it; a bare 404 is taken for it too, with a line of its own), Telegram's
        refusal as :class:`TelegramBadRequest` (the user turned topics off, say), and the
        errors of any call (:class:`ChatUnavailableError`,
        :class:`TelegramUnavailableError`).
        """

        async def create() -> ForumTopic:
            try:
                return await self.bot.create_forum_topic(chat_id=chat_id, name=name)
            except UnknownMethodError:
                raise
            except TelegramNotFound as exc:
                log.warning(
                    "the Bot API server answered createForumTopic 404 (%s); new "
                    "conversations are answered where they were asked", exc.message,
                )  # fmt: skip
                raise UnknownMethodError(method=exc.method, message=exc.message) from exc

        topic: ForumTopic = await self._call(create())
        return topic.message_thread_id


def _reply(reply_to: int | None) -> ReplyParameters | None:
    if reply_to is None:
        return None
    return ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)


#: Notes message ids of a chat that belong to no conversation (the transcript store's
#: ``unthreaded``): a reply to a command's answer starts a new conversation.
Unthreaded = Callable[[int, list[int]], Awaitable[None]]


class Notifier:
    """Local answers (commands, refusals) sent in the background.

    The update handler never waits on Telegram: what it has to say is sent by
    a task of its own, and the tasks still running are drained at shutdown.
    What a job sends belongs to no conversation: its message ids are noted as such
    (``unthreaded``), so a reply to one starts a new conversation, while a reply to
    a message of the bot's that nothing knows gets a notice instead.
    """

    def __init__(self, out: TelegramOut, unthreaded: Unthreaded | None = None) -> None:
        self.out = out
        self._unthreaded = unthreaded
        self._tasks: set[asyncio.Task[None]] = set()

    def say(
        self, chat_id: int, text: str, *, reply_to: int, thread_id: int | None,
        receiver: int | None = None,
    ) -> None:  # fmt: skip
        """Send ``text`` as a reply, in the background; to ``receiver`` only (a group's
        member) where the server has ephemeral messages."""
        if receiver is None:
            self.run(
                lambda: self.out.send_text(chat_id, text, reply_to=reply_to, thread_id=thread_id),
                name=f"notice-{chat_id}",
                chat_id=chat_id,
            )
            return
        self.run(
            lambda: self.out.send_personal(
                chat_id, text, receiver=receiver, reply_to=reply_to, thread_id=thread_id
            ),
            name=f"notice-{chat_id}",
            chat_id=chat_id,
        )

    def run(
        self,
        job: Callable[[], Awaitable[int | Sequence[int] | None]],
        *,
        name: str,
        chat_id: int | None = None,
    ) -> None:
        """Run ``job`` in the background; a failure is logged (by type), never raised.

        ``job`` returns the ids of the messages it sent to ``chat_id`` (0: unknown).
        """

        async def guarded() -> None:
            try:
                sent = await job()
                ids = [sent] if isinstance(sent, int) else list(sent or ())
                ids = [i for i in ids if i > 0]
                if ids and chat_id is not None and self._unthreaded is not None:
                    await self._unthreaded(chat_id, ids)
            except Exception as exc:
                log.warning("%s failed: %s", name, type(exc).__name__)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def idle(self) -> bool:
        """Whether nothing is being sent (every job ended)."""
        return not self._tasks

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait up to ``timeout`` s for notices still being sent, then cancel them."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
