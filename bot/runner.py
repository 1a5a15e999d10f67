"""Turn workers: read the intake stream and run each turn as its own task.

Chats run concurrently (a slow model call in one chat never delays another).
An entry is acknowledged only when its turn is finished; while Redis is away a
turn is retried with backoff and its entry stays pending, so nothing accepted is
lost. At start-up this process first finishes the entries it had taken before
it stopped (or crashed); entries of other processes are claimed once idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any

from transcript import StoreUnavailableError

from .engine import Engine
from .intake import Entry, Intake, Outage, backoff
from .journal import LEASE_MS, Journal
from .telegram import TelegramUnavailableError

log = logging.getLogger("replychain.runner")

READ_BLOCK_MS = 1000
CLAIM_EVERY = 30.0


class TurnRunner:
    """Owns the in-flight turns; stops reading and drains them on shutdown."""

    def __init__(
        self,
        engine: Engine,
        intake: Intake,
        journal: Journal,
        *,
        max_concurrent: int = 64,
        claim_idle_ms: int = LEASE_MS,
    ) -> None:
        self.engine = engine
        self.intake = intake
        self.journal = journal
        self.max_concurrent = max_concurrent
        self.claim_idle_ms = claim_idle_ms
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[tuple[int, int], asyncio.Task[Any]] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        self._stopping = asyncio.Event()
        self._consumer: asyncio.Task[None] | None = None
        self.telegram_outage = Outage(
            "Telegram", "Answers being written are kept and finished when it is back."
        )
        self.accepting = True
        #: Turns finished (answered, ended with a notice, or found done), for tests and stats.
        self.completed = 0
        #: Turn attempts that failed for want of Redis or Telegram and will run again.
        self.retried = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def stopping(self) -> asyncio.Event:
        return self._stopping

    def start(self) -> None:
        self._consumer = asyncio.create_task(self._consume(), name="intake-consumer")

    def spawn(self, coro: Coroutine[Any, Any, object], name: str) -> None:
        """Run a side job (a notice) so the update handler never waits on Telegram."""
        task = asyncio.create_task(self._guard(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _guard(coro: Coroutine[Any, Any, object], name: str) -> None:
        try:
            await coro
        except Exception as exc:
            log.warning("%s failed: %s", name, type(exc).__name__)

    # ------------------------------------------------------------ consuming

    async def _consume(self) -> None:
        attempt = 0
        resumed = False
        last_claim = 0.0
        while not self._stopping.is_set():
            try:
                if not resumed:
                    await self.intake.ensure_group()
                    entries = await self.intake.read_own_pending(self.max_concurrent)
                    resumed = not entries
                    if entries:
                        log.info("resuming %d turn(s) left unfinished", len(entries))
                elif time.monotonic() - last_claim > CLAIM_EVERY:
                    last_claim = time.monotonic()
                    entries = await self.intake.claim_idle(self.claim_idle_ms, self.max_concurrent)
                else:
                    await self._wait_for_slot()
                    entries = await self.intake.read_new(self._free_slots(), READ_BLOCK_MS)
                self.intake.outage.ok()
                attempt = 0
            except StoreUnavailableError as exc:
                self.intake.outage.failed(exc)
                attempt += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff(attempt))
                continue
            for entry in entries:
                self._start(entry)
            if entries and not resumed:
                await self._settle(entries)

    def _free_slots(self) -> int:
        return max(1, self.max_concurrent - len(self._active))

    async def _wait_for_slot(self) -> None:
        while len(self._active) >= self.max_concurrent:
            await asyncio.wait(set(self._active.values()), return_when=asyncio.FIRST_COMPLETED)

    async def _settle(self, entries: list[Entry]) -> None:
        """Own pending entries are re-read from id 0: wait until these are done."""
        keys = {(e.inbound.chat_id, e.inbound.message_id) for e in entries if e.inbound}
        tasks = [t for k, t in self._active.items() if k in keys]
        if tasks:
            await asyncio.wait(tasks)

    def _start(self, entry: Entry) -> None:
        task = asyncio.create_task(self._process(entry), name=f"turn-{entry.id.decode()}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process(self, entry: Entry) -> None:
        inbound = entry.inbound
        if inbound is None:
            log.warning("dropping an intake entry that does not decode (%s)", entry.id.decode())
            await self._ack(entry)
            return
        key = (inbound.chat_id, inbound.message_id)
        earlier = self._active.get(key)
        if earlier is not None:  # the same message twice: let the first finish
            await asyncio.wait([earlier])
        current = asyncio.current_task()
        assert current is not None
        self._active[key] = current
        try:
            await self._run_turn(entry)
        finally:
            if self._active.get(key) is current:
                del self._active[key]
            self.completed += 1

    async def _run_turn(self, entry: Entry) -> None:
        inbound = entry.inbound
        assert inbound is not None
        attempt = 0
        while True:
            try:
                if await self.journal.lease(
                    inbound.scope, inbound.message_id, self.intake.consumer
                ):
                    async with self._slots:
                        await self.engine.turn(inbound)
                    self.telegram_outage.ok()
                    await self.journal.release(inbound.scope, inbound.message_id)
                # else another process runs this message's turn: this entry is a duplicate
                await self._ack(entry)
                return
            except StoreUnavailableError as exc:
                self.intake.outage.failed(exc)
                self.retried += 1
            except TelegramUnavailableError as exc:
                self.telegram_outage.failed(exc)
                self.retried += 1
            except Exception:
                log.exception("turn in chat %s failed unexpectedly", inbound.chat_id)
                await self._ack(entry)
                return
            attempt += 1
            if self._stopping.is_set():
                return  # stays pending: finished at the next start
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff(attempt))

    async def _ack(self, entry: Entry) -> None:
        attempt = 0
        while True:
            try:
                await self.intake.ack(entry.id)
                return
            except StoreUnavailableError as exc:
                self.intake.outage.failed(exc)
                attempt += 1
                if self._stopping.is_set():
                    return  # a finished turn re-read later is recognised as done
                await asyncio.sleep(backoff(attempt))

    # ------------------------------------------------------------- shutdown

    async def drain(self, deadline: float) -> int:
        """Stop reading, wait up to ``deadline`` s, cancel what is left; returns cancelled.

        A cancelled turn's entry stays pending and is finished at the next start.
        """
        self.accepting = False
        if self._consumer is not None:
            self._consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._consumer
        pending = set(self._tasks)
        if pending:
            log.info("waiting up to %.0fs for %d answer(s) in flight", deadline, len(pending))
            _, pending = await asyncio.wait(pending, timeout=deadline)
        self._stopping.set()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning("cancelled %d answer(s) still running at the deadline", len(pending))
        return len(pending)
