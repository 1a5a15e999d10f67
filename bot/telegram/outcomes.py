"""What a send to Telegram may end in: the six typed errors the turn acts on.

Every Telegram failure a turn may meet becomes one of them (the session,
:mod:`bot.telegram.session`, has already classified odd answers, typed refusals by
their description (:mod:`bot.telegram.errors`) and waited out flood control)::

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
"""

from __future__ import annotations


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
