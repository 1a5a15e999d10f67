"""The turn runner against real Redis, with a stand-in for the turn flow.

A focused look at scheduling: one concurrency limit, a per-user limit whose
overflow waits in order, acknowledgement only of finished turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.bus.intake import Intake
from bot.bus.runner import InFlight, TurnRunner
from bot.data import keys
from bot.retry import cancel_until_done
from transcript import StaleCacheError, StoreUnavailableError


class HeldTurns:
    """Turns that run until the test releases them; records the order they started in."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.release: dict[tuple[int, int], asyncio.Event] = {}
        self.changed = asyncio.Event()

    async def run(self, inbound: Inbound, ack: object) -> bool:
        key = (inbound.user_id, inbound.message_id)
        self.started.append(key)
        self.changed.set()
        await self.release.setdefault(key, asyncio.Event()).wait()
        return False  # the runner acknowledges

    async def failed(self, inbound: Inbound) -> int:
        raise AssertionError("no failures here")

    async def give_up(self, inbound: Inbound, error: BaseException) -> None:
        raise AssertionError("no failures here")

    def finish(self, user: int, message: int) -> None:
        self.release.setdefault((user, message), asyncio.Event()).set()

    async def until(self, predicate: object, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait for ``predicate()``: re-checked when a turn starts, and every 20 ms."""
        assert callable(predicate)
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 0.02)


def runner_for(turns: HeldTurns, intake: Intake, *, max_per_user: int) -> TurnRunner:
    return TurnRunner(
        turns,
        intake,
        outages={StoreUnavailableError: intake.outage},
        in_flight=InFlight(),
        max_concurrent=8,
        max_per_user=max_per_user,
        max_attempts=3,
    )


async def test_one_users_backlog_never_delays_another_user(redis: Redis) -> None:
    intake = Intake(redis, "worker")
    await intake.ensure_group()
    never = asyncio.Event()
    for message in range(1, 11):  # user 1 sends ten messages at once
        assert await intake.record(Inbound(1, message, 1, f"m{message}"), never)
    assert await intake.record(Inbound(2, 100, 2, "mine"), never)  # then user 2 one
    turns = HeldTurns()
    runner = runner_for(turns, intake, max_per_user=2)
    runner.start()
    try:
        await turns.until(lambda: (2, 100) in turns.started)
        assert turns.started[:2] == [(1, 1), (1, 2)]  # user 1: two at a time
        assert len(turns.started) == 3
        for message in range(1, 11):  # user 1's backlog drains in order, two at a time
            turns.finish(1, message)
            await turns.until(lambda m=message: len(turns.started) >= min(3 + m, 11))
        assert [m for u, m in turns.started if u == 1] == list(range(1, 11))
        turns.finish(2, 100)
        await turns.until(lambda: runner.completed == 11)
        assert await redis.xlen(keys.INTAKE_STREAM) == 0  # each acknowledged when it ended
    finally:
        await runner.drain(1.0)


async def test_entries_waiting_for_a_busy_user_stay_pending_at_shutdown(redis: Redis) -> None:
    intake = Intake(redis, "worker")
    await intake.ensure_group()
    never = asyncio.Event()
    for message in range(1, 5):
        assert await intake.record(Inbound(1, message, 1, f"m{message}"), never)
    turns = HeldTurns()
    runner = runner_for(turns, intake, max_per_user=1)
    runner.start()
    await turns.until(lambda: len(turns.started) == 1)
    assert await runner.drain(0.1) == 1  # the running turn is cancelled at the deadline
    assert turns.started == [(1, 1)]
    # nothing was acknowledged: the next start finds all four, in order
    pending = await intake.read_pending(b"0", 10)
    assert [e.inbound.message_id for e in pending if e.inbound] == [1, 2, 3, 4]


async def test_a_task_that_lost_a_cancel_is_still_ended_at_shutdown() -> None:
    """Python 3.11's asyncio.wait_for, used by redis-py on every command it sends, drops
    a cancel that arrives as the command finishes (CPython #86296): the intake consumer
    then ran on and shutdown waited for it forever. The cancel is repeated until the
    task has ended."""
    first_cancel_lost = asyncio.Event()

    async def loses_one_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            first_cancel_lost.set()  # as wait_for returns when its call finished meanwhile
        await asyncio.Event().wait()

    task = asyncio.create_task(loses_one_cancel())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await cancel_until_done(task, every=0.01)
    assert first_cancel_lost.is_set()
    assert task.cancelled()


class StaleOnce(HeldTurns):
    """A turn whose first run meets a parent Redis no longer holds as cached."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    async def run(self, inbound: Inbound, ack: object) -> bool:
        self.started.append((inbound.user_id, inbound.message_id))
        self.changed.set()
        if len(self.started) == 1:
            raise StaleCacheError("1/1:0.1 changed in Redis")
        return False

    async def failed(self, inbound: Inbound) -> int:
        self.failures += 1
        return self.failures


async def test_a_turn_that_met_a_stale_cache_runs_again_without_a_traceback(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis lost writes a process had cached (transcript.StaleCacheError): the turn's run
    ends, counted as a failure (so retries stay bounded), and the turn runs again from
    what Redis holds; the log says so in one line, not as a crash."""
    intake = Intake(redis, "worker")
    await intake.ensure_group()
    assert await intake.record(Inbound(1, 7, 1, "hello"), asyncio.Event())
    turns = StaleOnce()
    runner = runner_for(turns, intake, max_per_user=1)
    caplog.set_level(logging.INFO, logger="replychain")
    runner.start()
    try:
        await turns.until(lambda: runner.completed == 1)
        assert turns.started == [(1, 7), (1, 7)]
        assert turns.failures == 1
        assert await redis.xlen(keys.INTAKE_STREAM) == 0  # answered, acknowledged
        lines = [r for r in caplog.records if "runs again from what Redis holds" in r.message]
        assert len(lines) == 1 and lines[0].exc_info is None
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        await runner.drain(1.0)


async def test_a_turn_taken_over_goes_ahead_of_the_users_newer_backlog(redis: Redis) -> None:
    """Soak (3 processes, seed 3906): a group user's turn left by a killed process was
    taken over, then waited behind the dozens of newer messages of the same user this
    process had read meanwhile, and was answered 92 s after the kill. A taken-over entry
    was accepted before them: it runs next."""
    never = asyncio.Event()
    dead = Intake(redis, "dead")
    await dead.ensure_group()
    assert await dead.record(Inbound(1, 1, 1, "left by a dead process"), never)
    assert [e.inbound.message_id for e in await dead.read_new(10, 1) if e.inbound] == [1]
    for message in range(2, 6):
        assert await dead.record(Inbound(1, message, 1, f"m{message}"), never)
    intake = Intake(redis, "worker")
    turns = HeldTurns()
    runner = runner_for(turns, intake, max_per_user=1)
    runner.takeover_ms = 300
    runner.start()
    try:
        await turns.until(lambda: turns.started == [(1, 2)])
        deadline = asyncio.get_running_loop().time() + 10
        taken = [{"name": b"worker", "pending": 5}]  # the dead consumer's entry came over
        while (await redis.xpending(keys.INTAKE_STREAM, keys.INTAKE_GROUP))["consumers"] != taken:
            assert asyncio.get_running_loop().time() < deadline, "never taken over"
            await asyncio.sleep(0.05)  # polling a condition, bounded above
        turns.finish(1, 2)
        await turns.until(lambda: len(turns.started) == 2)
        assert turns.started == [(1, 2), (1, 1)]  # the oldest next, then the backlog
        for message in (1, 3, 4):
            turns.finish(1, message)
        await turns.until(lambda: len(turns.started) == 5)
        assert turns.started == [(1, 2), (1, 1), (1, 3), (1, 4), (1, 5)]
    finally:
        await runner.drain(0.1)
