"""The Bot API session: every answer classified in one place, flood control for every call.

:class:`BotApiSession` is aiogram's aiohttp session with one change: an answer
that is not a valid Bot API response becomes a typed Telegram failure instead
of aiogram's ``ClientDecodeError`` (or worse), so callers handle it like any
other Telegram error::

    any status whose text says the server lacks  -> UnknownMethodError (never retried; the
      the method (a 404 "method not found", an       method is not asked again by this
      emulator's 500 "API method 'x' is not          process: one log line names it and
      supported", a 501)                             what goes the older way instead)
    HTTP 5xx, whatever the body                  -> TelegramServerError (retried)
    a 400 or 404 whose description names a       -> its typed error (bot.telegram.errors:
      known refusal ("message is not modified")       NotModifiedError, ThreadGoneError, ...)
    {"ok": true} with a result that does not     -> UnreadableResultError (the server
      decode (fields missing or malformed)            did it; ``result`` holds the raw JSON)
    anything else that is not a Bot API answer   -> BadResponseError
      (an HTML page, JSON without "ok", ...)

A getUpdates batch with one update aiogram cannot decode is decoded update by
update instead, so one odd update never stalls polling.

:class:`FloodControl` is a request middleware: every call to a chat waits
until that chat's ``retry_after`` window has passed (a window another process tells
of meanwhile, bot/bus/relay.py, extends the wait); a 429 is waited out as
Telegram asks, for up to ``max_wait`` seconds in all (then it counts as an
outage); a 5xx is tried again a few times, under the one outage policy
(:data:`bot.retry.WHILE_AWAY`). That is the Telegram edge's one retry loop: after
it gives up, the unit of work (a turn) waits out the outage. A request marked
:class:`CallerWaits` (a new answer part, noted in the part ledger just before it
goes out) is neither held nor retried here: a window raises ``TelegramRetryAfter``
to its caller, which waits (:meth:`FloodControl.clear`), notes the part again and
calls again, so the note is fresh when the part leaves, never flood seconds old.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import Update
from pydantic import ValidationError

from ..metrics import Metrics
from ..retry import retrying
from .errors import UnknownMethodError, classify, lacks_method

log = logging.getLogger("replychain.telegram")

#: Added to every ``retry_after`` so a retry never lands a hair too early.
_RETRY_MARGIN = 0.1
#: Most extra wait, drawn at random per window, so processes that met one window
#: together do not all call the chat again in the same millisecond: the first call
#: to meet a new 429 then reaches the others (bot/bus/relay.py) before they call.
FLOOD_SPREAD = 0.3
_PRUNE_AT = 10_000
#: Tries of a call Telegram answered with a 5xx (it did not do it: safe to repeat).
SERVER_ERROR_ATTEMPTS = 3


class CallerWaits:
    """Marks a request whose flood windows its caller waits out itself (see the module
    text): :class:`FloodControl` raises ``TelegramRetryAfter`` instead of waiting, and
    before trying it again after a 5xx awaits :data:`AGAIN`."""


#: Set by the caller of a :class:`CallerWaits` request (a new answer part: announced anew,
#: and only while its turn's claim is confirmed, bot/telegram/out.py ``send_part``):
#: awaited before the request is tried again after a 5xx, so a process frozen through
#: the backoff (and the turn's takeover by another process) raises there instead of
#: sending a part the other process sends too.
AGAIN: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("again", default=None)


class BadResponseError(TelegramAPIError):
    """The Bot API server answered something that is not a Bot API response."""


class UnreadableResultError(TelegramAPIError):
    """The server reports success, but its result does not decode; ``result`` is the raw JSON."""

    def __init__(self, method: TelegramMethod[Any], message: str, result: object) -> None:
        super().__init__(method=method, message=message)
        self.result = result


def describe_body(content: object) -> str:
    """What kind of body an answer had, for a one-line message (never the body itself)."""
    if isinstance(content, str):
        stripped = content.lstrip()[:100].lower()
        return "an HTML page" if stripped.startswith(("<!doctype", "<html")) else "a non-JSON body"
    if isinstance(content, dict) and "ok" not in content:
        return "JSON without an 'ok' field"
    return "a body that does not match the Bot API"


#: ``Response[T]`` for every result type T seen, held here for the process's life.
#: aiogram's ``check_response`` parametrizes ``Response[method.__returning__]`` on every
#: call, and pydantic keeps parametrized models only weakly: once garbage collection
#: freed one, the next call built it again (its whole schema, several milliseconds of
#: CPU; most calls of a turn did). There are a few dozen result types: this stays small.
_RESPONSE_TYPES: dict[object, type[Response[Any]]] = {}


def _hold_response_type(method: TelegramMethod[Any]) -> None:
    returning = method.__returning__
    if returning not in _RESPONSE_TYPES:
        _RESPONSE_TYPES[returning] = Response[returning]  # type: ignore[valid-type]


#: What goes the older way when the server lacks a method (the one log line says it).
_WITHOUT = {
    "sendRichMessage": "answers go out as HTML messages",
    "sendRichMessageDraft": "answers go out as HTML messages",
    "sendMessageDraft": "answers stream by editing messages",
    "getMyCommands": "the command menu is not set",
    "setMyCommands": "the command menu is not set",
    "deleteMyCommands": "the command menu is not set",
    "editEphemeralMessageText": "notices for one person are left as sent",
    "answerGuestQuery": "mentions in chats the bot is not in go unanswered",
    "createForumTopic": "new conversations are answered where they were asked",
    "setMySettings": "the topic sidebar is left as it is",
    "editForumTopic": "topics keep their names",
    "sendChatAction": "no typing indicator is shown",
}


#: Methods the bot cannot answer anyone without (Bot API 1.0's).
_ESSENTIAL = frozenset({"getMe", "getUpdates", "sendMessage", "editMessageText", "setWebhook"})


class BotApiSession(AiohttpSession):
    """aiogram's session, with every answer classified as a Bot API answer or a failure."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Methods the server said it lacks: this process does not ask for them again.
        self.lacking: set[str] = set()

    async def __call__(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        timeout: int | None = None,  # noqa: ASYNC109 - aiogram's signature
    ) -> TelegramType:
        if method.__api_method__ in self.lacking:
            raise UnknownMethodError(
                method=method, message=f"the Bot API server lacks {method.__api_method__}"
            )
        return await super().__call__(bot, method, timeout)

    def _lacks(self, method: TelegramMethod[Any], text: str) -> UnknownMethodError:
        """The server lacks ``method``: noted (one log line per method), as an error.

        A method the bot cannot work without is never noted: it is asked again each time
        (its caller says what fails), so a server that said so by mistake costs nothing
        for good."""
        name = method.__api_method__
        if name not in self.lacking and name not in _ESSENTIAL:
            self.lacking.add(name)
            log.warning(
                "the Bot API server lacks %s (%s); %s", name, text[:120].strip() or "no text",
                _WITHOUT.get(name, "the feature using it is off"),
            )  # fmt: skip
        return UnknownMethodError(method=method, message=text or f"{name} is not supported")

    def check_response(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        status_code: int,
        content: str,
    ) -> Response[TelegramType]:
        name = type(method).__name__
        _hold_response_type(method)  # aiogram's Response[...] below finds it built
        try:
            return super().check_response(bot, method, status_code, content)
        except (TelegramBadRequest, TelegramNotFound) as exc:
            typed = classify(exc, status_code)
            if isinstance(typed, UnknownMethodError):
                raise self._lacks(method, typed.message) from None
            raise typed from None
        except TelegramServerError as exc:  # a Bot API 5xx with a description
            if lacks_method(status_code, exc.message or ""):
                raise self._lacks(method, exc.message) from None
            raise
        except ClientDecodeError as exc:
            if isinstance(method, GetUpdates) and (cleaned := _without_undecodable(bot, content)):
                same = cast("TelegramMethod[TelegramType]", method)
                return super().check_response(bot, same, status_code, cleaned)
            if status_code >= 400 and lacks_method(status_code, text := _said(exc.data)):
                raise self._lacks(method, text) from None
            if status_code >= 500:
                raise TelegramServerError(
                    method=method, message=f"HTTP {status_code} with {describe_body(exc.data)}"
                ) from None
            data = exc.data
            if isinstance(data, dict) and data.get("ok") is True and 200 <= status_code < 300:
                raise UnreadableResultError(
                    method, f"{name} succeeded but its result does not decode"
                    f"{_first_problem(exc.original)}", data.get("result"),
                ) from None  # fmt: skip
            raise BadResponseError(
                method=method, message=f"HTTP {status_code} with {describe_body(data)}"
            ) from None
        except TypeError:
            # aiogram reads a 5xx without "description" as text and fails on None
            if lacks_method(status_code, ""):
                raise self._lacks(method, f"HTTP {status_code}") from None
            raise TelegramServerError(
                method=method, message=f"HTTP {status_code} without a description"
            ) from None


