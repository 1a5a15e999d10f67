"""Guest mode (Bot API 10.0): answering where the bot was summoned but is not a member.

A user mentions the bot in any chat; the bot gets a ``guest_message`` whose
``guest_query_id`` it answers once, with ``answerGuestQuery``: Telegram posts that one
message into the chat as the bot's. The bot learns only the answer's
``inline_message_id``, never its message id in that chat, and a reply to it arrives
as a ``guest_message`` whose ``reply_to_message`` is the answer as the chat shows it:
its text, entities and inline keyboard. So every guest answer carries one button whose
``callback_data`` names it (:func:`answer_data`, "guest:<m>" for the answer to message
m), and the reply is routed by that name (:func:`replied_answer`), never by its text.

A guest answer is the one message of its turn, known before it is sent as part
``-m`` (message ids are positive: it never meets one), under the guest chat's own
scope. The part ledger's rules hold as everywhere: announced before the call, recorded
after it. A run that dies between the two finds the query closed when it answers again,
and records the part all the same: if the first call posted it, a reply to it must find
it; if not, no message names it.

Answers arrive whole: an answer posted early could be edited (``editMessageText`` with
the ``inline_message_id``), but a run that died before recording that id could neither
finish it nor post another, leaving half an answer for good. One call per answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from aiogram.enums import ParseMode
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InlineQueryResultArticle,
    InputTextMessageContent,
    Message,
)

from ..i18n import N_, _
from .errors import EntitiesRejectedError, QueryClosedError, UnknownMethodError
from .format import TELEGRAM_LIMIT, Chunk, escape_html, render_chunks, utf16_len
from .onscreen import NoJournal, PartJournal
from .out import TelegramOut
from .outcomes import AnswerRejectedError, ChatUnavailableError
from .session import UnreadableResultError

log = logging.getLogger("replychain.guest")

#: The button under every guest answer: it names the answer for a reply to it.
BUTTON_TEXT = N_("↩ How to continue")
#: What pressing it shows (a callback answer: at most 200 characters).
HOW_TO_CONTINUE = N_(
    "Reply to this answer and mention @{bot} to continue the conversation; "
    "reply twice to one answer to branch."
)
#: Under an answer longer than one message (a guest answer is one message).
CUT = N_("… (too long for one message here: reply “go on” for the rest)")
#: /help (and /start) where the bot is a guest.
HELP = N_(
    "I am a chat bot for an AI model. Mention me with a question and I answer here. "
    "Reply to my answer (mentioning me) to continue that conversation; reply twice to one "
    "answer to branch; a mention that replies to somebody's message gives me that message "
    "to read."
)
#: Commands that need the bot's own chat.
COMMAND_HINT = N_(
    "Here I can only answer: mention me with a question, or reply to my answer to go on "
    "(/retry too). /tree, /export, /usage and /forget work in my own chat."
)
#: The title of the inline result (Telegram requires one; the chat shows the message).
_TITLE = "Answer"
_DATA = "guest:"


def answer_data(message_id: int) -> str:
    """The callback data naming the guest answer to message ``message_id``."""
    return f"{_DATA}{message_id}"


def part_of(message_id: int) -> int:
    """The part id of the guest answer to message ``message_id`` (never a message id)."""
    return -message_id


def replied_answer(message: Message, bot_id: int) -> int | None:
    """The part id of the bot's guest answer ``message`` replies to, by the name its
    button carries; ``None`` when it replies to no answer of this bot's."""
    target = message.reply_to_message
    if target is None or target.from_user is None or target.from_user.id != bot_id:
        return None
    markup = target.reply_markup
    for row in markup.inline_keyboard if markup is not None else []:
        for button in row:
            data = button.callback_data or ""
            if data.startswith(_DATA) and data[len(_DATA) :].isdigit():
                return part_of(int(data[len(_DATA) :]))
    return None


def quoted(message: Message) -> str:
    """The message a guest message replies to, as context for the model: its text, or
    a placeholder for what has none."""
    target = message.reply_to_message
    if target is None:
        return ""
    text = target.text or target.caption or f"[{target.content_type} without text]"
    who = target.from_user.full_name if target.from_user is not None else "someone"
    lines = "\n".join(f"> {line}" for line in text.splitlines())
    return f"[quoted message from {who}]\n{lines}\n\n"


def _one_message(text: str, prefix: str, reasoning: str) -> Chunk:
    """The answer as one message: cut, with a note, when longer than one."""
    chunks = render_chunks(text, prefix=prefix, reasoning=reasoning)
    if len(chunks) == 1:
        return chunks[0]
    cut = _(CUT)
    room = TELEGRAM_LIMIT - utf16_len(cut) - 2
    first = render_chunks(text, prefix=prefix, reasoning=reasoning, limit=room)[0]
    return Chunk(f"{first.html}\n\n{escape_html(cut)}", f"{first.plain}\n\n{cut}")


