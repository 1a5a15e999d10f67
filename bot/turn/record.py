"""A turn's record as read (:class:`TurnState`), and the Lua scripts that read and write
it, each in one atomic step.

The records are described in :mod:`bot.turn.state`, the only module that writes them
(through these scripts and its other commands); every key a script touches carries the
chat's hash tag, so each runs in one Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
from redis.asyncio.client import Pipeline

from transcript import ChatMessage, NodeId
from transcript.codec import decode_message

# Whether the turn is done: its id in one of the done sets KEYS[from..].
# The turn's fields, plus the number of the part it announced in the chat's part
# ledger and has not named yet, as field 's' ("a<n>" for an attachment). Shared by the
# scripts below.
COMMON_LUA = """
local function done(from, turn)
  for i = from, #KEYS do
    if redis.call('SISMEMBER', KEYS[i], turn) == 1 then return true end
  end
  return false
end
local function fields(state, ledger, turn)
  local flat = redis.call('HGETALL', state)
  local announced = redis.call('HGET', ledger, '~' .. turn)
  if announced then
    flat[#flat + 1] = 's'
    flat[#flat + 1] = string.match(announced, '^a?%d+')
  end
  return flat
end
"""

# Reads the turn's state; unless it is done, claims the turn for ARGV[1] (an owner
# may re-take its own claim after a crash) and counts one more model call while an
# answer may still be asked for. Returns false when another worker holds the claim.
#   KEYS: lease, state, part ledger, done sets (today first).
#   ARGV: owner, lease ms, turn id.
BEGIN_LUA = (
    COMMON_LUA
    + """
if done(4, ARGV[3]) then return {'d', '1'} end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return false end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if not redis.call('HGET', KEYS[2], 'a') then redis.call('HINCRBY', KEYS[2], 'c', 1) end
return fields(KEYS[2], KEYS[3], ARGV[3])
"""
)

# The turn's state as it is, without claiming it.
#   KEYS: state, part ledger, done sets.  ARGV: turn id.
READ_LUA = (
    COMMON_LUA
    + """
if done(3, ARGV[1]) then return {'d', '1'} end
return fields(KEYS[1], KEYS[2], ARGV[1])
"""
)

# Heartbeat of one running turn: extends the claim of ARGV[1]; 0 when another
# worker holds it, or finished the turn (this one lost it: it was away longer than
# the lease). A claim that lapsed with nobody taking it is still this worker's.
#   KEYS: lease, done sets.  ARGV: owner, lease ms, turn id.
RENEW_LUA = (
    COMMON_LUA
    + """
local holder = redis.call('GET', KEYS[1])
if not holder then
  if done(2, ARGV[3]) then return 0 end
  return 1
end
if holder ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# Marks the turn done in the day's set, drops its state and its claim, and takes
# its parts and its announcement out of the chat's part ledger, and the turn out of
# its topic's queue: at once (a redelivery finds it done, or finds it unfinished).
# The parts' aliases (and the topic's newest answer) are written before this runs
# (see TurnStates.finish), so a reader that no longer finds a part in the ledger
# finds its alias, and the topic's next turn finds the answer.
#   KEYS: the day's done set, state, lease, part ledger[, the topic's queue].
#   ARGV: turn id, the done set's TTL, part ids...
FINISH_LUA = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', KEYS[4], '~' .. ARGV[1], unpack(ARGV, 3))
if KEYS[5] then redis.call('ZREM', KEYS[5], ARGV[1]) end
return 1
"""

# A part sent: the turn's list of parts (field 'p'; its attachments: 'm'), and the ledger
# names it in place of the turn's announcement.
#   KEYS: state, ledger.
#   ARGV: the parts ("a,b,c"), the new part, turn id, announcement, the list's field.
ADD_PART_LUA = """
redis.call('HSET', KEYS[1], ARGV[5], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HDEL', KEYS[2], ARGV[4])
return 1
"""

# One more unexpected failure of an unfinished turn (a finished one has no hash to
# count in: 0, and nothing is written).
#   KEYS: state, done sets.  ARGV: turn id.
FAILED_LUA = (
    COMMON_LUA
    + """
if done(2, ARGV[1]) then return 0 end
return redis.call('HINCRBY', KEYS[1], 'x', 1)
"""
)


class ClaimReads(Protocol):
    """Reads of other modules that go on the claim's round trip."""

    def queue(self, pipe: Pipeline) -> None: ...

    def read(self, replies: list[Any]) -> None: ...


@dataclass(slots=True)
class TurnState:
    """How far the turn answering one message got (read with the claim)."""

    key: str
    scope: str
    root: NodeId | None = None
    user: NodeId | None = None
    answer: NodeId | None = None
    #: Answer (or notice) parts Telegram accepted, in order.
    parts: list[int] = field(default_factory=list)
    #: The answer's attachments Telegram accepted (parts that are not text: its voice
    #: notes, its pictures), in order.
    attached: list[int] = field(default_factory=list)
    #: The part this turn announced in the chat's part ledger and has not named (0:
    #: none): it may be on screen unrecorded, if an earlier run died after sending it.
    sending: int = 0
    #: The same for an attachment (the ledger holds one announcement: one of the two is 0).
    attaching: int = 0
    #: Model calls counted for this turn, the one about to be made included.
    calls: int = 0
    #: Unexpected failures so far.
    failures: int = 0
    #: The message replied to a bot message no conversation knows: it was stored as a
    #: new conversation, to be answered with a notice, not by the model.
    lost_track: bool = False
    done: bool = False
    #: Refs of the tool rounds' step nodes, round 1 first.
    tool_steps: list[NodeId] = field(default_factory=list)
    #: The tool round noted before its calls ran: (k, assistant message), if any.
    noted_round: tuple[int, ChatMessage] | None = None
    #: Results of that round's calls noted so far, by call index.
    noted_results: dict[int, ChatMessage] = field(default_factory=dict)
    #: An attempt at the turn's end failed with Redis away (its master may have failed
    #: over, losing the turn's last writes): the next attempt checks them first.
    end_failed: bool = False
    #: The topic this new conversation opened (0: none could be, answered in place);
    #: ``None``: none was asked for.
    topic: int | None = None
    #: A payment's turn: the credit its confirmation shows (nano-dollars), noted before
    #: it is sent; ``None``: not yet.
    paid_balance: int | None = None

    @classmethod
    def parse(cls, key: str, scope: str, flat: list[Any]) -> TurnState:
        raw = {bytes(flat[i]).decode(): flat[i + 1] for i in range(0, len(flat), 2)}

        def node(name: str) -> NodeId | None:
            value = raw.get(name)
            return NodeId.parse(scope, value) if value else None

        parts, attached = raw.get("p"), raw.get("m")
        announced = bytes(raw.get("s") or b"0")
        state = cls(
            key,
            scope,
            root=node("r"),
            user=node("u"),
            answer=node("a"),
            parts=[int(p) for p in parts.split(b",")] if parts else [],
            attached=[int(p) for p in attached.split(b",")] if attached else [],
            sending=0 if announced.startswith(b"a") else int(announced),
            attaching=int(announced[1:]) if announced.startswith(b"a") else 0,
            calls=int(raw.get("c") or 0),
            failures=int(raw.get("x") or 0),
            lost_track=raw.get("l") == b"1",
            topic=int(raw["o"]) if "o" in raw else None,
            paid_balance=int(raw["b"]) if "b" in raw else None,
            done=raw.get("d") == b"1",
        )
        k = 1
        while (step := node(f"t{k}")) is not None:
            state.tool_steps.append(step)
            k += 1
        noted = raw.get("q")
        if noted is not None:
            k, message = msgpack.unpackb(noted, raw=False)
            state.noted_round = (k, decode_message(f"{key}/q", message))
            for name, value in raw.items():
                prefix = f"q{k}."
                if name.startswith(prefix):
                    result = msgpack.unpackb(value, raw=False)
                    state.noted_results[int(name[len(prefix) :])] = decode_message(
                        f"{key}/{name}", result
                    )
        return state
