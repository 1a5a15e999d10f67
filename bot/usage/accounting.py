"""Token accounting: every model call's usage, summed per turn, branch, user and day.

Each call is recorded once, in two Lua scripts that write only what changes (a
zero count is never written, each hash gets one HSET per call): the first, in
the chat's Redis Cluster slot (its transcript's hash tag), writes the per-turn,
per-node and audit detail and notes the call as pending; the second, in the
user's totals bucket (one of ``USAGE_BUCKETS`` slots), adds it to the user's and
the day's totals; then the pending entry is removed. Both steps are no-ops when
repeated, and a pending entry left by a crash between them is finished by the
next record in that chat, so a call is counted once (exact under concurrency and
across restarts) and no one slot takes every call's write. The numbers are the
provider's; a call whose provider reported none is estimated and counted as such.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import msgpack
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import StoreUnavailableError
from transcript.outage import guarded

from ..data import keys
from ..data.connection import Queued, replica_ack, run_kept, run_together
from ..metrics import Metrics
from ..retry import Outage
from .calls import (
    DETAIL_DAYS,
    NANO,
    USER_DAY_TTL,
    CallRecord,
    Clock,
    Prices,
    _text,
    day_of,
)
from .reads import UsageReads

log = logging.getLogger("replychain.accounting")


# The first step, in the chat's slot (KEYS and ARGV: see _Recording). Hashes are
# read with HMGET/HGET and written with one HSET of the changed fields. The
# per-node entry "p c k n markers view" carries the markers of the calls counted
# in it, so a repeated record is found there before anything is written. A new
# call is also noted in the chat's pending hash (what the second step needs, and
# when), removed once its second step is done (ARGV[16...]: entries of earlier
# calls whose totals this process wrote); the script answers with the pending
# entries of other calls older than a minute (left by a crash): the caller
# finishes them.
_DETAIL_LUA = """
local tree, ref, marker, pending = KEYS[2], ARGV[9], ARGV[1], KEYS[3]
if #ARGV > 15 then redis.call('HDEL', pending, unpack(ARGV, 16)) end
local node = redis.call('HGET', tree, ref)
local counted = 0
if not (node and string.find(node, marker, 1, true)) then
  counted = 1
  local detail_ttl, refresh_below = tonumber(ARGV[2]), tonumber(ARGV[3])
  local delta = {tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), 1,
                 tonumber(ARGV[7]), tonumber(ARGV[8])}
  -- the turn's entry "p c k n e x" in its chat's hash of the day (e and x left out
  -- while both are 0)
  local turns, m = KEYS[1], ARGV[11]
  local t, j = {0, 0, 0, 0, 0, 0}, 0
  local old = redis.call('HGET', turns, m)
  if old then for v in string.gmatch(old, '%d+') do j = j + 1; t[j] = tonumber(v) end end
  for i = 1, 6 do t[i] = string.format('%d', t[i] + delta[i]) end
  local last = 6
  while last > 4 and t[last] == '0' do last = last - 1 end
  redis.call('HSET', turns, m, table.concat(t, ' ', 1, last))
  if redis.call('TTL', turns) < 0 then redis.call('EXPIRE', turns, detail_ttl) end
  -- the node's entry
  local p, c, k, n, seen = 0, 0, 0, 0, ''
  if node then p, c, k, n, seen = string.match(node, '^(%d+) (%d+) (%d+) (%d+) (%S+)') end
  redis.call('HSET', tree, ref, string.format('%d %d %d %d %s%s %s',
    p + delta[1], c + delta[2], k + delta[3], n + 1, seen, marker, ARGV[10]))
  if redis.call('TTL', tree) < refresh_below then redis.call('EXPIRE', tree, detail_ttl) end
  redis.call('HSET', pending, marker, ARGV[12])
  if KEYS[4] then
    redis.call('HSET', KEYS[4], marker, ARGV[13])
    if redis.call('TTL', KEYS[4]) < 0 then redis.call('EXPIRE', KEYS[4], ARGV[14]) end
  end
