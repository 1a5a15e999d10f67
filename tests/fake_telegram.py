"""A strict fake of the Telegram Bot API, served over HTTP on loopback, for end-to-end tests.

Point the real aiogram client at it::

    async with FakeTelegram() as tg:
        session = AiohttpSession(api=TelegramAPIServer.from_base(tg.url))
        bot = Bot(tg.token, session=session)
        tg.add_private_chat(42, "Ann")
        tg.send_user_message(42, 42, "/start")
        ...  # run the dispatcher, in-process or as a subprocess given ``tg.url``
        await tg.wait_for(lambda: len(tg.bot_messages(42)) == 1)

It answers like Telegram does (status codes, ``{"ok": false, "error_code", "description",
"parameters": {"retry_after"}}`` bodies and Telegram's error texts) so aiogram raises the
same exceptions it would in production, and it is at least as strict as Telegram about what
it accepts: HTML/MarkdownV2 parsing, UTF-16 length limits, replies, forum topics, edits and
flood limits.  Every call is kept in :attr:`FakeTelegram.calls`; client misbehaviour that real
Telegram would punish (ignoring ``retry_after``, two pollers at once, editing too fast) is
recorded in :attr:`FakeTelegram.violations`.

It can also behave like the servers people really run.  ``fail_next`` answers with a
Telegram-shaped error status; ``misbehave_next(method, kind, ...)`` answers like a sloppy
emulator, reverse proxy or newer server (a result missing a field aiogram requires, unknown
extra fields, ``result: null``, a JSON body without ``ok``, an HTML error page, ``{"ok":
false}`` alone), with or without applying the method; ``unsupported_methods=`` makes methods
unknown to the server; ``flood_sends_per_second=``/``flood_edits_per_second=`` add per-chat
and per-message flood limits.  Injected answers are marked in ``Call.fault``.

Rich messages (Bot API 10.1-10.3): ``sendRichMessage``, ``sendRichMessageDraft`` and
``editMessageText`` with ``rich_message`` (a text message may become rich and back) take
an ``InputRichMessage`` checked as strictly as :mod:`tests.fake_rich` describes (tags,
nesting, entities, the text, block, depth and column limits); a rich message is stored
with its ``RichMessage`` (``StoredMessage.rich_message``, also in the served Message) and
its visible text as ``text``; a rich draft keeps its ``rich_message`` too. Like an older
server, ``unsupported_methods={"sendRichMessage", "sendRichMessageDraft"}`` lacks them.

Drafts (``sendMessageDraft``, Bot API 10.3) are private-chat only (a group gets Telegram's
``400 TEXTDRAFT_PEER_INVALID``), at most 4096 visible characters, an empty text being the
"Thinking…" placeholder; every draft shown is kept in :attr:`FakeTelegram.drafts`, the one
on screen is :meth:`FakeTelegram.current_draft` (a message the bot sends replaces it).
:meth:`FakeTelegram.stop_generation` is the user pressing a draft's stop button (only on a
draft shown with ``can_stop``): it queues a ``stopped_message_generation`` update.  Like an
older or self-hosted server, ``unsupported_methods={"sendMessageDraft"}`` (or adding it to
that set while running) answers ``404 Not Found: method not found``.

Guest mode (Bot API 10.0): :meth:`FakeTelegram.add_guest_chat` is a chat the bot is not
in (kept apart from the bot's own chats, even under the same id, as Telegram says it "may
not coincide" with them); :meth:`FakeTelegram.summon` is a user mentioning the bot there (a
``guest_message`` update with a ``guest_query_id``; only a text that mentions the bot is
delivered, and its ``reply_to_message`` is the message replied to as the chat shows it);
:meth:`FakeTelegram.post_in_guest_chat` is a message the bot never sees. ``answerGuestQuery``
answers a query once (again, or after :meth:`FakeTelegram.expire_guest_query`, Telegram's
"query is too old" error), takes an ``article`` result and posts it into the chat as the
bot's message (text, entities and inline keyboard as sent, ``guest_bot_caller_user`` set, a
reply to the summoning message), answering an ``inline_message_id`` with which
``editMessageText`` edits it (``True`` as the result). ``sendMessage`` never reaches a guest
chat. ``guest_mode=False`` is a bot whose guest mode is off in @BotFather (getMe
``supports_guest_queries``).

Ephemeral messages (Bot API 10.2): ``sendMessage`` with 10.3's ``ephemeral_message_parameters``
(10.2's top-level ``receiver_user_id`` is ignored, as by a server that knows only the current
form) in a group shows the message to that user only: it is kept
in :attr:`FakeTelegram.ephemerals`, not among the chat's messages, with ``message_id`` 0 and an
``ephemeral_message_id``; :meth:`FakeTelegram.visible_to` is what one user sees.
Its receiver may press its buttons (:meth:`FakeTelegram.press_ephemeral_button`) and the bot
edit it with ``editEphemeralMessageText`` (Bot API 10.3). ``ephemeral=False`` is an older
server: it ignores those parameters and sends the message to everyone, as such a server
does with any parameter it does not know.

Private chats with topics (Bot API 9.3-10.5): ``private_topics(user)`` turns them on (getMe
``has_topics_enabled``; ``on=False``: the user turned them off in that chat); ``add_topic`` is
the user opening one, ``createForumTopic`` the bot (no update for its creation message);
``setMySettings`` keeps ``has_topic_sidebar``, which getMe reports while topics are on.

Deliberately stricter than Telegram (real Telegram silently passes these through):
a bare ``&`` that does not start ``&lt;``/``&gt;``/``&amp;``/``&quot;``/``&#NN;``/``&#xHH;``
(``;`` included) and ``<a>`` without ``href`` are rejected.  Pass ``strict_html=False`` to get
Telegram's lenient behaviour for these two.

Good to know:

* The server runs on the caller's event loop: never block it (use asyncio subprocesses).
* Like Telegram it trims surrounding whitespace from texts and adds the entities it detects
  itself (``bot_command``, ``mention``, ``url``) to user *and* bot messages.
* ``messages()``/``bot_messages()`` include deleted messages (``deleted=True``).
* ``add_topic`` queues the ``forum_topic_created`` service message as an update (as Telegram
  does); pass ``queue_update=False`` to skip that.
* In groups the bot may delete only its own messages unless ``add_group(bot_is_admin=True)``.
* ``clock=`` replaces ``time.monotonic`` for retry_after/flood bookkeeping and ``Call.at``.
* A bug inside the fake is answered with HTTP 500 and its traceback kept in ``server_errors``.
* Media messages carry real files: ``getFile`` answers a ``file_path`` and
  ``GET /file/bot<token>/<file_path>`` serves the bytes (``downloads`` lists them,
  ``download_requests`` every request with its status); a file claimed over 20 MB gets
  Telegram's "file is too big". See ``send_user_message``.
* ``local_mode=True`` is ``telegram-bot-api --local``: setWebhook takes http:// URLs and
  any port (updates are POSTed to the URL itself unless ``webhook_target`` is set), and
  getFile first writes the file under ``files_dir`` (``<token with ~ for :>/voice/
  file_0.oga``, as the real server lays out its ``--dir``) and answers its absolute path,
  for files of up to 2000 MB. ``server_dir`` names that directory as a server in
  another container would (a path the bot cannot read). Like the real server it serves
  no files (``/file/...`` is 404) unless ``serve_local_files=True`` (a web server in
  front serving ``/file/bot<token>/<absolute path>``). ``local_paths`` maps file ids to
  the paths answered; a test may change one to make the server answer another path.
* ``stop()`` answers open long polls with ``[]``; ``start()`` again reuses the same port
  and keeps all state (a Telegram outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import http
import inspect
import json
import math
import re
import struct
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from .fake_rich import Rich, RichError, parse_rich

__all__ = [
    "Call", "Checkout", "Draft", "FakeTelegram", "Misbehaviour", "StarCharge", "StarPayments",
    "StoredMessage",
]  # fmt: skip

JSON = dict[str, Any]

#: The ways :meth:`FakeTelegram.misbehave_next` breaks an answer (see its docstring).
Misbehaviour = Literal[
    "missing_field", "extra_fields", "null_result", "no_ok", "html", "bare_error"
]

_CONFLICT_POLL: Final = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
_CONFLICT_WEBHOOK: Final = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_NOT_MODIFIED: Final = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
_MAX_TEXT_UNITS: Final = 4096
_WEBHOOK_PORTS: Final = frozenset({80, 88, 443, 8443})
_WEBHOOK_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
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
_JSON_TYPE: Final = "application/json"
_FUTURE_FIELDS: Final = {"some_future_field": {"kind": "future", "since": "Bot API 99.0"}}
_ADMIN_ID: Final = 1_000_000_001  # synthetic creator of forum topics

_METHODS: Final = (
    "getMe",
    "getUpdates",
    "deleteWebhook",
    "setWebhook",
    "getWebhookInfo",
    "setMyCommands",
    "getMyCommands",
    "deleteMyCommands",
    "sendMessage",
    "sendPhoto",
    "sendDocument",
    "sendVoice",
    "editMessageText",
    "sendChatAction",
    "deleteMessage",
    "answerCallbackQuery",
    "editForumTopic",
    "close",
    "logOut",
    "getChat",
    "getFile",
    "sendMessageDraft",
    "sendRichMessage",
    "sendRichMessageDraft",
    "getChatMember",
    "answerGuestQuery",
    "editEphemeralMessageText",
    "createForumTopic",
    "setMySettings",
    "sendInvoice",
    "answerPreCheckoutQuery",
    "refundStarPayment",
)
_CANONICAL: Final = {name.lower(): name for name in _METHODS}
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
_MAX_CAPTION_UNITS: Final = 1024
# sendPhoto (core.telegram.org/bots/api#sendphoto): "The photo must be at most 10 MB in
# size. The photo's width and height must not exceed 10000 in total. Width and height
# ratio must be at most 20." Telegram keeps a scaled copy per size (longest side).
_MAX_PHOTO_BYTES: Final = 10 * 1024 * 1024
_PHOTO_SIDES: Final = (90, 320, 800, 1280, 2560)
_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_MAX_UPLOAD_BYTES: Final = 50 * 1024 * 1024
_DRAFT_PEER_INVALID: Final = "Bad Request: TEXTDRAFT_PEER_INVALID"  # a draft outside a DM

_CHAT_ACTIONS: Final = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
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

_BOT_COMMAND_SCOPES: Final = frozenset(
    {
        "default",
        "all_private_chats",
        "all_group_chats",
        "all_chat_administrators",
        "chat",
        "chat_administrators",
        "chat_member",
    }
)

# Form values are strings; these are decoded as integers (chat_id may also be "@name").
_INT_FIELDS: Final = frozenset(
    {
        "chat_id",
        "message_id",
        "message_thread_id",
        "direct_messages_topic_id",
        "reply_to_message_id",
        "from_chat_id",
        "user_id",
        "receiver_user_id",
        "ephemeral_message_id",
        "offset",
        "limit",
        "timeout",
        "max_connections",
        "draft_id",
    }
)
# ... and these are kept verbatim; every other value is JSON-decoded when it parses as JSON.
_STRING_FIELDS: Final = frozenset(
    {
        "text",
        "caption",
        "parse_mode",
        "action",
        "url",
        "inline_message_id",
        "business_connection_id",
        "message_effect_id",
        "callback_query_id",
        "guest_query_id",
        "secret_token",
        "ip_address",
        "language_code",
        "emoji",
        "query",
        "title",
        "name",
        "description",
        "short_description",
        "question",
        "explanation",
        "custom_emoji_id",
        "photo",
        "document",
        "voice",
        "video",
        "audio",
        "animation",
        "sticker",
        "payload",
        "currency",
        "provider_token",
        "pre_checkout_query_id",
        "error_message",
        "telegram_payment_charge_id",
        "start_parameter",
    }
)

_BUTTON_ACTIONS: Final = frozenset(
    {
        "url",
        "callback_data",
        "web_app",
        "login_url",
        "switch_inline_query",
        "switch_inline_query_current_chat",
        "switch_inline_query_chosen_chat",
        "copy_text",
        "callback_game",
        "pay",
    }
)

_COMMAND_NAME_RE: Final = re.compile(r"[a-z0-9_]{1,32}")
_AUTO_COMMAND_RE: Final = re.compile(
    r"(?<!\S)/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?=$|[\s.,;:!?)\]])"
)
_AUTO_MENTION_RE: Final = re.compile(r"(?<![\w@/])@[A-Za-z0-9_]{4,32}(?![\w@])")
_AUTO_URL_RE: Final = re.compile(r"(?<![\w@/.])(?:https?://|www\.)[^\s<>\"]+", re.IGNORECASE)
_URL_TRAILING: Final = ".,;:!?)]}'\""
_AUTO_SKIP_INSIDE: Final = frozenset({"code", "pre", "text_link", "text_mention", "custom_emoji"})
_WHITESPACE: Final = " \t\r\n"
_URL_SCHEMES: Final = frozenset({"http", "https", "ftp", "tg", "ton", "tonsite"})


# --------------------------------------------------------------------------- public records


@dataclass(frozen=True)
class Call:
    """One API call as the server saw it: canonical method name, decoded params, HTTP status."""

    method: str
    params: dict[str, Any]
    at: float  # the server clock (monotonic by default) when the request arrived
    status: int
    description: str | None = None  # error description when status != 200
    result: Any = None  # the ``result`` served when status == 200
    #: What shaped this answer when the test injected it: a :data:`Misbehaviour` kind,
    #: ``"unsupported"`` (a method in ``unsupported_methods``) or ``"fail_next"``; None
    #: for a genuine answer (flood-control 429s included).
    fault: str | None = None


@dataclass
class StoredMessage:
    """A message as the fake keeps it; ``raw`` is the Message dict served to clients."""

    chat_id: int
    message_id: int
    from_id: int
    text: str | None  # visible text after parsing entities (None for media and service messages)
    html: str | None  # the raw ``text`` parameter as the bot sent it (None for user messages)
    parse_mode: str | None
    entities: list[dict[str, Any]]
    reply_to: int | None  # the explicit reply only (not the implicit topic-starter reply)
    thread_id: int | None
    edits: int
    date: int
    deleted: bool
    is_bot: bool
    raw: dict[str, Any]
    caption: str | None = None
    reply_markup: dict[str, Any] | None = None
    edit_date: int | None = None
    history: list[str | None] = field(default_factory=list)  # earlier texts, oldest first
    photo: bytes | None = None  # the uploaded image of a photo the bot sent
    #: A document the bot uploaded: (file name, bytes).
    document: tuple[str, bytes] | None = None
    #: A rich message's ``RichMessage`` (its ``blocks``); ``text`` is then its visible
    #: text and ``html`` the ``InputRichMessage`` source it was sent or last edited with.
    rich_message: dict[str, Any] | None = None


@dataclass(frozen=True)
class Draft:
    """One ``sendMessageDraft`` the server accepted: what the user saw while it streamed."""

    chat_id: int
    draft_id: int
    text: str | None  # visible text after parsing; None for the "Thinking…" placeholder
    html: str | None  # the raw ``text`` parameter
    thread_id: int | None
    can_stop: bool
    keep_on_stop: bool
    at: float  # the server clock when it was shown
    #: A rich draft's ``RichMessage`` (``sendRichMessageDraft``); None for a text draft.
    rich_message: dict[str, Any] | None = None

    def blocks_of(self, kind: str) -> list[dict[str, Any]]:
        """The rich draft's top-level blocks of one type (``"thinking"``, ``"table"``…)."""
        blocks = (self.rich_message or {}).get("blocks", [])
        return [block for block in blocks if block.get("type") == kind]


