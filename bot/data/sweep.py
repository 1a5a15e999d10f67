"""The cold sweep: conversation trees nothing wrote to for COLD_AFTER_DAYS are compacted
in place (transcript/compact.py), so that Redis holds what nobody reads in a few bytes.

One process sweeps at a time: the holder of the sweep lease (``rc:cold-sweep``, a
:class:`~bot.data.lease.Lease` like the poller's), taken or renewed before each tick.
Every COLD_SWEEP_SECONDS it reads the index of hot trees by last append
(``rc:{trees:<k>}``, 16 sorted sets: a few keys on any Redis Cluster, the oldest trees
first) and compacts the trees older than COLD_AFTER_DAYS, at most :data:`TICK_TREES` a
tick with a pause between ticks, so that turns come first. What a tree's compaction
found decides its index entry:

* ``cold`` (compacted now, or by a sweep that stopped before its index write) and
  ``gone`` (erased): the entry goes, unless an append touched it meanwhile;
* ``fresh`` (written since it was indexed): the entry moves to that write;
* ``busy`` (a turn of it is unfinished) and ``changed`` (written while it was read):
  the entry is looked at again by the next sweep.

Trees written before the index existed are found once by a scan of the tree keys
(``rc:trees:backfilled`` is set when it completes), a few hundred keys (or 50 ms) a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from transcript import StoreUnavailableError, TranscriptStore
from transcript import keys as store_keys
from transcript.outage import guarded

from ..metrics import Metrics
from . import keys
from .lease import Lease

log = logging.getLogger("replychain.sweep")

#: Trees compacted (or looked at) in one tick at most.
TICK_TREES = 50
#: Seconds between two ticks of one sweep: the event loop's turns come first.
TICK_PAUSE = 0.05
#: Tree keys a tick of the backfill scan reads at most, and its longest time (a keyspace
#: holding few tree keys takes many SCAN calls to find them).
BACKFILL_KEYS = 500
BACKFILL_SECONDS = 0.05
#: The sweep lease's length (renewed every tick; a dead sweeper is replaced after it).
LEASE_MS = 60_000
#: Hot trees whose memory is measured to estimate all hot trees' bytes.
SAMPLE_TREES = 32

# Removes an index entry unless an append touched it after it was read.
#   KEYS: index bucket.  ARGV: member, its score as read.
_FORGET_LUA = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""


@dataclass(slots=True)
class Tick:
    """What one tick did: trees by outcome, bytes compacted (records and values)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    hot_bytes: int = 0
    cold_bytes: int = 0

    @property
    def looked_at(self) -> int:
        return sum(self.outcomes.values())


