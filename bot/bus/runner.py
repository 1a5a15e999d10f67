"""Turn workers: read the intake stream and run each turn as its own task.

Chats run concurrently (a slow model call in one chat never delays another),
at most ``max_concurrent`` turns at once and at most ``max_per_user`` of one
user's: the rest of that user's messages wait their turn in order (they stay
pending in the stream meanwhile), so one user's backlog never delays anyone
else. An entry is acknowledged only when
its turn is finished. A turn that fails because a service is away (Redis,
Telegram: the ``outages`` it is given) is tried again with backoff and its
entry stays pending meanwhile, so nothing accepted is lost. Any other failure
is tried again ``max_attempts`` times in all; then the handler tells the user
and the entry is parked in the dead-letter stream: never acknowledged as if
answered. At start-up this process first finishes the entries it had taken
before it stopped (or crashed).

Several processes share the intake. A heartbeat (every sixth of
``takeover_ms``) renews this process's claims: the idle time of every entry it
holds, and the lease of every turn it runs. A process that dies (SIGKILL,
machine loss) stops renewing them; once its entries sat idle for
``takeover_ms`` another process claims them, by then their leases have
lapsed (they last :data:`LEASE_SHARE` of it), and finishes the turns, which
resume from their persisted state (the part journal keeps an answer from being
sent twice). A process whose heartbeat finds a turn's lease taken by another
(it was away longer than the lease) stops running that turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from transcript import StaleCacheError, StoreUnavailableError

from ..data.connection import Queued
from ..metrics import Metrics
from ..retry import Outage, cancel_until_done, retrying
from .inbound import Inbound
from .intake import Entry, Intake

log = logging.getLogger("replychain.runner")

READ_BLOCK_MS = 1000
#: Entries held back for busy users, per turn slot, before reading pauses.
WAITING_PER_SLOT = 8
#: A dead process's entries are claimed after sitting idle this long (default).
TAKEOVER_MS = 30 * 1000
#: A turn's lease lasts this share of the takeover time: it has lapsed when the
#: entry is claimed, so the claimer can take the turn over at once.
LEASE_SHARE = 0.8
#: Heartbeats per takeover time (renewals of entries and leases).
BEATS_PER_TAKEOVER = 6
#: Looks for a dead process's entries per takeover time.
CLAIMS_PER_TAKEOVER = 4

TurnKey = tuple[str, int]


class TurnBusy(Exception):
    """Another worker holds the turn's lease: it runs the turn now."""


class Leases(Protocol):
    """Renews the leases of running turns (:class:`bot.turn.state.TurnStates`)."""

    #: How long a lease lasts: :data:`LEASE_SHARE` of the takeover time.
    lease_ms: int

    async def renew(self, running: Sequence[Inbound]) -> list[bool]:
        """Extend each claim; ``False`` for one another worker holds now."""


#: Queues the bus's own writes (the acknowledgement) on the turn's final round trip.
Ack = Queued


class TurnHandler(Protocol):
    """What the runner needs from the turn flow."""

    async def run(self, inbound: Inbound, ack: Ack) -> bool:
        """Answer ``inbound`` or finish answering it (safe to call again).

        Returns ``True`` when this run finished the turn, having queued ``ack``
        on the write that records it; ``False`` when there was nothing to do
        (finished before). Raises :class:`TurnBusy` when another worker runs it.
        """

    async def failed(self, inbound: Inbound) -> int:
        """Record one unexpected failure of the turn; returns how many there were."""

    async def give_up(self, inbound: Inbound, error: BaseException) -> None:
        """The last failure: leave the thread usable and tell the user."""


