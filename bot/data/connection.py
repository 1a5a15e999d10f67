"""The one place a Redis client is built, and the guard of the bot's own Redis calls."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.maint_notifications import MaintNotificationsConfig

from transcript import StoreUnavailableError

from .lane import Lane, lane_for

T = TypeVar("T")
#: Queues writes on a pipeline (scripts with ``Pipeline.eval``); what it returns is
#: not used.
Queued = Callable[[Pipeline], object]
_UNAVAILABLE = (ConnectionError, TimeoutError, OSError)


class BotRedis(Redis):
    """redis-py's client, and the :class:`~bot.data.lane.Lane` that
    :func:`run_together` sends the turn's hot round trips on (``None``: redis-py's
    pipeline sends them)."""

    lane: Lane | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.lane is not None:
            await self.lane.aclose()
        await super().aclose(close_connection_pool)


def connect(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 3.0,
    max_connections: int = 64,
    cluster: bool = False,
) -> Redis:
    """A ``redis.asyncio`` client that fails with an error instead of hanging.

    Each command gets ``socket_timeout`` seconds, each connection attempt
    ``connect_timeout``. Nothing is retried here: a connection error, a timeout or
    "loading the dataset" is raised at once (:func:`guarded` makes it an outage), and
    the one Redis retry policy is the outage's (:class:`bot.retry.Outage`), applied by
    the unit of work (a turn, the intake) where it happens. A pooled connection the
    server closed meanwhile (a restart) is noticed when it is taken from the pool and
    reconnected; that is not a retry. At most ``max_connections`` are open; more
    concurrent commands wait for one. The client speaks bytes (records are msgpack).
    No connection is made until first use.

    ``cluster``: ``url`` names any node of a Redis Cluster, and the client is
    redis-py's asyncio ``RedisCluster`` (it routes each command by its key's
    slot; every Lua script and transaction of the bot touches one slot). It
    offers the same commands, so it is typed as :class:`Redis` here. It keeps
    redis-py's cluster retries: they follow the cluster's topology (a MOVED slot, a
    replica promoted after a failover), which is routing, not a retry policy.

    On a single server the client also has a :class:`~bot.data.lane.Lane` with the
    same limits, for :func:`run_together`.
    """
    if cluster:
        routed = RedisCluster.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 3),
            health_check_interval=30,
            decode_responses=False,
        )
        return cast(Redis, routed)
    # A blocking pool: a burst of concurrent commands waits for a free
    # connection instead of failing with "too many connections".
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
        # "auto" (redis-py's default) skips the check at checkout that notices a
        # connection the server closed; the notifications are Redis Enterprise's
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
        decode_responses=False,
    )
    client = cast(BotRedis, BotRedis.from_pool(pool))  # from_pool builds a cls
    client.lane = lane_for(
        url,
        callbacks=client.response_callbacks,
        max_connections=max_connections,
        timeout=socket_timeout,
        connect_timeout=connect_timeout,
    )
    return client


async def guarded(awaitable: Awaitable[T]) -> T:
    """Await one Redis round trip; connection failures become :class:`StoreUnavailableError`."""
    started = time.monotonic()
    try:
        return await awaitable
    except _UNAVAILABLE as exc:
        waited = time.monotonic() - started
        raise StoreUnavailableError(
            f"Redis is unreachable ({type(exc).__name__} after {waited:.1f}s)"
        ) from exc


async def run_together(redis: Redis, *queues: Queued) -> list[list[Any]]:
    """Writes of several modules in one round trip; the replies, one list per queue.

    Lua scripts in it go as EVAL with their text (``Pipeline.eval``): redis-py asks
    SCRIPT EXISTS before each pipeline holding EVALSHA (a round trip more), and a
    cluster pipeline refuses EVALSHA. Nothing is atomic across queues. The
    pipeline only collects the commands where the client has a lane
    (:class:`BotRedis`): the lane sends them.
    """
    pipe = redis.pipeline(transaction=False)
    counts = []
    for queue in queues:
        before = len(pipe)  # (a cluster's pipeline has no command_stack)
        queue(pipe)
        counts.append(len(pipe) - before)
    lane = redis.lane if isinstance(redis, BotRedis) else None
    replies = await guarded(pipe.execute() if lane is None else lane.execute(pipe.command_stack))
    shaped, at = [], 0
    for count in counts:
        shaped.append(replies[at : at + count])
        at += count
    return shaped
