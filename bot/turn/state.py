"""The persisted state of one turn: what a resumed turn needs, and nothing in memory.

Each step of a turn records its result here before the next step runs, so a
turn run again (after a crash, a redelivery, an outage) continues where it
stopped. The user's and the answer's nodes are written by the transcript
store's append *into* this hash (``record_in``), in the same atomic step as the
node itself, so the state is also what makes those appends idempotent. Key
layout: :mod:`bot.data.keys`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import NodeId
from transcript.store import RecordField

from ..bus.inbound import Inbound
from ..data import keys
from ..data.connection import Queued, guarded, run_together
from ..usage.accounting import Clock, day_of, utc_now

#: A finished turn is recognised as done at least this long (Telegram keeps an update
#: 24 hours). Its mark is in the done set of its UTC day, read on that day and the
#: next two, and kept one day longer than this after the set's last write.
DONE_TTL_SECONDS = 2 * 24 * 3600
#: The days whose done sets are read: today and the two before.
DONE_DAYS = DONE_TTL_SECONDS // (24 * 3600) + 1
#: How long a possibly lost part can still be adopted by a reply to it.
ORPHAN_TTL_SECONDS = 30 * 24 * 3600
#: A worker's claim on a turn, by default; its heartbeat renews it while the turn
#: runs (:meth:`TurnStates.renew`), so it only lapses when the worker is gone.
LEASE_MS = 24 * 1000

# Whether the turn is done: its id in one of the done sets KEYS[from..], or the
# mark of earlier versions ('d') in its state hash. Shared by the scripts below.
_DONE_LUA = """
local function done(state, from, turn)
  for i = from, #KEYS do
    if redis.call('SISMEMBER', KEYS[i], turn) == 1 then return true end
  end
  return redis.call('HEXISTS', state, 'd') == 1
