"""Streaming an answer into Telegram: show it early, grow it by throttled edits.

While the model streams, :class:`AnswerWriter` re-renders the whole text so far
and brings the Telegram messages in line: the first part is sent as soon as
text exists, later parts are sent when the answer outgrows 4096 characters, and
changed parts are edited at most once per ``edit_interval`` seconds. A typing
action is shown until the first part is out.
Every new part goes through the :class:`PartJournal`: it is announced before
it is sent (so nothing is sent while the journal cannot record it, e.g. while
Redis is away) and recorded once Telegram accepted it, before anything else
is sent, so a part on screen is never forgotten by a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from .format import Chunk, render_chunks
from .out import ChatUnavailableError, MessageGoneError, TelegramOut
from .session import AFTER_FLOOD_WAIT

log = logging.getLogger("replychain.answer")

TYPING_EVERY = 4.5  # Telegram shows a chat action for about 5 s
#: The first part waits this long for more text, so a short answer arrives whole.
FIRST_SHOW_DELAY = 0.5


@dataclass(slots=True)
class Part:
    message_id: int
    chunk: Chunk | None  # None: sent by an earlier run, content unknown


class JournalUnavailableError(Exception):
    """The journal cannot record a new part right now: do not send it yet."""


class PartJournal(Protocol):
    """Where an answer's parts are recorded (the turn's state)."""

    async def sending(self, count: int, *, wait: bool) -> None:
        """Part number ``count`` is about to be sent.

        Raises :class:`JournalUnavailableError` when that cannot be recorded
        now, unless ``wait``, which waits until it can.
        """

    async def sent(self, parts: list[int], *, last: bool = False) -> None:
        """Telegram accepted these parts (the last one is new); waits until recorded.

        ``last``: nothing more is sent or edited before the answer's final write,
        which may record it instead.
        """


class _NoJournal:
    async def sending(self, count: int, *, wait: bool) -> None:
        return None

    async def sent(self, parts: list[int], *, last: bool = False) -> None:
        return None


class AnswerWriter:
    """One answer's Telegram messages, from the first token to the final text."""

    def __init__(
        self,
        out: TelegramOut,
        *,
        chat_id: int,
        reply_to: int | None,
        thread_id: int | None,
        edit_interval: float,
        existing: Sequence[int] = (),
    ) -> None:
        self._out = out
        self._chat_id = chat_id
        self._reply_to = reply_to
        self._thread_id = thread_id
        #: Put before the first part's text (``[depth:N] ``); set once the depth is known.
        self.prefix = ""
        self._interval = edit_interval
        #: Parts an earlier run of this turn already sent are edited, never re-sent.
        self.existing = tuple(existing)
        self.parts: list[Part] = [Part(m, None) for m in existing]
        #: Where new parts are announced and recorded (none by default).
        self.journal: PartJournal = _NoJournal()
        self._latest = ""
        self._shown = ""
        self._dirty = asyncio.Event()
        self._closing = False
        self._last_push = 0.0
        #: When a part was last edited: the final edit keeps the per-message edit rate,
        #: and nothing else delays it (the first part's send is not an edit).
        self._last_edit = float("-inf")
        self._pump_task: asyncio.Task[None] | None = None
        #: The chat refused us while streaming: every later step raises this.
        self._fatal: ChatUnavailableError | None = None
        self._typing: AbstractAsyncContextManager[object] | None = None
        #: When the first part of this run went on screen (monotonic), if it did.
        self.first_shown_at: float | None = None

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def message_ids(self) -> list[int]:
        return [p.message_id for p in self.parts]

    async def start(self) -> None:
        """Begin showing the typing action (until the first part is sent)."""
        if not self.parts and self._typing is None:
            self._typing = self._out.typing(self._chat_id, self._thread_id, TYPING_EVERY)
            await self._typing.__aenter__()

    def update(self, text: str) -> None:
        """The model's text so far; cheap, called for every streamed delta.

        Raises :class:`ChatUnavailableError` once the chat refused a message,
        which ends the model's stream: nobody can read the rest.
        """
        if self._fatal is not None:
            raise self._fatal
        self._latest = text
        self._dirty.set()
        if self._pump_task is None and not self._closing:
            if not self.parts:
                self._last_push = time.monotonic() - self._interval + FIRST_SHOW_DELAY
            self._pump_task = asyncio.create_task(self._pump())

    async def finish(self, text: str) -> list[int]:
        """Show the final text (every part in place) and return the part ids."""
        await self._stop()
        if self._fatal is not None:
            raise self._fatal
        await self._pace()
        await self._push(text)
        return self.message_ids

    async def fail(self, notice: str) -> list[int]:
        """End with a notice: after the partial text if some was shown, else alone."""
        await self._stop()
        if self._fatal is not None:
            raise self._fatal
        if self._latest.strip():
            await self._pace()
            await self._push(f"{self._latest}\n\n{notice}")
        else:
            await self._push_plain(notice)
        return self.message_ids

    async def close(self) -> None:
        """Stop every background activity (after a failure); nothing more is sent."""
        await self._stop()

    async def _push_plain(self, text: str) -> None:
        chunk = Chunk(text, text)
        if self.parts:
            try:
                self._last_edit = time.monotonic()
                await self._out.edit(self._chat_id, self.parts[0].message_id, chunk)
            except MessageGoneError:
                self.parts[0].message_id = await self._send_new(chunk, 1)
            self.parts[0].chunk = chunk
            await self._drop_extra(1)
            return
        self.parts.append(Part(await self._send_new(chunk, 1), chunk))
        await self.journal.sent(self.message_ids)

    async def _pace(self) -> None:
        """Keep the final edit within the per-message edit rate, too."""
        wait = self._last_edit + self._interval - time.monotonic()
        if self.parts and wait > 0:
            await asyncio.sleep(wait)

    async def _stop(self) -> None:
        """Stop streaming edits; a push in progress is finished, never cut mid-call."""
        self._closing = True
        self._dirty.set()
        if self._pump_task is not None:
            with contextlib.suppress(Exception):
                await self._pump_task
        await self._stop_typing()

    async def _stop_typing(self) -> None:
        sender, self._typing = self._typing, None
        if sender is not None:
            # typing is cosmetic: a failed chat action never fails the answer
            with contextlib.suppress(Exception):
                await sender.__aexit__(None, None, None)

    async def _pump(self) -> None:
        while not self._closing:
            await self._dirty.wait()
            wait = self._last_push + self._interval - time.monotonic()
            if wait > 0 and not self._closing:
                # rate limit: at most one round of edits per interval
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wait_closing(), wait)
            if self.closing:
                return
            self._dirty.clear()
            if self._latest != self._shown:
                try:
                    await self._push(self._latest)
                except ChatUnavailableError as exc:
                    self._fatal = exc
                    return
                except JournalUnavailableError:
                    continue  # nothing new is shown until it can be recorded
                except Exception as exc:
                    # an intermediate edit is not worth failing over: finish() retries
                    log.warning("streaming edit failed: %s", type(exc).__name__)
                    if not self.parts:
                        raise

    async def _wait_closing(self) -> None:
        while not self._closing:
            self._dirty.clear()
            await self._dirty.wait()

    async def _push(self, text: str) -> None:
        chunks = render_chunks(text, prefix=self.prefix)
        # the pace counts attempts, failed ones too: a failing edit is not retried at once
        self._last_push = time.monotonic()
        for i, chunk in enumerate(chunks):
            if i < len(self.parts):
                part = self.parts[i]
                if part.chunk != chunk:
                    try:
                        self._last_edit = time.monotonic()
                        await self._out.edit(self._chat_id, part.message_id, chunk)
                    except MessageGoneError:
                        # deleted by the user meanwhile: the part goes out anew
                        part.message_id = await self._send_new(chunk, i + 1)
                    part.chunk = chunk
            else:
                message_id = await self._send_new(chunk, i + 1)
                self.parts.append(Part(message_id, chunk))
                if len(self.parts) == 1:
                    self.first_shown_at = time.monotonic()
                    await self._stop_typing()
                last = self._closing and i == len(chunks) - 1
                await self.journal.sent(self.message_ids, last=last)
        await self._drop_extra(len(chunks))
        self._shown = text

    async def _send_new(self, chunk: Chunk, number: int) -> int:
        """Send a new message as part ``number``: announced to the journal first.

        While streaming, a journal that cannot record it now (Redis away) means
        "not now"; the final text waits until it can.
        """

        async def note() -> None:
            await self.journal.sending(number, wait=self._closing)

        await note()
        renote = AFTER_FLOOD_WAIT.set(note)  # a flood wait makes the note stale
        try:
            message_id = await self._out.send(
                self._chat_id, chunk, reply_to=self._reply_to, thread_id=self._thread_id
            )
        finally:
            AFTER_FLOOD_WAIT.reset(renote)
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
