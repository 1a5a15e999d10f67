"""The fake Telegram server's records (calls, messages, drafts, chats, users), its errors,
and the Bot API rules it checks: method names, limits, parameters, update types."""

from __future__ import annotations

import contextlib
import http
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import web

JSON = dict[str, Any]

#: The ways :meth:`FakeTelegram.misbehave_next` breaks an answer (see its docstring).
Misbehaviour = Literal[
    "missing_field", "extra_fields", "null_result", "no_ok", "html", "bare_error"
]

_CONFLICT_POLL: Final = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)

_JSON_TYPE: Final = "application/json"

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


def _set_or_drop(raw: JSON, key: str, value: Any) -> None:
    if value is None:
        raw.pop(key, None)
    else:
        raw[key] = value


def _describe_predicate(predicate: Callable[[], bool]) -> str:
    try:
        source = inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
    source = " ".join(source.split())
    return source if len(source) <= 200 else source[:197] + "..."


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