end
"""

# The turn's fields, and the number of the part it announced and has not recorded
# yet (from the chat's part ledger) as field 's'.
_FIELDS_LUA = """
local function fields(state, ledger, turn)
  local flat = redis.call('HGETALL', state)
  local announced = redis.call('HGET', ledger, '~' .. turn)
  if announced then
    flat[#flat + 1] = 's'
    flat[#flat + 1] = announced
  end
  return flat
end
"""

# Reads the turn's state; unless it is done (its id in a done set of the last
# days, or the mark of earlier versions in its hash), claims the turn for ARGV[1]
# (an owner may re-take its own claim after a crash) and counts one more model
# call while an answer may still be asked for. Returns false when another
# worker holds the claim.
#   KEYS: lease, state, part ledger, done sets (today first).
#   ARGV: owner, lease ms, turn id.
_BEGIN_LUA = (
    _DONE_LUA
    + _FIELDS_LUA
    + """
if done(KEYS[2], 4, ARGV[3]) then return {'d', '1'} end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return false end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if not redis.call('HGET', KEYS[2], 'a') then redis.call('HINCRBY', KEYS[2], 'c', 1) end
return fields(KEYS[2], KEYS[3], ARGV[3])
"""
)

# The turn's state as it is, without claiming it.
#   KEYS: state, part ledger, done sets.  ARGV: turn id.
_READ_LUA = (
    _DONE_LUA
    + _FIELDS_LUA
    + """
if done(KEYS[1], 3, ARGV[1]) then return {'d', '1'} end
return fields(KEYS[1], KEYS[2], ARGV[1])
"""
)

# Heartbeat of one running turn: extends the claim of ARGV[1]; 0 when another
# worker holds it (this one lost it: it was away longer than the lease).
#   KEYS: lease.  ARGV: owner, lease ms.
_RENEW_LUA = """
local holder = redis.call('GET', KEYS[1])
if not holder then return 1 end
if holder ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# Marks the turn done in the day's set, drops its state and its claim, and takes
# its parts and its announcement out of the chat's part ledger: at once (a
# redelivery finds it done, or finds it unfinished). The parts' aliases are
# written before this runs (see TurnStates.finish), so a reader that no longer
# finds a part in the ledger finds its alias.
#   KEYS: the day's done set, state, lease, part ledger.
#   ARGV: turn id, the done set's TTL, part ids...
_FINISH_LUA = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', KEYS[4], '~' .. ARGV[1], unpack(ARGV, 3))
return 1
"""

# One more unexpected failure of an unfinished turn (a finished one has no hash to
# count in: 0, and nothing is written).
#   KEYS: state, done sets.  ARGV: turn id.
_FAILED_LUA = (
    _DONE_LUA
    + """
if done(KEYS[1], 2, ARGV[1]) then return 0 end
return redis.call('HINCRBY', KEYS[1], 'x', 1)
"""
)


@dataclass(slots=True)
class TurnState:
    """How far the turn answering one message got."""

    key: str
    root: NodeId | None = None
    user: NodeId | None = None
    answer: NodeId | None = None
    #: Answer (or notice) parts Telegram accepted, in order.
    parts: list[int] = field(default_factory=list)
    #: The part this turn announced in the chat's part ledger and has not recorded (0:
    #: none): it may be on screen unrecorded, if an earlier run died after sending it.
    sending: int = 0
    #: Model calls started for this turn, the one about to be made included.
    calls: int = 0
    #: Unexpected failures so far.
    failures: int = 0
    #: The message replied to a bot message no conversation knows: it was stored as a
    #: new conversation, to be answered with a notice, not by the model.
    lost_track: bool = False
    done: bool = False
    #: Every field as read (the tool loop's steps live in fields of their own: bot/tools/loop.py).
    raw: dict[str, bytes] = field(default_factory=dict, repr=False)

    def record(self, name: str) -> RecordField:
        """Where the store's append records a node of this turn (``r``, ``u``, ``a``, or a
        tool step's ``t<round>``)."""
        return (self.key, name)

    @classmethod
    def parse(cls, key: str, scope: str, flat: list[Any]) -> TurnState:
        raw = {bytes(flat[i]).decode(): flat[i + 1] for i in range(0, len(flat), 2)}

        def node(name: str) -> NodeId | None:
            value = raw.get(name)
            return NodeId.parse(scope, value) if value else None

        parts = raw.get("p")
        return cls(
            key,
            root=node("r"),
            user=node("u"),
            answer=node("a"),
            parts=[int(p) for p in parts.split(b",")] if parts else [],
            sending=int(raw.get("s") or 0),
            calls=int(raw.get("c") or 0),
            failures=int(raw.get("x") or 0),
            lost_track=raw.get("l") == b"1",
            done=raw.get("d") == b"1",
            raw=raw,
        )


class TurnStates:
    """Turn states in Redis, and the claims of workers on them."""

    def __init__(
        self, redis: Redis, owner: str, *, lease_ms: int = LEASE_MS, clock: Clock = utc_now
    ) -> None:
        self._redis = redis
        self.owner = owner
        self.lease_ms = lease_ms
        #: Whose UTC day a finished turn's mark is filed under.
        self.clock = clock
        self._begin = redis.register_script(_BEGIN_LUA)
        self._renew = redis.register_script(_RENEW_LUA)
        self._failed = redis.register_script(_FAILED_LUA)
        self._read = redis.register_script(_READ_LUA)

    def _done_keys(self, inbound: Inbound) -> list[str]:
        """The done sets a finished mark of this turn may be in, today's first."""
        now: datetime = self.clock()
        days = [day_of(now - timedelta(days=back)) for back in range(DONE_DAYS)]
        return [keys.done_key(inbound.scope, day, inbound.turn) for day in days]

    async def begin(self, inbound: Inbound) -> TurnState | None:
        """Claim the turn and read its state in one round trip.

        ``None`` when another worker runs it. One model call is counted while
        no answer is stored, so resumes can never call the model more often
        than the per-turn guard allows.
        """
        found, args = self._begin_call(inbound)
        flat = await guarded(self._begin(keys=found, args=args))
        return self._claimed(inbound, flat)

    async def begin_with(
        self, inbound: Inbound, also: Queued
    ) -> tuple[TurnState | None, list[Any]]:
        """:meth:`begin` with more writes after it on the same round trip (a write
        guarded by the claim, :meth:`claim_of`, lands only if this run took it);
        the state, and the replies of ``also``."""
        found, args = self._begin_call(inbound)

        def claim(pipe: Pipeline) -> None:
            # EVAL with the text: a pipeline cannot count on the script cache
            pipe.eval(_BEGIN_LUA, len(found), *found, *args)

        [flat], replies = await run_together(self._redis, claim, also)
        return self._claimed(inbound, flat), replies

    def claim_of(self, inbound: Inbound) -> tuple[str, str]:
        """The key that holds this worker's claim on the turn while it has it, and its
        value there (a guard for writes that only the claim's holder may make)."""
        return keys.lease_key(inbound.scope, inbound.turn), self.owner

    @staticmethod
    def record_of(inbound: Inbound, name: str) -> RecordField:
        """:meth:`TurnState.record` of the turn of ``inbound``, before its state is read."""
        return keys.turn_key(inbound.scope, inbound.turn), name

    def _begin_call(self, inbound: Inbound) -> tuple[list[str], list[str | int]]:
        scope, turn = inbound.scope, inbound.turn
        found = [keys.lease_key(scope, turn), keys.turn_key(scope, turn)]
        found.append(keys.pending_parts_key(scope))
        return [*found, *self._done_keys(inbound)], [self.owner, self.lease_ms, turn]

    @staticmethod
    def _claimed(inbound: Inbound, flat: list[Any] | None) -> TurnState | None:
        key = keys.turn_key(inbound.scope, inbound.turn)
        return None if flat is None else TurnState.parse(key, inbound.scope, flat)

    async def renew(self, running: Sequence[Inbound]) -> list[bool]:
        """Heartbeat: extend this worker's claims on the running turns.

        ``False`` for a turn whose claim another worker holds now (this process
        was away longer than the lease, and the turn was taken over); a turn not
        claimed yet, or finished, counts as kept.
        """
        replies = await guarded(
            asyncio.gather(
                *(
                    self._renew(
                        keys=[keys.lease_key(inbound.scope, inbound.turn)],
                        args=[self.owner, self.lease_ms],
                    )
                    for inbound in running
                )
            )
        )
        return [bool(reply) for reply in replies]

    async def read(self, inbound: Inbound) -> TurnState:
        """The state as it is, without claiming the turn."""
        key = keys.turn_key(inbound.scope, inbound.turn)
        ledger = keys.pending_parts_key(inbound.scope)
        found = [key, ledger, *self._done_keys(inbound)]
        flat = await guarded(self._read(keys=found, args=[inbound.turn]))
        return TurnState.parse(key, inbound.scope, flat)

    async def set_user(self, state: TurnState, node: NodeId) -> None:
        """Record an existing node as the turn's question (a /retry asks it again)."""
        await guarded(self._redis.hset(state.key, "u", node.ref))
        state.user = node

    async def lost_track(self, state: TurnState) -> None:
        """The message replied to a bot message no conversation knows (before its node
        is stored: a later run answers it with the notice too)."""
        await guarded(self._redis.hset(state.key, "l", 1))
        state.lost_track = True

    async def sending(self, inbound: Inbound, state: TurnState, count: int) -> None:
        """Part number ``count`` is about to be sent (its id is recorded by :meth:`add_part`).

        The announcement is in the chat's part ledger, where a reply to that part
        finds it before its id is known (Telegram may deliver the reply before it
        answers the send), and where a later run of this turn finds that a part may
        be on screen unrecorded.
        """
        ledger = keys.pending_parts_key(inbound.scope)
        await guarded(self._redis.hset(ledger, _announced(inbound.turn), count))
        state.sending = count

    async def add_part(self, inbound: Inbound, state: TurnState, parts: list[int]) -> None:
        """Record the parts sent so far (the last one is new): in the turn's state, and in
        the chat's part ledger in place of its announcement."""
        ledger = keys.pending_parts_key(inbound.scope)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(state.key, "p", ",".join(map(str, parts)))
            pipe.hset(ledger, str(parts[-1]), inbound.turn)
            pipe.hdel(ledger, _announced(inbound.turn))
            await guarded(pipe.execute())
        state.parts = list(parts)
        state.sending = 0

    async def finish(
        self,
        inbound: Inbound,
        state: TurnState,
        parts: list[int],
        *,
        also: Sequence[Queued] = (),
    ) -> None:
        """Mark the turn done and let go of its claim.

        A done turn keeps only its mark, for redeliveries, until it expires: its
        id in the chat's done set of the day (its hash is deleted; its nodes and
        parts are found through their aliases from then on). ``also`` queue more
        writes on the same round trip (the parts' aliases, the intake's
        acknowledgement). The turn's own keys change in one script (one slot, the
        chat's); the other writes are idempotent and may be in other slots, so the
        round trip is a pipeline, not a transaction.
        """
        turn_keys = [
            self._done_keys(inbound)[0],
            state.key,
            keys.lease_key(inbound.scope, inbound.turn),
            keys.pending_parts_key(inbound.scope),
        ]

        def done(pipe: Pipeline) -> None:
            # EVAL with the text: a pipeline cannot count on the script cache (see
            # bot/data/connection.run_together)
            pipe.eval(
                _FINISH_LUA,
                len(turn_keys),
                *turn_keys,
                inbound.turn,
                DONE_TTL_SECONDS + 24 * 3600,
                *map(str, parts),
            )

        # the parts' aliases first: a reader that finds them gone from the ledger
        # finds their aliases (the commands run in order)
        await run_together(self._redis, *also, done)
        state.done = True

    async def release(self, inbound: Inbound, parts: list[int]) -> None:
        """Let go of an unfinished turn (it was given up): its parts no longer wait."""
        async with self._redis.pipeline(transaction=True) as pipe:
            self._release(pipe, inbound, parts)
            await guarded(pipe.execute())

    @staticmethod
    def _release(pipe: Pipeline, inbound: Inbound, parts: list[int]) -> None:
        pipe.delete(keys.lease_key(inbound.scope, inbound.turn))
        ledger = keys.pending_parts_key(inbound.scope)
        pipe.hdel(ledger, _announced(inbound.turn), *map(str, parts))

    @staticmethod
    def queue_orphans(
        pipe: Pipeline, inbound: Inbound, node: NodeId, *, low: int, high: int
    ) -> None:
        """A part of this turn's answer may be on screen, unrecorded, between the ids."""
        key = keys.orphans_key(inbound.scope)
        pipe.hset(key, inbound.turn, f"{low}:{high}:{node.ref}")
        pipe.expire(key, ORPHAN_TTL_SECONDS)

    async def orphan_home(self, scope: str, message_id: int) -> NodeId | None:
        """The node a lost part with this id belongs to, if it falls in a noted range."""
        ranges = await guarded(self._redis.hvals(keys.orphans_key(scope)))
        best: tuple[int, str] | None = None  # the narrowest range holding the id
        for value in ranges:
            text = value.decode() if isinstance(value, bytes) else value
            low, high, ref = text.split(":", 2)
            width = int(high) - int(low)
            if int(low) < message_id < int(high) and (best is None or width < best[0]):
                best = (width, ref)
        return None if best is None else NodeId.parse(scope, best[1])

    async def failed(self, inbound: Inbound) -> int:
        """One more unexpected failure of the turn; returns the count (0 once it is done:
        a later run finds it done and does nothing)."""
        key = keys.turn_key(inbound.scope, inbound.turn)
        found = self._failed(keys=[key, *self._done_keys(inbound)], args=[inbound.turn])
        return int(await guarded(found))

    async def ledger(self, scope: str) -> PartLedger:
        """The chat's part ledger: parts of turns still running, and announced parts."""
        raw = await guarded(self._redis.hgetall(keys.pending_parts_key(scope)))
        return PartLedger.parse(raw)


def _announced(turn: str) -> str:
    """The ledger's field announcing the next part of ``turn``."""
    return "~" + turn


def message_of(turn: str) -> int:
    """The message whose turn ``turn`` is (an edit's turn is ``<m>:e<digest>``)."""
    return int(turn.partition(":")[0])


@dataclass(frozen=True, slots=True)
class PartLedger:
    """What a chat's part ledger (``rc:{S}:part``) says right now.

    Every new answer part is announced here before it is sent, and recorded here
    once Telegram named its id, until its turn's final write aliases it. So a bot
    message of a running turn is always findable: by its id, or (before its id is
    known) as an announcement of that turn.
    """

    #: Sent parts of turns still running: part message id -> turn id.
    parts: dict[int, str]
    #: Turns about to send a part whose id is not known yet: turn id -> part number.
    announced: dict[str, int]

    @classmethod
    def parse(cls, raw: dict[Any, Any]) -> PartLedger:
        parts: dict[int, str] = {}
        announced: dict[str, int] = {}
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            text = value.decode() if isinstance(value, bytes) else str(value)
            if name.startswith("~"):
                announced[name[1:]] = int(text)
            else:
                parts[int(name)] = text
        return cls(parts, announced)
