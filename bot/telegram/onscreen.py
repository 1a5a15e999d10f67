"""An answer's messages on screen: its parts and attachments, and their journal.

Every new message goes through the :class:`PartJournal`: it is announced before
it is sent (so nothing is sent while the journal cannot record it, e.g. while
Redis is away) and recorded once Telegram accepted it, before anything else
is sent, so a part on screen is never forgotten by a crash. Drafts are not
journaled: they vanish by themselves.

After its text an answer may have *attachments*, parts that are not text (its voice
notes, its pictures: :class:`~bot.telegram.uploads.Attachment`), sent by
:meth:`OnScreen.attach` through the same journal, numbered apart from the text's parts
(a run again may need more or fewer text parts, never other attachments).

:class:`OnScreen` keeps them: it sends, edits and deletes an answer's parts at the
per-message pace and within the group's budget; the writer
(:class:`~bot.telegram.writer.AnswerWriter`) decides what they show and when.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from aiogram.types import InlineKeyboardMarkup

from .budget import ChatBudget
from .format import Chunk
from .out import TelegramOut
from .outcomes import MessageGoneError
from .uploads import CAPTION_LIMIT, Attachment


@dataclass(slots=True)
class Part:
    message_id: int
    chunk: Chunk | None  # None: sent by an earlier run, content unknown


class JournalUnavailableError(Exception):
    """The journal cannot record a new part right now: do not send it yet."""


class PartJournal(Protocol):
    """Where an answer's parts are recorded (the turn's state)."""

    async def sending(
        self, count: int, *, wait: bool, again: bool = False, attached: bool = False
    ) -> None:
        """Part number ``count`` is about to be sent (``again``: after a wait, such as
        flood control's, even if it was noted before; ``attached``: attachment number
        ``count``).

        Raises :class:`JournalUnavailableError` when that cannot be recorded
        now, unless ``wait``, which waits until it can.
        """

    async def sent(self, parts: list[int], *, last: bool = False, attached: bool = False) -> None:
        """Telegram accepted these parts (the last one is new; ``attached``: these are
        the answer's attachments); waits until recorded.

        ``last``: nothing more is sent or edited before the answer's final write,
        which may record it instead.
        """


class NoJournal:
    """A journal that records nothing: every part may be sent at once."""

    async def sending(
        self, count: int, *, wait: bool, again: bool = False, attached: bool = False
    ) -> None:
        return None

    async def sent(self, parts: list[int], *, last: bool = False, attached: bool = False) -> None:
        return None


#: The least time between two edits of one message (Telegram's per-message pace).
EDIT_GAP = 1.0


class OnScreen:
    """One answer's parts and attachments on screen, each recorded in the journal."""

    def __init__(
        self,
        out: TelegramOut,
        *,
        chat_id: int,
        reply_to: int | None,
        thread_id: int | None,
        existing: Sequence[int] = (),
        attached: Sequence[int] = (),
        budget: ChatBudget | None = None,
        journal: PartJournal | None = None,
    ) -> None:
        """``existing``, ``attached``: the parts and attachments an earlier run sent.
        ``budget``: the group's message budget (groups only). ``journal``: where new
        parts are announced and recorded (none by default)."""
        self._out = out
        self._budget = budget
        self._chat_id = chat_id
        self._reply_to = reply_to
        self._thread_id = thread_id
        #: Put before the first part's text (``[depth:N] ``); set once the depth is known.
        self.prefix = ""
        #: Parts an earlier run of this turn already sent are edited, never re-sent.
        self.existing = tuple(existing)
        self.parts: list[Part] = [Part(m, None) for m in existing]
        #: The attachments on screen, in order: those an earlier run sent, then this run's.
        self.existing_attached = tuple(attached)
        self.attached: list[int] = list(attached)
        #: The last part was left for the turn's final write to record: an attachment,
        #: sent before that write, has it recorded first.
        self._left_to_the_end = False
        #: Where new parts are announced and recorded.
        self.journal: PartJournal = journal or NoJournal()
        #: The answer is ending (its final text or a notice): a new part waits until the
        #: journal can record it; before, one it cannot record now is not sent now.
        self._closing = False
        #: When a part was last edited: the final edit keeps the per-message edit rate,
        #: and nothing else delays it (the first part's send is not an edit).
        self._last_edit = float("-inf")

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def message_ids(self) -> list[int]:
        """The ids of the text's parts."""
        return [p.message_id for p in self.parts]

    @property
    def every_id(self) -> list[int]:
        """The ids of every part on screen: the text's, then the attachments'."""
        return [*self.message_ids, *self.attached]

    async def settle(self) -> None:
        """Record the final text's last part now if it was left for the turn's final write
        (which no longer follows it at once: the attachments come first)."""
        if self._left_to_the_end:
            await self.journal.sent(self.message_ids)
            self._left_to_the_end = False

    async def attach(self, number: int, attachment: Attachment) -> int:
        """Send attachment ``number`` (the next one: those before it are on screen) as a
        reply, announced to the journal before it is sent and recorded once Telegram names
        its id (waiting for Redis if need be: the text is on screen). Its id.

        An answer without text (a picture alone) shows the prefix (``[depth:N] ``) at the
        start of its first attachment's caption; a caption is cut to Telegram's limit.

        Raises :class:`~bot.telegram.outcomes.AnswerRejectedError` when Telegram refuses it.
        """
        caption = attachment.caption
        if number == 1 and not self.parts:
            caption = self.prefix + caption
        if len(caption) > CAPTION_LIMIT:
            caption = caption[: CAPTION_LIMIT - 1] + "…"
        attachment = replace(attachment, caption=caption)
        await self.settle()

        async def note(again: bool) -> None:  # again: after a flood wait, which made it stale
            await self.journal.sending(number, wait=True, again=again, attached=True)

        self._spend()
        message_id = await self._out.send_attachment(
            self._chat_id, attachment, reply_to=self._reply_to, thread_id=self._thread_id,
            ready=note,
        )  # fmt: skip
        self.attached.append(message_id)
        await self.journal.sent(self.attached, attached=True)  # before anything else
        return message_id

    async def _push_plain(self, text: str, markup: InlineKeyboardMarkup | None = None) -> None:
        chunk = Chunk(text, text)
        if self.parts:
            try:
                await self._edit(self.parts[0].message_id, chunk)
            except MessageGoneError:
                self.parts[0].message_id = await self._send_new(chunk, 1)
            self.parts[0].chunk = chunk
            await self._drop_extra(1)
            return
        self.parts.append(Part(await self._send_new(chunk, 1, markup), chunk))
        await self.journal.sent(self.message_ids)

    async def _pace(self) -> None:
        """The final text keeps the per-message edit pace and the group's budget, and
        nothing else holds it (not the streaming interval)."""
        if not self.parts:
            return
        wait = self._last_edit + EDIT_GAP - time.monotonic()
        if self._budget is not None:
            wait = max(wait, self._budget.wait(self._chat_id))
        if wait > 0:
            await asyncio.sleep(wait)  # a rate, not a retry

    async def _edit(self, message_id: int, chunk: Chunk) -> None:
        """Edit a part, within the per-message edit pace.

        The pace runs from the end of the call too: Telegram counts an edit when it
        arrives, which a large one (a rich message of 30,000 characters) or one slowed
        on its way does late.
        """
        self._last_edit = time.monotonic()
        self._spend()
        try:
            await self._out.edit(self._chat_id, message_id, chunk)
        finally:
            self._last_edit = time.monotonic()

    def _spend(self) -> None:
        """A message or an edit goes to the chat (the group's budget)."""
        if self._budget is not None:
            self._budget.take(self._chat_id)

    async def _send_new(
        self, chunk: Chunk, number: int, markup: InlineKeyboardMarkup | None = None
    ) -> int:
        """Send a new message as part ``number``: announced to the journal first.

        While streaming, a journal that cannot record it now (Redis away) means
        "not now"; the final text waits until it can.
        """

        async def note(again: bool) -> None:  # again: after a flood wait, which made it stale
            await self.journal.sending(number, wait=self._closing, again=again)

        self._spend()
        message_id = await self._out.send_part(
            self._chat_id, chunk, reply_to=self._reply_to, thread_id=self._thread_id, ready=note,
            markup=markup,
        )  # fmt: skip
        if number <= len(self.parts):  # a replacement: record it before anything else
            self.parts[number - 1].message_id = message_id
            await self.journal.sent(self.message_ids)
        return message_id

    async def _drop_extra(self, keep: int) -> None:
        """Parts an earlier run sent beyond what this answer needs are deleted."""
        for part in self.parts[keep:]:
            if part.chunk is None:
                await self._out.delete(self._chat_id, part.message_id)
        self.parts[keep:] = [p for p in self.parts[keep:] if p.chunk is not None]
