"""Streaming an answer into Telegram: show it early, grow it, then persist it.

While the model streams, :class:`AnswerWriter` re-renders the whole text so far
and brings Telegram in line, at most once per ``edit_interval`` seconds. In a
group it edits messages: the first part is sent as soon as text exists, later
parts when the answer outgrows 4096 characters, and changed parts are edited;
a typing action is shown until the first part is out. In a private chat it
streams drafts instead (``sendMessageDraft``, one draft id per part, with a
stop button): an empty draft ("Thinking…") when the model has no text after
``FIRST_SHOW_DELAY``, then the part being written, while parts already complete are sent as
messages; the final text is sent as messages (drafts are ephemeral). When the
chat or the server takes no drafts, the writer goes on by editing, from the
same text: nothing shown is lost or sent twice.

The text is rendered as HTML or as rich messages (:mod:`bot.telegram.rendering`).
Switching, either way, renders the same text again and brings the parts on screen in
line with it (a part edited from HTML into rich or back, the parts the new rendering
needs beyond them sent), through the same journal: nothing is lost or sent twice.
The parts on screen, the journal that records each before anything else is sent, and
the answer's attachments are :class:`~bot.telegram.onscreen.OnScreen`'s, which the
writer extends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from aiogram.types import InlineKeyboardMarkup

from .budget import ChatBudget
from .drafts import draft_id
from .format import Chunk
from .onscreen import JournalUnavailableError, OnScreen, Part, PartJournal
from .out import TelegramOut
from .outcomes import (
    ChatUnavailableError,
    DraftsUnavailableError,
    MessageGoneError,
    RichUnavailableError,
)
from .rendering import Rendering, Style

log = logging.getLogger("replychain.answer")

TYPING_EVERY = 4.5  # Telegram shows a chat action for about 5 s
#: The first part waits this long for more text, so a short answer arrives whole; so
#: does "typing…" (an answer on screen by then needs none) and, in a private chat,
#: "Thinking…" (a model slower to start than this gets the placeholder draft).
FIRST_SHOW_DELAY = 0.5
#: A private chat's first draft waits this long after the first text for the rest:
#: an answer complete by then goes out as the message alone, without a draft.
FIRST_TEXT_WAIT = 0.1
#: A draft shows for about 30 s: one not updated for this long is shown again.
DRAFT_REFRESH = 20.0
#: No draft shown yet (a draft of None is the "Thinking…" placeholder).
_NO_DRAFT = object()


class AnswerWriter(OnScreen):
    """One answer's Telegram messages, from the first token to the final text."""

    def __init__(  # noqa: PLR0913 - the answer's place and how it streams, each by name
        self,
        out: TelegramOut,
        *,
        chat_id: int,
        reply_to: int | None,
        thread_id: int | None,
        edit_interval: float,
        existing: Sequence[int] = (),
        attached: Sequence[int] = (),
        draft_of: int | None = None,
        budget: ChatBudget | None = None,
        style: Style = "always",
        journal: PartJournal | None = None,
    ) -> None:
        """``draft_of``: stream drafts named after this message (the question; private
        chats only) instead of editing messages, unless parts are already on screen.
        ``budget``: the group's message budget (groups only), which the final text
        waits for instead of the streaming interval. ``style``: when the answer is
        rendered as rich messages (:func:`~bot.telegram.rendering.answer_style`).
        ``journal``: where its new parts are announced and recorded (none by default)."""
        super().__init__(
            out, chat_id=chat_id, reply_to=reply_to, thread_id=thread_id, existing=existing,
            attached=attached, budget=budget, journal=journal,
        )  # fmt: skip
        self._interval = edit_interval
        self._draft_of = draft_of if not self.existing else None
        #: The draft on screen: None for "Thinking…"; _NO_DRAFT before the first one.
        self._drafted: Chunk | object | None = _NO_DRAFT
        self._last_draft = float("-inf")
        #: The draft call in flight, which the end of the answer cuts short.
        self._draft_call: asyncio.Future[None] | None = None
        self._started = float("-inf")
        self._latest = ""
        self._shown = ""
        self._dirty = asyncio.Event()
        #: The model's text is complete (:meth:`ended`); the final text follows.
        self._ended = False
        self._last_push = float("-inf")
        self._pump_task: asyncio.Task[None] | None = None
        #: The chat refused us while streaming: every later step raises this.
        self._fatal: ChatUnavailableError | None = None
        self._typing: AbstractAsyncContextManager[object] | None = None
        #: "typing…" about to start (after FIRST_SHOW_DELAY, unless a part is out by then).
        self._typing_soon: asyncio.Task[None] | None = None
        #: When the model's first text came (monotonic).
        self._first_text_at: float | None = None
        #: When the first text of this run went on screen (monotonic; a draft or a part).
        self.first_shown_at: float | None = None
        self._rendering = Rendering(out, style)
        #: A reasoning model's thoughts so far, before its answer (:meth:`think`), and
        #: those the draft on screen shows.
        self._thoughts = ""
        self._shown_thoughts = ""

    @property
    def drafting(self) -> bool:
        """Whether the answer streams as drafts (else by editing messages)."""
        return self._draft_of is not None and self._out.drafts

    @property
    def rich(self) -> bool:
        """Whether the answer is rendered as rich messages (else as HTML chunks)."""
        return self._rendering.rich

    async def start(self) -> None:
        """Show that an answer is coming: "Thinking…" as a draft, else typing."""
        if self.drafting:
            if self._pump_task is None:
                self._started = time.monotonic()
                self._pump_task = asyncio.create_task(self._pump())
            return
        await self._start_typing()

    async def _start_typing(self) -> None:
        """Typing, from a moment on until the first part is sent (an answer on screen
        sooner shows none)."""
        if not self.parts and self._typing is None and self._typing_soon is None:
            self._typing_soon = asyncio.create_task(self._type_soon())

    async def _type_soon(self) -> None:
        await asyncio.sleep(FIRST_SHOW_DELAY)  # a moment, not a retry
        if not self.parts and not self._closing and self._typing is None:
            typing = self._out.typing(self._chat_id, self._thread_id, TYPING_EVERY)
            await typing.__aenter__()
            self._typing = typing

    def update(self, text: str) -> None:
        """The model's text so far; cheap, called for every streamed delta.

        Raises :class:`ChatUnavailableError` once the chat refused a message,
        which ends the model's stream: nobody can read the rest.
        """
        if self._fatal is not None:
            raise self._fatal
        self._latest = text
        if self._first_text_at is None and text:
            self._first_text_at = time.monotonic()
        self._dirty.set()
        if self._pump_task is None and not self._closing:
            if not self.parts and not self.drafting:
                self._last_push = time.monotonic() - self._interval + FIRST_SHOW_DELAY
            self._pump_task = asyncio.create_task(self._pump())

    def think(self, thoughts: str) -> None:
        """A reasoning model's thoughts so far, while it has no answer text yet; cheap.

        A rich draft shows them live in its thinking block; they are never part of a
        message (SHOW_REASONING shows the final thoughts, given to :meth:`finish`).
        Elsewhere (edits, HTML drafts) the thoughts are not shown: nothing is done.
        """
        if self.drafting and self.rich:
            self._thoughts = thoughts
            self.update(self._latest)

    def ended(self) -> None:
        """The model's text is complete: nothing more is drafted or edited before
        :meth:`finish`, which shows it once the answer is stored (a draft of it now
        would be replaced by the message a moment later). A draft on screen is still
        shown again before it vanishes, should storing the answer take that long."""
        self._ended = True
        self._dirty.set()

    async def finish(self, text: str, *, reasoning: str = "") -> list[int]:
        """Show the final text (every part in place) and return the part ids.

        ``reasoning`` is shown collapsed after the prefix (SHOW_REASONING).
        """
        await self._stop()
        if self._fatal is not None:
            raise self._fatal
        await self._pace()
        await self._push(text, reasoning, final=True)
        return self.message_ids

    async def fail(self, notice: str, *, markup: InlineKeyboardMarkup | None = None) -> list[int]:
        """End with a notice: after the partial text if some was shown, else alone (then
        with ``markup``'s buttons under it, when it is sent as a new message)."""
        await self._stop()
        if self._fatal is not None:
            raise self._fatal
        if self._latest.strip():
            await self._pace()
            await self._push(f"{self._latest}\n\n{notice}", final=True)
        else:
            await self._push_plain(notice, markup)
        return self.message_ids

    async def close(self) -> None:
        """Stop every background activity (after a failure); nothing more is sent."""
        await self._stop()

    async def _stop(self) -> None:
        """Stop streaming; a push in progress is finished, never cut mid-call, except a
        draft: it is cosmetic, and may be sitting out a flood window for minutes."""
        self._closing = True
        self._dirty.set()
        if self._draft_call is not None:
            self._draft_call.cancel()
        if self._pump_task is not None:
            with contextlib.suppress(Exception):
                await self._pump_task
        await self._stop_typing()

    async def _stop_typing(self) -> None:
        soon, self._typing_soon = self._typing_soon, None
        if soon is not None:
            soon.cancel()
            await asyncio.wait([soon])  # (a cancellation of the caller still propagates)
        sender, self._typing = self._typing, None
        if sender is not None:
            # typing is cosmetic: a failed chat action never fails the answer
            with contextlib.suppress(Exception):
                await sender.__aexit__(None, None, None)

    def _draft_due(self) -> bool:
        """No draft shown yet, or the one shown is about to vanish."""
        return self.drafting and (
            self._drafted is _NO_DRAFT or time.monotonic() - self._last_draft >= DRAFT_REFRESH
        )

    async def _pump(self) -> None:
        while not self._closing:
            await self._next_round()
            if self.closing:
                return
            self._dirty.clear()
            if self._ended:
                if not (self.drafting and self._drafted is not _NO_DRAFT):
                    return  # finish() shows the final text
                if not self._draft_due():
                    continue  # only a draft about to vanish is shown again
            if self._stale or self._draft_due():
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
                    if not self.parts and not self.drafting:
                        raise

    @property
    def _stale(self) -> bool:
        """The text on screen is not the latest (nor the thoughts a draft shows)."""
        return self._latest != self._shown or self._thinking() != self._shown_thoughts

    def _thinking(self) -> str:
        """The thoughts a draft shows now: a rich draft's, until the answer text begins."""
        live = self.drafting and self.rich and not self._closing and not self._latest.strip()
        return self._thoughts if live else ""

    async def _next_round(self) -> None:
        """Wait until the next round of edits or drafts is worth making, and allowed."""
        now = time.monotonic()
        if not self.drafting:
            await self._dirty.wait()
        elif self._drafted is _NO_DRAFT:
            if not self._latest:
                # "Thinking…" only for a model slow to start: a quick first text goes out
                # soon instead of a second after the placeholder
                await self._wait_dirty(self._started + FIRST_SHOW_DELAY - now)
            if self._first_text_at is not None:
                # the first text waits a moment for the rest: an answer complete by
                # then goes out as the message alone (finish()), without a draft first
                await self._wait_ended(self._first_text_at + FIRST_TEXT_WAIT - time.monotonic())
        else:
            # a draft shown 30 s ago is gone: show it again even without new text
            await self._wait_dirty(self._last_draft + DRAFT_REFRESH - now)
        # drafts and edits are paced from when the last one was done: a chat's rate
        # counts arrivals
        last = max(self._last_push, self._last_draft, self._last_edit)
        wait = last + self._interval - time.monotonic()
        if wait > 0 and not self._closing:
            # rate limit: at most one round of edits per interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # (wait_for would start a task)
                    await self._wait_closing()

    async def _wait_dirty(self, timeout: float) -> None:  # noqa: ASYNC109
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._dirty.wait()

    async def _wait_ended(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait (at most ``timeout`` s) until the text is complete or the writer closes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                while not (self._ended or self._closing):
                    self._dirty.clear()
                    await self._dirty.wait()

    async def _wait_closing(self) -> None:
        while not self._closing:
            self._dirty.clear()
            await self._dirty.wait()

    async def _push(self, text: str, reasoning: str = "", *, final: bool = False) -> None:
        """Show ``text``: edit the parts on screen, send the new ones. ``final``: the
        answer's final text (:meth:`finish`, :meth:`fail`), whose last new part the
        turn's final write records; a streaming push records every part it sends."""
        try:
            await self._push_rendered(text, reasoning, final)
        except RichUnavailableError:
            # nothing of that call reached the screen; the parts that did are brought in
            # line with the HTML rendering (for this answer; for every answer when the
            # server has no rich messages at all)
            self._rendering.rich_ok = False
            await self._push_rendered(text, reasoning, final)

    async def _push_rendered(self, text: str, reasoning: str, final: bool) -> None:
        # the pace counts attempts, failed ones too: a failing edit is not retried at once
        self._last_push = time.monotonic()
        thinking = self._thinking()
        chunks = self._render(text, reasoning, thinking)
        drafting = self.drafting and not self._closing
        # while drafting, the part being written is a draft; the parts before it are done
        settled = chunks[:-1] if drafting else chunks
        for i, chunk in enumerate(settled):
            if i < len(self.parts):
                part = self.parts[i]
                if part.chunk != chunk:
                    try:
                        await self._edit(part.message_id, chunk)
                    except MessageGoneError:
                        # deleted by the user meanwhile: the part goes out anew
                        part.message_id = await self._send_new(chunk, i + 1)
                    part.chunk = chunk
            else:
                message_id = await self._send_new(chunk, i + 1)
                self.parts.append(Part(message_id, chunk))
                # recorded before anything else is awaited: until then a crash would
                # leave it on screen unrecorded. Only the final push's last part is
                # left to the final write, which follows it with no Telegram call
                # between; a streaming push that returns once the answer is closing
                # is followed by the final text's pace (seconds in a busy group).
                last = final and i == len(chunks) - 1
                await self.journal.sent(self.message_ids, last=last)
                self._left_to_the_end = last
                if len(self.parts) == 1:
                    if self.first_shown_at is None:
                        self.first_shown_at = time.monotonic()
                    await self._stop_typing()
        tail = chunks[-1] if text.strip() or thinking else None
        if drafting and not await self._draft(len(chunks), tail):
            # no drafts here after all: the same text goes on by editing
            if text.strip():
                await self._push(text, reasoning, final=final)
            else:
                await self._start_typing()
            return
        if final:  # (while streaming, a part an earlier run sent may be needed again)
            await self._drop_extra(len(chunks))
        self._shown, self._shown_thoughts = text, thinking

    def next_new_part(self, text: str, reasoning: str = "") -> int:
        """The number of the first part the final ``text`` adds to those on screen (0:
        none): its renderings are kept, so :meth:`finish` does not render it again."""
        chunks = self._render(text, reasoning)
        return len(self.parts) + 1 if len(chunks) > len(self.parts) else 0

    def _render(self, text: str, reasoning: str, thinking: str = "") -> list[Chunk]:
        return self._rendering.render(
            text, prefix=self.prefix, reasoning=reasoning, thinking=thinking
        )

    async def _draft(self, number: int, chunk: Chunk | None) -> bool:
        """Show part ``number`` as a draft; False when drafts turned out unavailable."""
        if chunk == self._drafted and not self._draft_due():
            return True
        assert self._draft_of is not None
        call = asyncio.ensure_future(
            self._out.draft(
                self._chat_id, draft_id(self._draft_of, number), chunk, thread_id=self._thread_id
            )
        )
        self._draft_call = call
        try:
            await asyncio.wait({call})
        finally:
            self._draft_call = None
            call.cancel()  # (only if this task itself was cancelled meanwhile)
        if call.cancelled():
            return True  # cut short by the end of the answer
        try:
            call.result()
        except DraftsUnavailableError:
            self._draft_of = None
            return False
        self._drafted, self._last_draft = chunk, time.monotonic()
        if chunk is not None and self.first_shown_at is None:
            self.first_shown_at = self._last_draft  # the first text on screen is a draft
        return True
