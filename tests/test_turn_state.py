"""A finished turn's done mark in its chat's set of the day, against real Redis.

Each finished turn's id goes into ``rc:{chat}:done:<day>`` (an edit's into
``…:done:<day>:e``) and its state hash is deleted; a redelivery is recognised as
done for at least DONE_TTL_SECONDS, across UTC midnights, and never calls the model
again. The clock is the test's, so "the next day" is a moved clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from bot.bus.inbound import EDIT, Inbound
from bot.data import keys
from bot.turn.state import DONE_TTL_SECONDS, TurnStates
from transcript import TranscriptStore

from .test_turn import CHAT, Rig, inbound


class Clock:
    """A UTC clock the test moves."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


LATE = datetime(2026, 3, 1, 23, 59, 30, tzinfo=UTC)  # just before a UTC midnight


@pytest.fixture
def clock() -> Clock:
    return Clock(LATE)


@pytest.fixture
def rig(redis: Redis, clock: Clock) -> Rig:
    rig = Rig(redis)
    rig.states.clock = clock
    return rig


def edit(message_id: int, text: str) -> Inbound:
    return Inbound(CHAT, message_id, 5, text, kind=EDIT)


async def test_a_turn_finished_before_midnight_is_done_for_two_days_after(
    rig: Rig, clock: Clock
) -> None:
    assert await rig.engine.run(inbound(1)) is True
    assert rig.model.calls == 1
    shown = (rig.telegram.sends, rig.telegram.edits, dict(rig.telegram.shown))
    before = await rig.redis.dbsize()
    # redelivered the next day, and just under two days later (the third day's sets)
    for later in (timedelta(minutes=1), timedelta(seconds=DONE_TTL_SECONDS - 60)):
        clock.now = LATE + later
        assert await rig.engine.run(inbound(1)) is False
        other = Rig(rig.redis)  # another process
        other.states.clock = clock
        assert await other.engine.run(inbound(1)) is False
        assert other.model.calls == 0
        assert (await rig.states.read(inbound(1))).done
    assert rig.model.calls == 1  # the model is never called again
    assert (rig.telegram.sends, rig.telegram.edits, dict(rig.telegram.shown)) == shown
    assert await rig.redis.dbsize() == before  # nor is anything written
    assert not await rig.redis.exists(keys.lease_key(str(CHAT), 1))
    # the mark is kept past the last day it is read on
    done = keys.done_key(str(CHAT), "20260301", "1")
    last_read = datetime(2026, 3, 4, tzinfo=UTC) - LATE
    assert last_read.total_seconds() < await rig.redis.ttl(done)


async def test_done_marks_stay_a_few_bytes_a_turn_and_edits_keep_their_own_set(
    redis: Redis, clock: Clock
) -> None:
    states = TurnStates(redis, TranscriptStore(redis), "test", clock=clock)
    turns = [inbound(m) for m in range(1, 41)] + [edit(3, "new wording")]
    for message in turns:
        state = await states.begin(message)
        assert state is not None and not state.done
        await states.finish(message, state, [])
    for message in turns:
        state = await states.begin(message)
        assert state is not None and state.done
        assert not await redis.exists(state.key)  # the hash is gone, the mark kept
    numbers = keys.done_key(str(CHAT), "20260301", "1")
    edits = keys.done_key(str(CHAT), "20260301", edit(3, "new wording").turn)
    assert edits != numbers
    assert await redis.scard(numbers) == 40 and await redis.scard(edits) == 1
    assert await redis.object("encoding", numbers) == b"intset"
    assert (await redis.memory_usage(numbers, samples=0) or 0) < 40 * 8  # vs ~88 B a hash
    # the same message edited to another wording is a turn of its own, not done yet
    other = await states.begin(edit(3, "another wording"))
    assert other is not None and not other.done


async def test_a_failure_noted_after_the_turn_finished_writes_nothing(rig: Rig) -> None:
    """A failure after the final write (e.g. titling a topic) must not leave a hash
    without a TTL behind; the next run finds the turn done."""
    await rig.engine.run(inbound(1))
    assert await rig.engine.failed(inbound(1)) == 0
    assert not await rig.redis.exists(keys.turn_key(str(CHAT), 1))
    assert await rig.engine.run(inbound(1)) is False
    # an unfinished turn's failures are counted in its hash as before
    state = await rig.states.begin(inbound(2))
    assert state is not None
    assert await rig.engine.failed(inbound(2)) == 1
    assert await rig.engine.failed(inbound(2)) == 2
