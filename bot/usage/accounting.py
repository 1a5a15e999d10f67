"""Token accounting: every model call's usage, summed per turn, branch, user and day.

Each call is recorded once, by one Lua script that updates every aggregate
atomically (exact under concurrency and across restarts) and writes only what
changes: a zero count is never written, and each hash gets one HSET per call.
All usage keys share the hash tag ``{usage}`` (one slot, so the script also
runs on Redis Cluster). The numbers are the provider's; a call whose provider
reported none is estimated and counted as such.

The key layout, and how long each key is kept, is in :mod:`bot.data.keys`.

An audit record per call ("why did it say that?") references what was sent by
node id (the chain up to the user's node) and what came back by the turn's
message id (its answer node is in that turn's state while it is kept) or the
error; it stores no message text.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
from redis.asyncio import Redis

from transcript import NodeId, StoreUnavailableError

from ..bus.inbound import Inbound
from ..data import keys
from ..data.connection import guarded
from ..metrics import Metrics
from ..model import Usage
from ..retry import Outage

log = logging.getLogger("replychain.accounting")

Clock = Callable[[], datetime]
USER_DAY_TTL = 400 * 24 * 3600
#: Default days the per-turn and per-node detail is kept (like the call markers were).
DETAIL_DAYS = 90
_FIELDS = ("p", "c", "k", "n", "e", "x")
#: The audit record's fields, in the order of its msgpack array.
AUDIT_FIELDS = (
    "at", "model", "user", "message", "sent", "prompt", "completion", "cached", "estimated",
    "latency", "error", "view",
)  # fmt: skip

# KEYS and ARGV: see _Recording. Counter hashes are read with HMGET and written
# with one HSET of the changed fields (fewer commands, so less AOF, than one
# HINCRBY per field); the script runs atomically, so this is as exact. The
# per-node entry "p c k n markers view" carries the markers of the calls counted
# in it, so a repeated record is found there before anything is written.
_RECORD_LUA = """
local tree, ref, marker = KEYS[6], ARGV[11], ARGV[1]
local node = redis.call('HGET', tree, ref)
if node and string.find(node, marker, 1, true) then return 0 end
local detail_ttl, refresh_below = tonumber(ARGV[2]), tonumber(ARGV[3])
local names = {'p', 'c', 'k', 'n', 'e', 'x'}
local delta = {tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), 1,
               tonumber(ARGV[8]), tonumber(ARGV[9])}
