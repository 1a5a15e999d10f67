"""Telegram's refusals as types: the one place that reads an error's description.

Telegram tells most of its 400s apart only by the text of ``description``.
:meth:`bot.telegram.session.BotApiSession.check_response` passes every 400 and
404 through :func:`classify`, so the code above catches types, never text::

    TelegramBadRequest (aiogram: 400)
    ├── EntitiesRejectedError    "can't parse entities", "unsupported start tag"
    ├── NotModifiedError         "message is not modified"
    ├── EditTargetGoneError      "message to edit not found", "MESSAGE_ID_INVALID"
    ├── DraftPeerInvalidError    "TEXTDRAFT_PEER_INVALID" (a draft outside a private chat)
    ├── ThreadGoneError          "message thread not found" (the topic was deleted)
    ├── QueryClosedError         "query is too old …", "QUERY_ID_INVALID" (answered already,
    │                            or too old: a guest message's or a button's query)
    └── OversizeFileError        "file is too big" (getFile: the server will not serve it)
    TelegramNotFound (aiogram: 404)
    └── UnknownMethodError       "method not found" (an older or self-hosted server)

A 400 or 404 whose description names none of these stays aiogram's own error.
"""

from __future__ import annotations

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


class OversizeFileError(TelegramBadRequest):
    """A file too big for the Bot API server: getFile will not serve it, or an upload is
    over the server's limit."""


class UnknownMethodError(TelegramNotFound):
    """The Bot API server does not know the method (an older or self-hosted server)."""


#: (words in the lower-cased description, the error they name); the first match wins,
#: and only where the typed error refines the one aiogram raised (a 400's, a 404's).
_BY_DESCRIPTION: tuple[tuple[tuple[str, ...], type[TelegramAPIError]], ...] = (
    (("can't parse entities", "unsupported start tag"), EntitiesRejectedError),
    (("message is not modified",), NotModifiedError),
    (("message to edit not found", "message_id_invalid"), EditTargetGoneError),
    (("textdraft_peer_invalid",), DraftPeerInvalidError),
    (("message thread not found",), ThreadGoneError),
    (("query is too old", "query_id_invalid"), QueryClosedError),
    (("file is too big",), OversizeFileError),
    (("method not found",), UnknownMethodError),
)


def classify(exc: TelegramAPIError) -> TelegramAPIError:
    """The typed error ``exc``'s description names, or ``exc`` itself when it names none."""
    text = (exc.message or "").lower()
    for words, kind in _BY_DESCRIPTION:
        if issubclass(kind, type(exc)) and any(w in text for w in words):
            return kind(method=exc.method, message=exc.message)
    return exc
