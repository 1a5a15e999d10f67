"""The fake Telegram server's core: its state, the HTTP plumbing (routing, faults,
misbehaviour, flood limits), getUpdates, getMe, inspection and waiting, and storing
messages. Each concern on top of it (telegram_messages, _files, _guest, _payments,
_setup) is a class that adds its Bot API methods through ``_methods``."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Self

from aiohttp import web

from .telegram_markup import _visible_markup, _without_reply
from .telegram_types import (
    _CANONICAL,
    _CONFLICT_POLL,
    _JSON_TYPE,
    _METHODS,
    JSON,
    Call,
    Draft,
    Misbehaviour,
    StarPayments,
    StoredMessage,
    _ApiError,
    _canonical,
    _Chat,
    _coerce_int,
    _default_description,
    _describe_predicate,
    _drop_path,
    _error_response,
    _GuestQuery,
    _html_page,
    _json_response,
    _opt_int,
    _read_params,
    _set_or_drop,
    _update_id,
    _User,
)

_CONFLICT_WEBHOOK: Final = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)


_METHOD_NOT_FOUND: Final = "Not Found: method not found"  # telegram-bot-api's answer

#: A sloppy server's 5xx without ``ok`` (misbehave_next's "no_ok"), and its answer to a
#: method it lacks (``unsupported_answer="no_ok"``).
_NO_OK_BODY: Final = json.dumps({"error": "upstream request failed"})

_NO_OK_UNSUPPORTED: Final = json.dumps({"error": "method not supported"})

#: What the npm telegram-test-api answers (HTTP 500) for a method it does not implement.
_EMULATOR_UNSUPPORTED: Final = (
    "API method '{method}' is not supported. Are you sure you're using Telegram Bot API "
    "correctly? Check out the list of methods supported by `telegram-test-api` package or "
    "look at official documentation: https://core.telegram.org/bots/api#available-methods"
)

_FUTURE_FIELDS: Final = {"some_future_field": {"kind": "future", "since": "Bot API 99.0"}}

#: Parameters the Bot API deprecated: link_preview_options (7.0) and reply_parameters
#: (7.0) replaced these; in send methods, ephemeral_message_parameters (10.3) replaced
#: the top-level receiver_user_id and callback_query_id.
_DEPRECATED_PARAMS: Final = frozenset(
    {"disable_web_page_preview", "reply_to_message_id", "allow_sending_without_reply"}
)

_DEPRECATED_SEND_PARAMS: Final = frozenset({"receiver_user_id", "callback_query_id"})

#: The methods the npm telegram-test-api emulator implements (its src/routes/bot/).
_TELEGRAM_TEST_API: Final = frozenset(
    {
        "getMe",
        "getUpdates",
        "sendMessage",
        "editMessageText",
        "deleteMessage",
        "answerCallbackQuery",
        "setWebhook",
        "deleteWebhook",
    }
)

# Methods whose successful result is an object (so a field can be dropped or added).
_OBJECT_RESULTS: Final = frozenset(
    {
        "getMe",
        "getWebhookInfo",
        "getChat",
        "sendMessage",
        "sendPhoto",
        "sendDocument",
        "sendVoice",
        "editMessageText",
        "sendRichMessage",
    }
)

_RESULT_KINDS: Final = frozenset({"missing_field", "extra_fields", "null_result"})

_DEFAULT_FAULT_STATUS: Final = {"no_ok": 500, "html": 502, "bare_error": 400}

# Methods whose flood limits are per chat: a 429 for one chat blocks them all for that chat.
_CHAT_RATE_METHODS: Final = frozenset(
    {
        "sendMessage",
        "sendPhoto",
        "sendDocument",
        "sendVoice",
        "editMessageText",
        "sendChatAction",
        "sendMessageDraft",
        "sendRichMessage",
        "sendRichMessageDraft",
    }
)

_UPDATE_TYPES: Final = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "guest_message",
    "message_reaction",
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
    "managed_bot",
    "subscription",
    "stopped_message_generation",
)

_DEFAULT_ALLOWED: Final = frozenset(_UPDATE_TYPES) - {
    "chat_member",
    "message_reaction",
    "message_reaction_count",
}


@dataclass
class _Fault:
    method: str
    status: int
    description: str
    retry_after: int | None
    remaining: int
    chat_id: int | None


@dataclass
class _Misbehaving:
    method: str
    kind: Misbehaviour
    status: int
    applied: bool
    remaining: int
    chat_id: int | None
    field: str | None
    extra: JSON
    body: str | None

    def answer(self, result: Any) -> tuple[Any, web.Response]:
        """The result as recorded in ``Call.result`` and the broken HTTP answer."""
        if self.kind == "missing_field":
            served = copy.deepcopy(result)
            _drop_path(served, self.field or "")
            return served, _json_response(self.status, {"ok": True, "result": served})
        if self.kind == "extra_fields":
            served = {**copy.deepcopy(result), **copy.deepcopy(self.extra)}
            return served, _json_response(self.status, {"ok": True, "result": served})
        if self.kind == "null_result":
            return None, _json_response(self.status, {"ok": True, "result": None})
        if self.kind == "bare_error":
            return None, _json_response(self.status, {"ok": False})
        if self.kind == "no_ok":
            body = self.body if self.body is not None else _NO_OK_BODY
            return None, web.Response(status=self.status, text=body, content_type=_JSON_TYPE)
        body = self.body if self.body is not None else _html_page(self.status)
        return None, web.Response(status=self.status, text=body, content_type="text/html")


class _Broken(Exception):
    """Answer this call with ``response`` (a misbehaving server), the method not applied."""

    def __init__(self, status: int, fault: str, response: web.Response) -> None:
        super().__init__(fault)
        self.status = status
        self.fault = fault
        self.response = response


@dataclass
class _Poll:
    request: web.Request
    conflicted: bool = False

    def connected(self) -> bool:
        transport = self.request.transport
        return transport is not None and not transport.is_closing()


class TelegramCore:
    def __init__(  # noqa: PLR0915 - one attribute a statement
        self,
        *,
        token: str = "123456:TEST-token-abcdefghijklmnopqrstuvw",
        bot_id: int = 123456,
        username: str = "replychain_bot",
        first_name: str = "replychain",
        flood_edits_per_second: float | None = None,
        flood_sends_per_second: float | None = None,
        flood_drafts_per_second: float | None = None,
        strict_html: bool = True,
        unsupported_methods: Iterable[str] = (),
        unsupported_answer: Literal["not_found", "no_ok", "emulator"] = "not_found",
        clock: Callable[[], float] = time.monotonic,
        local_mode: bool = False,
        files_dir: str | Path | None = None,
        server_dir: str | Path | None = None,
        serve_local_files: bool = False,
        guest_mode: bool = True,
        ephemeral: bool = True,
    ) -> None:
        self.token = token
        #: The bot's guest mode is on in @BotFather (getMe ``supports_guest_queries``).
        self.guest_mode = guest_mode
        #: The server knows ephemeral messages (Bot API 10.2).
        self.ephemeral = ephemeral
        self._guest_chats: dict[int, _Chat] = {}
        #: Guest queries by id: (guest chat, summoning message, caller) and their state.
        self.guest_queries: dict[str, _GuestQuery] = {}
        #: inline_message_id -> (guest chat, message id) of each answer posted.
        self._inline: dict[str, tuple[int, int]] = {}
        #: Every ephemeral message sent, oldest first (never among a chat's messages).
        self.ephemerals: list[StoredMessage] = []
        self._set_up_files(local_mode, files_dir, server_dir, serve_local_files)
        #: Invoices, pre-checkout queries and Stars payments (see :class:`StarPayments`).
        self.stars = StarPayments()
        self.bot_id = bot_id
        self.username = username
        self.first_name = first_name
        #: Edits of one message per second before a 429 (recorded as a violation).
        self.flood_edits_per_second = flood_edits_per_second
        #: sendMessage calls to one chat per second before a 429 retry_after (not a
        #: violation by itself: the bot cannot know a chat's limit; sending again before
        #: retry_after elapsed is).
        self.flood_sends_per_second = flood_sends_per_second
        #: Drafts to one chat per second before a 429 (recorded as a violation, like edits).
        self.flood_drafts_per_second = flood_drafts_per_second
        #: Every draft shown, oldest first.
        self.drafts: list[Draft] = []
        self._draft_on_screen: dict[int, Draft] = {}
        self._draft_windows: dict[int, deque[float]] = {}
        #: Methods this server does not implement at all (canonical names, e.g.
        #: ``"setMyCommands"``), answered as ``unsupported_answer`` says: ``"not_found"`` like
        #: telegram-bot-api (404 ``Not Found: method not found``), ``"no_ok"`` like a
        #: sloppy emulator (500 ``{"error": "method not supported"}``, no ``ok``) or
        #: ``"emulator"`` as the npm ``telegram-test-api`` answers any method it lacks (500
        #: ``{"message": "API method 'x' is not supported. …"}``, no ``ok``).
        self.unsupported_methods: set[str] = {_canonical(name) for name in unsupported_methods}
        self.unsupported_answer: Literal["not_found", "no_ok", "emulator"] = unsupported_answer
        self.strict_html = strict_html
        self.url = ""
        self.calls: list[Call] = []
        self.violations: list[str] = []
        self.server_errors: list[str] = []  # tracebacks of bugs in the fake itself
        self.commands: dict[tuple[str, str], list[JSON]] = {}
        self.webhook_url = ""
        self.webhook_secret = ""
        self.webhook_max_connections = 40
        #: Where webhook updates are really POSTed (an http:// URL on loopback standing
        #: for the reverse proxy in front of the bot); None: nothing is delivered.
        self.webhook_target: str | None = None
        #: Seconds before an update whose delivery failed is POSTed again.
        self.webhook_retry_delay = 0.2
        #: (update_id, HTTP status or 0 for a connection failure) of every webhook POST.
        self.webhook_deliveries: list[tuple[int, int]] = []
        self._webhook_last_error: tuple[int, str] | None = None
        self._delivery: asyncio.Task[None] | None = None
        #: Awaited after a successful call is applied, before the client gets the answer.
        self.after_call: Callable[[Call], Awaitable[None]] | None = None
        #: Awaited after a call met a fault :meth:`fail_next` queued, before the client
        #: gets the error (a test may freeze the client right in that call).
        self.after_fault: Callable[[Call], Awaitable[None]] | None = None
        self._clock = clock
        self._chats: dict[int, _Chat] = {}
        self._users: dict[int, _User] = {}
        self._updates: list[JSON] = []
        self._next_update_id = 1
        self._allowed_updates: frozenset[str] | None = None
        #: Callback queries pushed and not yet answered: id -> (chat, message id).
        self.open_queries: dict[str, tuple[int, int]] = {}
        #: Topics in private chats are on for this bot (getMe ``has_topics_enabled``).
        self.topics_enabled = False
        #: The bot has a main Mini App (getMe ``has_main_web_app``; set in @BotFather).
        self.main_web_app = False
        #: The bot lists its topics in private chats in a sidebar (Bot API 10.5: getMe
        #: ``has_topic_sidebar``, set with ``setMySettings``; shown only while topics are on).
        self.topic_sidebar = False
        #: answerCallbackQuery calls: id -> its text (None when it showed nothing).
        self.query_answers: dict[str, str | None] = {}
        self._poll: _Poll | None = None
        self._faults: list[_Fault] = []
        self._misbehaving: list[_Misbehaving] = []
        self._cooldowns: dict[tuple[str, int | str], float] = {}
        self._edit_windows: dict[tuple[int, int], deque[float]] = {}
        self._send_windows: dict[int, deque[float]] = {}
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._closing = False
        self._handlers: dict[str, Callable[[JSON], Any]] = self._methods()

    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        """The Bot API methods this server answers, by name: each part of the fake
        adds its own (getUpdates is served apart, as a long poll)."""
        return {
            "getMe": self._get_me,
            "close": lambda _params: True,
            "logOut": lambda _params: True,
        }

    def _set_up_files(
        self,
        local_mode: bool,
        files_dir: str | Path | None,
        server_dir: str | Path | None,
        serve_local_files: bool,
    ) -> None:
        if local_mode and files_dir is None:
            raise ValueError("local_mode needs files_dir, the server's --dir")
        #: Files users sent: file_id -> (file_unique_id, bytes, reported file_size).
        self._files: dict[str, tuple[str, bytes, int]] = {}
        #: Every file download served (file paths), in order.
        self.downloads: list[str] = []
        #: Every ``GET /file/...`` request: (file path, HTTP status), in order.
        self.download_requests: list[tuple[str, int]] = []
        #: ``telegram-bot-api --local`` (see the module docstring).
        self.local_mode = local_mode
        self.files_dir = Path(files_dir) if files_dir is not None else None
        self.server_dir = Path(server_dir) if server_dir is not None else self.files_dir
        self.serve_local_files = serve_local_files
        #: Local mode: file_id -> the absolute path getFile answers for it.
        self.local_paths: dict[str, str] = {}
        #: file_id -> (the server's folder for its kind, file name extension).
        self._file_kinds: dict[str, tuple[str, str]] = {}

    def _routes(self, app: web.Application) -> None:
        """Routes besides the Bot API methods (the file server adds its own)."""

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port the first time, the same port after a stop())."""
        if self._runner is not None:
            raise RuntimeError("FakeTelegram is already running")
        self._closing = False
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._routes(app)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        self.url = f"http://127.0.0.1:{self._port}"
        self._delivery = self._delivering()

    def _delivering(self) -> asyncio.Task[None] | None:
        """The task delivering updates to a webhook while the server runs (none here)."""
        return None

    async def stop(self) -> None:
        """Answer pending long polls with no updates, then close every connection."""
        if self._runner is None:
            return
        self._closing = True
        self._notify()
        delivery, self._delivery = self._delivery, None
        if delivery is not None:
            delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def like_telegram_test_api(self) -> None:
        """Answer as the npm ``telegram-test-api`` emulator does: only the methods it
        implements, every other one a 500 whose JSON body (no ``ok``) names the method as
        unsupported; parameters it does not know (ephemeral messages) are ignored."""
        self.unsupported_methods = set(_METHODS) - _TELEGRAM_TEST_API
        self.unsupported_answer = "emulator"
        self.ephemeral = False
        self.guest_mode = False

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = None,
        description: str | None = None,
        count: int = 1,
        chat_id: int | None = None,
    ) -> None:
        """The next ``count`` calls of ``method`` (for ``chat_id`` if given) get ``status``."""
        canonical = _canonical(method)
        if status == 429 and retry_after is None:
            retry_after = 1
        if description is None:
            description = _default_description(status, retry_after)
        self._faults.append(_Fault(canonical, status, description, retry_after, count, chat_id))

    def clear_faults(self) -> None:
        """Drop the faults :meth:`fail_next` queued and not used up."""
        self._faults.clear()

    def misbehave_next(
        self,
        method: str,
        kind: Misbehaviour,
        *,
        count: int = 1,
        chat_id: int | None = None,
        field: str | None = None,
        extra: dict[str, Any] | None = None,
        status: int | None = None,
        applied: bool | None = None,
        body: str | None = None,
    ) -> None:
        """Answer the next ``count`` calls of ``method`` (for ``chat_id`` if given) like a
        sloppy Bot API server, reverse proxy or newer server would.  ``kind``:

        * ``"missing_field"``: 200, the result lacks ``field`` (a dotted path, e.g.
          ``"is_bot"``, ``"chat"``, ``"from.is_bot"``).  Applied.
        * ``"extra_fields"``: 200, the result carries ``extra`` too (by default an unknown
          ``some_future_field`` object, as a newer server would send).  Applied.
        * ``"null_result"``: 200 ``{"ok": true, "result": null}``.  Applied unless
          ``applied=False``.
        * ``"no_ok"``: ``status`` (500) with a JSON body without ``ok`` (``body``, by default
          ``{"error": "upstream request failed"}``).
        * ``"html"``: ``status`` (502) with a ``text/html`` error page (``body``, by default
          nginx's page; for ``status=200`` a captive portal's sign-in page).
        * ``"bare_error"``: ``status`` (400) with ``{"ok": false}`` and nothing else.

        The last three are answered without applying the method (a proxy or an emulator
        that never ran it), unless ``applied=True`` (the method ran, then the answer broke).
        A kind that applies the method is used up only by a call that succeeds: a call
        that fails for real (400, 403, flood 429...) gets its genuine error and the
        misbehaviour waits for the next call.  Flood-control cooldowns and ``fail_next``
        come first.  Each broken answer is recorded in :attr:`calls` with ``fault=kind``,
        the status sent and, for the first three kinds, the result as served.
        """
        canonical = _canonical(method)
        result_kind = kind in _RESULT_KINDS
        if kind not in _RESULT_KINDS and kind not in _DEFAULT_FAULT_STATUS:
            raise ValueError(f"unknown misbehaviour {kind!r}")
        if count < 1:
            raise ValueError("count must be at least 1")
        if (field is not None) != (kind == "missing_field") or field == "":
            raise ValueError('field= names the field to drop, for kind="missing_field" only')
        if extra is not None and kind != "extra_fields":
            raise ValueError('extra= is for kind="extra_fields" only')
        if kind in ("missing_field", "extra_fields"):
            if canonical not in _OBJECT_RESULTS:
                raise ValueError(f"{canonical} does not answer with an object")
            if applied is False:
                raise ValueError(f"{kind} changes a result, so the method is always applied")
        if result_kind and status is not None:
            raise ValueError(f"{kind} is answered with 200; status= is for error kinds")
        if body is not None and kind not in ("no_ok", "html"):
            raise ValueError('body= is for kind="no_ok" or kind="html" only')
        self._misbehaving.append(
            _Misbehaving(
                method=canonical,
                kind=kind,
                status=_DEFAULT_FAULT_STATUS.get(kind, 200) if status is None else status,
                applied=result_kind if applied is None else applied,
                remaining=count,
                chat_id=chat_id,
                field=field,
                extra=copy.deepcopy(_FUTURE_FIELDS if extra is None else extra),
                body=body,
            )
        )

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by a getUpdates offset."""
        return len(self._updates)

    @property
    def last_update_id(self) -> int:
        """The update_id given to the last update queued (0: none yet)."""
        return self._next_update_id - 1

    def flood_remaining(self, chat_id: int) -> float:
        """Seconds the chat's flood control (the retry_after of a 429) still runs."""
        deadline = self._cooldowns.get(("chat", chat_id), 0.0)
        return max(0.0, deadline - self._clock())

    @property
    def polling(self) -> bool:
        """True while a getUpdates request is being held open."""
        return self._poll is not None

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of the chat (deleted ones too, flagged), in id order."""
        return sorted(self._chat(chat_id).messages.values(), key=lambda m: m.message_id)

    def bot_messages(self, chat_id: int) -> list[StoredMessage]:
        return [message for message in self.messages(chat_id) if message.is_bot]

    def message(self, chat_id: int, message_id: int) -> StoredMessage:
        message = self._chat(chat_id).messages.get(message_id)
        if message is None:
            raise KeyError(f"no message {message_id} in chat {chat_id}")
        return message

    def calls_to(self, method: str) -> list[Call]:
        canonical = _CANONICAL.get(method.lower(), method)
        return [call for call in self.calls if call.method == canonical]

    async def wait_for(
        self,
        predicate: Callable[[], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 - a deadline is what this helper is for
        *,
        what: str | None = None,
    ) -> None:
        """Wait until ``predicate()`` holds; re-checked on every state change and every 50 ms.

        A predicate raising LookupError (``fake.bot_messages(1)[0]`` before there is one)
        counts as "not yet"; on timeout an AssertionError describes the fake's state.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        lookup_error: LookupError | None = None
        while True:
            event = self._changed
            try:
                if predicate():
                    return
            except LookupError as exc:
                lookup_error = exc
            remaining = deadline - loop.time()
            if remaining <= 0:
                report = self._wait_report(predicate, timeout, what)
                if lookup_error is not None:
                    report += f"\nlast predicate error: {lookup_error!r}"
                raise AssertionError(report)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(remaining, 0.05))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error_response(_ApiError(404, "Not Found"))

    async def _handle(self, request: web.Request) -> web.Response:
        started = self._clock()
        canonical = _CANONICAL.get(request.match_info["method"].lower())
        method = canonical or request.match_info["method"]
        params: JSON = {}
        try:
            params = await _read_params(request)
            if self._closing:
                raise _ApiError(502, "Bad Gateway")
            if request.match_info["token"] != self.token:
                raise _ApiError(401, "Unauthorized")
            if canonical is None:
                raise _ApiError(404, "Not Found")
            self._check_supported(canonical)
            self._check_current(canonical, params)
            misbehaving = self._preflight(canonical, params)
            if canonical == "getUpdates":
                result = await self._get_updates(params, request)
            else:
                result = self._handlers[canonical](params)
            if misbehaving is not None and self._use_up(misbehaving):
                served, response = misbehaving.answer(result)
                status, fault = misbehaving.status, misbehaving.kind
                call = Call(method, params, started, status, result=served, fault=fault)
            else:
                response = _json_response(200, {"ok": True, "result": result})
                call = Call(method, params, started, 200, None, copy.deepcopy(result))
        except _ApiError as exc:
            if exc.status == 429 and exc.retry_after and exc.sets_cooldown:
                self._cooldowns[self._cooldown_key(method, params)] = (
                    self._clock() + exc.retry_after
                )
            injected = "fail_next" if exc.injected else None
            failed = Call(method, params, started, exc.status, exc.description, fault=injected)
            self._record(failed)
            if exc.injected and self.after_fault is not None:
                await self.after_fault(failed)
            return _error_response(exc)
        except _Broken as broken:
            self._record(Call(method, params, started, broken.status, fault=broken.fault))
            return broken.response
        except Exception as exc:  # a bug in the fake: answer like Telegram's 500, keep the trace
            self.server_errors.append("".join(traceback.format_exception(exc)))
            failure = _ApiError(500, f"Internal Server Error: FakeTelegram bug: {exc!r}")
            self._record(Call(method, params, started, 500, failure.description))
            return _error_response(failure)
        self._record(call)
        if self.after_call is not None:
            # applied but not yet answered: a test may kill the client right here
            await self.after_call(call)
        return response

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        self._notify()

    def _cooldown_key(self, method: str, params: JSON) -> tuple[str, int | str]:
        chat_id = _coerce_int(params.get("chat_id"))
        if method in _CHAT_RATE_METHODS and chat_id is not None:
            return ("chat", chat_id)
        return ("method", method)

    def _check_supported(self, method: str) -> None:
        unsupported = {name.lower() for name in self.unsupported_methods}
        if method.lower() not in unsupported:
            return
        if self.unsupported_answer == "no_ok":
            response = web.Response(status=500, text=_NO_OK_UNSUPPORTED, content_type=_JSON_TYPE)
            raise _Broken(500, "unsupported", response)
        if self.unsupported_answer == "emulator":
            body = json.dumps({"message": _EMULATOR_UNSUPPORTED.format(method=method)})
            response = web.Response(status=500, text=body, content_type=_JSON_TYPE)
            raise _Broken(500, "unsupported", response)
        raise _Broken(404, "unsupported", _error_response(_ApiError(404, _METHOD_NOT_FOUND)))

    def _check_current(self, method: str, params: JSON) -> None:
        """A parameter the Bot API deprecated (aiogram 3.31 marks them) is a violation: the
        current one exists, and a server may drop the old one any day."""
        old = _DEPRECATED_PARAMS | (_DEPRECATED_SEND_PARAMS if method.startswith("send") else set())
        for name in sorted(old & params.keys()):
            self.violations.append(f"{method} with the deprecated parameter {name}")

    def _use_up(self, misbehaving: _Misbehaving) -> bool:
        """Count one broken answer; False when concurrent calls have used it up already."""
        if misbehaving not in self._misbehaving:
            return False
        misbehaving.remaining -= 1
        if misbehaving.remaining <= 0:
            self._misbehaving.remove(misbehaving)
        return True

    def _preflight(self, method: str, params: JSON) -> _Misbehaving | None:
        """Flood control and injected faults, checked before the method runs.

        Returns the misbehaviour that will break the answer once the method has run.
        """
        now = self._clock()
        key = self._cooldown_key(method, params)
        deadline = self._cooldowns.get(key)
        if deadline is not None and deadline > now:
            remaining = deadline - now
            seconds = max(1, math.ceil(remaining))
            scope = f"chat {key[1]}" if key[0] == "chat" else "the method"
            self.violations.append(
                f"{method} for {scope} {remaining:.2f}s before an earlier retry_after elapsed"
            )
            raise _ApiError(
                429,
                f"Too Many Requests: retry after {seconds}",
                retry_after=seconds,
                sets_cooldown=False,
            )
        chat_id = _coerce_int(params.get("chat_id"))
        for fault in self._faults:
            if fault.method == method and fault.chat_id in (None, chat_id):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                raise _ApiError(
                    fault.status, fault.description, retry_after=fault.retry_after, injected=True
                )
        misbehaving = next(
            (
                candidate
                for candidate in self._misbehaving
                if candidate.method == method and candidate.chat_id in (None, chat_id)
            ),
            None,
        )
        if misbehaving is not None and not misbehaving.applied:
            self._use_up(misbehaving)
            _served, response = misbehaving.answer(None)
            raise _Broken(misbehaving.status, misbehaving.kind, response)
        if method == "editMessageText":
            self._check_edit_flood(params, now)
        if method in ("sendMessage", "sendPhoto", "sendVoice", "sendRichMessage"):
            self._check_send_flood(chat_id, now)
        if method in ("sendMessageDraft", "sendRichMessageDraft"):
            self._check_draft_flood(chat_id, now)
        return misbehaving

    def _check_draft_flood(self, chat_id: int | None, now: float) -> None:
        limit = self.flood_drafts_per_second
        if limit is None or chat_id is None:
            return
        window = self._draft_windows.setdefault(chat_id, deque())
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) + 1 > limit:
            self.violations.append(f"drafts: more than {limit:g} drafts/s in chat {chat_id}")
            raise _ApiError(429, "Too Many Requests: retry after 1", retry_after=1)
        window.append(now)

    def _check_send_flood(self, chat_id: int | None, now: float) -> None:
        rate = self.flood_sends_per_second
        if rate is None or chat_id is None:
            return
        burst = max(1, math.floor(rate))
        span = burst / rate  # ``burst`` sends per ``span`` seconds: 1 per 2 s for rate 0.5
        window = self._send_windows.setdefault(chat_id, deque())
        while window and now - window[0] >= span:
            window.popleft()
        if len(window) >= burst:
            wait = max(1, math.ceil(window[0] + span - now))
            raise _ApiError(429, f"Too Many Requests: retry after {wait}", retry_after=wait)
        window.append(now)

    def _check_edit_flood(self, params: JSON, now: float) -> None:
        limit = self.flood_edits_per_second
        chat_id = _coerce_int(params.get("chat_id"))
        message_id = _coerce_int(params.get("message_id"))
        if limit is None or chat_id is None or message_id is None:
            return
        window = self._edit_windows.setdefault((chat_id, message_id), deque())
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) + 1 > limit:
            self.violations.append(
                f"editMessageText: more than {limit:g} edits/s of message {message_id} "
                f"in chat {chat_id}"
            )
            raise _ApiError(429, "Too Many Requests: retry after 1", retry_after=1)
        window.append(now)

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update of any shape; ``update_id`` is assigned when missing."""
        update = copy.deepcopy(update)
        update_id = update.get("update_id")
        if update_id is None:
            update_id = self._next_update_id
            update = {"update_id": update_id, **update}
        if isinstance(update_id, int) and not isinstance(update_id, bool):
            self._next_update_id = max(self._next_update_id, update_id + 1)
        else:
            update_id = -1
        self._updates.append(update)
        self._notify()
        return update_id

    async def _get_updates(self, params: JSON, request: web.Request) -> list[JSON]:
        if self.webhook_url:
            raise _ApiError(409, _CONFLICT_WEBHOOK)
        offset = _opt_int(params, "offset")
        limit = min(max(_opt_int(params, "limit") or 100, 1), 100)
        timeout = max(_opt_int(params, "timeout") or 0, 0)
        self._set_allowed_updates(params.get("allowed_updates"))
        poll = _Poll(request)
        previous = self._poll
        if previous is not None:
            previous.conflicted = True
            if previous.connected():
                self.violations.append(
                    "getUpdates: a second getUpdates request arrived while another one was "
                    "still open (two pollers/bot instances); the earlier one got 409 Conflict"
                )
        self._poll = poll
        self._notify()
        try:
            if offset is not None:
                self._confirm(offset)
            return await self._long_poll(poll, limit, timeout)
        finally:
            if self._poll is poll:
                self._poll = None
                self._notify()

    async def _long_poll(self, poll: _Poll, limit: int, wait_seconds: int) -> list[JSON]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        while True:
            if poll.conflicted:
                raise _ApiError(409, _CONFLICT_POLL)
            batch = self._deliverable(limit)
            remaining = deadline - loop.time()
            if batch or remaining <= 0 or self._closing:
                return batch
            event = self._changed
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()

    def _set_allowed_updates(self, allowed: Any) -> None:
        if allowed is None:
            return  # Telegram keeps the previous setting
        if not isinstance(allowed, list) or not all(isinstance(kind, str) for kind in allowed):
            raise _ApiError(400, "Bad Request: can't parse allowed updates")
        self._allowed_updates = frozenset(allowed) or None

    def _confirm(self, offset: int) -> None:
        if offset < 0:
            self._updates = self._updates[offset:]
            return
        self._updates = [update for update in self._updates if _update_id(update) >= offset]

    def _deliverable(self, limit: int) -> list[JSON]:
        allowed = self._allowed_updates or _DEFAULT_ALLOWED
        kept = []
        for update in self._updates:
            kind = next((key for key in update if key in _UPDATE_TYPES), None)
            if kind is None or kind in allowed:
                kept.append(update)
        self._updates = kept  # Telegram never creates updates of types the bot excluded
        return [copy.deepcopy(update) for update in kept[:limit]]

    def _get_me(self, _params: JSON) -> JSON:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.first_name,
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": self.main_web_app,
            "has_topics_enabled": self.topics_enabled,
            "has_topic_sidebar": self.topic_sidebar and self.topics_enabled,
            "supports_guest_queries": self.guest_mode,
        }

    def _bot_user(self) -> JSON:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.first_name,
            "username": self.username,
        }

    def _chat(self, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            raise KeyError(f"unknown chat {chat_id}: add it with add_private_chat/add_group")
        return chat

    def _ensure_user(self, user_id: int) -> _User:
        user = self._users.get(user_id)
        if user is None:
            user = self._users[user_id] = _User(user_id, f"User{user_id}")
        return user

    def _user_reply_target(self, chat: _Chat, reply_to: int | None) -> StoredMessage | None:
        if reply_to is None:
            return None
        target = chat.messages.get(reply_to)
        if target is None or target.deleted:
            raise ValueError(f"no live message {reply_to} in chat {chat.id} to reply to")
        return target

    @staticmethod
    def _check_user_content(text: str | None, caption: str | None, media: list[str]) -> None:
        if len(media) > 1:
            raise ValueError("a message carries at most one kind of media")
        if media and text is not None:
            raise ValueError("media messages have a caption, not a text")
        if caption is not None and media in ([], ["sticker"]):
            raise ValueError("only photo, voice and document messages have captions")
        if text is None and not media:
            raise ValueError("a user message needs text or media")

    def _store(
        self,
        chat: _Chat,
        sender: JSON,
        *,
        is_bot: bool,
        text: str | None = None,
        entities: list[JSON] | None = None,
        thread_id: int | None = None,
        reply: StoredMessage | None = None,
        html: str | None = None,
        parse_mode: str | None = None,
        reply_markup: JSON | None = None,
        extra: JSON | None = None,
        caption: str | None = None,
    ) -> StoredMessage:
        message_id = chat.allocate_id()
        date = int(time.time())
        raw: JSON = {"message_id": message_id, "from": sender, "chat": chat.as_dict(), "date": date}
        if thread_id is not None:
            raw["message_thread_id"] = thread_id
            raw["is_topic_message"] = True
        implicit = chat.messages.get(thread_id) if thread_id not in (None, message_id) else None
        replied = reply or implicit  # messages in a topic reply to its creation message
        if replied is not None:
            raw["reply_to_message"] = _without_reply(replied.raw)
        if text is not None:
            raw["text"] = text
            if entities:
                raw["entities"] = copy.deepcopy(entities)
        raw.update(copy.deepcopy(extra or {}))
        _set_or_drop(raw, "reply_markup", _visible_markup(reply_markup))
        message = StoredMessage(
            chat_id=chat.id,
            message_id=message_id,
            from_id=int(sender["id"]),
            text=text,
            html=html,
            parse_mode=parse_mode,
            entities=copy.deepcopy(entities or []),
            reply_to=reply.message_id if reply is not None else None,
            thread_id=thread_id,
            edits=0,
            date=date,
            deleted=False,
            is_bot=is_bot,
            raw=raw,
            caption=caption,
            reply_markup=reply_markup,
        )
        chat.messages[message_id] = message
        self._notify()
        return message

    def _wait_report(self, predicate: Callable[[], bool], timeout: float, what: str | None) -> str:
        lines = [
            f"FakeTelegram.wait_for: condition not met within {timeout:g}s: "
            f"{what or _describe_predicate(predicate)}",
            f"pending updates: {self.pending_updates}, getUpdates open: {self.polling}",
        ]
        lines.append(f"last API calls ({len(self.calls)} in total):")
        for call in self.calls[-12:]:
            shown = {
                k: f"<file {len(v['data'])} bytes>" if isinstance(v, dict) and "data" in v else v
                for k, v in call.params.items()
                if k != "text"
            }
            text = call.params.get("text")
            if isinstance(text, str):
                shown["text"] = text if len(text) <= 80 else text[:77] + "..."
            outcome = "ok" if call.status == 200 else f"{call.status} {call.description}"
            if call.fault is not None:
                outcome += f" [injected: {call.fault}]"
            lines.append(f"  {call.method} {shown} -> {outcome}")
        for chat_id, chat in self._chats.items():
            recent = sorted(chat.messages.values(), key=lambda m: m.message_id)[-3:]
            for msg in recent:
                who = "bot" if msg.is_bot else f"user {msg.from_id}"
                gone = " (deleted)" if msg.deleted else ""
                lines.append(
                    f"  chat {chat_id} #{msg.message_id} {who}{gone}: {msg.text or msg.caption!r}"
                )
        if self.violations:
            lines.append("violations: " + "; ".join(self.violations))
        if self.server_errors:
            lines.append("FakeTelegram crashed:\n" + self.server_errors[-1])
        return "\n".join(lines)