class ColdSweep:
    """Compacts trees at rest while this process holds the sweep lease."""

    def __init__(
        self,
        redis: Redis,
        store: TranscriptStore,
        owner: str,
        *,
        cold_after_days: float,
        every: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis, self.store = redis, store
        self.cold_after = cold_after_days * 24 * 3600
        self.every = every
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.lease = Lease(redis, keys.SWEEP_LEASE, owner, lease_ms=LEASE_MS)
        self._backfill: Any = None  # the scan's iterator while it runs
        self._bucket = 0  # the bucket the next tick starts at (round robin)
        #: Trees compacted by this process, and ticks run.
        self.compacted = 0
        self.ticks = 0

    async def run(self, stopping: asyncio.Event) -> None:
        """Sweep every ``every`` seconds until ``stopping``; a failing sweep is logged
        and tried at the next."""
        try:
            while not stopping.is_set():
                try:
                    await self.sweep(stopping)
                except StoreUnavailableError:
                    pass  # Redis away: the turns' outage lines say so; next sweep
                except Exception:
                    log.exception("the cold sweep failed; trying again in %.0f s", self.every)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.every)
        finally:
            with contextlib.suppress(StoreUnavailableError):
                await self.lease.release()

    async def sweep(self, stopping: asyncio.Event | None = None) -> int:
        """One sweep: ticks while there is work and this process holds the lease;
        returns the trees compacted."""
        before = self.compacted
        while stopping is None or not stopping.is_set():
            if not await self.lease.take():
                break
            tick = await self.tick()
            if not tick.looked_at and self._backfill is None:
                break
            await asyncio.sleep(TICK_PAUSE)
        if self.compacted > before:
            log.info("compacted %d conversation trees at rest", self.compacted - before)
        await self._measure()
        return self.compacted - before

    async def tick(self) -> Tick:
        """One bounded step: at most :data:`TICK_TREES` trees looked at (and
        :data:`BACKFILL_KEYS` tree keys indexed, for :data:`BACKFILL_SECONDS` at most,
        while the backfill scan runs)."""
        self.ticks += 1
        tick = Tick()
        await self._backfill_step()
        now = self.clock()
        due: list[tuple[int, str, int, float]] = []  # bucket, scope, tree, score
        for step in range(store_keys.IDLE_BUCKETS):
            bucket = (self._bucket + step) % store_keys.IDLE_BUCKETS
            found: list[Any] = await guarded(
                self.redis.zrangebyscore(
                    store_keys.idle_key(bucket), "-inf", now - self.cold_after,
                    start=0, num=TICK_TREES - len(due), withscores=True,
                )
            )  # fmt: skip
            for member, score in found:
                try:
                    scope, tree = store_keys.parse_idle_member(member)
                except ValueError:
                    await guarded(self.redis.zrem(store_keys.idle_key(bucket), member))
                    continue
                due.append((bucket, scope, tree, float(score)))
            if len(due) >= TICK_TREES:
                self._bucket = bucket  # the next tick goes on here
                break
        by_scope: dict[str, list[tuple[int, int, float]]] = {}
        for bucket, scope, tree, score in due:
            by_scope.setdefault(scope, []).append((bucket, tree, score))
        for scope, trees in by_scope.items():
            await self._compact(scope, trees, tick, now)
        return tick

    async def _compact(
        self, scope: str, trees: list[tuple[int, int, float]], tick: Tick, now: float
    ) -> None:
        done = await self.store.compact(
            scope, [tree for _, tree, _ in trees], cold_after=self.cold_after,
            companions=keys.tree_companions,
        )  # fmt: skip
        cold_trees = cold_bytes = 0
        pipe = self.redis.pipeline(transaction=False)
        for bucket, tree, score in trees:
            result = done[tree]
            tick.outcomes[result.outcome] = tick.outcomes.get(result.outcome, 0) + 1
            index, member = store_keys.idle_key(bucket), store_keys.idle_member(scope, tree)
            if result.outcome in ("cold", "gone"):
                pipe.eval(_FORGET_LUA, 1, index, member, score)
            else:  # looked at again after its last write, or at the next sweep
                again = result.written if result.outcome == "fresh" else now - self.cold_after
                pipe.zadd(index, {member: max(again, now - self.cold_after + self.every)}, gt=True)
            if result.cold_bytes:
                cold_trees += 1
                cold_bytes += result.cold_bytes
                tick.hot_bytes += result.hot_bytes
                tick.cold_bytes += result.cold_bytes
                self.metrics.cold_tree(result.hot_bytes, result.cold_bytes)
        if cold_trees:
            pipe.hincrby(store_keys.COLD_STATS, "n", cold_trees)
            pipe.hincrby(store_keys.COLD_STATS, "b", cold_bytes)
            self.compacted += cold_trees
        await guarded(pipe.execute())

    async def _backfill_step(self) -> None:
        """Index a few trees written before the index existed (once per Redis)."""
        if self._backfill is None:
            done: int = await guarded(self.redis.exists(store_keys.IDLE_BACKFILLED))
            if self.ticks > 1 or done:
                return
            self._backfill = aiter(self.redis.scan_iter(match="rc:{*}:t:*", count=BACKFILL_KEYS))
        pipe = self.redis.pipeline(transaction=False)
        stamp = int(self.clock())
        deadline = time.monotonic() + BACKFILL_SECONDS
        try:
            for _ in range(BACKFILL_KEYS):
                if time.monotonic() > deadline:
                    break
                name = await guarded(anext(self._backfill))
                text = name.decode() if isinstance(name, bytes) else str(name)
                scope, _, tree = text[len("rc:{") :].partition("}:t:")
                if scope and tree.isdigit():
                    member = store_keys.idle_member(scope, int(tree))
                    index = store_keys.idle_key(store_keys.idle_bucket(scope))
                    pipe.zadd(index, {member: stamp}, nx=True)
        except StopAsyncIteration:
            self._backfill = None
            pipe.set(store_keys.IDLE_BACKFILLED, stamp)
        await guarded(pipe.execute())

    async def _measure(self) -> None:
        """Hot and cold trees and their bytes, for the metrics (hot: estimated from
        the memory of a sample of hot trees)."""
        pipe = self.redis.pipeline(transaction=False)
        cutoff = self.clock() - self.cold_after
        for bucket in range(store_keys.IDLE_BUCKETS):
            pipe.zcard(store_keys.idle_key(bucket))
            pipe.zcount(store_keys.idle_key(bucket), "-inf", cutoff)
            pipe.zrandmember(store_keys.idle_key(bucket), SAMPLE_TREES // 8 or 1)
        pipe.hmget(store_keys.COLD_STATS, ["n", "b"])
        *found, (cold, cold_bytes) = await guarded(pipe.execute())
        hot = sum(int(n) for n in found[0::3])
        eligible = sum(int(n) for n in found[1::3])
        sample = [m for members in found[2::3] for m in (members or [])][:SAMPLE_TREES]
        sizes = self.redis.pipeline(transaction=False)
        for member in sample:
            scope, tree = store_keys.parse_idle_member(member)
            sizes.memory_usage(store_keys.tree_key(scope, tree), samples=0)
        measured = [int(n or 0) for n in await guarded(sizes.execute())] if sample else []
        hot_bytes = hot * sum(measured) // len(measured) if measured else 0
        self.metrics.trees(
            hot=hot, cold=int(cold or 0), eligible=eligible,
            hot_bytes=hot_bytes, cold_bytes=int(cold_bytes or 0),
        )  # fmt: skip


async def eligible_trees(redis: Redis, cold_after_days: float) -> tuple[int, int]:
    """Hot trees, and those at rest for ``cold_after_days`` (for ``doctor``)."""
    pipe = redis.pipeline(transaction=False)
    cutoff = time.time() - cold_after_days * 24 * 3600
    for bucket in range(store_keys.IDLE_BUCKETS):
        pipe.zcard(store_keys.idle_key(bucket))
        pipe.zcount(store_keys.idle_key(bucket), "-inf", cutoff)
    found = await guarded(pipe.execute())
    return sum(int(n) for n in found[0::2]), sum(int(n) for n in found[1::2])