end
-- the pending entries "user day p c k e x at" older than ARGV[15], of other calls
local stale, all = {}, redis.call('HGETALL', pending)
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], '(%d+)$'))
  if all[i] ~= marker and at < tonumber(ARGV[15]) then
    stale[#stale + 1] = all[i]
    stale[#stale + 1] = all[i + 1]
  end
end
return {counted, stale}
"""

# The second step, in the user's bucket: KEYS user, user-day, day, users, counted-of-day;
# ARGV marker as a number, user, p, c, k, e, x, user-day TTL, counted TTL, the call's
# cost in nano-dollars and its model (those two absent in an entry written before they
# existed; "-": not kept per model); the model's share goes in fields
# "<p|c|k|n|d>:<model>". Answers 0 when the call was counted already, else {1, the
# bucket's cost of the day} (what the spend alert watches). The counted
# set (an intset: 8 bytes a call) makes a repeated second step (a crash before the
# pending entry was removed) a no-op.
_TOTALS_LUA = """
if redis.call('SADD', KEYS[5], ARGV[1]) == 0 then return 0 end
if redis.call('TTL', KEYS[5]) < 0 then redis.call('EXPIRE', KEYS[5], ARGV[9]) end
local names = {'p', 'c', 'k', 'n', 'e', 'x', 'd'}
local delta = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), 1,
               tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[10] or '0')}