def _said(content: object) -> str:
    """What an answer that is not a Bot API response says: its description, message or
    error field, else its text (an HTML page's), else nothing."""
    if isinstance(content, dict):
        for field in ("description", "message", "error"):
            value = content.get(field)
            if isinstance(value, str):
                return value
        return ""
    return content[:300] if isinstance(content, str) else ""


def _first_problem(error: object) -> str:
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f" ({where}: {first['msg'].lower()})"
    return ""


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


class FloodControl(BaseRequestMiddleware):
    """Honour ``retry_after`` per chat for every Telegram call; retry 5xx briefly."""

    def __init__(self, max_wait: float = 600.0, metrics: Metrics | None = None) -> None:
        self.max_wait = max_wait
        self.metrics = metrics or Metrics()
        self._not_before: dict[object, float] = {}
        #: Tells the other processes of a flood window met here (bot/bus/relay.py).
        self.tell: Callable[[int, float], None] | None = None
        #: One call at a time per chat (while a call is running or waiting).
        self._chat_turns: weakref.WeakValueDictionary[object, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def _one_at_a_time(self, chat: object) -> contextlib.AbstractAsyncContextManager[object]:
        """Calls to one chat go out one after another: a call still on its way when
        another one's 429 comes back would land inside the window the 429 opened.
        (Calls without a chat, getUpdates' long poll among them, are not held.)"""
        if chat is None:
            return contextlib.nullcontext()
        lock = self._chat_turns.get(chat)
        if lock is None:
            lock = self._chat_turns[chat] = asyncio.Lock()
        return lock

    def hold(self, chat: object, seconds: float) -> None:
        """No call to ``chat`` for ``seconds`` from now (a window Telegram opened, here
        or in another process)."""
        spread = random.uniform(0.0, FLOOD_SPREAD)
        until = time.monotonic() + seconds + _RETRY_MARGIN + spread
        self._not_before[chat] = max(self._not_before.get(chat, 0.0), until)
        self._prune()

    def _wait_for(self, chat: object) -> float:
        return self._not_before.get(chat, 0.0) - time.monotonic()

    def _wait_any(self, chat: object) -> float:
        """Seconds until neither the chat's window nor the bot's (``None``) is open."""
        return max(self._wait_for(chat), self._wait_for(None))

    async def clear(self, chat: int) -> None:
        """Wait until no flood window of ``chat`` is open (one another process tells of
        meanwhile included): what a :class:`CallerWaits` request's caller waits for."""
        while (delay := self._wait_any(chat)) > 0:  # noqa: ASYNC110 - a window is a time
            await asyncio.sleep(delay)

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        chat = getattr(method, "chat_id", None)
        name = type(method).__name__
        caller_waits = isinstance(method, CallerWaits)

        async def attempt() -> Response[TelegramType]:
            again = AGAIN.get() if caller_waits and server_errors else None
            if again is not None:
                await again()
            async with self._one_at_a_time(chat):
                # asked again after each wait: another process may have met the next
                # 429 meanwhile and told this one (the relay), extending the window
                while (delay := self._wait_any(chat)) > 0:
                    if caller_waits:
                        raise TelegramRetryAfter(
                            method=method, message="a flood window is open",
                            retry_after=math.ceil(delay),
                        )  # fmt: skip
                    await asyncio.sleep(delay)
                try:
                    return await make_request(bot, method)
                except TelegramRetryAfter as exc:
                    self.hold(chat, exc.retry_after)
                    if self.tell is not None and isinstance(chat, int):
                        self.tell(chat, exc.retry_after)
                    self.metrics.telegram_429(method.__api_method__)
                    log.warning(
                        "Telegram flood control on %s: waiting %ss before retrying",
                        name, exc.retry_after,
                    )  # fmt: skip
                    raise

        server_errors = 0

        def note(exc: BaseException) -> None:
            nonlocal server_errors
            if isinstance(exc, TelegramRetryAfter):
                self.metrics.telegram_retry("flood_control")
                return
            server_errors += 1
            self.metrics.telegram_retry("server_error")
            log.warning("Telegram server error on %s (%s); retrying", name, exc)

        def count(exc: BaseException) -> bool:
            """A 429 within ``max_wait`` (the next attempt waits out its window) unless its
            caller waits itself, or a 5xx while it has tries left (after the outage
            policy's backoff)."""
            if isinstance(exc, TelegramServerError):
                return server_errors + 1 < SERVER_ERROR_ATTEMPTS
            return not caller_waits

        return await retrying(
            attempt,
            on=(TelegramRetryAfter, TelegramServerError),
            when=count,
            within=self.max_wait,
            wait_hint=lambda exc: 0.0 if isinstance(exc, TelegramRetryAfter) else None,
            on_retry=note,
        )

    def _prune(self) -> None:
        if len(self._not_before) > _PRUNE_AT:
            now = time.monotonic()
            self._not_before = {k: v for k, v in self._not_before.items() if v > now}
