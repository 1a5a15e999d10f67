"""Runs turns as tasks, so a slow model call in one chat never delays another."""

from __future__ import annotations

import asyncio
import logging

from .engine import Engine, Inbound

log = logging.getLogger("replychain.runner")


class TurnRunner:
    """Owns the in-flight turns; stops taking new ones and drains them on shutdown."""

    def __init__(self, engine: Engine, *, max_concurrent: int = 64) -> None:
        self.engine = engine
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max_concurrent)
        self.accepting = True
        #: Turns finished (answered, failed with a notice, or dropped), for tests and stats.
        self.completed = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, inbound: Inbound) -> bool:
        """Start a turn in the background; ``False`` once shutdown has begun."""
        if not self.accepting:
            return False
        task = asyncio.create_task(self._run(inbound), name=f"turn-{inbound.chat_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run(self, inbound: Inbound) -> None:
        async with self._slots:
            try:
                await self.engine.turn(inbound)
            except Exception:
                log.exception("turn in chat %s failed unexpectedly", inbound.chat_id)
            finally:
                self.completed += 1

    async def drain(self, deadline: float) -> int:
        """Stop accepting, wait up to ``deadline`` s, cancel what is left; returns cancelled."""
        self.accepting = False
        pending = set(self._tasks)
        if pending:
            log.info("waiting up to %.0fs for %d answer(s) in flight", deadline, len(pending))
            _, pending = await asyncio.wait(pending, timeout=deadline)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning("cancelled %d answer(s) still running at the deadline", len(pending))
        return len(pending)
