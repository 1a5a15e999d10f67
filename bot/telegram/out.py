"""Sending to Telegram: answer parts and notices, as typed outcomes the turn can act on.

:class:`TelegramOut` is the one object the bot sends through. It is made of:

- :mod:`bot.telegram.calls`: every call, its failures typed (:mod:`bot.telegram.outcomes`),
  text as HTML or a rich message; a part sent as a reply;
- :mod:`bot.telegram.notices`: plain-text notices, with buttons, or for one person;
- :mod:`bot.telegram.uploads`: attachments (voice notes, pictures), charts, documents;

and, here, what streams an answer: new parts (their sender waits out flood windows),
edits, drafts, "typing…"; and the chat's housekeeping: deleting a message, opening and
renaming a topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramNotFound
from aiogram.methods import EditMessageText
from aiogram.types import ForumTopic, InlineKeyboardMarkup

from .calls import SentMessage, calling
from .errors import (
    DraftPeerInvalidError,
    EditTargetGoneError,
    NotModifiedError,
    ThreadGoneError,
    UnknownMethodError,
)
from .format import Chunk
from .notices import Notices
from .outcomes import (
    AnswerRejectedError,
    DraftsUnavailableError,
    MessageGoneError,
    TelegramUnavailableError,
)
from .session import UnreadableResultError
from .uploads import Uploads

log = logging.getLogger("replychain.telegram")

#: The empty draft Telegram shows as "Thinking…" (no entities: never refused as HTML).
_THINKING = Chunk("", "")


class _EditMessageText(EditMessageText):
    __returning__ = SentMessage | bool


class _Typing:
    """Sends the typing action every ``interval`` seconds until the context ends.

    Ending never waits for a chat action in flight: it may be sitting out a
    flood-control window for minutes, and the answer it decorates must be
    recorded now (aiogram's ChatActionSender waits for it). A failed action
    ends the typing quietly: it is cosmetic.
    """

    def __init__(self, bot: Bot, chat_id: int, thread_id: int | None, interval: float) -> None:
        self.bot, self.chat_id, self.thread_id, self.interval = bot, chat_id, thread_id, interval
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Typing:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # (a cancellation of the caller still propagates)

    async def _run(self) -> None:
        while True:
            try:
                await self.bot.send_chat_action(
                    chat_id=self.chat_id, action="typing", message_thread_id=self.thread_id
                )
            except Exception as exc:
                log.debug("typing in chat %s stopped: %s", self.chat_id, type(exc).__name__)
                return
            await asyncio.sleep(self.interval)


class TelegramOut(Notices, Uploads):
    """Sends, edits and deletes messages; the only place the turn flow talks to Telegram."""

    #: Whether answers stream as drafts in private chats; the first server that knows no
    #: ``sendMessageDraft`` turns it off for the life of the process.
    drafts = True

    async def send_part(
        self,
        chat_id: int,
        chunk: Chunk,
        *,
        reply_to: int | None,
        thread_id: int | None,
        ready: Callable[[bool], Awaitable[None]],
        markup: InlineKeyboardMarkup | None = None,
    ) -> int:
        """Send a new answer part, ``ready(again)`` awaited just before each try: a part
        is noted (the part ledger) right before it leaves, never flood seconds before
        (``markup``: buttons under it).

        A flood window (open before the call or opened by its 429) is waited out here,
        then the part is noted again (``again``) and sent; for at most the flood
        control's ``max_wait`` in all, then it counts as an outage.
        """
        return await self._caller_waits(
            chat_id, ready,
            lambda: self.send(
                chat_id, chunk, reply_to=reply_to, thread_id=thread_id, markup=markup, part=True
            ),
        )  # fmt: skip

    async def edit(self, chat_id: int, message_id: int, chunk: Chunk) -> None:
        """Replace a part's text; "not modified" counts as done.

        Raises :class:`MessageGoneError` when the message was deleted.
        """
        try:
            edit = calling(self.bot, _EditMessageText)
            await self._formatted(
                edit,
                chunk,
                rich=edit,
                chat_id=chat_id,
                message_id=message_id,
            )
        except NotModifiedError:
            pass
        except EditTargetGoneError as exc:
            raise MessageGoneError(exc.message) from exc
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            log.info("chat %s: %s; the edit counts as done", chat_id, exc.message)

    async def draft(
        self, chat_id: int, draft_id: int, chunk: Chunk | None, *, thread_id: int | None
    ) -> None:
        """Show ``chunk`` as the chat's draft with a stop button (None: "Thinking…").

        Raises :class:`DraftsUnavailableError` when the chat takes no drafts or the
        server does not know the method; the latter also turns drafts off for good.
        """
        try:
            await self._formatted(
                self.bot.send_message_draft,
                chunk or _THINKING,
                rich=self.bot.send_rich_message_draft,
                chat_id=chat_id,
                draft_id=draft_id,
                message_thread_id=thread_id,
                # the stop button; the partial text stays until the final message replaces it
                can_stop=True,
                keep_on_stop=True,
            )
        except UnknownMethodError as exc:  # (the session logged it, once)
            self.drafts = False
            raise DraftsUnavailableError(exc.message) from exc
        except (DraftPeerInvalidError, ThreadGoneError) as exc:
            # the answer goes on by sending messages, which handle both cases
            raise DraftsUnavailableError(exc.message) from exc
        except TelegramUnavailableError as exc:
            if not exc.server:
                raise
            # drafts are a nicety: an answer never waits for a server failing them
            log.warning("drafts in chat %s failed (%s); this answer goes on by editing",
                        chat_id, exc)  # fmt: skip
            raise DraftsUnavailableError(str(exc)) from exc
        except TelegramBadRequest as exc:
            raise AnswerRejectedError(exc.message) from exc
        except UnreadableResultError as exc:
            log.info("chat %s: %s; the draft counts as shown", chat_id, exc.message)

    def typing(
        self, chat_id: int, thread_id: int | None, interval: float
    ) -> AbstractAsyncContextManager[object]:
        """Shows "typing…" in the chat until the context ends."""
        return _Typing(self.bot, chat_id, thread_id, interval)

    async def delete(self, chat_id: int, message_id: int) -> None:
        """Best effort: a message that cannot be deleted is left as it is."""
        try:
            await self._call(self.bot.delete_message(chat_id=chat_id, message_id=message_id))
        except (TelegramBadRequest, UnreadableResultError) as exc:
            log.info("could not delete message %s: %s", message_id, exc.message)

    async def rename_topic(self, chat_id: int, thread_id: int, name: str) -> None:
        """Rename a topic (``editForumTopic``); a refusal is raised as Telegram's error."""
        await self._call(
            self.bot.edit_forum_topic(chat_id=chat_id, message_thread_id=thread_id, name=name)
        )

    async def open_topic(self, chat_id: int, name: str) -> int:
        """A new topic of a private chat with topics (``createForumTopic``, Bot API 9.4):
        its ``message_thread_id``.

        Raises :class:`UnknownMethodError` for a server without the method (the session
        logs it; a bare 404 is taken for it too, with a line of its own), Telegram's
        refusal as :class:`TelegramBadRequest` (the user turned topics off, say), and the
        errors of any call (:class:`ChatUnavailableError`,
        :class:`TelegramUnavailableError`).
        """

        async def create() -> ForumTopic:
            try:
                return await self.bot.create_forum_topic(chat_id=chat_id, name=name)
            except UnknownMethodError:
                raise
            except TelegramNotFound as exc:
                log.warning(
                    "the Bot API server answered createForumTopic 404 (%s); new "
                    "conversations are answered where they were asked", exc.message,
                )  # fmt: skip
                raise UnknownMethodError(method=exc.method, message=exc.message) from exc

        topic: ForumTopic = await self._call(create())
        return topic.message_thread_id
