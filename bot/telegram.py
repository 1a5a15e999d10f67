"""The Telegram edge: flood control for every call, and sending that never fails on format.

:class:`FloodControl` is an aiogram request middleware: every Bot API call to a
chat waits until that chat's ``retry_after`` window has passed, and a 429 is
retried after the time Telegram asks for. :class:`TelegramOut` sends and edits
answer parts as HTML and falls back to the same text without formatting when
Telegram still rejects the entities.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiogram import BaseMiddleware, Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.enums import ChatAction, ParseMode
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import LinkPreviewOptions, Message, ReplyParameters, TelegramObject, Update
from aiogram.types.update import UpdateTypeLookupError
from pydantic import ValidationError

from .format import Chunk

log = logging.getLogger("replychain.telegram")

#: Added to every ``retry_after`` so a retry never lands a hair too early.
_RETRY_MARGIN = 0.1
_PRUNE_AT = 10_000


class ChatUnavailableError(Exception):
    """The bot may not write to this chat any more (blocked, kicked, chat gone)."""


class AnswerRejectedError(Exception):
    """Telegram refused a message for a reason retrying will not fix (a 400)."""


class MessageGoneError(Exception):
    """The message to edit no longer exists (the user deleted it)."""


class TelegramUnavailableError(Exception):
    """Telegram failed (5xx after retries) or could not be reached: try the turn later."""


class FloodControl(BaseRequestMiddleware):
    """Honour ``retry_after`` per chat for every Telegram call, retrying 429s."""

    def __init__(self, max_retries: int = 5, server_error_retries: int = 2) -> None:
        self.max_retries = max_retries
        self.server_error_retries = server_error_retries
        self._not_before: dict[object, float] = {}
        self.retries = 0

    def _wait_for(self, chat: object) -> float:
        return self._not_before.get(chat, 0.0) - time.monotonic()

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        chat = getattr(method, "chat_id", None)
        attempt = 0
        failures = 0
        while True:
            delay = max(self._wait_for(chat), self._wait_for(None))
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                return await make_request(bot, method)
            except TelegramServerError as exc:
                # a 5xx means Telegram did not do it: safe to repeat, briefly
                failures += 1
                if failures > self.server_error_retries:
                    raise
                log.warning(
                    "Telegram server error on %s (%s); retrying", type(method).__name__, exc
                )
                await asyncio.sleep(float(failures))
            except TelegramRetryAfter as exc:
                attempt += 1
                if attempt > self.max_retries:
                    raise
                self.retries += 1
                until = time.monotonic() + exc.retry_after + _RETRY_MARGIN
                key = chat if chat is not None else None
                self._not_before[key] = max(self._not_before.get(key, 0.0), until)
                log.warning(
                    "Telegram flood control on %s: waiting %ss before retrying",
                    type(method).__name__,
                    exc.retry_after,
                )
                self._prune()

    def _prune(self) -> None:
        if len(self._not_before) > _PRUNE_AT:
            now = time.monotonic()
            self._not_before = {k: v for k, v in self._not_before.items() if v > now}


def _is_parse_error(exc: TelegramBadRequest) -> bool:
    text = exc.message.lower()
    return "can't parse entities" in text or "unsupported start tag" in text


def _is_not_modified(exc: TelegramBadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def _is_gone(exc: TelegramBadRequest) -> bool:
    text = exc.message.lower()
    return "message to edit not found" in text or "message_id_invalid" in text


def _is_thread_gone(exc: TelegramBadRequest) -> bool:
    return "message thread not found" in exc.message.lower()


class LenientSession(AiohttpSession):
    """Decodes a getUpdates batch update by update when it does not decode whole.

    aiogram decodes a batch in one go: a single update it cannot parse (Telegram
    sends some, e.g. a forward from a hidden user in some aiogram versions)
    would fail every poll and stall every chat. Such an update is logged by id
    and replaced by an empty one, so the offset moves past it.
    """

    def check_response(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        status_code: int,
        content: str,
    ) -> Response[TelegramType]:
        try:
            return super().check_response(bot, method, status_code, content)
        except ClientDecodeError:
            if not isinstance(method, GetUpdates):
                raise
            cleaned = _without_undecodable(bot, content)
            if cleaned is None:
                raise
            same = cast("TelegramMethod[TelegramType]", method)
            return super().check_response(bot, same, status_code, cleaned)


def _without_undecodable(bot: Bot, content: str) -> str | None:
    try:
        data = json.loads(content)
    except ValueError:
        return None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        return None
    cleaned: list[Any] = []
    for raw in result:
        try:
            Update.model_validate(raw, context={"bot": bot})
            cleaned.append(raw)
        except ValidationError:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not isinstance(update_id, int):
                continue
            log.warning("skipped update %s: it does not match the Bot API schema", update_id)
            cleaned.append({"update_id": update_id})
    return json.dumps({**data, "result": cleaned})


class SkipUnknownUpdates(BaseMiddleware):
    """Updates of no type aiogram knows end here (aiogram would warn with their text)."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if isinstance(event, Update):
            try:
                event.event_type  # noqa: B018
            except UpdateTypeLookupError:
                log.info("ignored update %s of a type this bot does not know", event.update_id)
                return None
        return await handler(event, data)


