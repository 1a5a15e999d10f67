"""Telegram's refusals as types: the one place that reads an error's description.

Telegram tells most of its 400s apart only by the text of ``description``.
:meth:`bot.telegram.session.BotApiSession.check_response` passes every 400 and
404 through :func:`classify`, so the code above catches types, never text::

    TelegramBadRequest (aiogram: 400)
    ├── EntitiesRejectedError    "can't parse entities", "unsupported start tag"
    │   └── RichRejectedError    "RICH_MESSAGE_…", "can't parse rich message", or "text is
    │                            empty" for a request carrying a rich message (a server
    │                            that does not read it): send this answer as HTML
    ├── NotModifiedError         "message is not modified"
    ├── EditTargetGoneError      "message to edit not found", "MESSAGE_ID_INVALID"
    ├── DraftPeerInvalidError    "TEXTDRAFT_PEER_INVALID" (a draft outside a private chat)
    ├── ThreadGoneError          "message thread not found" (the topic was deleted)
    ├── QueryClosedError         "query is too old …", "QUERY_ID_INVALID" (answered already,
    │                            or too old: a guest message's or a button's query)
    ├── ChargeRefundedError      "CHARGE_ALREADY_REFUNDED" (refundStarPayment: done before)
    └── OversizeFileError        "file is too big" (getFile: the server will not serve it)
    TelegramNotFound (aiogram: 404)
    └── UnknownMethodError       the server lacks the method, however it says so: a 404
                                 "method not found" (telegram-bot-api), or any status
                                 (a 500 or 501 of an emulator, a 400) whose text names
                                 the method as unknown, unsupported or not implemented

A 400 or 404 whose description names none of these stays aiogram's own error.
:func:`lacks_method` reads the other answers (a 5xx, a body without ``ok``) for the
session (:mod:`bot.telegram.session`).
"""

from __future__ import annotations

import re

from aiogram.exceptions import TelegramAPIError, TelegramBadRequest, TelegramNotFound


class EntitiesRejectedError(TelegramBadRequest):
    """Telegram could not parse the message's formatting (its HTML entities)."""


class NotModifiedError(TelegramBadRequest):
    """The edit would leave the message as it is."""


class EditTargetGoneError(TelegramBadRequest):
    """The message to edit no longer exists (or never did)."""


class DraftPeerInvalidError(TelegramBadRequest):
    """Drafts are refused in this chat (only private chats take them)."""


class ThreadGoneError(TelegramBadRequest):
    """The forum topic the message was meant for no longer exists."""


class QueryClosedError(TelegramBadRequest):
    """The query can no longer be answered: answered already, too old, or unknown
    (Telegram tells these apart in no way)."""


class ChargeRefundedError(TelegramBadRequest):
    """The Stars payment was refunded already (by an earlier refundStarPayment)."""


class OversizeFileError(TelegramBadRequest):
    """A file too big for the Bot API server: getFile will not serve it, or an upload is
    over the server's limit."""


class RichRejectedError(EntitiesRejectedError):
    """Telegram refused this rich message (its markup, a limit): the answer goes on as
    HTML. Other refusals of a rich request (the chat, the message replied to) are
    refusals of any message."""


class UnknownMethodError(TelegramNotFound):
    """The Bot API server does not know the method (an older or self-hosted server)."""


#: How servers say they lack a method: telegram-bot-api's "Not Found: method not found",
#: telegram-test-api's "API method 'x' is not supported", "unknown method", "Method not
#: implemented", ... (never "message to edit not found": the word "method" is needed).
_LACKS_METHOD = re.compile(
    r"\bmethod\b[^.]{0,80}?\b(?:not (?:found|supported|implemented|available)"
    r"|unknown|unsupported|does ?n[o']t exist)"
    r"|\b(?:unknown|unsupported|unimplemented|no such) (?:bot )?(?:api )?method\b"
)


def lacks_method(status: int, text: str) -> bool:
    """Whether an answer of HTTP ``status`` whose text (description, message or body) is
    ``text`` says the server lacks the method called: its text says so, or the status is
    501 Not Implemented."""
    return status == 501 or _LACKS_METHOD.search(text.lower()) is not None


#: (words in the lower-cased description, the error they name); the first match wins,
#: and only where the typed error refines the one aiogram raised (a 400's, a 404's).
_BY_DESCRIPTION: tuple[tuple[tuple[str, ...], type[TelegramAPIError]], ...] = (
    (("rich_message_", "can't parse rich message"), RichRejectedError),
    (("can't parse entities", "unsupported start tag"), EntitiesRejectedError),
    (("message is not modified",), NotModifiedError),
    (("message to edit not found", "message_id_invalid"), EditTargetGoneError),
    (("textdraft_peer_invalid",), DraftPeerInvalidError),
    (("message thread not found",), ThreadGoneError),
    (("query is too old", "query_id_invalid"), QueryClosedError),
    (("file is too big",), OversizeFileError),
    (("charge_already_refunded",), ChargeRefundedError),
)


#: What a server that does not read ``rich_message`` says of an edit carrying one.
_NO_TEXT = ("text is empty", "text must be non-empty")


def classify(exc: TelegramAPIError, status: int = 400) -> TelegramAPIError:
    """The typed error ``exc``'s description names, or ``exc`` itself when it names none."""
    if lacks_method(status, exc.message or ""):
        return UnknownMethodError(method=exc.method, message=exc.message)
    text = (exc.message or "").lower()
    if getattr(exc.method, "rich_message", None) is not None and any(w in text for w in _NO_TEXT):
        return RichRejectedError(method=exc.method, message=exc.message)
    for words, kind in _BY_DESCRIPTION:
        if issubclass(kind, type(exc)) and any(w in text for w in words):
            return kind(method=exc.method, message=exc.message)
    return exc
