"""What a Redis Cluster failover that loses acknowledged writes must not lead to, against
real Redis (issue 43): a lost part's range adopting another turn's part, and a holder
whose renewals were lost sending an answer another worker is sending too.

The lossy soak (``make soak SOAK_ARGS="--cluster --lossy"``) met both; these pin the
rules that close them, one step each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.data import keys
from bot.retry import Outage
from bot.turn.claims import HOLD_SHARE, ClaimUnconfirmedError
from bot.turn.parts import Parts
from bot.turn.state import TurnStates
from transcript import ChatMessage, NodeId, TranscriptStore

CHAT = 77
SCOPE = str(CHAT)


async def durably(call: Callable[[], Awaitable[Any]]) -> Any:
    return await call()


async def answer(parts: Parts, question: str, text: str) -> NodeId:
    """A conversation's answer node (its question above it)."""
    root = await parts.store.start(SCOPE, [ChatMessage("system", "s")])
    asked = await parts.store.append(root, [ChatMessage("user", question)])
    return (await parts.store.append(asked, [ChatMessage("assistant", text)])).id


def parts_of(redis: Redis) -> Parts:
    store = TranscriptStore(redis)
    states = TurnStates(redis, store, "me")
    return Parts(redis, store, states, durably=durably, outage=Outage("Redis", "test"))


async def test_a_lost_parts_range_never_adopts_while_another_turn_may_be_sending_there(
    redis: Redis,
) -> None:
    """Two turns of one chat whose records a failover lost together (seed 3908): turn 5
    noted that its first part may be on screen between ids 50 and 60, and turn 9, run
    again, announced a part above 52 (or sent one at 56). A reply to message 57, whose
    text can be turn 5's part, is adopted only while no other turn sends into the range."""
    parts = parts_of(redis)
    home = await answer(parts, "a question", "An answer, in words")
    await redis.hset(keys.orphans_key(SCOPE), "5", f"50:60:{home.ref}:1:2")
    ledger = keys.pending_parts_key(SCOPE)
    await redis.hset(ledger, "~9", "1:52")  # turn 9 is about to send a part above 52
    assert await parts.adopt(SCOPE, 57, "[depth:2] an answer") is None
    await redis.hdel(ledger, "~9")
    await redis.hset(ledger, "56", "9")  # turn 9 sent message 56 and runs on
    assert await parts.adopt(SCOPE, 57, "[depth:2] an answer") is None
    await redis.hset(ledger, "70", "9")  # a part outside the range is no one's business
    await redis.hdel(ledger, "56")
    assert await parts.adopt(SCOPE, 57, "[depth:2] an answer") == home
    assert await parts.store.resolve(SCOPE, 57) == home


async def test_a_message_two_lost_ranges_hold_is_adopted_by_neither(redis: Redis) -> None:
    """Two sibling turns of one chat whose records a failover lost together (lossy soak,
    seed 4322): both ran again and finished, so the ledger names neither, and each noted
    that its first part may be on screen between ids around 57. A reply to message 57,
    whose text can be either's first part, is adopted by neither (the lost-track notice
    follows); where the text can be only one's part, that one adopts it."""
    parts = parts_of(redis)
    first = await answer(parts, "one", "an answer")
    second = await answer(parts, "two", "an answer")
    orphans = keys.orphans_key(SCOPE)
    await redis.hset(orphans, "5", f"50:60:{first.ref}:1:2")
    await redis.hset(orphans, "9", f"52:58:{second.ref}:1:2")  # narrower, same depth
    assert await parts.adopt(SCOPE, 57, "[depth:2] an answer") is None
    assert await parts.store.resolve(SCOPE, 57) is None
    await redis.hset(orphans, "9", f"52:58:{second.ref}:1:3")  # its part is [depth:3]
    assert await parts.adopt(SCOPE, 57, "[depth:2] an answer") == first
    assert await parts.store.resolve(SCOPE, 57) == first


async def test_a_message_showing_words_its_ranges_answer_has_not_is_not_adopted(
    redis: Redis,
) -> None:
    """The same failover, where the first turn lost even its announcement (so it noted
    no range; lossy soak seed 4322, chats 7004 and 7018): message 34, the first turn's
    lost part, falls in the second's range and has its depth. Its words are the first
    answer's, not the second's: it is nobody's. A part of the second answer, its words
    in it (markup and spacing aside, as Telegram shows them), is adopted."""
    parts = parts_of(redis)
    second = await answer(parts, "question c17m14", "echo c17m14 **w41** w42 w43")
    await redis.hset(keys.orphans_key(SCOPE), "14", f"29:41:{second.ref}:1:6")
    assert await parts.adopt(SCOPE, 34, "[depth:6] echo c17m13 w15") is None
    assert await parts.store.resolve(SCOPE, 34) is None
    assert await parts.adopt(SCOPE, 35, "[depth:6] echo c17m14 w41 w") == second
    assert await parts.adopt(SCOPE, 36, "[depth:6] 🎤") == second  # no words to compare


async def test_a_holder_whose_renewals_do_not_come_back_sends_nothing_new(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that has not had its claim confirmed within a share of the lease (its
    renewals lost to a failover, or Redis away) announces no part, so it sends none:
    another worker may have taken the turn over. A renewal that comes back lets it go on."""
    now = [1000.0]
    monkeypatch.setattr("bot.turn.claims.monotonic", lambda: now[0])
    states = TurnStates(redis, TranscriptStore(redis), "me", lease_ms=10_000)
    inbound = Inbound(CHAT, 1, 5, "hello")
    state = await states.begin(inbound)
    assert state is not None and states.holds(inbound)
    await states.sending(inbound, state, 1)  # confirmed by the claim: announced
    now[0] += 10 * HOLD_SHARE + 0.1  # the heartbeat's renewals never came back
    assert not states.holds(inbound)
    with pytest.raises(ClaimUnconfirmedError):
        await states.sending(inbound, state, 2)
    assert await redis.hget(keys.pending_parts_key(SCOPE), "~1") == b"1:1"  # not part 2
    assert await states.renew([inbound]) == [True]  # a renewal comes back
    assert states.holds(inbound)
    await states.sending(inbound, state, 2)
    assert await redis.hget(keys.pending_parts_key(SCOPE), "~1") == b"2:1"