_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


class TelegramOut:
    """Sends and edits answer parts; the only place the turn flow talks to Telegram."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    async def send(
        self, chat_id: int, chunk: Chunk, *, reply_to: int | None, thread_id: int | None
    ) -> int:
        """Send one part as a reply (kept even if the replied message is gone)."""
        reply = (
            ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
            if reply_to is not None
            else None
        )
        common: dict[str, Any] = {
            "chat_id": chat_id,
            "reply_parameters": reply,
            "message_thread_id": thread_id,
            "link_preview_options": _NO_PREVIEW,
        }
        try:
            message = await self._call(
                self.bot.send_message(text=chunk.html, parse_mode=ParseMode.HTML, **common)
            )
        except TelegramBadRequest as exc:
            if _is_thread_gone(exc) and thread_id is not None:
                # the forum topic was deleted meanwhile: answer in the chat instead
                log.info("topic %s of chat %s is gone; answering outside it", thread_id, chat_id)
                return await self.send(chat_id, chunk, reply_to=None, thread_id=None)
            if not _is_parse_error(exc):
                raise AnswerRejectedError(exc.message) from exc
            log.warning("Telegram rejected formatting (%s); sending plain text", exc.message)
            try:
                message = await self._call(
                    self.bot.send_message(text=chunk.plain, parse_mode=None, **common)
                )
            except TelegramBadRequest as plain_exc:
                raise AnswerRejectedError(plain_exc.message) from plain_exc
        assert isinstance(message, Message)
        return message.message_id

    async def edit(self, chat_id: int, message_id: int, chunk: Chunk) -> None:
        """Replace a part's text; "not modified" counts as done.

        Raises :class:`MessageGoneError` when the message was deleted.
        """
        common: dict[str, Any] = {
            "chat_id": chat_id,
            "message_id": message_id,
            "link_preview_options": _NO_PREVIEW,
        }
        try:
            try:
                await self._call(
                    self.bot.edit_message_text(text=chunk.html, parse_mode=ParseMode.HTML, **common)
                )
            except TelegramBadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                log.warning("Telegram rejected formatting (%s); editing as plain text", exc.message)
                await self._call(
                    self.bot.edit_message_text(text=chunk.plain, parse_mode=None, **common)
                )
        except TelegramBadRequest as exc:
            if _is_gone(exc):
                raise MessageGoneError(exc.message) from exc
            if not _is_not_modified(exc):
                raise AnswerRejectedError(exc.message) from exc

    async def send_text(
        self, chat_id: int, text: str, *, reply_to: int | None, thread_id: int | None
    ) -> int:
        """A short notice (plain text, never parsed)."""
        return await self.send(chat_id, Chunk(text, text), reply_to=reply_to, thread_id=thread_id)

    async def delete(self, chat_id: int, message_id: int) -> None:
        """Best effort: a message that cannot be deleted is left as it is."""
        try:
            await self._call(self.bot.delete_message(chat_id=chat_id, message_id=message_id))
        except TelegramBadRequest as exc:
            log.info("could not delete message %s: %s", message_id, exc.message)

    async def typing(self, chat_id: int, thread_id: int | None) -> None:
        """One typing action; failures only matter to the log."""
        try:
            await self.bot.send_chat_action(
                chat_id=chat_id, action=ChatAction.TYPING, message_thread_id=thread_id
            )
        except TelegramForbiddenError:
            raise
        except Exception as exc:  # typing is cosmetic: never fail a turn for it
            log.debug("typing action failed: %s", type(exc).__name__)

    @staticmethod
    async def _call(request: Any) -> Any:
        try:
            return await request
        except TelegramForbiddenError as exc:
            raise ChatUnavailableError(exc.message) from exc
        except (TelegramServerError, TelegramNetworkError) as exc:
            raise TelegramUnavailableError(exc.message) from exc