-- adds delta to a counter hash; true if it had no calls yet
local function add(key)
  local old = redis.call('HMGET', key, unpack(names))
  local args = {}
  for i = 1, 6 do
    if delta[i] ~= 0 then
      args[#args + 1] = names[i]
      args[#args + 1] = string.format('%d', (tonumber(old[i]) or 0) + delta[i])
    end
  end
  redis.call('HSET', key, unpack(args))
  return not old[4]
end
add(KEYS[2])
if add(KEYS[3]) then redis.call('EXPIRE', KEYS[3], ARGV[4]) end
add(KEYS[4])
if delta[1] + delta[2] ~= 0 then
  redis.call('ZINCRBY', KEYS[5], delta[1] + delta[2], ARGV[10])
end
-- the turn's entry "p c k n e x" in its chat's hash of the day
local turns, m = KEYS[1], ARGV[15]
local t = {0, 0, 0, 0, 0, 0}
local old = redis.call('HGET', turns, m)
if old then t = {string.match(old, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')} end
for i = 1, 6 do t[i] = string.format('%d', t[i] + delta[i]) end
redis.call('HSET', turns, m, table.concat(t, ' '))
if redis.call('TTL', turns) < 0 then redis.call('EXPIRE', turns, detail_ttl) end
-- the node's entry
local p, c, k, n, seen = 0, 0, 0, 0, ''
if node then p, c, k, n, seen = string.match(node, '^(%d+) (%d+) (%d+) (%d+) (%S+)') end
redis.call('HSET', tree, ref, string.format('%d %d %d %d %s%s %s',
  p + delta[1], c + delta[2], k + delta[3], n + 1, seen, marker, ARGV[12]))
if redis.call('TTL', tree) < refresh_below then redis.call('EXPIRE', tree, detail_ttl) end
if KEYS[7] then redis.call('SET', KEYS[7], ARGV[13], 'EX', ARGV[14]) end
return 1
"""


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens; all zero means no price table."""

    input: float = 0.0
    cached_input: float = 0.0
    output: float = 0.0

    @property
    def configured(self) -> bool:
        return bool(self.input or self.cached_input or self.output)

    def cost(self, totals: Totals) -> float:
        uncached = max(0, totals.prompt - totals.cached)
        return (
            uncached * self.input
            + totals.cached * self.cached_input
            + totals.completion * self.output
        ) / 1e6


@dataclass(frozen=True, slots=True)
class Totals:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    calls: int = 0
    estimated: int = 0
    errors: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cached + other.cached,
            self.calls + other.calls,
            self.estimated + other.estimated,
            self.errors + other.errors,
        )

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> Totals:
        def get(name: str) -> int:
            value = raw.get(name.encode(), raw.get(name))
            return int(value) if value is not None else 0

        return cls(get("p"), get("c"), get("k"), get("n"), get("e"), get("x"))


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call, as recorded."""

    chat_id: int
    user_id: int
    message_id: int  # the user's message this turn answers
    sent: NodeId  # the chain up to this node is what the model was sent
    model: str
    usage: Usage
    latency: float
    error: str | None = None
    #: The view sent: the fold node it started from ("" for the full history).
    view: str = ""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def of(
        cls,
        inbound: Inbound,
        sent: NodeId,
        *,
        model: str,
        usage: Usage,
        latency: float,
        error: str | None,
        view: str,
    ) -> CallRecord:
        """A call made for the turn answering ``inbound``."""
        return cls(
            inbound.chat_id,
            inbound.user_id,
            inbound.message_id,
            sent,
            model,
            usage,
            latency,
            error=error,
            view=view,
        )


def utc_now() -> datetime:
    return datetime.now(UTC)


def day_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d")


def next_reset(moment: datetime) -> datetime:
    """The next UTC midnight, when daily limits reset."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, utc.day, tzinfo=UTC) + timedelta(days=1)


def _marker(call_id: str) -> str:
    """Marks a call as counted in its node's entry: 48 bits of its id, "#" and 8 characters."""
    digest = hashlib.blake2b(call_id.encode(), digest_size=6).digest()
    return "#" + base64.urlsafe_b64encode(digest).decode()


@dataclass(frozen=True, slots=True)
class _Recording:
    """The record script's keys and arguments for one call, built from named values."""

    call: CallRecord
    day: str
    detail_ttl: int
    audit_ttl: int = 0  # 0: no audit record
    audit: bytes = b""

    def keys(self) -> list[str]:
        call = self.call
        chat, user = call.chat_id, call.user_id
        found = [
            keys.usage_key("t", chat, self.day),  # 1: the chat's turns of the day
            keys.usage_key("u", user),  # 2
            keys.usage_key("u", user, self.day),  # 3
            keys.usage_key("d", self.day),  # 4
            keys.usage_key("users"),  # 5
            keys.usage_key("n", chat, call.sent.tree),  # 6: per node, this tree
        ]
        if self.audit_ttl > 0:
            found.append(keys.usage_key("a", chat, call.call_id))  # 7
        return found

    def args(self) -> list[str | int | bytes]:
        call, usage, ttl = self.call, self.call.usage, self.detail_ttl
        return [
            _marker(call.call_id),  # 1
            ttl,  # 2
            ttl - max(1, min(24 * 3600, ttl // 10)),  # 3: refresh the tree's TTL below this
            USER_DAY_TTL,  # 4
            usage.prompt_tokens,  # 5
            usage.completion_tokens,  # 6
            usage.cached_tokens,  # 7
            int(usage.estimated),  # 8
            int(call.error is not None),  # 9
            call.user_id,  # 10
            call.sent.ref,  # 11
            call.view,  # 12
            self.audit,  # 13
            self.audit_ttl,  # 14
            call.message_id,  # 15: the turn's field in 1
        ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _node_usage(value: Any) -> tuple[int, int, int, int, str]:
    """A per-node entry "p c k n markers view": tokens, calls and the last call's view."""
    p, c, k, n, _, view = _text(value).split(" ", 5)
    return int(p), int(c), int(k), int(n), view


class Accounting:
    """Records model calls and answers usage questions."""

    def __init__(
        self,
        redis: Redis,
        *,
        clock: Clock,
        outage: Outage | None = None,
        audit_days: int = 7,
        prices: Prices | None = None,
        detail_days: int = DETAIL_DAYS,
        metrics: Metrics | None = None,
    ) -> None:
        if detail_days < 1:
            raise ValueError("detail_days must be at least 1")
        self._redis = redis
        self.clock = clock
        #: Whose "Redis is unreachable" line a wait for Redis logs (the intake's, in the bot).
        self.outage = outage or Outage("Redis", "Usage is recorded once Redis is back.")
        self.audit_days = audit_days
        self.prices = prices or Prices()
        #: Days the per-turn and per-node detail is kept after its last write.
        self.detail_days = detail_days
        self._script = redis.register_script(_RECORD_LUA)
        self.metrics = metrics or Metrics()

    async def record(self, call: CallRecord) -> None:
        """Count one call exactly once; waits while Redis is away (a call costs money).

        The call id makes a repeated record a no-op, so waiting and retrying
        can never count a call twice.
        """
        self.metrics.model_call(call.usage, call.latency, call.error)
        await self.outage.guard(lambda: self._save(call), on=(StoreUnavailableError,))

    async def _save(self, call: CallRecord) -> None:
        now = self.clock()
        recording = _Recording(call, day_of(now), self.detail_days * 24 * 3600)
        if self.audit_days > 0:
            usage = call.usage
            record = [
                int(now.timestamp()), call.model, call.user_id, call.message_id, str(call.sent),
                usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                usage.estimated, round(call.latency, 3), call.error, call.view,
            ]  # fmt: skip
            audit = msgpack.packb(record)
            recording = replace(recording, audit_ttl=self.audit_days * 24 * 3600, audit=audit)
        await guarded(self._script(keys=recording.keys(), args=recording.args()))

    # ----------------------------------------------------------------- reads

    async def _totals(self, key: str) -> Totals:
        values = await guarded(self._redis.hmget(key, _FIELDS))
        return Totals.from_hash(dict(zip(_FIELDS, values, strict=True)))

    async def user_today(self, user_id: int) -> Totals:
        return await self._totals(keys.usage_key("u", user_id, day_of(self.clock())))

    async def user_all_time(self, user_id: int) -> Totals:
        return await self._totals(keys.usage_key("u", user_id))

    async def turn(self, chat_id: int, message_id: int) -> Totals:
        """The calls of the turn answering ``message_id`` (those of today and yesterday)."""
        now = self.clock()
        pipe = self._redis.pipeline(transaction=False)
        for day in (day_of(now), day_of(now - timedelta(days=1))):
            pipe.hget(keys.usage_key("t", chat_id, day), str(message_id))
        total = Totals()
        for value in await guarded(pipe.execute()):
            if value is not None:
                total = total + Totals(*map(int, _text(value).split(" ")))
        return total

    async def chain(self, chat_id: int, path: Sequence[NodeId]) -> Totals:
        """Usage of the turns along one root → leaf path (a branch's own chain)."""
        if not path:
            return Totals()
        by_tree: dict[int, list[NodeId]] = {}
        for node in path:
            by_tree.setdefault(node.tree, []).append(node)
        pipe = self._redis.pipeline(transaction=False)
        for tree, nodes in by_tree.items():
            pipe.hmget(keys.usage_key("n", chat_id, tree), [n.ref for n in nodes])
        found: dict[NodeId, Any] = {}
        for nodes, values in zip(by_tree.values(), await guarded(pipe.execute()), strict=True):
            found.update(zip(nodes, values, strict=True))
        sums = [0, 0, 0, 0]
        for value in found.values():
            if value is not None:
                sums = [a + b for a, b in zip(sums, _node_usage(value)[:4], strict=True)]
        missing = [n for n, value in found.items() if value is None]
        if missing:  # nodes recorded before the per-tree layout
            fields = [f"{n.ref}:{f}" for n in missing for f in ("p", "c", "k", "n")]
            values = await guarded(self._redis.hmget(keys.usage_key("n", chat_id), fields))
            for i, value in enumerate(values):
                sums[i % 4] += int(value) if value is not None else 0
        return Totals(prompt=sums[0], completion=sums[1], cached=sums[2], calls=sums[3])

    async def last_call(self, chat_id: int, sent: NodeId) -> tuple[int, int, str] | None:
        """Prompt and completion tokens of the one call sent up to ``sent``, and its view."""
        value = await guarded(self._redis.hget(keys.usage_key("n", chat_id, sent.tree), sent.ref))
        if value is not None:
            prompt, completion, _, calls, view = _node_usage(value)
        else:  # recorded before the per-tree layout, if at all
            fields = [f"{sent.ref}:{f}" for f in ("p", "c", "n", "v")]
            raw = await guarded(self._redis.hmget(keys.usage_key("n", chat_id), fields))
            if any(v is None for v in raw[:3]):
                return None
            prompt, completion, calls = (int(_text(v)) for v in raw[:3])
            view = _text(raw[3]) if raw[3] is not None else ""
        if calls != 1:
            return None  # several calls summed: not one request's size
        return prompt, completion, view

    async def stats(
        self, *, days: int = 14, users: int = 20
    ) -> tuple[list[tuple[int, Totals, Totals]], list[tuple[str, Totals]]]:
        """Top users (all time and today) and the last ``days`` days, for owners."""
        top = await guarded(
            self._redis.zrevrange(keys.usage_key("users"), 0, users - 1, withscores=False)
        )
        per_user = []
        for raw in top:
            user = int(_text(raw))
            per_user.append((user, await self.user_all_time(user), await self.user_today(user)))
        today = self.clock()
        per_day = []
        for back in range(days):
            day = day_of(today - timedelta(days=back))
            per_day.append((day, await self._totals(keys.usage_key("d", day))))
        return per_user, per_day
