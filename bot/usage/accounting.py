"""Token accounting: every model call's usage, summed per turn, chain, chat, user and day.

Each call is recorded once (a call id guards against a repeated record) by one
Lua script that increments every aggregate atomically, so totals are exact
under concurrency and across restarts. All usage keys share the hash tag
``{usage}`` (one slot, so the script also runs on Redis Cluster). The numbers
are the provider's; a call whose provider reported none is estimated and
counted as such.

An audit record per call ("why did it say that?") references what was sent by
node id (the chain up to the user's node) and what came back by the turn's
message id (its answer node is found under the idempotency key ``answer:<id>``)
or the error; it stores no message text.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
from redis.asyncio import Redis

from transcript import NodeId, StoreUnavailableError

from ..bus.inbound import Inbound
from ..data import keys
from ..data.connection import guarded
from ..model import Usage
from ..retry import Outage

log = logging.getLogger("replychain.accounting")

Clock = Callable[[], datetime]
CALL_MARKER_TTL = 90 * 24 * 3600
USER_DAY_TTL = 400 * 24 * 3600

# KEYS[1] call marker; KEYS[2..n-3] counter hashes; KEYS[n-2] users zset;
# KEYS[n-1] days zset; KEYS[n] per-node hash. ARGV: marker ttl, prompt,
# completion, cached, estimated (0/1), error (0/1), user id, day, node field
# prefix, day-hash ttl, day-hash key, audit key or '', audit value, audit ttl,
# the view the call was sent (its fold node, '' for the whole history).
_RECORD_LUA = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local p, c, k = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local e, x = tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 2, #KEYS - 3 do
  redis.call('HINCRBY', KEYS[i], 'p', p)
  redis.call('HINCRBY', KEYS[i], 'c', c)
  redis.call('HINCRBY', KEYS[i], 'k', k)
  redis.call('HINCRBY', KEYS[i], 'n', 1)
  if e > 0 then redis.call('HINCRBY', KEYS[i], 'e', 1) end
  if x > 0 then redis.call('HINCRBY', KEYS[i], 'x', 1) end
end
redis.call('ZINCRBY', KEYS[#KEYS - 2], p + c, ARGV[7])
redis.call('ZINCRBY', KEYS[#KEYS - 1], p + c, ARGV[8])
local node = KEYS[#KEYS]
redis.call('HINCRBY', node, ARGV[9] .. ':p', p)
redis.call('HINCRBY', node, ARGV[9] .. ':c', c)
redis.call('HINCRBY', node, ARGV[9] .. ':k', k)
redis.call('HINCRBY', node, ARGV[9] .. ':n', 1)
redis.call('HSET', node, ARGV[9] .. ':v', ARGV[15])
redis.call('EXPIRE', ARGV[11], ARGV[10])
if ARGV[12] ~= '' then redis.call('SET', ARGV[12], ARGV[13], 'EX', ARGV[14]) end
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
    ) -> None:
        self._redis = redis
        self.clock = clock
        #: Whose "Redis is unreachable" line a wait for Redis logs (the intake's, in the bot).
        self.outage = outage or Outage("Redis", "Usage is recorded once Redis is back.")
        self.audit_days = audit_days
        self.prices = prices or Prices()
        self._script = redis.register_script(_RECORD_LUA)

    async def record(self, call: CallRecord) -> None:
        """Count one call exactly once; waits while Redis is away (a call costs money).

        The call id makes a repeated record a no-op, so waiting and retrying
        can never count a call twice.
        """
        await self.outage.guard(lambda: self._save(call), on=(StoreUnavailableError,))

    async def _save(self, call: CallRecord) -> None:
        now = self.clock()
        day = day_of(now)
        chat, user = call.chat_id, call.user_id
        user_day = keys.usage_key("u", user, day)
        counters = [
            keys.usage_key("u", user),
            user_day,
            keys.usage_key("c", chat),
            keys.usage_key("r", chat, call.sent.tree),
            keys.usage_key("t", chat, call.message_id),
            keys.usage_key("d", day),
        ]
        audit_key, audit_value = "", b""
        if self.audit_days > 0:
            audit_key = keys.usage_key("a", chat, call.call_id)
            audit_value = msgpack.packb(
                {
                    "at": now.timestamp(),
                    "model": call.model,
                    "user": user,
                    "message": call.message_id,
                    "sent": str(call.sent),
                    "prompt": call.usage.prompt_tokens,
                    "completion": call.usage.completion_tokens,
                    "cached": call.usage.cached_tokens,
                    "estimated": call.usage.estimated,
                    "latency": round(call.latency, 3),
                    "error": call.error,
                    "view": call.view,
                }
            )
        usage = call.usage
        await guarded(
            self._script(
                keys=[
                    keys.usage_key("call", call.call_id),
                    *counters,
                    keys.usage_key("users"),
                    keys.usage_key("days"),
                    keys.usage_key("n", chat),
                ],
                args=[
                    CALL_MARKER_TTL,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cached_tokens,
                    int(usage.estimated),
                    int(call.error is not None),
                    user,
                    day,
                    call.sent.ref,
                    USER_DAY_TTL,
                    user_day,
                    audit_key,
                    audit_value,
                    self.audit_days * 24 * 3600,
                    call.view,
                ],
            )
        )

    # ----------------------------------------------------------------- reads

    async def _totals(self, key: str) -> Totals:
        return Totals.from_hash(await guarded(self._redis.hgetall(key)))

    async def user_today(self, user_id: int) -> Totals:
        return await self._totals(keys.usage_key("u", user_id, day_of(self.clock())))

    async def user_all_time(self, user_id: int) -> Totals:
        return await self._totals(keys.usage_key("u", user_id))

    async def turn(self, chat_id: int, message_id: int) -> Totals:
        return await self._totals(keys.usage_key("t", chat_id, message_id))

    async def chain(self, chat_id: int, path: Sequence[NodeId]) -> Totals:
        """Usage of the turns along one root → leaf path (a branch's own chain)."""
        fields = [f"{n.ref}:{f}" for n in path for f in ("p", "c", "k", "n")]
        if not fields:
            return Totals()
        values = await guarded(self._redis.hmget(keys.usage_key("n", chat_id), fields))
        sums = [0, 0, 0, 0]
        for i, value in enumerate(values):
            sums[i % 4] += int(value) if value is not None else 0
        return Totals(prompt=sums[0], completion=sums[1], cached=sums[2], calls=sums[3])

    async def last_call(self, chat_id: int, sent: NodeId) -> tuple[int, int, str] | None:
        """Prompt and completion tokens of the one call sent up to ``sent``, and its view."""
        fields = [f"{sent.ref}:{f}" for f in ("p", "c", "n", "v")]
        prompt, completion, calls, view = await guarded(
            self._redis.hmget(keys.usage_key("n", chat_id), fields)
        )
        if not calls or int(calls) != 1 or prompt is None or completion is None:
            return None  # unknown, or several calls summed: not one request's size
        text = view.decode() if isinstance(view, bytes) else (view or "")
        return int(prompt), int(completion), text

    async def stats(
        self, *, days: int = 14, users: int = 20
    ) -> tuple[list[tuple[int, Totals, Totals]], list[tuple[str, Totals]]]:
        """Top users (all time and today) and the last ``days`` days, for owners."""
        top = await guarded(
            self._redis.zrevrange(keys.usage_key("users"), 0, users - 1, withscores=False)
        )
        per_user = []
        for raw in top:
            user = int(raw.decode() if isinstance(raw, bytes) else str(raw))
            per_user.append((user, await self.user_all_time(user), await self.user_today(user)))
        today = self.clock()
        per_day = []
        for back in range(days):
            day = day_of(today - timedelta(days=back))
            per_day.append((day, await self._totals(keys.usage_key("d", day))))
        return per_user, per_day
