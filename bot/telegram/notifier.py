"""Local answers (commands, refusals) sent in the background, so no update waits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from .out import TelegramOut

log = logging.getLogger("replychain.telegram")

#: Notes message ids of a chat that belong to no conversation (the transcript store's
#: ``unthreaded``): a reply to a command's answer starts a new conversation.
Unthreaded = Callable[[int, list[int]], Awaitable[None]]


class Notifier:
    """Local answers (commands, refusals) sent in the background.

    The update handler never waits on Telegram: what it has to say is sent by
    a task of its own, and the tasks still running are drained at shutdown.
    What a job sends belongs to no conversation: its message ids are noted as such
    (``unthreaded``), so a reply to one starts a new conversation, while a reply to
    a message of the bot's that nothing knows gets a notice instead.
    """

    def __init__(self, out: TelegramOut, unthreaded: Unthreaded | None = None) -> None:
        self.out = out
        self._unthreaded = unthreaded
        self._tasks: set[asyncio.Task[None]] = set()

    def say(
        self, chat_id: int, text: str, *, reply_to: int, thread_id: int | None,
        receiver: int | None = None,
    ) -> None:  # fmt: skip
        """Send ``text`` as a reply, in the background; to ``receiver`` only (a group's
        member) where the server has ephemeral messages."""
        if receiver is None:
            self.run(
                lambda: self.out.send_text(chat_id, text, reply_to=reply_to, thread_id=thread_id),
                name=f"notice-{chat_id}",
                chat_id=chat_id,
            )
            return
        self.run(
            lambda: self.out.send_personal(
                chat_id, text, receiver=receiver, reply_to=reply_to, thread_id=thread_id
            ),
            name=f"notice-{chat_id}",
            chat_id=chat_id,
        )

    def run(
        self,
        job: Callable[[], Awaitable[int | Sequence[int] | None]],
        *,
        name: str,
        chat_id: int | None = None,
    ) -> None:
        """Run ``job`` in the background; a failure is logged (by type), never raised.

        ``job`` returns the ids of the messages it sent to ``chat_id`` (0: unknown).
        """

        async def guarded() -> None:
            try:
                sent = await job()
                ids = [sent] if isinstance(sent, int) else list(sent or ())
                ids = [i for i in ids if i > 0]
                if ids and chat_id is not None and self._unthreaded is not None:
                    await self._unthreaded(chat_id, ids)
            except Exception as exc:
                log.warning("%s failed: %s", name, type(exc).__name__)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def idle(self) -> bool:
        """Whether nothing is being sent (every job ended)."""
        return not self._tasks

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait up to ``timeout`` s for notices still being sent, then cancel them."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