# --------------------------------------------------------------------------- internals


class _ApiError(Exception):
    def __init__(
        self,
        status: int,
        description: str,
        *,
        retry_after: int | None = None,
        sets_cooldown: bool = True,
        injected: bool = False,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.sets_cooldown = sets_cooldown
        self.injected = injected


class _EntityError(Exception):
    """A markup error; ``str(exc)`` is what follows "can't parse entities: "."""


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


@dataclass
class _GuestQuery:
    chat_id: int
    message_id: int
    caller: JSON
    #: The inline_message_id of the answer posted (None: not answered yet).
    answered: str | None = None
    expired: bool = False


@dataclass
class Checkout:
    """A ``pre_checkout_query``: a user pressed Pay on an invoice."""

    user_id: int
    #: The chat the ``successful_payment`` message goes to once it is accepted.
    chat_id: int
    currency: str
    total_amount: int
    payload: str
    at: float  # the server clock when the query was sent
    #: None while open; True accepted (the charge id is set), False refused.
    ok: bool | None = None
    error_message: str | None = None
    charge_id: str | None = None
    expired: bool = False


@dataclass
class StarCharge:
    """A successful payment: ``telegram_payment_charge_id`` -> who paid how many Stars."""

    user_id: int
    total_amount: int
    payload: str
    refunded: bool = False


@dataclass
class StarPayments:
    """What the test server knows of payments (``FakeTelegram.stars``)."""

    #: (chat, message id) of each invoice the bot sent -> its currency, amount, payload.
    invoices: dict[tuple[int, int], JSON] = field(default_factory=dict)
    #: pre_checkout_query id -> the query.
    checkouts: dict[str, Checkout] = field(default_factory=dict)
    #: telegram_payment_charge_id -> the payment.
    charges: dict[str, StarCharge] = field(default_factory=dict)
    #: The updates the payment helpers queued, by update_id (:meth:`FakeTelegram.redeliver`).
    updates: dict[int, JSON] = field(default_factory=dict)


@dataclass
class _User:
    id: int
    first_name: str
    username: str | None = None
    #: The IETF tag of the user's client language (Telegram leaves it out when unknown).
    language_code: str | None = "en"

    def as_dict(self) -> JSON:
        user: JSON = {"id": self.id, "is_bot": False, "first_name": self.first_name}
        if self.username:
            user["username"] = self.username
        if self.language_code is not None:
            user["language_code"] = self.language_code
        return user


@dataclass
class _Chat:
    id: int
    type: str
    title: str | None = None
    first_name: str | None = None
    username: str | None = None
    is_forum: bool = False
    #: A private chat in which the user has topics (Bot API 9.3 "threaded mode").
    private_topics: bool = False
    bot_is_admin: bool = False
    blocked: bool = False
    topics: dict[int, str] = field(default_factory=dict)
    #: A group's members by user id: "creator", "member" (anyone else has "left").
    members: dict[int, str] = field(default_factory=dict)
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    next_message_id: int = 1

    def as_dict(self) -> JSON:
        chat: JSON = {"id": self.id, "type": self.type}
        if self.type == "private":
            chat["first_name"] = self.first_name
            if self.username:
                chat["username"] = self.username
        else:
            chat["title"] = self.title
        if self.is_forum:
            chat["is_forum"] = True
        return chat

    @property
    def has_topics(self) -> bool:
        return self.is_forum or self.private_topics

    def allocate_id(self) -> int:
        message_id = self.next_message_id
        self.next_message_id += 1
        return message_id

    def blocked_description(self) -> str:
        if self.type == "private":
            return "Forbidden: bot was blocked by the user"
        return f"Forbidden: bot was kicked from the {self.type} chat"


def _u16(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's offsets and limits."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def _entity(kind: str, offset: int, length: int, **extra: Any) -> JSON:
    return {"type": kind, "offset": offset, "length": length, **extra}


def _entity_sort_key(entity: JSON) -> tuple[int, int, str]:
    return (int(entity["offset"]), -int(entity["length"]), str(entity["type"]))


def _canonical_entities(entities: list[JSON]) -> list[str]:
    return sorted(json.dumps(entity, sort_keys=True) for entity in entities)


def _without_reply(raw: JSON) -> JSON:
    return {key: copy.deepcopy(value) for key, value in raw.items() if key != "reply_to_message"}


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


def _coerce_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return None


def _opt_int(params: JSON, key: str) -> int | None:
    value = params.get(key)
    if value is None or value == "":
        return None
    number = _coerce_int(value)
    if number is None:
        raise _ApiError(400, f"Bad Request: invalid {key} specified")
    return number


def _decode_param(key: str, value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str):
        if key in _INT_FIELDS and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if key in _INT_FIELDS:
        number = _coerce_int(value.strip())
        return value if number is None else number
    if key in _STRING_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _normalise_url(url: str) -> str | None:
    """Roughly Telegram's URL check: None when the link would be dropped."""
    url = url.strip()
    match = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    if match:
        scheme = match.group(1).lower()
        rest = url[match.end() :]
    else:
        scheme, rest = "http", url
        if "." not in re.split(r"[/?#]", rest, maxsplit=1)[0]:
            return None
    if scheme not in _URL_SCHEMES or not rest:
        return None
    if scheme not in ("http", "https", "ftp"):
        return f"{scheme}://{rest}"
    host_end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    host, tail = rest[:host_end], rest[host_end:]
    if not host:
        return None
    if not tail.startswith("/"):
        tail = "/" + tail
    return f"{scheme}://{host.lower()}{tail}"


def _strip_formatted(text: str, entities: list[JSON]) -> tuple[str, list[JSON]]:
    """Telegram trims leading and trailing whitespace and shifts the entities with it."""
    stripped = text.strip(_WHITESPACE)
    lead = len(text) - len(text.lstrip(_WHITESPACE))
    shift, total = _u16(text[:lead]), _u16(stripped)
    kept: list[JSON] = []
    for entity in entities:
        start = max(int(entity["offset"]) - shift, 0)
        end = min(int(entity["offset"]) + int(entity["length"]) - shift, total)
        if end > start:
            kept.append({**entity, "offset": start, "length": end - start})
    return stripped, kept


def _auto_entities(text: str, existing: list[JSON] | None = None) -> list[JSON]:
    """Entities Telegram detects by itself: bot commands, @mentions and URLs."""
    blocked = [
        (int(e["offset"]), int(e["offset"]) + int(e["length"]))
        for e in existing or []
        if e["type"] in _AUTO_SKIP_INSIDE
    ]
    found: list[JSON] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in (
        ("bot_command", _AUTO_COMMAND_RE),
        ("url", _AUTO_URL_RE),
        ("mention", _AUTO_MENTION_RE),
    ):
        for match in pattern.finditer(text):
            token = match.group()
            if kind == "url":
                token = token.rstrip(_URL_TRAILING)
            start = _u16(text[: match.start()])
            end = start + _u16(token)
            if any(start < hi and lo < end for lo, hi in blocked + taken):
                continue
            taken.append((start, end))
            found.append(_entity(kind, start, end - start))
    return sorted(found, key=_entity_sort_key)


# --------------------------------------------------------------------------- markup parsers


class _Out:
    """The visible text being built, with its length in UTF-16 units."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.units = 0
        self.chars = 0

    def add(self, chunk: str) -> None:
        self.parts.append(chunk)
        self.units += _u16(chunk)
        self.chars += len(chunk)

    def text(self) -> str:
        return "".join(self.parts)


_HTML_SPACE: Final = frozenset(" \t\r\n\v\f")
_HTML_TAGS: Final = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "tg-emoji",
        "code",
        "pre",
        "blockquote",
    }
)
_HTML_SIMPLE: Final = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "span": "spoiler",
    "tg-spoiler": "spoiler",
}
_HTML_NAMED: Final = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _decode_html_entity(src: str, pos: int, *, strict: bool) -> tuple[str, int] | None:
    """Decode the character reference at ``src[pos] == "&"``: (char, next position) or None."""
    n = len(src)
    end = pos + 1
    if end < n and src[end] == "#":
        end += 1
        base, digits = 10, frozenset("0123456789")
        if end < n and src[end] == "x":
            base, digits, end = 16, _HEX_DIGITS, end + 1
        start = end
        while end < n and src[end] in digits:
            end += 1
        if end == start or end - start > 8:
            return None
        code = int(src[start:end], base)
        if code == 0 or code >= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return None
        char = chr(code)
    else:
        start = end
        while end < n and src[end].isascii() and src[end].isalpha():
            end += 1
        named = _HTML_NAMED.get(src[start:end])
        if named is None:
            return None
        char = named
    if end < n and src[end] == ";":
        return char, end + 1
    return None if strict else (char, end)


@dataclass
class _OpenTag:
    name: str
    argument: str
    offset: int  # UTF-16 offset in the visible text
    source_pos: int  # index in the source, for error messages


class _HtmlParser:
    """Telegram's (tdlib's) HTML parser, error messages included, plus the strict extras."""

    def __init__(self, src: str, *, strict: bool) -> None:
        self.src = src
        self.strict = strict
        self.pos = 0
        self.out = _Out()
        self.stack: list[_OpenTag] = []
        self.entities: list[JSON] = []
        self.code_language: dict[tuple[int, int], str] = {}

    def parse(self) -> tuple[str, list[JSON]]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "&":
                self._ampersand()
            elif ch != "<":
                self.out.add(ch)
                self.pos += 1
            elif src.startswith("</", self.pos):
                self._end_tag()
            else:
                self._start_tag()
        if self.stack:
            name = self.stack[-1].name
            raise _EntityError(f'Can\'t find end tag corresponding to start tag "{name}"')
        return self.out.text(), self.entities

    def _at(self, index: int) -> int:
        return _byte_offset(self.src, index)

    def _ampersand(self) -> None:
        decoded = _decode_html_entity(self.src, self.pos, strict=self.strict)
        if decoded is not None:
            char, self.pos = decoded
            self.out.add(char)
            return
        if self.strict:
            raise _EntityError(self._bad_ampersand(self.pos))
        self.out.add("&")
        self.pos += 1

    def _bad_ampersand(self, pos: int) -> str:
        token = re.match(r"&#?\w{0,12};?", self.src[pos:])
        shown = token.group() if token else "&"
        return (
            f'Unsupported HTML entity "{shown}" at byte offset {self._at(pos)}; '
            'a literal "&" must be written as "&amp;" (FakeTelegram strict mode)'
        )

    def _skip_spaces(self) -> None:
        while self.pos < len(self.src) and self.src[self.pos] in _HTML_SPACE:
            self.pos += 1

    def _start_tag(self) -> None:
        src, begin = self.src, self.pos
        end = begin + 1
        while end < len(src) and src[end] not in _HTML_SPACE and src[end] != ">":
            end += 1
        if end >= len(src):
            raise _EntityError(f"Unclosed start tag at byte offset {self._at(begin)}")
        name = src[begin + 1 : end].lower()
        if name not in _HTML_TAGS:
            raise _EntityError(f'Unsupported start tag "{name}" at byte offset {self._at(begin)}')
        self.pos = end
        attributes = self._attributes(name, begin)
        argument = self._tag_argument(name, attributes, begin)
        self.stack.append(_OpenTag(name, argument, self.out.units, begin))
        self.pos += 1  # the '>'

    def _attributes(self, name: str, begin: int) -> dict[str, str]:
        src = self.src
        attributes: dict[str, str] = {}
        unclosed = f'Unclosed start tag "{name}" at byte offset {self._at(begin)}'
        while True:
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            if src[self.pos] == ">":
                return attributes
            attr_begin = self.pos
            while (
                self.pos < len(src)
                and src[self.pos] not in _HTML_SPACE
                and (src[self.pos] not in "=>")
            ):
                self.pos += 1
            attribute = src[attr_begin : self.pos]
            if not attribute:
                raise _EntityError(
                    f'Empty attribute name in the tag "{name}" at byte offset {self._at(begin)}'
                )
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            if src[self.pos] != "=":
                attributes[attribute] = ""
                continue
            self.pos += 1
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            attributes[attribute] = self._attribute_value(begin)

    def _attribute_value(self, begin: int) -> str:
        src = self.src
        quote = src[self.pos]
        if quote not in "'\"":
            start = self.pos
            while self.pos < len(src) and (
                (src[self.pos].isascii() and src[self.pos].isalnum()) or src[self.pos] in ".-"
            ):
                self.pos += 1
            if self.pos >= len(src) or (src[self.pos] not in _HTML_SPACE and src[self.pos] != ">"):
                raise _EntityError(f"Unexpected end of name token at byte offset {self._at(start)}")
            return src[start : self.pos].lower()
        self.pos += 1
        value: list[str] = []
        while self.pos < len(src) and src[self.pos] != quote:
            if src[self.pos] == "&":
                decoded = _decode_html_entity(src, self.pos, strict=self.strict)
                if decoded is not None:
                    value.append(decoded[0])
                    self.pos = decoded[1]
                    continue
                if self.strict:
                    raise _EntityError(self._bad_ampersand(self.pos))
            value.append(src[self.pos])
            self.pos += 1
        if self.pos >= len(src):
            raise _EntityError(f"Unclosed start tag at byte offset {self._at(begin)}")
        self.pos += 1
        return "".join(value)

    def _tag_argument(self, name: str, attributes: dict[str, str], begin: int) -> str:
        if name == "a":
            href = attributes.get("href", "")
            if not href and self.strict:
                raise _EntityError(
                    f'Tag "a" must have a non-empty "href" attribute at byte offset '
                    f"{self._at(begin)} (FakeTelegram strict mode)"
                )
            return href
        if name == "code":
            css = attributes.get("class", "")
            return css.removeprefix("language-") if css.startswith("language-") else ""
        if name == "span":
            if attributes.get("class") != "tg-spoiler":
                raise _EntityError(
                    f'Tag "span" must have class "tg-spoiler" at byte offset {self._at(begin)}'
                )
            return "spoiler"
        if name == "tg-emoji":
            emoji_id = attributes.get("emoji-id", "")
            if not emoji_id.isdigit():
                raise _EntityError("Invalid custom emoji identifier specified")
            return emoji_id
        if name == "blockquote":
            return "expandable" if "expandable" in attributes else ""
        return ""

    def _end_tag(self) -> None:
        src, begin = self.src, self.pos
        if not self.stack:
            raise _EntityError(f"Unexpected end tag at byte offset {self._at(begin)}")
        end = begin + 2
        while end < len(src) and src[end] not in _HTML_SPACE and src[end] != ">":
            end += 1
        end_name = src[begin + 2 : end].lower()
        while end < len(src) and src[end] in _HTML_SPACE:
            end += 1
        if end >= len(src) or src[end] != ">":
            raise _EntityError(f"Unclosed end tag at byte offset {self._at(begin)}")
        tag = self.stack.pop()
        if end_name and end_name != tag.name:
            raise _EntityError(
                f"Unmatched end tag at byte offset {self._at(begin)}, "
                f'expected "</{tag.name}>", found "</{end_name}>"'
            )
        self.pos = end + 1
        self._close(tag)

    def _close(self, tag: _OpenTag) -> None:
        offset, length = tag.offset, self.out.units - tag.offset
        if length <= 0:
            return
        if tag.name in _HTML_SIMPLE:
            self.entities.append(_entity(_HTML_SIMPLE[tag.name], offset, length))
        elif tag.name == "a":
            url = _normalise_url(tag.argument) if tag.argument else None
            if url is not None:
                self.entities.append(_entity("text_link", offset, length, url=url))
        elif tag.name == "tg-emoji":
            self.entities.append(
                _entity("custom_emoji", offset, length, custom_emoji_id=tag.argument)
            )
        elif tag.name == "blockquote":
            kind = "expandable_blockquote" if tag.argument else "blockquote"
            self.entities.append(_entity(kind, offset, length))
        elif tag.name == "pre":
            self._close_pre(offset, length)
        else:
            self._close_code(offset, length, tag.argument)

    def _last_entity_is(self, kind: str, offset: int, length: int) -> bool:
        if not self.entities:
            return False
        last = self.entities[-1]
        return bool(last["type"] == kind and last["offset"] == offset and last["length"] == length)

    def _close_pre(self, offset: int, length: int) -> None:
        language = ""
        if self._last_entity_is("code", offset, length):  # <pre><code class=...>
            self.entities.pop()
            language = self.code_language.get((offset, length), "")
        pre = _entity("pre", offset, length)
        if language:
            pre["language"] = language
        self.entities.append(pre)

    def _close_code(self, offset: int, length: int, language: str) -> None:
        if self._last_entity_is("pre", offset, length):  # <code><pre>...</pre></code>
            if language:
                self.entities[-1]["language"] = language
            return
        self.code_language[(offset, length)] = language
        self.entities.append(_entity("code", offset, length))


def _pre_header(src: str, pos: int) -> tuple[str, int]:
    """After an opening ``` at ``pos``: the language (if any) and where the contents start."""
    lang_end = pos
    while lang_end < len(src) and src[lang_end] not in _HTML_SPACE and src[lang_end] != "`":
        lang_end += 1
    language = ""
    if pos != lang_end and lang_end < len(src) and src[lang_end] != "`":
        language, pos = src[pos:lang_end], lang_end
    if pos < len(src) and src[pos] in "\r\n":
        pair = src[pos : pos + 2]
        pos += 2 if len(pair) == 2 and pair[1] in "\r\n" and pair[0] != pair[1] else 1
    return language, pos


_MDV2_RESERVED: Final = frozenset("_*[]()~`>#+-=|{}.!")
_MDV2_OPENERS: Final = (
    ("__", "underline"),
    ("||", "spoiler"),
    ("![", "custom_emoji"),
    ("_", "italic"),
    ("*", "bold"),
    ("~", "strikethrough"),
    ("[", "text_link"),
    ("`", "code"),
)
_MDV2_CLOSERS: Final = {
    "bold": "*",
    "italic": "_",
    "code": "`",
    "pre": "```",
    "text_link": "]",
    "custom_emoji": "]",
    "underline": "__",
    "strikethrough": "~",
    "spoiler": "||",
}
_TD_TYPE_NAMES: Final = {
    "bold": "Bold",
    "italic": "Italic",
    "underline": "Underline",
    "strikethrough": "Strikethrough",
    "spoiler": "Spoiler",
    "code": "Code",
    "pre": "Pre",
    "text_link": "TextUrl",
    "custom_emoji": "CustomEmoji",
}


@dataclass
class _OpenMd:
    kind: str
    argument: str
    offset: int  # UTF-16 offset in the visible text
    char_start: int  # index in the visible text (for links that use their text as URL)
    source_pos: int


class _MarkdownV2Parser:
    """Telegram's MarkdownV2 parser (tdlib's algorithm and messages), with > block quotes."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.out = _Out()
        self.stack: list[_OpenMd] = []
        self.entities: list[JSON] = []
        self.quote_start: int | None = None

    def parse(self) -> tuple[str, list[JSON]]:
        while self.pos < len(self.src):
            self._step()
        self._close_quote(self.out.units)
        if self.stack:
            top = self.stack[-1]
            raise _EntityError(
                f"Can't find end of {_TD_TYPE_NAMES[top.kind]} entity at byte offset "
                f"{_byte_offset(self.src, top.source_pos)}"
            )
        return self.out.text(), self.entities

    def _step(self) -> None:
        src, pos = self.src, self.pos
        ch = src[pos]
        in_code = bool(self.stack) and self.stack[-1].kind in ("code", "pre")
        if not in_code and (pos == 0 or src[pos - 1] == "\n") and self._line_start(ch):
            return
        if ch == "\\" and pos + 1 < len(src) and 0 < ord(src[pos + 1]) <= 126:
            self.out.add(src[pos + 1])
            self.pos += 2
            return
        reserved = "`" if in_code else _MDV2_RESERVED
        if ch not in reserved:
            self.out.add(ch)
            self.pos += 1
        elif self.stack and self._is_end(ch):
            self._end_entity()
        else:
            self._begin_entity(ch)

    def _line_start(self, ch: str) -> bool:
        """Handle '>' block quotes at a line start; True when the character was consumed."""
        if ch == ">":
            if self.quote_start is None:
                self.quote_start = self.out.units
            self.pos += 1
            return True
        if self.pos > 0:
            self._close_quote(self.out.units - 1)  # the quote ends before the newline
        return False

    def _close_quote(self, end: int) -> None:
        if self.quote_start is not None and end > self.quote_start:
            self.entities.append(_entity("blockquote", self.quote_start, end - self.quote_start))
        self.quote_start = None

    def _is_end(self, ch: str) -> bool:
        kind = self.stack[-1].kind
        if kind == "italic":
            return ch == "_" and not self.src.startswith("__", self.pos)
        return self.src.startswith(_MDV2_CLOSERS[kind], self.pos)

    def _begin_entity(self, ch: str) -> None:
        begin = self.pos
        if self.src.startswith("```", begin):
            language, self.pos = _pre_header(self.src, begin + 3)
            self._push("pre", language, begin)
            return
        for opener, kind in _MDV2_OPENERS:
            if self.src.startswith(opener, begin):
                self.pos += len(opener)
                self._push(kind, "", begin)
                return
        raise _EntityError(
            f"Character '{ch}' is reserved and must be escaped with the preceding '\\'"
        )

    def _push(self, kind: str, argument: str, begin: int) -> None:
        self.stack.append(_OpenMd(kind, argument, self.out.units, self.out.chars, begin))

    def _end_entity(self) -> None:
        tag = self.stack.pop()
        extra: JSON = {}
        if tag.kind in ("text_link", "custom_emoji"):
            target = self._link_target(tag)
            if tag.kind == "custom_emoji":
                match = re.fullmatch(r"tg://emoji\?id=(\d+)", target)
                if match is None:
                    raise _EntityError("Custom emoji entity must contain a tg://emoji URL")
                extra["custom_emoji_id"] = match.group(1)
            else:
                url = _normalise_url(target)
                if url is None:
                    return
                extra["url"] = url
        else:
            self.pos += len(_MDV2_CLOSERS[tag.kind])
        if tag.kind == "pre" and tag.argument:
            extra["language"] = tag.argument
        length = self.out.units - tag.offset
        if length > 0:
            self.entities.append(_entity(tag.kind, tag.offset, length, **extra))

    def _link_target(self, tag: _OpenMd) -> str:
        src = self.src
        if not src.startswith("](", self.pos):
            self.pos += 1
            return self.out.text()[tag.char_start :]
        pos = url_begin = self.pos + 2
        url: list[str] = []
        while pos < len(src) and src[pos] != ")":
            if src[pos] == "\\" and pos + 1 < len(src) and 0 < ord(src[pos + 1]) <= 126:
                url.append(src[pos + 1])
                pos += 2
                continue
            url.append(src[pos])
            pos += 1
        if pos >= len(src):
            raise _EntityError(
                f"Can't find end of a URL at byte offset {_byte_offset(src, url_begin)}"
            )
        self.pos = pos + 1
        return "".join(url)


class _MarkdownParser:
    """Telegram's legacy Markdown parser (parse_mode="Markdown")."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.out = _Out()
        self.entities: list[JSON] = []

    def parse(self) -> tuple[str, list[JSON]]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "\\" and src[self.pos + 1 : self.pos + 2] in ("_", "*", "`", "["):
                self.out.add(src[self.pos + 1])
                self.pos += 2
            elif ch in "_*`[":
                self._entity(ch)
            else:
                self.out.add(ch)
                self.pos += 1
        return self.out.text(), self.entities

    def _entity(self, ch: str) -> None:
        src, begin = self.src, self.pos
        end_char = "]" if ch == "[" else ch
        is_pre = ch == "`" and src.startswith("```", begin)
        language = ""
        if is_pre:
            language, self.pos = _pre_header(src, begin + 3)
        else:
            self.pos += 1
        start, start_char = self.out.units, self.out.chars
        while self.pos < len(src) and (
            src[self.pos] != end_char or (is_pre and not src.startswith("```", self.pos))
        ):
            self.out.add(src[self.pos])
            self.pos += 1
        if self.pos >= len(src):
            raise _EntityError(
                f"Can't find end of the entity starting at byte offset {_byte_offset(src, begin)}"
            )
        length = self.out.units - start
        if ch == "[":
            self._link(start, length, self.out.text()[start_char:])
            return
        self.pos += 3 if is_pre else 1
        if length <= 0:
            return
        if is_pre:
            entity = _entity("pre", start, length)
            if language:
                entity["language"] = language
            self.entities.append(entity)
        else:
            kind = {"_": "italic", "*": "bold", "`": "code"}[ch]
            self.entities.append(_entity(kind, start, length))

    def _link(self, start: int, length: int, inner: str) -> None:
        src = self.src
        url = inner
        if src.startswith("](", self.pos):
            close = src.find(")", self.pos + 2)
            close = len(src) if close < 0 else close
            url = src[self.pos + 2 : close]
            self.pos = close + 1
        else:
            self.pos += 1
        normalised = _normalise_url(url)
        if length > 0 and normalised is not None:
            self.entities.append(_entity("text_link", start, length, url=normalised))


# --------------------------------------------------------------------------- the server


class FakeTelegram:
    """A Bot API server for one bot. See the module docstring for usage."""

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
        self._handlers: dict[str, Callable[[JSON], Any]] = {
            "getMe": self._get_me,
            "deleteWebhook": self._delete_webhook,
            "setWebhook": self._set_webhook,
            "getWebhookInfo": self._get_webhook_info,
            "setMyCommands": self._set_my_commands,
            "getMyCommands": self._get_my_commands,
            "deleteMyCommands": self._delete_my_commands,
            "sendMessage": self._send_message,
            "sendPhoto": self._send_photo,
            "sendDocument": self._send_document,
            "sendVoice": self._send_voice,
            "editMessageText": self._edit_message_text,
            "sendChatAction": self._send_chat_action,
            "deleteMessage": self._delete_message_call,
            "answerCallbackQuery": self._answer_callback_query,
            "editForumTopic": self._edit_forum_topic,
            "close": lambda _params: True,
            "logOut": lambda _params: True,
            "getChat": self._get_chat,
            "getFile": self._get_file,
            "sendMessageDraft": self._send_message_draft,
            "sendRichMessage": self._send_rich_message,
            "sendRichMessageDraft": self._send_rich_message_draft,
            "getChatMember": self._get_chat_member,
            "answerGuestQuery": self._answer_guest_query,
            "editEphemeralMessageText": self._edit_ephemeral_message_text,
            "createForumTopic": self._create_forum_topic,
            "setMySettings": self._set_my_settings,
            "sendInvoice": self._send_invoice,
            "answerPreCheckoutQuery": self._answer_pre_checkout_query,
            "refundStarPayment": self._refund_star_payment,
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

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port the first time, the same port after a stop())."""
        if self._runner is not None:
            raise RuntimeError("FakeTelegram is already running")
        self._closing = False
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
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
        self._delivery = asyncio.create_task(self._deliver_webhook_updates())

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

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ----------------------------------------------------------------- chats and users

    def add_user(self, user_id: int, first_name: str = "User", username: str | None = None) -> None:
        self._users[user_id] = _User(user_id, first_name, username)
        self._notify()

    def set_language(self, user_id: int, language_code: str | None) -> None:
        """The user's client language from now on (None: Telegram sends none)."""
        self._ensure_user(user_id).language_code = language_code
        self._notify()

    def add_private_chat(
        self, user_id: int, first_name: str = "User", username: str | None = None
    ) -> int:
        """The user has started the bot: a private chat whose id is the user's id."""
        self.add_user(user_id, first_name, username)
        chat = self._chats.get(user_id)
        if chat is None:
            self._chats[user_id] = _Chat(user_id, "private", first_name=first_name)
        elif chat.type != "private":
            raise ValueError(f"chat {user_id} is a {chat.type}, not a private chat")
        self._chats[user_id].first_name = first_name
        self._chats[user_id].username = username
        self._notify()
        return user_id

    def add_group(
        self,
        chat_id: int,
        title: str = "Group",
        *,
        supergroup: bool = True,
        forum: bool = False,
        bot_is_admin: bool = False,
    ) -> int:
        if forum and not supergroup:
            raise ValueError("only supergroups can be forums")
        kind = "supergroup" if supergroup else "group"
        chat = self._chats.setdefault(chat_id, _Chat(chat_id, kind))
        if chat.type == "private":
            raise ValueError(f"chat {chat_id} is a private chat")
        chat.type, chat.title, chat.is_forum, chat.bot_is_admin = kind, title, forum, bot_is_admin
        self._notify()
        return chat_id

    def add_member(self, chat_id: int, user_id: int, status: str = "member") -> None:
        """``user_id`` is in the group ``chat_id`` (``creator`` or ``member``); ``left``
        removes them."""
        if status not in ("creator", "member", "left"):
            raise ValueError(f"unsupported member status {status!r}")
        chat = self._chat(chat_id)
        if chat.type == "private":
            raise ValueError(f"chat {chat_id} is a private chat")
        self._ensure_user(user_id)
        if status == "left":
            chat.members.pop(user_id, None)
        else:
            chat.members[user_id] = status

    def add_topic(
        self,
        chat_id: int,
        name: str,
        *,
        creator_id: int | None = None,
        queue_update: bool = True,
        implicit: bool = False,
    ) -> int:
        """Create a topic: its forum_topic_created message id is the message_thread_id.

        In a forum supergroup, or in a private chat with topics (Bot API 9.3; turn
        them on with ``private_topics``): there the user creates it, and
        ``implicit`` marks a name Telegram made up (``is_name_implicit``).
        """
        chat = self._chat(chat_id)
        if not chat.has_topics:
            raise ValueError(f"chat {chat_id} is not a forum supergroup nor a chat with topics")
        if chat.type == "private":
            creator_id = chat.id
        if creator_id is None:
            creator_id = _ADMIN_ID
            self._users.setdefault(_ADMIN_ID, _User(_ADMIN_ID, "Admin", "group_admin"))
        creator = self._ensure_user(creator_id)
        thread_id = chat.next_message_id
        chat.topics[thread_id] = name
        created: JSON = {"name": name, "icon_color": 0x6FB9F0}
        if implicit:
            created["is_name_implicit"] = True
        message = self._store(
            chat,
            creator.as_dict(),
            is_bot=False,
            thread_id=thread_id,
            extra={"forum_topic_created": created},
        )
        if queue_update:
            self.push_update({"message": copy.deepcopy(message.raw)})
        return thread_id

    def private_topics(self, user_id: int, *, on: bool = True) -> None:
        """The bot has topics in private chats, and this user's chat with it shows them
        (``on=False``: the user turned them off in this chat)."""
        self.topics_enabled = True
        chat = self._chat(user_id)
        if chat.type != "private":
            raise ValueError(f"chat {user_id} is not a private chat")
        chat.private_topics = on

    def block_chat(self, chat_id: int) -> None:
        """Every send/edit/action/delete to this chat now fails with 403."""
        self._chat(chat_id).blocked = True
        self._notify()

    def unblock_chat(self, chat_id: int) -> None:
        self._chat(chat_id).blocked = False
        self._notify()

    # ----------------------------------------------------------------- guest mode

    def add_guest_chat(self, chat_id: int, kind: str = "private", *, title: str = "Friends") -> int:
        """A chat the bot is not a member of, where users may summon it (Bot API 10.0).

        Kept apart from the bot's own chats: ``chat_id`` may equal one of theirs.
        """
        if kind not in ("private", "group", "supergroup"):
            raise ValueError("guest bots are summoned in private chats, groups and supergroups")
        chat = _Chat(chat_id, kind, title=None if kind == "private" else title)
        if kind == "private":
            chat.first_name = "Friend"
        self._guest_chats[chat_id] = chat
        return chat_id

    def summon(
        self,
        chat_id: int,
        from_user_id: int,
        text: str,
        *,
        reply_to: int | None = None,
        photo: bool = False,
    ) -> dict[str, Any]:
        """A user mentions the bot in guest chat ``chat_id``: a ``guest_message`` update.

        Telegram delivers nothing unless the text (``photo``: a photo's caption) mentions
        the bot. ``reply_to`` is any message of that chat (the bot's guest answers
        included); the update carries it as ``reply_to_message`` as the chat shows it now.
        """
        chat = self._guest_chats[chat_id]
        entities = _auto_entities(text)
        extra: JSON = {}
        if photo:  # a real file the bot can getFile, as send_user_message's
            extra = _media_payload("photo", -chat_id - 10**13, chat.next_message_id)
            self._attach_files(extra, "photo", None, None, None, None, None, None)
            extra.update(caption=text, caption_entities=entities)
        mention = f"@{self.username}".lower()
        if not any(
            e["type"] == "mention"
            and text[e["offset"] : e["offset"] + e["length"]].lower() == mention
            for e in entities
        ):
            raise ValueError("a guest message reaches the bot only when it mentions the bot")
        message = self._store(
            chat,
            self._ensure_user(from_user_id).as_dict(),
            is_bot=False,
            text=None if photo else text,
            entities=[] if photo else entities,
            reply=self._user_reply_target(chat, reply_to),
            extra=extra,
            caption=text if photo else None,
        )
        query_id = str(7_000_000_000_000 + len(self.guest_queries))
        self.guest_queries[query_id] = _GuestQuery(
            chat_id, message.message_id, self._ensure_user(from_user_id).as_dict()
        )
        update = copy.deepcopy(message.raw)
        update["guest_query_id"] = query_id
        self.push_update({"guest_message": update})
        return update

    def post_in_guest_chat(self, chat_id: int, from_user_id: int, text: str) -> int:
        """Somebody writes in the guest chat without mentioning the bot: it sees nothing."""
        chat = self._guest_chats[chat_id]
        user = self._ensure_user(from_user_id).as_dict()
        return self._store(
            chat, user, is_bot=False, text=text, entities=_auto_entities(text)
        ).message_id

    def press_guest_button(self, chat_id: int, message_id: int, user_id: int, data: str) -> str:
        """A user presses a button of the bot's guest answer: a ``callback_query`` with
        the answer's ``inline_message_id`` and no message (an inline message's)."""
        message = self._guest_chats[chat_id].messages[message_id]
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        inline = next(
            (i for i, where in self._inline.items() if where == (chat_id, message_id)), None
        )
        if inline is None or data not in held:
            raise ValueError(f"guest message {message_id} in chat {chat_id} has no button {data!r}")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, message_id)
        callback = {
            "id": query_id,
            "from": self._ensure_user(user_id).as_dict(),
            "inline_message_id": inline,
            "chat_instance": f"gi{abs(chat_id)}",
            "data": data,
        }
        self.push_update({"callback_query": callback})
        return query_id

    def press_ephemeral_button(
        self, chat_id: int, ephemeral_id: int, user_id: int, data: str
    ) -> str:
        """The receiver of an ephemeral message presses one of its buttons (nobody else
        sees it): a ``callback_query`` carrying the message."""
        message = self._ephemeral(chat_id, ephemeral_id)
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        if message.raw["receiver_user"]["id"] != user_id or data not in held:
            raise ValueError(f"user {user_id} sees no button {data!r} of that message")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, 0)
        callback = {
            "id": query_id,
            "from": self._ensure_user(user_id).as_dict(),
            "message": copy.deepcopy(message.raw),
            "chat_instance": f"ci{abs(chat_id)}",
            "data": data,
        }
        self.push_update({"callback_query": callback})
        return query_id

    def _ephemeral(self, chat_id: int, ephemeral_id: int) -> StoredMessage:
        for message in self.ephemerals:
            if message.chat_id == chat_id and message.raw["ephemeral_message_id"] == ephemeral_id:
                return message
        raise KeyError(f"no ephemeral message {ephemeral_id} in chat {chat_id}")

    def expire_guest_query(self, query_id: str) -> None:
        """The query can no longer be answered (Telegram's "query is too old")."""
        self.guest_queries[query_id].expired = True

    def pay(self, chat_id: int, message_id: int, user_id: int) -> str:
        """``user_id`` presses Pay on the invoice the bot sent as ``message_id`` (anyone may:
        a forwarded invoice can be paid by anyone). Queues the ``pre_checkout_query``, as
        Telegram does; once the bot answers it ok, the ``successful_payment`` message
        update follows (in the payer's private chat with the bot, else the invoice's
        chat). Returns the query's id."""
        invoice = self.stars.invoices.get((chat_id, message_id))
        if invoice is None:
            raise ValueError(f"message {message_id} in chat {chat_id} is no invoice of the bot")
        payer_chat = user_id if user_id in self._chats else chat_id
        return self.checkout(
            user_id, invoice["payload"], invoice["total_amount"],
            currency=invoice["currency"], chat_id=payer_chat,
        )  # fmt: skip

    def checkout(
        self,
        user_id: int,
        payload: str,
        total_amount: int,
        *,
        currency: str = "XTR",
        chat_id: int | None = None,
    ) -> str:
        """A ``pre_checkout_query`` for any invoice (one made elsewhere, or a payload a
        test forged); the ``successful_payment`` goes to ``chat_id`` (default: the
        payer's private chat). Returns the query's id."""
        chat = self._chat(user_id if chat_id is None else chat_id)
        query_id = str(5_000_000_000_000 + len(self.stars.checkouts))
        self.stars.checkouts[query_id] = Checkout(
            user_id, chat.id, currency, total_amount, payload, self._clock()
        )
        query = {
            "id": query_id, "from": self._ensure_user(user_id).as_dict(), "currency": currency,
            "total_amount": total_amount, "invoice_payload": payload,
        }  # fmt: skip
        self._payment_update({"pre_checkout_query": query})
        return query_id

    def expire_checkout(self, query_id: str) -> None:
        """The query can no longer be answered (more than 10 s passed)."""
        self.stars.checkouts[query_id].expired = True

    def redeliver(self, update_id: int) -> int:
        """The same update once more (a payment helper's, or one still pending), as
        Telegram sends an update again that it holds unconfirmed: same content, here
        under a new update_id so that a poller already past it gets it. Returns the id."""
        update = self.stars.updates.get(update_id) or next(
            (u for u in self._updates if _update_id(u) == update_id), None
        )
        if update is None:
            raise ValueError(f"no update {update_id} to deliver again")
        return self._payment_update({k: v for k, v in update.items() if k != "update_id"})

    def _payment_update(self, update: JSON) -> int:
        update_id = self.push_update(update)
        self.stars.updates[update_id] = {"update_id": update_id, **copy.deepcopy(update)}
        return update_id

    def guest_messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of guest chat ``chat_id``, in id order."""
        return sorted(self._guest_chats[chat_id].messages.values(), key=lambda m: m.message_id)

    def guest_answers(self, chat_id: int) -> list[StoredMessage]:
        """The bot's answers posted into guest chat ``chat_id``."""
        return [m for m in self.guest_messages(chat_id) if m.is_bot]

    def visible_to(self, chat_id: int, user_id: int) -> list[StoredMessage]:
        """What ``user_id`` sees in the chat: its messages and the ephemeral ones sent to them."""
        mine = [m for m in self.ephemerals
                if m.chat_id == chat_id and m.raw["receiver_user"]["id"] == user_id]  # fmt: skip
        return [*self.messages(chat_id), *mine]

    # ----------------------------------------------------------------- inbound traffic

    def send_user_message(
        self,
        chat_id: int,
        from_user_id: int,
        text: str | None = None,
        *,
        reply_to: int | None = None,
        thread_id: int | None = None,
        caption: str | None = None,
        photo: bool = False,
        sticker: bool = False,
        voice: bool = False,
        document: bool = False,
        audio: bool = False,
        entities: list[dict[str, Any]] | None = None,
        photo_sizes: Sequence[tuple[int, int]] | None = None,
        data: bytes | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
        duration: int | None = None,
        file_size: int | None = None,
        media_group_id: str | None = None,
    ) -> dict[str, Any]:
        """A user writes to the bot: store the message, queue a ``message`` update.

        Media come with real files the bot can ``getFile`` and download: a photo in
        ``photo_sizes`` (width, height; by default three, the largest 1280x960), each
        size its own JPEG-signed bytes; a voice note, audio or document holds ``data``
        (default: some bytes) with ``file_name``/``mime_type``/``duration``.
        ``file_size`` claims another size than the bytes' (over 20 MB: getFile answers
        "file is too big", as Telegram does). Albums: the same ``media_group_id`` on
        several photo messages, each its own update.
        """
        chat = self._chat(chat_id)
        if chat.type == "private" and from_user_id != chat_id:
            raise ValueError("in a private chat only the chat's user can write")
        media = [kind for kind, on in _media_flags(photo, sticker, voice, document, audio) if on]
        self._check_user_content(text, caption, media)
        user = self._ensure_user(from_user_id)
        reply = self._user_reply_target(chat, reply_to)
        if thread_id is not None and not (chat.has_topics and thread_id in chat.topics):
            raise ValueError(f"no topic {thread_id} in chat {chat_id}")
        if thread_id is None and reply is not None:
            thread_id = reply.thread_id
        extra: JSON = {}
        for kind in media:
            extra.update(_media_payload(kind, chat_id, chat.next_message_id))
            self._attach_files(
                extra, kind, photo_sizes, data, file_name, mime_type, duration, file_size
            )
        if media_group_id is not None:
            extra["media_group_id"] = media_group_id
        if caption is not None:
            extra["caption"] = caption
            caption_entities = _auto_entities(caption)
            if caption_entities:
                extra["caption_entities"] = caption_entities
        if text is not None and entities is None:
            entities = _auto_entities(text)
        message = self._store(
            chat,
            user.as_dict(),
            is_bot=False,
            text=text,
            entities=entities or [],
            thread_id=thread_id,
            reply=reply,
            extra=extra,
            caption=caption,
        )
        self.push_update({"message": copy.deepcopy(message.raw)})
        return copy.deepcopy(message.raw)

    def _attach_files(
        self,
        extra: JSON,
        kind: str,
        photo_sizes: Sequence[tuple[int, int]] | None,
        data: bytes | None,
        file_name: str | None,
        mime_type: str | None,
        duration: int | None,
        file_size: int | None,
    ) -> None:
        """Give the media objects of ``extra`` real files (registered for getFile)."""
        if kind == "photo":
            base = extra["photo"][0]
            sizes = list(photo_sizes or [(p["width"], p["height"]) for p in extra["photo"]])
            photos = []
            for w, h in sizes:
                file_id = f"{base['file_id'].rsplit('-', 1)[0]}-{w}x{h}"
                unique = f"{base['file_unique_id']}{w}x{h}"
                body = _jpeg_bytes(f"{file_id}", max(200, w * h // 20))
                claimed = file_size if file_size is not None and (w, h) == sizes[-1] else None
                self._files[file_id] = (unique, body, claimed or len(body))
                self._file_kinds[file_id] = ("photos", ".jpg")
                photos.append(
                    {
                        "file_id": file_id,
                        "file_unique_id": unique,
                        "width": w,
                        "height": h,
                        "file_size": claimed or len(body),
                    }
                )
            extra["photo"] = photos
            return
        obj = extra[kind]
        if kind == "sticker":
            self._files[obj["file_id"]] = (obj["file_unique_id"], b"RIFF-webp", obj["file_size"])
            self._file_kinds[obj["file_id"]] = ("stickers", ".webp")
            return
        body = data if data is not None else f"{kind} of {obj['file_id']}".encode()
        obj["file_size"] = file_size if file_size is not None else len(body)
        if file_name is not None and kind in ("document", "audio"):
            obj["file_name"] = file_name
        if mime_type is not None:
            obj["mime_type"] = mime_type
        if duration is not None and kind in ("voice", "audio"):
            obj["duration"] = duration
        self._files[obj["file_id"]] = (obj["file_unique_id"], body, obj["file_size"])
        folder = {"voice": "voice", "audio": "music"}.get(kind, "documents")
        extension = {"voice": ".oga", "audio": ".mp3"}.get(kind, "")
        extension = extension or Path(obj.get("file_name", "")).suffix
        self._file_kinds[obj["file_id"]] = (folder, extension)

    def file_bytes(self, file_id: str) -> bytes:
        """The bytes of a file a user sent."""
        return self._files[file_id][1]

    def local_file(self, file_id: str) -> Path:
        """Local mode: where the file is on disk (written now, as getFile does, if not yet).

        The real server keeps a downloaded file and answers its path again, so a test
        may replace what is there (a FIFO, a directory) before the bot's getFile.
        """
        if self.files_dir is None or self.server_dir is None:
            raise RuntimeError("only a local-mode server keeps files on disk")
        folder, extension = self._file_kinds[file_id]
        relative = Path(self.token.replace(":", "~"), folder, f"file_{file_id}{extension}")
        path = self.files_dir / relative
        if file_id not in self.local_paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self._files[file_id][1])
            self.local_paths[file_id] = str(self.server_dir / relative)
        return path

    def edit_user_message(self, chat_id: int, message_id: int, text: str) -> dict[str, Any]:
        """The user edits their text message: queue an ``edited_message`` update."""
        message = self.message(chat_id, message_id)
        if message.is_bot or message.deleted or message.text is None:
            raise ValueError(f"message {message_id} in chat {chat_id} is not a live user text")
        message.history.append(message.text)
        message.text = text
        message.entities = _auto_entities(text)
        message.edits += 1
        message.edit_date = int(time.time())
        message.raw["text"] = text
        message.raw["edit_date"] = message.edit_date
        if message.entities:
            message.raw["entities"] = copy.deepcopy(message.entities)
        else:
            message.raw.pop("entities", None)
        self.push_update({"edited_message": copy.deepcopy(message.raw)})
        return copy.deepcopy(message.raw)

    def press_button(self, chat_id: int, message_id: int, user_id: int, data: str) -> str:
        """The user presses the inline button carrying ``data`` under a bot message.

        Queues a ``callback_query`` update; returns the query's id. Only data a
        button of that message holds can be pressed (Telegram sends nothing else).
        """
        message = self.message(chat_id, message_id)
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        if not message.is_bot or message.deleted or data not in held:
            raise ValueError(f"message {message_id} in chat {chat_id} has no button {data!r}")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, message_id)
        self.push_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": self._ensure_user(user_id).as_dict(),
                    "message": copy.deepcopy(message.raw),
                    "chat_instance": f"ci{abs(chat_id)}",
                    "data": data,
                }
            }
        )
        return query_id

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

    def current_draft(self, chat_id: int) -> Draft | None:
        """The draft the user sees in the chat now (None once a message replaced it)."""
        return self._draft_on_screen.get(chat_id)

    def drafts_in(self, chat_id: int) -> list[Draft]:
        return [draft for draft in self.drafts if draft.chat_id == chat_id]

    def stop_generation(self, chat_id: int, draft_id: int | None = None) -> int:
        """The user presses the stop button of a draft (default: the one on screen).

        Only a draft shown with ``can_stop`` has the button. Queues the
        ``stopped_message_generation`` update; returns its update_id.
        """
        shown = self.current_draft(chat_id) if draft_id is None else next(
            (d for d in reversed(self.drafts_in(chat_id)) if d.draft_id == draft_id), None
        )  # fmt: skip
        if shown is None or not shown.can_stop:
            raise ValueError(f"no draft with a stop button to press in chat {chat_id}")
        if not shown.keep_on_stop and self._draft_on_screen.get(chat_id) == shown:
            del self._draft_on_screen[chat_id]
        event: JSON = {"chat": self._chat(chat_id).as_dict(), "draft_id": shown.draft_id}
        if shown.thread_id is not None:
            event["message_thread_id"] = shown.thread_id
        return self.push_update({"stopped_message_generation": event})

    def delete_message(self, chat_id: int, message_id: int) -> None:
        """As if the user deleted the message (bots get no update for that)."""
        self.message(chat_id, message_id).deleted = True
        self._notify()

    # ----------------------------------------------------------------- fault injection

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

    # ----------------------------------------------------------------- inspection

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

    # ----------------------------------------------------------------- HTTP plumbing

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
            self._record(Call(method, params, started, exc.status, exc.description, fault=injected))
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

    # ----------------------------------------------------------------- getUpdates

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

    # ----------------------------------------------------------------- simple methods

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

    def _delete_webhook(self, params: JSON) -> bool:
        self.webhook_url = ""
        if _truthy(params.get("drop_pending_updates")):
            self._updates.clear()
            self._notify()
        return True

    def _set_webhook(self, params: JSON) -> bool:
        url = params.get("url")
        if url is None:
            raise _ApiError(400, 'Bad Request: parameter "url" is required')
        url = str(url)
        if url:
            self._check_webhook_url(url)
        secret = params.get("secret_token")
        secret = "" if secret is None else str(secret)
        if secret and not _WEBHOOK_SECRET.fullmatch(secret):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        connections = _opt_int(params, "max_connections")
        if connections is not None and not 1 <= connections <= (
            100_000 if self.local_mode else 100
        ):
            raise _ApiError(400, "Bad Request: bad webhook: invalid max_connections specified")
        self._set_allowed_updates(params.get("allowed_updates"))
        self.webhook_url = url
        self.webhook_secret = secret if url else ""
        self.webhook_max_connections = connections or 40
        self._webhook_last_error = None
        if _truthy(params.get("drop_pending_updates")):
            self._updates.clear()
        self._notify()
        return True

    def _check_webhook_url(self, url: str) -> None:
        """Telegram's rules for a webhook URL; a local server takes http:// and any port."""
        if self.local_mode:
            try:
                parts = urlsplit(url)
                usable = parts.scheme.lower() in ("https", "http") and bool(parts.hostname)
                usable = usable and parts.port != 0
            except ValueError:
                usable = False
            if not usable:
                raise _ApiError(400, "Bad Request: invalid webhook URL specified")
            return
        if not url.lower().startswith("https://"):
            raise _ApiError(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        try:
            port = urlsplit(url).port or 443
        except ValueError:
            raise _ApiError(400, "Bad Request: bad webhook: Wrong port number specified") from None
        if port not in _WEBHOOK_PORTS:
            raise _ApiError(
                400, "Bad Request: bad webhook: Webhook can be set up only on ports "
                "80, 88, 443 or 8443",
            )  # fmt: skip

    def _get_webhook_info(self, _params: JSON) -> JSON:
        info: JSON = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }
        if self.webhook_url:
            info["max_connections"] = self.webhook_max_connections
            if self._allowed_updates is not None:
                info["allowed_updates"] = sorted(self._allowed_updates)
            if self._webhook_last_error is not None:
                info["last_error_date"], info["last_error_message"] = self._webhook_last_error
        return info

    # ----------------------------------------------------------------- webhook delivery

    async def _deliver_webhook_updates(self) -> None:
        """POST pending updates to ``webhook_target`` while a webhook is set, like Telegram.

        Up to ``max_connections`` at once; an update leaves the queue only when the
        bot answered 2xx; anything else is retried after ``webhook_retry_delay``.
        """
        sending: dict[int, asyncio.Task[None]] = {}
        retry_at: dict[int, float] = {}
        loop = asyncio.get_running_loop()
        async with ClientSession(timeout=ClientTimeout(total=60)) as http:
            try:
                while True:
                    changed = self._changed
                    target = self.webhook_target
                    if target is None and self.local_mode:  # the URL itself is reachable
                        target = self.webhook_url
                    wait = 1.0
                    if self.webhook_url and target and not self._closing:
                        for update in self._deliverable(100):
                            update_id = _update_id(update)
                            due = retry_at.get(update_id, 0.0) - loop.time()
                            if due > 0:
                                wait = min(wait, due)
                                continue
                            if update_id in sending:
                                continue
                            if len(sending) >= self.webhook_max_connections:
                                break
                            task = asyncio.create_task(
                                self._post_update(http, target, update, retry_at)
                            )
                            sending[update_id] = task
                            task.add_done_callback(
                                functools.partial(self._delivered, sending, update_id)
                            )
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(wait, 0.01)):
                            await changed.wait()
            finally:
                for task in sending.values():
                    task.cancel()

    def _delivered(self, sending: dict[int, Any], update_id: int, _task: object) -> None:
        sending.pop(update_id, None)
        self._notify()

    async def _post_update(
        self, http: ClientSession, target: str, update: JSON, retry_at: dict[int, float]
    ) -> None:
        update_id = _update_id(update)
        headers = {"Content-Type": _JSON_TYPE}
        if self.webhook_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
        status, error = 0, "Connection refused"
        try:
            async with http.post(target, data=json.dumps(update), headers=headers) as response:
                await response.read()
                status = response.status
                error = f"Wrong response from the webhook: {status} {response.reason}"
        except (ClientError, TimeoutError, OSError):
            pass
        self.webhook_deliveries.append((update_id, status))
        if 200 <= status < 300:
            self._updates = [u for u in self._updates if _update_id(u) != update_id]
            retry_at.pop(update_id, None)
        else:
            self._webhook_last_error = (int(time.time()), error)
            retry_at[update_id] = asyncio.get_running_loop().time() + self.webhook_retry_delay

    def _commands_key(self, params: JSON) -> tuple[str, str]:
        scope = params.get("scope") or {"type": "default"}
        if not isinstance(scope, dict) or scope.get("type") not in _BOT_COMMAND_SCOPES:
            raise _ApiError(400, "Bad Request: can't parse BotCommandScope JSON object")
        language = params.get("language_code") or ""
        return json.dumps(scope, sort_keys=True), str(language)

    def _set_my_commands(self, params: JSON) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _ApiError(400, "Bad Request: can't parse commands JSON object")
        if len(commands) > 100:
            raise _ApiError(400, "Bad Request: BOT_COMMANDS_TOO_MUCH")
        for command in commands:
            if not isinstance(command, dict):
                raise _ApiError(400, "Bad Request: can't parse BotCommand JSON object")
            name, description = command.get("command"), command.get("description")
            if not isinstance(name, str) or not _COMMAND_NAME_RE.fullmatch(name):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self.commands[self._commands_key(params)] = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        self._notify()
        return True

    def _get_my_commands(self, params: JSON) -> list[JSON]:
        return copy.deepcopy(self.commands.get(self._commands_key(params), []))

    def _delete_my_commands(self, params: JSON) -> bool:
        self.commands.pop(self._commands_key(params), None)
        self._notify()
        return True

    def _get_chat(self, params: JSON) -> JSON:
        chat = self._chats.get(_coerce_int(params.get("chat_id")) or 0)
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        info = chat.as_dict()
        info.update(
            {
                "accent_color_id": 0,
                "max_reaction_count": 11,
                "accepted_gift_types": {
                    "unlimited_gifts": False,
                    "limited_gifts": False,
                    "unique_gifts": False,
                    "premium_subscription": False,
                    "gifts_from_channels": False,
                },
            }
        )
        return info

    def _get_chat_member(self, params: JSON) -> JSON:
        """A chat member as Telegram answers: a group's member or creator; ``left`` for
        a known user who is not in it; 400 for an unknown chat or user."""
        chat = self._chats.get(_coerce_int(params.get("chat_id")) or 0)
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        user = self._users.get(_coerce_int(params.get("user_id")) or 0)
        if user is None:
            raise _ApiError(400, "Bad Request: user not found")
        if chat.type == "private":
            if user.id != chat.id:
                raise _ApiError(400, "Bad Request: PARTICIPANT_ID_INVALID")
            return {"status": "member", "user": user.as_dict()}
        status = chat.members.get(user.id, "left")
        member: JSON = {"status": status, "user": user.as_dict()}
        if status == "creator":
            member["is_anonymous"] = False
        return member

    # ----------------------------------------------------------------- messages

    def _target_chat(self, params: JSON) -> _Chat:
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: chat_id is empty")
        chat_id = _coerce_int(raw)
        chat = self._chats.get(chat_id) if chat_id is not None else None
        if chat is None:
            if chat_id in self._users:
                raise _ApiError(403, "Forbidden: bot can't initiate conversation with a user")
            raise _ApiError(400, "Bad Request: chat not found")
        if chat.blocked:
            raise _ApiError(403, chat.blocked_description())
        return chat

    def _check_thread(self, chat: _Chat, thread_id: int | None) -> None:
        if thread_id is not None and not (chat.has_topics and thread_id in chat.topics):
            raise _ApiError(400, "Bad Request: message thread not found")

    def _format(
        self, params: JSON, *, caption: bool = False
    ) -> tuple[str, list[JSON], str | None, str]:
        """Parse text + parse_mode/entities like Telegram: (text, entities, parse_mode, raw).

        ``caption``: a media caption instead (caption_entities, at most 1024 characters,
        may be empty: then the text is "").
        """
        raw = params.get("caption" if caption else "text")
        if caption and raw in (None, ""):
            return "", [], None, ""
        if caption:
            params = {**params, "entities": params.get("caption_entities")}
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: message text is empty")
        raw = raw if isinstance(raw, str) else json.dumps(raw)
        mode = params.get("parse_mode")
        mode_name = mode.lower() if isinstance(mode, str) else ""
        try:
            if mode_name in ("", "none"):
                text, entities = raw, _explicit_entities(params.get("entities"))
            elif mode_name == "html":
                text, entities = _HtmlParser(raw, strict=self.strict_html).parse()
            elif mode_name == "markdownv2":
                text, entities = _MarkdownV2Parser(raw).parse()
            elif mode_name == "markdown":
                text, entities = _MarkdownParser(raw).parse()
            else:
                raise _ApiError(400, "Bad Request: unsupported parse_mode")
        except _EntityError as exc:
            raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        text, entities = _strip_formatted(text, entities)
        if caption and _u16(text) > _MAX_CAPTION_UNITS:
            raise _ApiError(400, "Bad Request: message caption is too long")
        if not text and not caption:
            raise _ApiError(400, "Bad Request: message text is empty")
        if _u16(text) > _MAX_TEXT_UNITS:
            raise _ApiError(400, "Bad Request: message is too long")
        entities = [self._resolve_mention(entity) for entity in entities]
        entities = sorted(entities + _auto_entities(text, entities), key=_entity_sort_key)
        return text, entities, mode if mode_name not in ("", "none") else None, raw

    def _resolve_mention(self, entity: JSON) -> JSON:
        """tg://user?id=N links become text_mention entities for users the fake knows."""
        match = re.fullmatch(r"tg://user\?id=(\d+)", str(entity.get("url", "")))
        user = self._users.get(int(match.group(1))) if match else None
        if user is None:
            return entity
        return _entity("text_mention", entity["offset"], entity["length"], user=user.as_dict())

    def _reply_request(self, params: JSON) -> tuple[int | None, bool, int | str | None]:
        reply = params.get("reply_parameters")
        if reply is not None:
            if not isinstance(reply, dict):
                raise _ApiError(400, "Bad Request: can't parse reply parameters JSON object")
            message_id = _coerce_int(reply.get("message_id"))
            if message_id is None:
                raise _ApiError(400, "Bad Request: message to be replied not found")
            reply_chat = reply.get("chat_id")
            chat_ref = _coerce_int(reply_chat) if reply_chat is not None else None
            allow = _truthy(reply.get("allow_sending_without_reply"))
            return message_id, allow, chat_ref if chat_ref is not None else reply_chat
        message_id = _opt_int(params, "reply_to_message_id")
        allow = _truthy(params.get("allow_sending_without_reply"))
        return (message_id or None), allow, None

    def _placement(self, chat: _Chat, params: JSON) -> tuple[int | None, StoredMessage | None]:
        """Where a bot message lands: (message_thread_id, replied message)."""
        reply_id, allow, reply_chat = self._reply_request(params)
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        target: StoredMessage | None = None
        if reply_id is not None:
            if reply_chat is not None and reply_chat != chat.id:
                raise _ApiError(
                    400, "Bad Request: replies to other chats are not supported by FakeTelegram"
                )
            candidate = chat.messages.get(reply_id)
            if (
                candidate is not None
                and not candidate.deleted
                and (thread_id is None or candidate.thread_id == thread_id)
            ):
                target = candidate
            elif not allow:
                raise _ApiError(400, "Bad Request: message to be replied not found")
        if thread_id is None and target is not None:
            thread_id = target.thread_id
        return thread_id, target

    def _send_message(self, params: JSON) -> JSON:
        chat = self._target_chat(params)
        text, entities, mode, raw_text = self._format(params)
        thread_id, reply = self._placement(chat, params)
        markup = _reply_markup(params, chat)
        receiver = self._ephemeral_receiver(chat, params)
        self._draft_on_screen.pop(chat.id, None)  # a message the bot sends replaces its draft
        next_id = chat.next_message_id
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            text=text,
            entities=entities,
            thread_id=thread_id,
            reply=reply,
            html=raw_text,
            parse_mode=mode,
            reply_markup=markup,
        )
        if receiver is not None:
            # shown to one user only: no message id of the chat, an ephemeral one instead
            del chat.messages[message.message_id]
            chat.next_message_id = next_id
            message.message_id = message.raw["message_id"] = 0
            message.raw["ephemeral_message_id"] = len(self.ephemerals) + 1
            message.raw["receiver_user"] = receiver.as_dict()
            self.ephemerals.append(message)
        return copy.deepcopy(message.raw)

    def _ephemeral_receiver(self, chat: _Chat, params: JSON) -> _User | None:
        """The receiver of an ephemeral message (None: an ordinary one, or a server that
        knows no ephemeral messages and ignores the parameters). Like a server that knows
        only Bot API 10.3's form, ``ephemeral_message_parameters``: 10.2's top-level
        ``receiver_user_id`` is ignored (the message goes to everyone)."""
        nested = params.get("ephemeral_message_parameters")
        raw = nested.get("receiver_user_id") if isinstance(nested, dict) else None
        if raw is None or not self.ephemeral:
            return None
        if chat.type not in ("group", "supergroup"):
            raise _ApiError(400, "Bad Request: ephemeral messages can be sent only to groups")
        user = self._users.get(_coerce_int(raw) or 0)
        if user is None:
            raise _ApiError(400, "Bad Request: user not found")
        return user

    def _send_photo(self, params: JSON) -> JSON:
        """sendPhoto with an uploaded PNG or JPEG (multipart/form-data, directly or via
        ``attach://name``); a file_id this server issued is accepted too."""
        chat = self._target_chat(params)
        data = self._photo_bytes(params)
        width, height = _image_size(data)
        if width + height > 10000 or max(width, height) > 20 * min(width, height):
            raise _ApiError(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        caption, entities, mode, raw_caption = self._format(params, caption=True)
        thread_id, reply = self._placement(chat, params)
        markup = _reply_markup(params, chat)
        extra: JSON = {"photo": _photo_sizes(data, width, height, chat.id, chat.next_message_id)}
        if caption:
            extra["caption"] = caption
            if entities:
                extra["caption_entities"] = copy.deepcopy(entities)
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=raw_caption or None,
            parse_mode=mode,
            reply_markup=markup,
            extra=extra,
            caption=caption or None,
        )
        message.photo = data
        return copy.deepcopy(message.raw)

    def _photo_bytes(self, params: JSON) -> bytes:
        photo = params.get("photo")
        if isinstance(photo, str) and photo.startswith("attach://"):
            photo = params.get(photo.removeprefix("attach://"))
        if isinstance(photo, dict) and isinstance(photo.get("data"), bytes):
            data: bytes = photo["data"]
            if not data:
                raise _ApiError(400, "Bad Request: file must be non-empty")
            if len(data) > _MAX_PHOTO_BYTES:
                raise _ApiError(400, "Bad Request: file is too big")
            return data
        if isinstance(photo, str) and photo:
            for chat in self._chats.values():
                for message in chat.messages.values():
                    sizes = message.raw.get("photo") or []
                    if message.photo is not None and any(s["file_id"] == photo for s in sizes):
                        return message.photo
            if photo.startswith(("http://", "https://")):
                raise _ApiError(400, "Bad Request: failed to get HTTP URL content")
            raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        raise _ApiError(400, "Bad Request: there is no photo in the request")

    def _send_document(self, params: JSON) -> JSON:
        """An uploaded file (multipart/form-data); file ids and URLs are not kept here."""
        chat = self._target_chat(params)
        document = params.get("document")
        if document is None or document == "":
            raise _ApiError(400, "Bad Request: there is no document in the request")
        if isinstance(document, str) and document.startswith("attach://"):
            # a file sent in the same multipart request under that part's name
            document = params.get(document.removeprefix("attach://"))
            if not isinstance(document, dict):
                raise _ApiError(400, "Bad Request: wrong remote file identifier specified")
        if isinstance(document, str):
            raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if not isinstance(document, dict) or not isinstance(document.get("data"), bytes):
            raise _ApiError(400, "Bad Request: wrong type of the web page content")
        data: bytes = document["data"]
        if not data:
            raise _ApiError(400, "Bad Request: file must be non-empty")
        if len(data) > _MAX_UPLOAD_BYTES:
            raise _ApiError(413, "Request Entity Too Large")
        caption, entities, mode, raw = self._format(params, caption=True)
        thread_id, reply = self._placement(chat, params)
        name = str(document.get("filename") or "document")
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=raw or None,
            parse_mode=mode,
            reply_markup=_reply_markup(params, chat),
            caption=caption or None,
            extra={
                "document": {
                    "file_id": f"BQACAgIAAxkDoc{abs(chat.id)}x{chat.next_message_id}",
                    "file_unique_id": f"AgADoc{chat.next_message_id}",
                    "file_name": name,
                    "mime_type": document.get("content_type") or "application/octet-stream",
                    "file_size": len(data),
                },
                **({"caption": caption} if caption else {}),
                **({"caption_entities": entities} if caption and entities else {}),
            },
        )
        message.document = (name, data)
        return copy.deepcopy(message.raw)

    def _send_voice(self, params: JSON) -> JSON:
        """sendVoice with an uploaded OGG/Opus file (multipart/form-data, directly or via
        ``attach://name``), or the file_id of a voice message this server holds; an empty
        upload, one over 50 MB or a file_id it never issued is refused as Telegram refuses
        it. Stricter than Telegram (which also takes MP3 and M4A, and sends other formats as
        a document): anything but OGG/Opus is refused. The message is a voice message like a
        user's: its file is registered, so ``getFile`` and the file server serve its bytes
        (``file_bytes``); ``duration`` is the one sent, else the file's own."""
        chat = self._target_chat(params)
        file_id, data = self._voice_upload(params)
        caption, entities, mode, raw_caption = self._format(params, caption=True)
        thread_id, reply = self._placement(chat, params)
        if file_id is None:
            stem = f"{abs(chat.id)}x{chat.next_message_id}"
            file_id = f"AwACAgIAAxkDVO{stem}"
            self._files[file_id] = (f"AgADVO{stem}", data, len(data))
            self._file_kinds[file_id] = ("voice", ".oga")
        duration = _opt_int(params, "duration")
        voice = {
            "file_id": file_id,
            "file_unique_id": self._files[file_id][0],
            "duration": duration if duration is not None else self._ogg_seconds(data),
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        extra: JSON = {"voice": voice}
        if caption:
            extra["caption"] = caption
            if entities:
                extra["caption_entities"] = copy.deepcopy(entities)
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=raw_caption or None,
            parse_mode=mode,
            reply_markup=_reply_markup(params, chat),
            extra=extra,
            caption=caption or None,
        )
        return copy.deepcopy(message.raw)

    def _voice_upload(self, params: JSON) -> tuple[str | None, bytes]:
        """(the file_id of a voice message sent again, else None; the voice's bytes)."""
        voice = params.get("voice")
        if isinstance(voice, str) and voice.startswith("attach://"):
            voice = params.get(voice.removeprefix("attach://"))
        if isinstance(voice, dict) and isinstance(voice.get("data"), bytes):
            data: bytes = voice["data"]
            if not data:
                raise _ApiError(400, "Bad Request: file must be non-empty")
            if len(data) > _MAX_UPLOAD_BYTES:
                raise _ApiError(413, "Request Entity Too Large")
            if not (data.startswith(b"OggS") and data[28:36] == b"OpusHead"):
                raise _ApiError(
                    400, "Bad Request: wrong voice file type (FakeTelegram takes OGG/Opus)"
                )
            return None, data
        if isinstance(voice, str) and voice:
            if voice.startswith(("http://", "https://")):
                raise _ApiError(400, "Bad Request: failed to get HTTP URL content")
            if self._file_kinds.get(voice, ("",))[0] != "voice":
                raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
            return voice, self._files[voice][1]
        raise _ApiError(400, "Bad Request: there is no voice in the request")

    @staticmethod
    def _ogg_seconds(data: bytes) -> int:
        """An OGG/Opus file's length in whole seconds: its last page's granule position
        (48 kHz samples) less the header's pre-skip, read page by page."""
        pos, granule = 0, 0
        while data.startswith(b"OggS", pos) and pos + 27 <= len(data):
            granule = int.from_bytes(data[pos + 6 : pos + 14], "little", signed=True)
            segments = data[pos + 26]
            pos += 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        pre_skip = int.from_bytes(data[38:40], "little")
        return max(0, round((granule - pre_skip) / 48_000))

    def _send_message_draft(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if chat.type != "private":
            raise _ApiError(400, _DRAFT_PEER_INVALID)
        draft_id = _opt_int(params, "draft_id")
        if draft_id is None:
            raise _ApiError(400, 'Bad Request: parameter "draft_id" is required')
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        raw = params.get("text")
        text: str | None = None
        html: str | None = None
        if raw not in (None, ""):  # an empty text is the "Thinking…" placeholder
            text, _entities, _mode, html = self._format(params)
        draft = Draft(
            chat.id, draft_id, text, html, thread_id, _truthy(params.get("can_stop")),
            _truthy(params.get("keep_on_stop")), self._clock(),
        )  # fmt: skip
        self.drafts.append(draft)
        self._draft_on_screen[chat.id] = draft
        self._notify()
        return True

    def _rich(self, params: JSON, *, draft: bool = False) -> tuple[Rich, str]:
        """The ``rich_message`` parameter as Telegram takes it, and its source."""
        value = params.get("rich_message")
        if value is None or value == "":
            raise _ApiError(400, 'Bad Request: parameter "rich_message" is required')
        try:
            rich = parse_rich(value, draft=draft)
        except RichError as exc:
            raise _ApiError(400, f"Bad Request: {exc}") from None
        source = value.get("html") or value.get("markdown") or json.dumps(value.get("blocks"))
        return rich, str(source)

    def _send_rich_message(self, params: JSON) -> JSON:
        chat = self._target_chat(params)
        rich, source = self._rich(params)
        thread_id, reply = self._placement(chat, params)
        markup = _reply_markup(params)
        self._draft_on_screen.pop(chat.id, None)  # a message the bot sends replaces its draft
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=source,
            reply_markup=markup,
            extra={"rich_message": rich.message},
        )
        message.text, message.rich_message = rich.text, rich.message
        return copy.deepcopy(message.raw)

    def _send_rich_message_draft(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if chat.type != "private":
            raise _ApiError(400, _DRAFT_PEER_INVALID)
        draft_id = _opt_int(params, "draft_id")
        if draft_id is None:
            raise _ApiError(400, 'Bad Request: parameter "draft_id" is required')
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        rich, source = self._rich(params, draft=True)
        draft = Draft(
            chat.id, draft_id, rich.text, source, thread_id, _truthy(params.get("can_stop")),
            _truthy(params.get("keep_on_stop")), self._clock(), rich.message,
        )  # fmt: skip
        self.drafts.append(draft)
        self._draft_on_screen[chat.id] = draft
        self._notify()
        return True

    def _edit_message_text(self, params: JSON) -> JSON | bool:
        inline = params.get("inline_message_id")
        if inline:
            # an inline message (a guest answer): no chat_id, and True as the result
            where = self._inline.get(str(inline))
            if where is None:
                raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
            posted = self._guest_chats[where[0]].messages[where[1]]
            if posted.deleted:
                raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
            self._apply_edit(posted, params)
            return True
        chat = self._target_chat(params)
        message_id = _opt_int(params, "message_id")
        if message_id is None:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        message = chat.messages.get(message_id)
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if not message.is_bot or message.text is None:
            raise _ApiError(400, "Bad Request: message can't be edited")
        self._apply_edit(message, params)
        return copy.deepcopy(message.raw)

    def _apply_edit(self, message: StoredMessage, params: JSON) -> None:
        if params.get("rich_message") is not None and params.get("text") not in (None, ""):
            raise _ApiError(400, "Bad Request: text and rich_message can't be specified together")
        rich: Rich | None = None
        entities: list[JSON] = []
        if params.get("rich_message") is not None:  # a text or rich message becomes rich
            rich, raw_text = self._rich(params)
            text, mode = rich.text, None
        else:
            text, entities, mode, raw_text = self._format(params)
        markup = _reply_markup(params)
        if (
            text == message.text
            and _canonical_entities(entities) == _canonical_entities(message.entities)
            and (rich.message if rich else None) == message.rich_message
            and markup == message.reply_markup
        ):
            raise _ApiError(400, _NOT_MODIFIED)
        message.history.append(message.text)
        message.text, message.entities = text, entities
        message.html, message.parse_mode = raw_text, mode
        message.rich_message = rich.message if rich else None
        message.reply_markup = markup
        message.edits += 1
        message.edit_date = int(time.time())
        raw = message.raw
        raw["edit_date"] = message.edit_date
        _set_or_drop(raw, "text", None if rich else text)
        _set_or_drop(raw, "rich_message", copy.deepcopy(rich.message) if rich else None)
        _set_or_drop(raw, "entities", copy.deepcopy(entities) or None)
        _set_or_drop(raw, "reply_markup", _visible_markup(markup))
        self._notify()

    def _create_forum_topic(self, params: JSON) -> JSON:
        """A new topic (Bot API 9.4: also in a private chat with topics, by the bot): its
        ``ForumTopic``. Its creation message is the bot's and reaches no update."""
        chat = self._target_chat(params)
        if chat.type == "private":
            if not (self.topics_enabled and chat.private_topics):
                raise _ApiError(400, "Bad Request: the chat is not a forum")
        elif not chat.is_forum:
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        elif not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: not enough rights to create a topic")
        name = str(params.get("name") or "")
        if not name.strip():
            raise _ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY")
        if len(name) > 128:
            raise _ApiError(400, "Bad Request: TOPIC_TITLE_TOO_LONG")
        thread_id = chat.next_message_id
        chat.topics[thread_id] = name
        created: JSON = {"name": name, "icon_color": 0x6FB9F0}
        self._store(
            chat, self._bot_user(), is_bot=True, thread_id=thread_id,
            extra={"forum_topic_created": created},
        )  # fmt: skip
        return {"message_thread_id": thread_id, **created}

    def _set_my_settings(self, params: JSON) -> bool:
        """Bot API 10.5's settings; this server keeps the topic ones."""
        for name in ("has_topics_enabled", "has_topic_sidebar"):
            value = params.get(name)
            if value is not None and not isinstance(value, bool):
                raise _ApiError(400, f'Bad Request: field "{name}" must be of type Boolean')
        if params.get("has_topics_enabled") is not None:
            self.topics_enabled = params["has_topics_enabled"]
        if params.get("has_topic_sidebar") is not None:
            self.topic_sidebar = params["has_topic_sidebar"]
        return True

    def _edit_forum_topic(self, params: JSON) -> bool:
        """Rename a topic: the bot in a private chat with topics, or a forum's admin."""
        chat = self._target_chat(params)
        if not chat.has_topics:
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        thread_id = _opt_int(params, "message_thread_id")
        if thread_id is None or thread_id not in chat.topics:
            raise _ApiError(400, "Bad Request: message thread not found")
        if chat.type != "private" and not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: not enough rights to manage topics")
        name = params.get("name")
        if name is not None:
            name = str(name)
            if not name.strip():
                raise _ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY")
            if len(name) > 128:
                raise _ApiError(400, "Bad Request: TOPIC_TITLE_TOO_LONG")
            if name == chat.topics[thread_id]:
                raise _ApiError(400, "Bad Request: TOPIC_NOT_MODIFIED")
            chat.topics[thread_id] = name
            self._store(
                chat,
                self._bot_user(),
                is_bot=True,
                thread_id=thread_id,
                extra={"forum_topic_edited": {"name": name}},
            )
        return True

    def _answer_callback_query(self, params: JSON) -> bool:
        query_id = params.get("callback_query_id")
        if not query_id:
            raise _ApiError(400, "Bad Request: QUERY_ID_INVALID")
        if str(query_id) not in self.open_queries:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        text = params.get("text")
        if text is not None and len(str(text)) > 200:
            raise _ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        del self.open_queries[str(query_id)]
        self.query_answers[str(query_id)] = None if text is None else str(text)
        return True

    def _answer_guest_query(self, params: JSON) -> JSON:
        query = self.guest_queries.get(str(params.get("guest_query_id") or ""))
        if query is None or query.answered is not None or query.expired:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        result = params.get("result")
        if not isinstance(result, dict):
            raise _ApiError(400, "Bad Request: can't parse inline query result JSON object")
        if result.get("type") != "article":
            raise _ApiError(400, "Bad Request: only article results are supported by FakeTelegram")
        if not 1 <= len(str(result.get("id") or "").encode()) <= 64:
            raise _ApiError(400, "Bad Request: RESULT_ID_INVALID")
        if not result.get("title"):
            raise _ApiError(400, "Bad Request: RESULT_TITLE_EMPTY")
        content = result.get("input_message_content")
        if not isinstance(content, dict) or "message_text" not in content:
            raise _ApiError(400, "Bad Request: can't parse input message content")
        text, entities, mode, raw_text = self._format(
            {
                "text": content["message_text"],
                "parse_mode": content.get("parse_mode"),
                "entities": content.get("entities"),
            }
        )
        markup = _reply_markup({"reply_markup": result.get("reply_markup")})
        if markup is not None and "inline_keyboard" not in markup:
            raise _ApiError(400, "Bad Request: REPLY_MARKUP_INVALID")
        chat = self._guest_chats[query.chat_id]
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            text=text,
            entities=entities,
            reply=chat.messages[query.message_id],
            html=raw_text,
            parse_mode=mode,
            reply_markup=markup,
            extra={"guest_bot_caller_user": copy.deepcopy(query.caller)},
        )
        inline = hashlib.sha256(f"{query.chat_id}:{message.message_id}".encode()).hexdigest()[:27]
        query.answered = inline
        self._inline[inline] = (chat.id, message.message_id)
        return {"inline_message_id": inline}

    def _send_invoice(self, params: JSON) -> JSON:
        """sendInvoice, checked as Telegram checks a Stars invoice (currency XTR: one
        price, a whole number of Stars, no provider token); other currencies need one."""
        chat = self._target_chat(params)
        title, description = str(params.get("title") or ""), str(params.get("description") or "")
        payload, currency = str(params.get("payload") or ""), str(params.get("currency") or "")
        if not 1 <= len(title) <= 32:
            raise _ApiError(400, "Bad Request: TITLE_INVALID")
        if not 1 <= len(description) <= 255:
            raise _ApiError(400, "Bad Request: DESCRIPTION_INVALID")
        if not 1 <= len(payload.encode()) <= 128:
            raise _ApiError(400, "Bad Request: INVOICE_PAYLOAD_INVALID")
        prices = params.get("prices")
        priced = isinstance(prices, list) and all(
            isinstance(p, dict) and p.get("label") and isinstance(p.get("amount"), int)
            for p in prices
        )
        if not priced or not prices:
            raise _ApiError(400, "Bad Request: can't parse prices JSON object")
        total = sum(int(p["amount"]) for p in prices)
        if currency == "XTR":
            if params.get("provider_token") or len(prices) != 1 or total < 1:
                raise _ApiError(400, "Bad Request: STARS_INVOICE_INVALID")
        elif not params.get("provider_token"):
            raise _ApiError(400, "Bad Request: PAYMENT_PROVIDER_INVALID")
        thread_id, reply = self._placement(chat, params)
        start = str(params.get("start_parameter") or "")
        invoice = {"title": title, "description": description, "currency": currency,
                   "total_amount": total, "start_parameter": start}  # fmt: skip
        message = self._store(
            chat, self._bot_user(), is_bot=True, thread_id=thread_id, reply=reply,
            reply_markup=_reply_markup(params, chat), extra={"invoice": invoice},
        )  # fmt: skip
        self.stars.invoices[(chat.id, message.message_id)] = {**invoice, "payload": payload}
        return copy.deepcopy(message.raw)

    def _answer_pre_checkout_query(self, params: JSON) -> bool:
        """Once per query and within 10 s of it (else Telegram's "query is too old"); an
        accepted query's ``successful_payment`` message update follows."""
        query_id = str(params.get("pre_checkout_query_id") or "")
        query = self.stars.checkouts.get(query_id)
        late = query is not None and self._clock() - query.at > 10
        if query is not None and (query.ok is not None or late):
            self.violations.append(
                f"answerPreCheckoutQuery {query_id}: "
                + ("answered again" if query.ok is not None else "answered after 10 s")
            )
        if query is None or query.ok is not None or query.expired or late:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        ok, error = _truthy(params.get("ok")), params.get("error_message")
        if not ok and not error:
            raise _ApiError(400, "Bad Request: ERROR_MESSAGE_EMPTY")
        query.ok, query.error_message = ok, None if ok else str(error)
        if ok:
            charge = "stx" + hashlib.sha256(f"charge:{query_id}".encode()).hexdigest()[:40]
            query.charge_id = charge
            self.stars.charges[charge] = StarCharge(
                query.user_id, query.total_amount, query.payload
            )
            paid = {
                "currency": query.currency, "total_amount": query.total_amount,
                "invoice_payload": query.payload, "telegram_payment_charge_id": charge,
                "provider_payment_charge_id": "",
            }  # fmt: skip
            sender = self._ensure_user(query.user_id).as_dict()
            message = self._store(
                self._chat(query.chat_id), sender, is_bot=False,
                extra={"successful_payment": paid},
            )  # fmt: skip
            self._payment_update({"message": copy.deepcopy(message.raw)})
        return True

    def _refund_star_payment(self, params: JSON) -> bool:
        """Gives a payment's Stars back, once per charge; as Telegram does, the payer's chat
        with the bot gets a ``refunded_payment`` service message (an update)."""
        charge_id = str(params.get("telegram_payment_charge_id") or "")
        charge = self.stars.charges.get(charge_id)
        if charge is None:
            raise _ApiError(400, "Bad Request: CHARGE_ID_INVALID")
        if charge.user_id != _coerce_int(params.get("user_id")):
            raise _ApiError(400, "Bad Request: USER_ID_INVALID")
        if charge.refunded:
            raise _ApiError(400, "Bad Request: CHARGE_ALREADY_REFUNDED")
        charge.refunded = True
        if charge.user_id in self._chats:
            refunded = {
                "currency": "XTR", "total_amount": charge.total_amount,
                "invoice_payload": charge.payload, "telegram_payment_charge_id": charge_id,
            }  # fmt: skip
            message = self._store(
                self._chat(charge.user_id), self._ensure_user(charge.user_id).as_dict(),
                is_bot=False, extra={"refunded_payment": refunded},
            )  # fmt: skip
            self._payment_update({"message": copy.deepcopy(message.raw)})
        return True

    def _edit_ephemeral_message_text(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        try:
            message = self._ephemeral(chat.id, _opt_int(params, "ephemeral_message_id") or 0)
        except KeyError:
            raise _ApiError(400, "Bad Request: message to edit not found") from None
        if message.raw["receiver_user"]["id"] != _opt_int(params, "receiver_user_id"):
            raise _ApiError(400, "Bad Request: message to edit not found")
        self._apply_edit(message, params)
        return True

    def _send_chat_action(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if params.get("action") not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        self._check_thread(chat, _opt_int(params, "message_thread_id"))
        return True

    def _delete_message_call(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        message_id = _opt_int(params, "message_id")
        if message_id is None:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        message = chat.messages.get(message_id)
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to delete not found")
        own = message.is_bot and message.from_id == self.bot_id
        if chat.type != "private" and not own and not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: message can't be deleted")
        message.deleted = True
        self._notify()
        return True

    # ----------------------------------------------------------------- storage helpers

    def _chat(self, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            raise KeyError(f"unknown chat {chat_id}: add it with add_private_chat/add_group")
        return chat

    def _get_file(self, params: JSON) -> JSON:
        file_id = params.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise _ApiError(400, "Bad Request: file_id not specified")
        found = self._files.get(file_id)
        if found is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        unique, _, size = found
        if size > (_LOCAL_FILE_LIMIT if self.local_mode else _DOWNLOAD_LIMIT):
            raise _ApiError(400, "Bad Request: file is too big")
        path = f"files/{file_id}"
        if self.local_mode:  # the server downloads the file to its disk, then answers
            self.local_file(file_id)
            path = self.local_paths[file_id]
        return {"file_id": file_id, "file_unique_id": unique, "file_size": size, "file_path": path}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """``GET /file/bot<token>/<file_path>``: the file, as Telegram's file server.

        In local mode telegram-bot-api serves no files (404); with ``serve_local_files``
        a web server in front serves the absolute paths getFile answered.
        """
        path = request.match_info["path"]
        response = self._file_response(request.match_info["token"], path)
        self.download_requests.append((path, response.status))
        if response.status == 200:
            self.downloads.append(path)
        self._notify()
        return response

    def _file_response(self, token: str, path: str) -> web.Response:
        if token != self.token or self._closing:
            return _error_response(_ApiError(401 if not self._closing else 502, "Unauthorized"))
        if self.local_mode:
            by_path = {answered: file_id for file_id, answered in self.local_paths.items()}
            file_id = by_path.get(path) if self.serve_local_files else None
        else:
            file_id = path.removeprefix("files/") if path.startswith("files/") else None
        found = self._files.get(file_id or "")
        if found is None or (not self.local_mode and found[2] > _DOWNLOAD_LIMIT):
            return _error_response(_ApiError(404, "Not Found"))
        return web.Response(body=found[1], content_type="application/octet-stream")

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


# --------------------------------------------------------------------------- module helpers


def _update_id(update: JSON) -> int:
    update_id = update.get("update_id")
    if isinstance(update_id, int) and not isinstance(update_id, bool):
        return update_id
    return -1


def _default_description(status: int, retry_after: int | None) -> str:
    if status == 429:
        return f"Too Many Requests: retry after {retry_after}"
    return {
        400: "Bad Request: injected failure",
        401: "Unauthorized",
        403: "Forbidden: bot was blocked by the user",
        404: "Not Found",
        409: _CONFLICT_POLL,
        500: "Internal Server Error",
        502: "Bad Gateway",
    }.get(status, f"Error {status}: injected failure")


def _canonical(method: str) -> str:
    canonical = _CANONICAL.get(method.lower())
    if canonical is None:
        raise ValueError(f"unknown Bot API method {method!r}")
    return canonical


def _drop_path(result: Any, path: str) -> None:
    """Remove the field at a dotted ``path`` ("chat", "from.is_bot") from a result object."""
    *parents, name = path.split(".")
    target = result
    for part in parents:
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict) or name not in target:
        raise ValueError(f"misbehave_next: the result has no field {path!r} to drop")
    del target[name]


def _html_page(status: int) -> str:
    """What a reverse proxy (nginx) or, for 200, a captive portal answers instead of JSON."""
    if status == 200:
        return (
            "<html><head><title>Sign in</title></head><body><h1>Sign in to the network</h1>"
            '<form method="post"><input name="accept" type="submit"></form></body></html>'
        )
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return (
        f"<html><head><title>{status} {phrase}</title></head><body>"
        f"<center><h1>{status} {phrase}</h1></center><hr><center>nginx</center></body></html>"
    )


def _json_response(status: int, body: JSON) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body, ensure_ascii=False),
        content_type=_JSON_TYPE,
    )


def _error_response(exc: _ApiError) -> web.Response:
    body: JSON = {"ok": False, "error_code": exc.status, "description": exc.description}
    if exc.retry_after is not None:
        body["parameters"] = {"retry_after": exc.retry_after}
    return _json_response(exc.status, body)


async def _read_params(request: web.Request) -> JSON:
    """Query string plus a JSON, urlencoded or multipart body, decoded like Telegram does."""
    merged: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        content_type = request.content_type
        if content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                raise _ApiError(400, "Bad Request: can't parse JSON object") from None
            if not isinstance(body, dict):
                raise _ApiError(400, "Bad Request: can't parse JSON object")
            merged.update(body)
        elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    merged[key] = {
                        "filename": value.filename,
                        "content_type": value.content_type,
                        "data": value.file.read(),
                    }
                else:
                    merged[key] = value
    return {key: _decode_param(key, value) for key, value in merged.items()}


def _image_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG (its IHDR) or a baseline/progressive JPEG (its SOF)."""
    if data.startswith(_PNG_SIGNATURE) and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        if width and height:
            return width, height
    elif data.startswith(b"\xff\xd8"):
        pos = 2
        while pos + 9 <= len(data) and data[pos] == 0xFF:
            marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2 : pos + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
                if width and height:
                    return width, height
                break
            pos += 2 + length
    raise _ApiError(400, "Bad Request: IMAGE_PROCESS_FAILED")


def _photo_sizes(data: bytes, width: int, height: int, chat_id: int, message_id: int) -> list[JSON]:
    """The PhotoSize array Telegram returns: a scaled copy per size, the largest last."""
    stem = f"{abs(chat_id)}x{message_id}"
    longest = max(width, height)
    sides = [side for side in _PHOTO_SIDES if side < longest] + [min(longest, _PHOTO_SIDES[-1])]
    sizes = []
    for side in sides:
        scale = side / longest
        sizes.append(
            {
                "file_id": f"AgACAgIAAxkDPH{stem}-{side}",
                "file_unique_id": f"AQADPH{stem}{side}",
                "width": max(1, round(width * scale)),
                "height": max(1, round(height * scale)),
                "file_size": max(1, round(len(data) * scale * scale)),
            }
        )
    return sizes


def _explicit_entities(value: Any) -> list[JSON]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _ApiError(400, "Bad Request: can't parse entities JSON object")
    entities: list[JSON] = []
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("type"), str)
            and _coerce_int(item.get("offset")) is not None
            and _coerce_int(item.get("length")) is not None
        ):
            raise _ApiError(400, "Bad Request: can't parse MessageEntity JSON object")
        offset, length = _coerce_int(item["offset"]) or 0, _coerce_int(item["length"]) or 0
        if offset >= 0 and length > 0:
            entities.append({**item, "offset": offset, "length": length})
    return entities


def _reply_markup(params: JSON, chat: _Chat | None = None) -> JSON | None:
    """The message's keyboard, checked like Telegram's; ``web_app`` buttons only in a
    private ``chat`` (when given), with an https:// URL."""
    markup = params.get("reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    keyboard = markup.get("inline_keyboard")
    if keyboard is None:
        return markup
    if not isinstance(keyboard, list) or not all(isinstance(row, list) for row in keyboard):
        raise _ApiError(400, 'Bad Request: field "inline_keyboard" must be an Array of Array')
    for row in keyboard:
        for button in row:
            _check_button(button)
            web_app = button.get("web_app")
            if web_app is not None and chat is not None and chat.type != "private":
                raise _ApiError(400, "Bad Request: BUTTON_TYPE_INVALID")
            if web_app is not None and not str(web_app.get("url", "")).startswith("https://"):
                raise _ApiError(400, "Bad Request: BUTTON_URL_INVALID")
    return markup


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise _ApiError(400, "Bad Request: can't parse inline keyboard button")
    if not _BUTTON_ACTIONS & button.keys():
        raise _ApiError(
            400,
            "Bad Request: can't parse inline keyboard button: "
            "Text buttons are unallowed in the inline keyboard",
        )
    data = button.get("callback_data")
    if data is not None and not 1 <= len(str(data).encode()) <= 64:
        raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


def _visible_markup(markup: JSON | None) -> JSON | None:
    """Only inline keyboards are part of the Message object Telegram returns."""
    if markup is not None and "inline_keyboard" in markup:
        return copy.deepcopy(markup)
    return None


def _set_or_drop(raw: JSON, key: str, value: Any) -> None:
    if value is None:
        raw.pop(key, None)
    else:
        raw[key] = value


def _media_flags(
    photo: bool, sticker: bool, voice: bool, document: bool, audio: bool = False
) -> list[tuple[str, bool]]:
    return [
        ("photo", photo), ("sticker", sticker), ("voice", voice), ("document", document),
        ("audio", audio),
    ]  # fmt: skip


#: Bots may download files of up to 20 MB (getFile answers "file is too big" above).
_DOWNLOAD_LIMIT = 20 * 1024 * 1024
#: A local server downloads files as big as Telegram keeps (2000 MB) for getFile.
_LOCAL_FILE_LIMIT = 2000 * 1024 * 1024


def _jpeg_bytes(seed: str, size: int) -> bytes:
    """Deterministic bytes with a JPEG's start and end markers."""
    block = hashlib.sha256(seed.encode()).digest()
    body = (block * (size // len(block) + 1))[:size]
    return b"\xff\xd8\xff\xe0" + body + b"\xff\xd9"


def _media_payload(kind: str, chat_id: int, message_id: int) -> JSON:
    """Plausible file objects (all fields aiogram requires) for an inbound media message."""
    stem = f"{abs(chat_id)}x{message_id}"
    file_id = f"AgACAgIAAxk{kind[:2].upper()}{stem}"
    unique = f"AQAD{kind[:1]}{stem}"
    if kind == "photo":
        sizes = [(90, 67, 1_402), (320, 240, 15_311), (1280, 960, 121_847)]
        return {
            "photo": [
                {
                    "file_id": f"{file_id}-{w}",
                    "file_unique_id": f"{unique}{w}",
                    "width": w,
                    "height": h,
                    "file_size": size,
                }
                for w, h, size in sizes
            ]
        }
    if kind == "sticker":
        return {
            "sticker": {
                "file_id": file_id,
                "file_unique_id": unique,
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "😀",
                "set_name": "FakeTelegramStickers",
                "file_size": 23_041,
            }
        }
    if kind == "voice":
        voice = {"duration": 3, "mime_type": "audio/ogg", "file_size": 9_877}
        return {"voice": {"file_id": file_id, "file_unique_id": unique, **voice}}
    if kind == "audio":
        audio = {"duration": 30, "mime_type": "audio/mpeg", "file_name": "audio.mp3"}
        return {"audio": {"file_id": file_id, "file_unique_id": unique, **audio}}
    document = {"file_name": "document.pdf", "mime_type": "application/pdf", "file_size": 54_321}
    return {"document": {"file_id": file_id, "file_unique_id": unique, **document}}


def _describe_predicate(predicate: Callable[[], bool]) -> str:
    try:
        source = inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
    source = " ".join(source.split())
    return source if len(source) <= 200 else source[:197] + "..."
