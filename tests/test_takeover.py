"""Heartbeat leases: a live worker keeps its turns; a dead one's are taken over.

Two turn runners on one real Redis, as two bot processes would be, with a short
takeover time. "Dying" is what SIGKILL does to a runner: its heartbeat and its
reading stop, its turns stay half done. (The same with real processes is in
tests/test_scale_e2e.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.bus.intake import Intake
from bot.bus.runner import InFlight, TurnBusy, TurnRunner
from bot.data import keys
from bot.turn.state import TurnStates
from transcript import StoreUnavailableError, TranscriptStore

TAKEOVER_MS = 1200


class LeasedTurns:
    """A turn flow that claims each turn's lease like the engine, then holds or finishes."""

    def __init__(self, redis: Redis, owner: str, *, hold: bool) -> None:
        self.states = TurnStates(
            redis, TranscriptStore(redis), owner, lease_ms=int(TAKEOVER_MS * 0.8)
        )
        self.hold = hold
        self.started: list[int] = []
        self.finished: list[int] = []
        self.release = asyncio.Event()

    async def run(self, inbound: Inbound, ack: object) -> bool:
        state = await self.states.begin(inbound)
        if state is None:
            raise TurnBusy
        if state.done:
            return False
        self.started.append(inbound.message_id)
        if self.hold:
            await self.release.wait()
        await self.states.finish(inbound, state, [])
        self.finished.append(inbound.message_id)
        return False  # the runner acknowledges

    async def failed(self, inbound: Inbound) -> int:
        raise AssertionError("no failures here")

    async def give_up(self, inbound: Inbound, error: BaseException) -> None:
        raise AssertionError("no failures here")


def runner_for(turns: LeasedTurns, intake: Intake) -> TurnRunner:
    return TurnRunner(
        turns,
        intake,
        outages={StoreUnavailableError: intake.outage},
        in_flight=InFlight(),
        max_concurrent=8,
        max_per_user=4,
        max_attempts=3,
        leases=turns.states,
    )


async def until(predicate: object, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait for ``predicate()`` (re-checked every 20 ms), failing after ``timeout``."""
    assert callable(predicate)
    never = asyncio.Event()
    async with asyncio.timeout(timeout):
        while not predicate():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(never.wait(), 0.02)


def die(runner: TurnRunner) -> None:
    """What SIGKILL leaves behind: no heartbeat, no reading, turns half done."""
    for task in (runner._heartbeat, runner._consumer):
        assert task is not None
        task.cancel()


async def stop(runner: TurnRunner) -> None:
    with contextlib.suppress(Exception):
        await runner.drain(0.1)


async def test_a_live_workers_turn_is_never_taken_over(redis: Redis) -> None:
    first, second = Intake(redis, "a"), Intake(redis, "b")
    await first.ensure_group()
    a, b = LeasedTurns(redis, "a", hold=True), LeasedTurns(redis, "b", hold=False)
    runner_a = runner_for(a, first)
    runner_a.start()
    await first.record(Inbound(1, 10, 1, "slow"), asyncio.Event())
    await until(lambda: a.started == [10])
    runner_b = runner_for(b, second)
    runner_b.start()
    try:
        # b keeps looking for idle entries; a's heartbeat keeps its entry and lease fresh
        for _ in range(4):
            await asyncio.sleep(TAKEOVER_MS / 1000)
            assert b.started == []
            assert await redis.get(keys.lease_key("1", 10)) == b"a"
        a.release.set()
        await until(lambda: runner_a.completed == 1)
        assert await redis.xlen(keys.INTAKE_STREAM) == 0
        assert b.started == []
    finally:
        await stop(runner_a)
        await stop(runner_b)


async def test_a_dead_workers_turns_are_finished_by_another_once(redis: Redis) -> None:
    first, second = Intake(redis, "a"), Intake(redis, "b")
    await first.ensure_group()
    a, b = LeasedTurns(redis, "a", hold=True), LeasedTurns(redis, "b", hold=False)
    runner_a = runner_for(a, first)
    runner_a.start()
    never = asyncio.Event()
    for message in (10, 11, 12):
        await first.record(Inbound(message, message, message, "hi"), never)
    await until(lambda: sorted(a.started) == [10, 11, 12])
    runner_b = runner_for(b, second)
    runner_b.start()
    try:
        die(runner_a)
        await until(lambda: sorted(b.finished) == [10, 11, 12])
        await until(lambda: runner_b.completed == 3)
        assert await redis.xlen(keys.INTAKE_STREAM) == 0
        pending = await redis.xpending(keys.INTAKE_STREAM, keys.INTAKE_GROUP)
        assert pending["pending"] == 0
        assert a.finished == []
    finally:
        a.release.set()
        await stop(runner_a)
        await stop(runner_b)


async def test_a_worker_back_after_its_lease_was_taken_stops_that_turn(redis: Redis) -> None:
    """A frozen worker's turn is taken over; when it wakes, its heartbeat stops its run."""
    first, second = Intake(redis, "a"), Intake(redis, "b")
    await first.ensure_group()
    a, b = LeasedTurns(redis, "a", hold=True), LeasedTurns(redis, "b", hold=True)
    runner_a = runner_for(a, first)
    runner_a.start()
    await first.record(Inbound(1, 10, 1, "slow"), asyncio.Event())
    await until(lambda: a.started == [10])
    die(runner_a)  # frozen: no renewals, no reading
    runner_b = runner_for(b, second)
    runner_b.start()
    try:
        await until(lambda: b.started == [10])
        runner_a._heartbeat = asyncio.create_task(runner_a._beat())  # awake again
        await until(lambda: runner_a.in_flight_count == 0)
        assert a.finished == []  # its run was stopped, never finished
        b.release.set()
        await until(lambda: b.finished == [10])
        await until(lambda: runner_b.completed == 1)
        assert await redis.xlen(keys.INTAKE_STREAM) == 0
    finally:
        a.release.set()
        await stop(runner_a)
        await stop(runner_b)


async def test_a_sharded_intake_keeps_each_chat_in_one_stream_and_answers_all(
    redis: Redis,
) -> None:
    intake = Intake(redis, "a", shards=4)
    await intake.ensure_group()
    never = asyncio.Event()
    for chat in range(1, 17):
        for message in (1, 2):
            await intake.record(Inbound(chat, message, chat, "hi"), never)
    lengths = [await redis.xlen(stream) for stream in intake.streams]
    assert sum(lengths) == 32
    assert sum(1 for length in lengths if length) >= 3  # the chats spread
    for chat in range(1, 17):  # both messages of a chat are in its stream
        found: Any = await redis.xrange(intake.stream_of(chat))
        chats = [Inbound.decode(fields[b"m"]) for _id, fields in found]
        assert sum(1 for inbound in chats if inbound and inbound.chat_id == chat) == 2
    turns = LeasedTurns(redis, "a", hold=False)
    runner = runner_for(turns, intake)
    runner.start()
    try:
        await until(lambda: runner.completed == 32)
        assert len(turns.finished) == 32
        for stream in intake.streams:
            assert await redis.xlen(stream) == 0  # each acknowledged in its own stream
    finally:
        await stop(runner)
