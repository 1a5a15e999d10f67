"""How every call to Telegram goes: its failures typed, an answer's text formatted.

:class:`TelegramCalls` is the base of :class:`~bot.telegram.out.TelegramOut`: one
wrapper for every request (:meth:`TelegramCalls._call`: Telegram's failures as the typed
errors of :mod:`bot.telegram.outcomes`), the id of a message sent (a forum topic deleted
meanwhile: outside it), the wait of a caller that waits out flood windows itself, and
sending a part as a reply.

Messages, edits and drafts go out through one wrapper, :meth:`TelegramCalls._formatted`,
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
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import SendMessage, SendRichMessage, TelegramMethod
from aiogram.types import InlineKeyboardMarkup, InputRichMessage, ReplyParameters
from aiogram.types.base import TelegramObject
from pydantic import ConfigDict

from .errors import EntitiesRejectedError, RichRejectedError, ThreadGoneError, UnknownMethodError
from .format import Chunk
from .outcomes import (
    AnswerRejectedError,
    ChatUnavailableError,
    RichUnavailableError,
    TelegramUnavailableError,
)
from .session import AGAIN, BadResponseError, CallerWaits, FloodControl, UnreadableResultError

log = logging.getLogger("replychain.telegram")


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


class _SendPart(_SendMessage, CallerWaits):
    """A new answer part: its caller waits out flood windows
    (:meth:`~bot.telegram.out.TelegramOut.send_part`)."""


class _SendRichPart(_SendRichMessage, CallerWaits):
    """A new answer part as a rich message (as :class:`_SendPart`)."""


def calling(bot: Bot, method: type[TelegramMethod[Any]]) -> Callable[..., Awaitable[Any]]:
    """``bot``'s call of ``method`` built from keyword fields (as ``Bot.send_message`` is)."""

    def call(**fields: Any) -> Awaitable[Any]:
        return bot(method(**fields))

    return call


def sent_id(exc: UnreadableResultError) -> int | None:
    """The id of a message the server sent but described unreadably, if it named one."""
    result = exc.result
    message_id = result.get("message_id") if isinstance(result, dict) else None
    return message_id if isinstance(message_id, int) and message_id > 0 else None


def as_reply(reply_to: int | None) -> ReplyParameters | None:
    """A reply to ``reply_to`` (None: none), kept even if the replied message is gone."""
    if reply_to is None:
        return None
    return ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)


class TelegramCalls:
    """Every call to Telegram, its failures typed; a part of an answer sent as a reply."""

    #: Whether answers go out as rich messages (RICH_MESSAGES=auto); the first server that
    #: knows none turns it off for the life of the process.
    rich = True

    #: The session's flood control, which :meth:`_caller_waits` waits on (None: a 429 is
    #: waited out as it asks).
    floods: FloodControl | None = None

    def __init__(self, bot: Bot, *, rich: bool = True, floods: FloodControl | None = None) -> None:
        """``rich``: answers may go out as rich messages (RICH_MESSAGES is not ``off``)
        until the first Bot API server that knows none turns them off for the life of
        the process. ``floods``: the session's flood control (see
        :meth:`~bot.telegram.out.TelegramOut.send_part`)."""
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
        (:meth:`~bot.telegram.out.TelegramOut.send_part`): a window raises ``TelegramRetryAfter``
        instead of waiting.
        """

        def sending(reply_to: int | None, thread_id: int | None) -> Awaitable[Any]:
            return self._formatted(
                calling(self.bot, _SendPart if part else _SendMessage),
                chunk,
                rich=calling(self.bot, _SendRichPart if part else _SendRichMessage),
                chat_id=chat_id,
                reply_parameters=as_reply(reply_to),
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
            sent = sent_id(exc)
            if sent is None:
                raise TelegramUnavailableError(exc.message) from exc
            log.warning("chat %s: %s; using its message id %s", chat_id, exc.message, sent)
            return sent
        if not isinstance(message, SentMessage):
            # {"ok": true, "result": null}: sent or not, nobody can tell; try again later
            raise TelegramUnavailableError(f"{method} succeeded without the message")
        return message.message_id

    async def _caller_waits(
        self, chat_id: int, ready: Callable[[bool], Awaitable[None]],
        send: Callable[[], Awaitable[int]],
    ) -> int:  # fmt: skip
        """``send()`` (a request marked :class:`CallerWaits`), ``ready(again)`` awaited
        just before each try; a flood window is waited out here (see
        :meth:`~bot.telegram.out.TelegramOut.send_part`)."""
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