async def post(out: TelegramOut, query_id: str, chunk: Chunk, *, name: int | None) -> str:
    """Answer guest query ``query_id`` with ``chunk``, the button naming message ``name``'s
    answer under it (``None``: a local notice, which continues nothing: no button); its
    ``inline_message_id``. Formatting Telegram rejects is dropped.

    Raises :class:`QueryClosedError` when the query was answered already or is too old,
    and :mod:`bot.telegram.outcomes`' typed errors otherwise.
    """
    markup = None
    if name is not None:
        button = InlineKeyboardButton(text=_(BUTTON_TEXT), callback_data=answer_data(name))
        markup = InlineKeyboardMarkup(inline_keyboard=[[button]])

    def result(text: str, mode: str | None) -> InlineQueryResultArticle:
        content = InputTextMessageContent(message_text=text, parse_mode=mode)
        return InlineQueryResultArticle(
            id=str(name or 0), title=_TITLE, input_message_content=content, reply_markup=markup
        )

    bot = out.bot
    try:
        try:
            sent = await out._call(
                bot.answer_guest_query(
                    guest_query_id=query_id, result=result(chunk.html, ParseMode.HTML)
                )
            )
        except EntitiesRejectedError as exc:
            log.warning("Telegram rejected formatting (%s); sending plain text", exc.message)
            sent = await out._call(
                bot.answer_guest_query(guest_query_id=query_id, result=result(chunk.plain, None))
            )
    except QueryClosedError:
        raise
    except UnknownMethodError as exc:  # no way to answer there at all (the session said so)
        raise ChatUnavailableError(exc.message) from exc
    except TelegramBadRequest as exc:
        raise AnswerRejectedError(exc.message) from exc
    except UnreadableResultError as exc:  # answered; what it said cannot be read
        log.info("answerGuestQuery: %s; the answer counts as posted", exc.message)
        return ""
    return str(getattr(sent, "inline_message_id", ""))


class GuestWriter:
    """The answer writer of a guest turn: the same steps as
    :class:`~bot.telegram.writer.AnswerWriter`, one message posted once at the end."""

    def __init__(
        self, out: TelegramOut, *, query_id: str, message_id: int,
        existing: Sequence[int] = (), journal: PartJournal | None = None,
    ) -> None:  # fmt: skip
        self._out = out
        self._query = query_id
        self._name = message_id
        #: Put before the answer's text (``[depth:N] ``); set once the depth is known.
        self.prefix = ""
        #: The part an earlier run recorded (posted: never posted again).
        self.existing = tuple(existing)
        self.message_ids: list[int] = list(existing)
        self.journal: PartJournal = journal or NoJournal()
        self.first_shown_at: float | None = None
        self._latest = ""

    @property
    def every_id(self) -> list[int]:
        """The ids of every part on screen: the one message (a guest answer has no
        attachments)."""
        return self.message_ids

    async def start(self) -> None:
        """Nothing to show while the model writes: no chat action reaches a guest chat."""

    def update(self, text: str) -> None:
        self._latest = text

    def think(self, thoughts: str) -> None:
        """A reasoning model's thoughts: nowhere to show them before the answer."""

    def ended(self) -> None:
        """The text is complete; :meth:`finish` posts it."""

    def next_new_part(self, text: str, reasoning: str = "") -> int:
        """1 while the answer is not posted (announced with the stored answer), else 0."""
        return 0 if self.message_ids else 1

    async def finish(self, text: str, *, reasoning: str = "") -> list[int]:
        return await self._post(_one_message(text, self.prefix, reasoning))

    async def fail(self, notice: str, *, markup: InlineKeyboardMarkup | None = None) -> list[int]:
        """End with a notice, after what the model said so far, if anything (a guest
        answer has its own button: ``markup`` is not shown)."""
        text = f"{self._latest}\n\n{notice}" if self._latest.strip() else notice
        if self._latest.strip():
            return await self._post(_one_message(text, self.prefix, ""))
        return await self._post(Chunk(escape_html(notice), notice))

    async def close(self) -> None:
        """Nothing runs in the background."""

    async def _post(self, chunk: Chunk) -> list[int]:
        if self.message_ids:
            return self.message_ids  # posted by an earlier run: a query is answered once
        part = part_of(self._name)
        await self.journal.sending(1, wait=True)
        try:
            await post(self._out, self._query, chunk, name=self._name)
        except QueryClosedError as exc:
            # answered by an earlier run that died before recording it, or too old to
            # answer: recorded all the same (see the module's docstring)
            log.info("guest query of message %s is closed (%s)", self._name, exc.message)
        else:
            self.first_shown_at = time.monotonic()
        self.message_ids = [part]
        await self.journal.sent(self.message_ids, last=True)
        return self.message_ids
