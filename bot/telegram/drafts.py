"""Telegram's stop button: draft ids that name their answer, and the answers it can stop.

In private chats an answer streams as drafts (``sendMessageDraft`` with
``can_stop``). A draft's id is made of the question's message id and the
answer part's number, so the ``stopped_message_generation`` update Telegram
sends when the user presses the stop button names the turn to stop, without
anything stored. :class:`StopButtons` holds the turns this process is running
now; a stop for any other draft (an answer already finished, or started by a
process that has since restarted) is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

#: Part numbers kept in a draft id (a longer answer's later parts share the last id).
DRAFT_PARTS = 256


def draft_id(question: int, part: int) -> int:
    """The draft id of part ``part`` (from 1) of the answer to message ``question``."""
    return question * DRAFT_PARTS + min(max(part, 1), DRAFT_PARTS - 1)


def question_of(draft: int) -> int:
    """The message whose answer the draft ``draft`` shows."""
    return draft // DRAFT_PARTS


class StopButtons:
    """The answers this process is generating now, by (chat, question): a stop ends one."""

    def __init__(self) -> None:
        self._running: dict[tuple[int, int], asyncio.Event] = {}

    @contextlib.contextmanager
    def watching(self, chat_id: int, question: int) -> Iterator[asyncio.Event]:
        """An event set when the user stops the answer to ``question``, while the block runs."""
        key = (chat_id, question)
        event = asyncio.Event()
        self._running[key] = event
        try:
            yield event
        finally:
            if self._running.get(key) is event:
                del self._running[key]

    def press(self, chat_id: int, draft: int) -> bool:
        """The user pressed stop on draft ``draft``; False when no answer here has it."""
        event = self._running.get((chat_id, question_of(draft)))
        if event is None:
            return False
        event.set()
        return True