-- the model's own fields "<name>:<model>" (tokens, calls, cost)
local model = ARGV[11] or '-'
if model ~= '-' then
  for _, i in ipairs({1, 2, 3, 4, 7}) do
    names[#names + 1] = names[i] .. ':' .. model
    delta[#delta + 1] = delta[i]
  end
end
-- adds delta to a counter hash; true if it had no calls yet
local function add(key)
  local old = redis.call('HMGET', key, unpack(names))
  local args = {}
  for i = 1, #names do
    if delta[i] ~= 0 then
      args[#args + 1] = names[i]
      args[#args + 1] = string.format('%d', (tonumber(old[i]) or 0) + delta[i])
    end
  end
  redis.call('HSET', key, unpack(args))
  return not old[4]
end
add(KEYS[1])
if add(KEYS[2]) then redis.call('EXPIRE', KEYS[2], ARGV[8]) end
add(KEYS[3])
if delta[1] + delta[2] ~= 0 then
  redis.call('ZINCRBY', KEYS[4], delta[1] + delta[2], ARGV[2])
end
return {1, redis.call('HGET', KEYS[3], 'd') or '0'}
"""
#: How long a bucket remembers that a call's totals are written (the counted set).
OK_TTL = 2 * 24 * 3600
#: Seconds after which another call's pending entry counts as left behind by a crash.
STALE_PENDING = 60


def _marker(call_id: str) -> str:
    """Marks a call as counted in its node's entry: 48 bits of its id, "#" and 8 characters."""
    digest = hashlib.blake2b(call_id.encode(), digest_size=6).digest()
    return "#" + base64.urlsafe_b64encode(digest).decode()


def _marker_number(marker: str) -> int:
    """The 48 bits of a marker as a number (a member of a bucket's counted set)."""
    return int.from_bytes(base64.urlsafe_b64decode(marker[1:]), "big")


@dataclass(frozen=True, slots=True)
class _Recording:
    """The first step's keys and arguments for one call, built from named values."""

    call: CallRecord
    day: str
    at: int  # unix seconds
    detail_ttl: int
    audit_ttl: int = 0  # 0: no audit record
    audit: bytes = b""
    #: What the call cost, in nano-dollars.
    cost: int = 0
    #: Count the call per model too (a bot with several models).
    per_model: bool = False

    def keys(self) -> list[str]:
        call = self.call
        chat = call.sent.scope  # the chat's, or a guest chat's (g<chat>): never mixed
        found = [
            keys.chat_usage_key(chat, "t", self.day),  # 1: the chat's turns of the day
            keys.chat_usage_key(chat, "n", call.sent.tree),  # 2: per node, this tree
            keys.chat_usage_key(chat, "p"),  # 3: pending totals
        ]
        if self.audit_ttl > 0:
            found.append(keys.chat_usage_key(chat, "a", self.day))  # 4: audit of the day
        return found

    def args(self) -> list[str | int | bytes]:
        call, ttl = self.call, self.detail_ttl
        return [
            _marker(call.call_id),  # 1
            ttl,  # 2
            ttl - max(1, min(24 * 3600, ttl // 10)),  # 3: refresh the tree's TTL below this
            *self.delta(),  # 4-8: p c k e x
            call.sent.ref,  # 9
            call.view,  # 10
            call.message_id,  # 11: the turn's field in 1
            self.pending(),  # 12: the pending entry
            self.audit,  # 13
            self.audit_ttl + 24 * 3600,  # 14: each record is kept at least audit_ttl
            self.at - STALE_PENDING,  # 15: other calls' pending entries older: left behind
        ]

    def pending(self) -> str:
        """The pending entry "user day p c k e x cost model at" (what the second step
        needs; the model's name has no spaces: see bot.model.catalogue)."""
        call = self.call
        model = ("".join(call.model.split()) or "-") if self.per_model else "-"
        entry = [call.user_id, self.day, *self.delta(), self.cost, model, self.at]
        return " ".join(map(str, entry))

    def delta(self) -> list[int]:
        """What the call adds: prompt, completion and cached tokens, estimated, failed."""
        call, usage = self.call, self.call.usage
        return [
            usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
            int(usage.estimated), int(call.error is not None),
        ]  # fmt: skip


def _queue_totals(pipe: Pipeline, marker: str, pending: str) -> None:
    """Queue the second step for one pending entry "user day p c k e x cost model at"
    (or "user day p c k e x at", as written before costs were kept; a no-op if it
    already ran)."""
    user_text, day, *rest = pending.split(" ")
    delta, priced = rest[:5], rest[5:-1]
    user = int(user_text)
    bucket = keys.usage_bucket(user)
    found = [
        keys.usage_total_key(bucket, "u", user),
        keys.usage_total_key(bucket, "u", user, day),
        keys.usage_total_key(bucket, "d", day),
        keys.usage_total_key(bucket, "users"),
        keys.usage_total_key(bucket, "counted", day),
    ]
    args: list[str | int] = [_marker_number(marker), user, *delta, USER_DAY_TTL, OK_TTL, *priced]
    pipe.eval(_TOTALS_LUA, len(found), *found, *args)


class Accounting(UsageReads):
    """Records model calls and answers usage questions (:class:`UsageReads`)."""

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
        model_prices: Mapping[str, Prices] | None = None,
    ) -> None:
        """``prices``: of a model ``model_prices`` does not name (the single model of a
        bot without MODELS_FILE: the PRICE_* settings)."""
        if detail_days < 1:
            raise ValueError("detail_days must be at least 1")
        super().__init__(redis, clock=clock, prices=prices, model_prices=model_prices)
        #: Replica acknowledgement of a record that carries the answer's node (Redis
        #: Cluster only).
        self.replicas = replica_ack(redis)
        #: Whose "Redis is unreachable" line a wait for Redis logs (the intake's, in the bot).
        self.outage = outage or Outage("Redis", "Usage is recorded once Redis is back.")
        self.audit_days = audit_days
        #: Called with a bucket's cost of the day (nano-dollars) after a priced call
        #: counted there (the daily spend alert, DAILY_SPEND_ALERT_USD).
        self.on_spent: Callable[[int], None] | None = None
        #: Days the per-turn and per-node detail is kept after its last write.
        self.detail_days = detail_days
        #: Per chat, the pending entries whose totals this process wrote (removed with
        #: the turn's final write, or the chat's next record).
        self._done: dict[str, set[str]] = {}  # by chat scope
        self.metrics = metrics or Metrics()

    async def record(self, call: CallRecord, *, with_writes: Queued | None = None) -> list[Any]:
        """Count one call exactly once; waits while Redis is away (a call costs money).

        The call id makes a repeated record a no-op, so waiting and retrying
        can never count a call twice. ``with_writes`` queues more idempotent script
        calls on the same round trip (the answer's node); their replies are
        returned.
        """
        self.metrics.model_call(call.usage, call.latency, call.error)
        return await self.outage.guard(
            lambda: self._save(call, with_writes), on=(StoreUnavailableError,)
        )

    async def _save(self, call: CallRecord, with_writes: Queued | None) -> list[Any]:
        """Two steps sent together: the chat's detail (with a pending entry) and the
        user's totals; the pending entry is removed by a later write (the turn's
        final one, :meth:`queue_settled`, or the chat's next record).

        Each step is a no-op when repeated (the node's markers; the bucket's counted
        set), so a retry counts nothing twice. A pending entry outlives its call
        only if the process died before removing it (or between sending the
        steps): the chat's next record a minute or more later finishes it (its
        totals step again, a no-op if it ran) while its day's counted set is kept,
        today or yesterday; an older one is dropped (see README, "Running at
        scale").
        """
        now = self.clock()
        day = day_of(now)
        usage = call.usage
        cost = call.cost
        if cost is None:
            dollars = self.prices_of(call.model).dollars(
                usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens
            )
            cost = round(dollars * NANO)
        recording = _Recording(
            call, day, int(now.timestamp()), self.detail_days * 24 * 3600,
            cost=cost, per_model=len(self.model_prices) > 1,
        )  # fmt: skip
        if self.audit_days > 0:
            user = None if call.user_id == call.chat_id else call.user_id
            record = [
                int(now.timestamp()), call.model, user, call.message_id, call.sent.ref,
                usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                usage.estimated, round(call.latency, 3), call.error, call.view,
            ]  # fmt: skip
            audit = msgpack.packb(record, use_single_float=True)
            recording = replace(recording, audit_ttl=self.audit_days * 24 * 3600, audit=audit)
        marker = _marker(call.call_id)
        scope = call.sent.scope
        done = self._done.pop(scope, set())

        def steps(pipe: Pipeline) -> None:
            detail = recording.keys()
            pipe.eval(_DETAIL_LUA, len(detail), *detail, *recording.args(), *done)
            _queue_totals(pipe, marker, recording.pending())

        try:
            # with the answer's node, kept by a replica on a Redis Cluster (run_kept):
            # the answer goes on screen next, and the turn's end refers to the node
            replies = await run_kept(
                self._redis, self.replicas if with_writes else None, recording.keys()[0],
                steps, *([with_writes] if with_writes else []),
            )  # fmt: skip
        except BaseException:
            self._done.setdefault(scope, set()).update(done)
            raise
        (_, flat), totals = replies[0]
        if self.on_spent is not None and recording.cost and isinstance(totals, list):
            self.on_spent(int(totals[1]))
        stale = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}
        if stale:
            await self._finish(scope, stale, now)
        self._done.setdefault(scope, set()).add(marker)
        sent = (scope, call.sent)
        usage = call.usage
        self._sizes[sent] = (
            None
            if sent in self._sizes
            else (usage.prompt_tokens, usage.completion_tokens, call.view)
        )
        return replies[1] if with_writes else []

    async def _finish(self, scope: str, stale: dict[str, str], now: datetime) -> None:
        """Write the totals of pending entries a crash left behind, then remove them."""
        recent = {day_of(now), day_of(now - timedelta(days=1))}
        finish = {m: entry for m, entry in stale.items() if entry.split(" ")[1] in recent}
        if len(finish) < len(stale):  # its counted set may be gone: could count twice
            log.warning("dropped %d usage entries pending for days", len(stale) - len(finish))

        def totals(pipe: Pipeline) -> None:
            for marker, entry in finish.items():
                _queue_totals(pipe, marker, entry)

        if finish:  # (the buckets may be other slots: removed only once this succeeded)
            await run_together(self._redis, totals)
        await guarded(self._redis.hdel(keys.chat_usage_key(scope, "p"), *stale))

    def queue_settled(self, chat: int | str) -> Queued:
        """Queues the removal of the chat's pending entries whose totals are written
        (``chat``: its id, or its scope, a guest chat's "g<chat>").

        The turn's final write carries it (no round trip of its own); entries it
        does not carry go with the chat's next record.
        """
        done = self._done.pop(str(chat), set())

        def queue(pipe: Pipeline) -> None:
            if done:
                pipe.hdel(keys.chat_usage_key(chat, "p"), *done)

        return queue

    async def settled(self, chat: int | str) -> None:
        """Remove the chat's pending entries whose totals are written, now."""
        pipe = self._redis.pipeline(transaction=False)
        self.queue_settled(chat)(pipe)
        await guarded(pipe.execute())

    # ----------------------------------------------------------------- reads