class InFlight:
    """Turns running in this process, so a turn can wait for another one to finish."""

    def __init__(self) -> None:
        self._running: dict[TurnKey, asyncio.Future[None]] = {}

    def get(self, key: TurnKey) -> asyncio.Future[None] | None:
        return self._running.get(key)

    def begin(self, key: TurnKey) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        return future

    def end(self, key: TurnKey, future: asyncio.Future[None]) -> None:
        if self._running.get(key) is future:
            del self._running[key]
        if not future.done():
            future.set_result(None)

    async def wait(self, key: TurnKey, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait (at most ``timeout`` s) for that turn if it runs here; ``False`` if it does not."""
        future = self._running.get(key)
        if future is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), timeout)
        return True


class _TryAgain(Exception):
    """An unexpected failure that has attempts left."""


class TurnRunner:
    """Owns the in-flight turns; stops reading and drains them on shutdown."""

    def __init__(
        self,
        handler: TurnHandler,
        intake: Intake,
        *,
        outages: Mapping[type[BaseException], Outage],
        in_flight: InFlight,
        max_concurrent: int,
        max_per_user: int,
        max_attempts: int,
        metrics: Metrics | None = None,
        leases: Leases | None = None,
    ) -> None:
        self.handler = handler
        self.intake = intake
        self.outages = dict(outages)
        self._retried_kinds: tuple[type[BaseException], ...] = (*outages, _TryAgain)
        self.in_flight = in_flight
        self.max_concurrent = max_concurrent
        self.max_per_user = max_per_user
        #: Turns running per user, and each user's entries waiting for one to end.
        self._running_of: dict[int, int] = {}
        self._waiting: dict[int, deque[Entry]] = {}
        self._waiting_count = 0
        self.max_attempts = max_attempts
        self.metrics = metrics or Metrics()
        self.leases = leases
        #: A dead process's entries are claimed after sitting idle this long.
        self.takeover_ms = round(leases.lease_ms / LEASE_SHARE) if leases else TAKEOVER_MS
        #: Entries this process holds (running or waiting), renewed by the heartbeat.
        self._held: dict[bytes, Entry] = {}
        #: The task running each held entry's turn.
        self._task_of: dict[bytes, asyncio.Task[None]] = {}
        #: Entries claimed from a dead process (a busy turn stays pending then).
        self._claimed: set[bytes] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._consumer: asyncio.Task[None] | None = None
        #: Turns finished (answered, ended with a notice, parked or found done).
        self.completed = 0
        #: Turn attempts that failed and will run again.
        self.retried = 0

    @property
    def in_flight_count(self) -> int:
        return len(self._tasks)

    def start(self) -> None:
        self._consumer = asyncio.create_task(self._consume(), name="intake-consumer")
        self._heartbeat = asyncio.create_task(self._beat(), name="intake-heartbeat")

    # ------------------------------------------------------------ consuming

    async def _redis(self, call: Callable[[], Awaitable[list[Entry]]]) -> list[Entry]:
        return await self.intake.outage.guard(
            call, on=(StoreUnavailableError,), until=self._stopping
        )

    async def _consume(self) -> None:
        await self.intake.outage.guard(
            self.intake.ensure_group, on=(StoreUnavailableError,), until=self._stopping
        )
        for stream in self.intake.streams:
            await self._resume_own(stream)
        await asyncio.gather(
            self._claim_idle(), *(self._read(stream) for stream in self.intake.streams)
        )

    async def _read(self, stream: str) -> None:
        """Start the turns of new entries of one intake stream as turn slots free up."""
        claim_every = self.takeover_ms / 1000 / CLAIMS_PER_TAKEOVER
        block_ms = max(1, min(READ_BLOCK_MS, int(claim_every * 1000)))
        while not self._stopping.is_set():
            await self._slot()
            entries = await self._redis(
                lambda: self.intake.read_new(self._free(), block_ms, stream)
            )
            for entry in entries:
                self._start(entry)

    async def _claim_idle(self) -> None:
        """Look for a dead process's entries (idle for the takeover time) and take them over."""
        claim_every = self.takeover_ms / 1000 / CLAIMS_PER_TAKEOVER
        while not self._stopping.is_set():
            await asyncio.sleep(claim_every)  # a schedule, not a retry: nothing failed
            await self._slot()
            entries = await self._redis(
                lambda: self.intake.claim_idle(self.takeover_ms, self._free())
            )
            # an entry of this process's own that went idle (its heartbeat was late) runs here
            entries = [entry for entry in entries if entry.id not in self._held]
            if entries:
                log.warning("taking over %d turn(s) of a stopped process", len(entries))
            self._claimed.update(entry.id for entry in entries)
            for entry in entries:
                self._start(entry, taken_over=True)

    async def _beat(self) -> None:
        """The heartbeat: keep this process's entries and turn leases from lapsing."""
        every = self.takeover_ms / 1000 / BEATS_PER_TAKEOVER
        while True:
            await asyncio.sleep(every)  # a schedule, not a retry: nothing failed
            try:
                await self._renew()
            except StoreUnavailableError as exc:
                log.warning("heartbeat missed: %s", exc)

    async def _renew(self) -> None:
        await self.intake.keep(list(self._held.values()))
        if self.leases is None:
            return
        running = [
            (entry_id, entry.inbound)
            for entry_id, entry in self._held.items()
            if entry.inbound is not None and entry_id in self._task_of
        ]
        kept = await self.leases.renew([inbound for _id, inbound in running])
        for (entry_id, inbound), ok in zip(running, kept, strict=True):
            task = self._task_of.get(entry_id)
            if not ok and task is not None:
                log.warning(
                    "message %s in chat %s was taken over by another process; "
                    "stopping this run of its turn", inbound.message_id, inbound.chat_id,
                )  # fmt: skip
                task.cancel()

    async def _resume_own(self, stream: str) -> None:
        """Start, once each, the entries of ``stream`` this consumer took before it stopped."""
        after = b"0"
        resumed = 0
        while True:
            await self._slot()
            entries = await self._redis(
                lambda after=after: self.intake.read_pending(after, self._free(), stream)  # type: ignore[misc]
            )
            if not entries:
                break
            for entry in entries:
                self._start(entry)
            resumed += len(entries)
            after = entries[-1].id
        if resumed:
            log.info("resuming %d turn(s) left unfinished", resumed)

    def _free(self) -> int:
        return max(1, self.max_concurrent - len(self._tasks))

    async def _slot(self) -> None:
        """Wait for room: a free turn slot, and not too many entries waiting for users."""
        while (
            len(self._tasks) >= self.max_concurrent
            or self._waiting_count >= WAITING_PER_SLOT * self.max_concurrent
        ):
            await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)

    def _start(self, entry: Entry, *, taken_over: bool = False) -> None:
        self._held[entry.id] = entry
        user = entry.inbound.user_id if entry.inbound else None
        if user is not None and self._running_of.get(user, 0) >= self.max_per_user:
            waiting = self._waiting.setdefault(user, deque())
            if taken_over:
                # accepted before the user's entries this process read meanwhile: it goes
                # ahead of them (behind the others taken over), not behind their backlog
                at = 0
                while at < len(waiting) and waiting[at].id in self._claimed:
                    at += 1
                waiting.insert(at, entry)
            else:
                waiting.append(entry)
            self._waiting_count += 1
            return
        if user is not None:
            self._running_of[user] = self._running_of.get(user, 0) + 1
        self._launch(entry, user)

    def _launch(self, entry: Entry, user: int | None) -> None:
        task = asyncio.create_task(self._process(entry), name=f"turn-{entry.id.decode()}")
        self._tasks.add(task)
        self._task_of[entry.id] = task
        task.add_done_callback(lambda done: self._ended(done, entry, user))

    def _ended(self, task: asyncio.Task[None], entry: Entry, user: int | None) -> None:
        """A turn ended: the user's next waiting entry (if any) takes its place."""
        self._tasks.discard(task)
        self._held.pop(entry.id, None)
        self._task_of.pop(entry.id, None)
        self._claimed.discard(entry.id)
        if user is None:
            return
        waiting = self._waiting.get(user)
        if waiting and not self._stopping.is_set():
            self._waiting_count -= 1
            entry = waiting.popleft()
            if not waiting:
                del self._waiting[user]
            self._launch(entry, user)
            return
        self._running_of[user] -= 1
        if not self._running_of[user]:
            del self._running_of[user]

    async def _process(self, entry: Entry) -> None:
        inbound = entry.inbound
        if inbound is None:
            log.error("parking an intake entry that does not decode (%s)", entry.id.decode())
            await self._settle(lambda: self.intake.park(entry, "undecodable entry"))
            return
        key = (inbound.scope, inbound.message_id)
        earlier = self.in_flight.get(key)
        if earlier is not None:  # the same message twice: let the first finish
            await asyncio.shield(earlier)
        future = self.in_flight.begin(key)
        try:
            await self._run(entry, inbound)
        finally:
            self.in_flight.end(key, future)
            self.completed += 1

    async def _run(self, entry: Entry, inbound: Inbound) -> None:
        watchers = {kind: outage.watcher() for kind, outage in self.outages.items()}
        try:
            settled = await retrying(
                lambda: self._attempt(entry, inbound),
                on=self._retried_kinds,
                until=self._stopping,
                on_retry=lambda exc: self._note_retry(exc, watchers),
            )
        except self._retried_kinds:
            return  # shutting down: the entry stays pending and is finished at the next start
        if not settled:
            await self._settle(lambda: self.intake.ack(entry.id, entry.stream))
        for outage in self.outages.values():
            outage.ok()

    async def _attempt(self, entry: Entry, inbound: Inbound) -> bool:
        """One run of the turn; ``True`` when its entry needs no acknowledgement of ours."""
        try:
            return await self.handler.run(
                inbound, lambda pipe: Intake.queue_ack(pipe, entry.id, entry.stream)
            )
        except TurnBusy:
            # a stopped process's turn whose lease has not lapsed yet: its entry stays
            # pending (no longer renewed) and is claimed again later. A new entry is
            # the same message twice: the other entry's run answers it.
            return entry.id in self._claimed
        except tuple(self.outages):
            raise
        except Exception as exc:
            if isinstance(exc, StaleCacheError):  # the store said why; no traceback
                log.warning(
                    "turn for message %s in chat %s runs again from what Redis holds",
                    inbound.message_id, inbound.chat_id,
                )  # fmt: skip
            else:
                log.exception(
                    "turn for message %s in chat %s failed", inbound.message_id, inbound.chat_id
                )
            failures = await self.handler.failed(inbound)
            if failures < self.max_attempts:
                raise _TryAgain from exc
            log.error(
                "giving up on message %s in chat %s after %d failures; parked in the "
                "dead-letter stream", inbound.message_id, inbound.chat_id, failures,
            )  # fmt: skip
            await self.handler.give_up(inbound, exc)
            await self.intake.park(entry, type(exc).__name__)
            self.metrics.turn("parked")
            return True

    def _note_retry(
        self, exc: BaseException, watchers: Mapping[type[BaseException], Callable[..., None]]
    ) -> None:
        self.retried += 1
        cause = "error"
        for kind, watch in watchers.items():
            if isinstance(exc, kind):
                watch(exc)
                cause = self.outages[kind].service.lower()
        self.metrics.turn_retry(cause)

    async def _settle(self, call: Callable[[], Awaitable[None]]) -> None:
        """A bookkeeping write that must happen: retried while Redis is away."""
        with contextlib.suppress(StoreUnavailableError):
            # stopping: a finished turn re-read at the next start is recognised as done
            await self.intake.outage.guard(call, on=(StoreUnavailableError,), until=self._stopping)

    # ------------------------------------------------------------- shutdown

    async def drain(self, deadline: float) -> int:
        """Stop reading, wait up to ``deadline`` s, cancel what is left; returns cancelled.

        A cancelled turn's entry stays pending and is finished at the next start.
        """
        if self._consumer is not None:
            await cancel_until_done(self._consumer)
        heartbeat = self._heartbeat
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
        if heartbeat is not None:
            await cancel_until_done(heartbeat)
        return len(pending)
