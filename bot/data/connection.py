"""The one place a Redis client is built, and the guard of the bot's own Redis calls."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import (
    ConnectionError,
    RedisClusterException,
)
from redis.maint_notifications import MaintNotificationsConfig

from transcript.outage import guarded

from .pipeline_client import PipelineClient, pipeline_client_for

T = TypeVar("T")
#: Queues writes on a pipeline (scripts with ``Pipeline.eval``); what it returns is
#: not used.
Queued = Callable[[Pipeline], object]


class BotRedis(Redis):
    """redis-py's client, and the :class:`~bot.data.pipeline_client.PipelineClient` that
    :func:`run_together` sends the turn's hot round trips on (``None``: redis-py's
    pipeline sends them)."""

    pipelines: PipelineClient | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.pipelines is not None:
            await self.pipelines.aclose()
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

    On a single server the client also has a
    :class:`~bot.data.pipeline_client.PipelineClient` with the same limits, for
    :func:`run_together`.
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
    client.pipelines = pipeline_client_for(
        url,
        callbacks=client.response_callbacks,
        max_connections=max_connections,
        timeout=socket_timeout,
        connect_timeout=connect_timeout,
    )
    return client


async def run_together(redis: Redis, *queues: Queued) -> list[list[Any]]:
    """Writes of several modules in one round trip; the replies, one list per queue.

    Lua scripts in it go as EVAL with their text (``Pipeline.eval``): redis-py asks
    SCRIPT EXISTS before each pipeline holding EVALSHA (a round trip more), and a
    cluster pipeline refuses EVALSHA. Nothing is atomic across queues. The
    pipeline only collects the commands where the client has a pipeline client
    (:class:`BotRedis`): the pipeline client sends them.
    """
    pipe = redis.pipeline(transaction=False)
    counts = []
    for queue in queues:
        before = len(pipe)  # (a cluster's pipeline has no command_stack)
        queue(pipe)
        counts.append(len(pipe) - before)
    direct = redis.pipelines if isinstance(redis, BotRedis) else None
    replies = await guarded(
        pipe.execute() if direct is None else direct.execute(pipe.command_stack)
    )
    shaped, at = [], 0
    for count in counts:
        shaped.append(replies[at : at + count])
        at += count
    return shaped


async def run_kept(
    redis: Redis, replicas: ReplicaAck | None, key: str, *queues: Queued
) -> list[list[Any]]:
    """:func:`run_together` for writes that follow something shown on Telegram: on a
    Redis Cluster (``replicas``) it returns once a replica of ``key``'s master holds
    that master's share of them, and fails when that master goes away first
    (:class:`ReplicaAck`; every such write is idempotent: the caller makes it again)."""
    if replicas is None:
        return await run_together(redis, *queues)
    counts: list[int] = []

    def together(pipe: Pipeline) -> None:
        for queue in queues:
            before = len(pipe)
            queue(pipe)
            counts.append(len(pipe) - before)

    replies = await guarded(replicas.write(key, together))
    shaped, at = [], 0
    for count in counts:
        shaped.append(replies[at : at + count])
        at += count
    return shaped


#: Longest a write waits for a replica to acknowledge it (:class:`ReplicaAck`). A replica
#: in sync answers in about a millisecond; the wait is long only while the replica is cut
#: off, and it outlasts the moment in which a master that lost its replica's link can die
#: with writes the replica never got: a write still waiting then fails and is made again
#: on the promoted replica, instead of being taken and lost.
REPLICA_WAIT_MS = 2000
#: Seconds a master that had a replica connected is still taken to have one after its
#: link dropped: a replica cut off is promoted all the same if the master dies.
REPLICA_MEMORY = 60.0
#: Seconds a master's count of replicas is trusted before it is asked again.
REPLICAS_TTL = 5.0


def replica_ack(redis: Redis) -> ReplicaAck | None:
    """Replica acknowledgement for writes on a Redis Cluster; None on a single server.

    One per client: what it learned of each master's replicas (and the count of writes
    no replica acknowledged) serves every module writing through that client."""
    routed: object = redis  # connect() types a cluster client as Redis
    if not isinstance(routed, RedisCluster):
        return None
    found = _REPLICA_ACKS.get(routed)
    if found is None:
        found = _REPLICA_ACKS[routed] = ReplicaAck(routed)
    return found


_REPLICA_ACKS: weakref.WeakKeyDictionary[RedisCluster, ReplicaAck] = weakref.WeakKeyDictionary()


class ReplicaAck:
    """Writes that a replica holds before they count as done, on a Redis Cluster.

    A master acknowledges a write before its replicas have it (replication is
    asynchronous): killed in that moment, it is replaced by a replica that never got
    the write, and the write is lost. Here the writes and a ``WAIT 1 <ms>`` go on one
    connection to the key's master (a cluster pipeline holding commands of one node),
    so the WAIT covers them: it returns once a replica acknowledged them, fails when
    the master goes away first (the writes may be on it alone: the caller makes them
    again, on the promoted replica), or returns after
    ``timeout_ms`` (then the write is only as safe as on the master alone; counted in
    :attr:`unacknowledged`, and the master's writes wait no more until its replicas are
    asked again: a replica that is resyncing or gone costs one wait, not one per write).
    A master with no replica connected, nor one in the last :data:`REPLICA_MEMORY` s,
    gets no WAIT. Whether it has one is asked (``ROLE``) at most every
    :data:`REPLICAS_TTL` s: redis-py's slot map does not learn that a failed master came
    back as a replica. Single servers never use this.
    """

    def __init__(self, cluster: RedisCluster, *, timeout_ms: int = REPLICA_WAIT_MS) -> None:
        self._cluster = cluster
        self.timeout_ms = timeout_ms
        self._replicas: dict[str, tuple[float, int]] = {}
        #: When each master last had a replica connected.
        self._had_replica: dict[str, float] = {}
        #: Writes no replica acknowledged within the time (or whose WAIT failed).
        self.unacknowledged = 0

    async def write(self, key: str, queue: Queued) -> list[Any]:
        """Run the writes ``queue`` makes (on ``key``'s slot only); their replies."""
        cluster = self._cluster
        await cluster.initialize()  # the slot map (a no-op once it is known)
        node = cluster.get_node_from_key(key)
        waits = node is not None and await self._replicas_of(node) > 0
        pipe = cluster.pipeline(transaction=False)
        queue(cast(Pipeline, pipe))  # the same commands (see connect)
        if waits:
            pipe.execute_command("WAIT", 1, self.timeout_ms, target_nodes=node)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except RedisClusterException as exc:  # the topology changed under a retry
            raise ConnectionError("the cluster changed during the write") from exc
        written = replies[:-1] if waits else replies
        for reply in written:
            if isinstance(reply, Exception):
                raise reply
        if waits and isinstance(replies[-1], Exception):
            # the master went away before a replica said it had the writes: they may be
            # on the dead master alone. Failed, so the caller makes them again (on the
            # promoted replica); not counted as taken.
            raise ConnectionError("the master failed before a replica acknowledged the write")
        if waits and not (isinstance(replies[-1], int) and replies[-1] > 0):
            self.unacknowledged += 1
            assert node is not None  # waits needs it
            self._replicas[node.name] = (time.monotonic(), 0)
        return written

    async def _replicas_of(self, node: ClusterNode) -> int:
        checked = self._replicas.get(node.name)
        now = time.monotonic()
        if checked is not None and now - checked[0] < REPLICAS_TTL:
            return checked[1]
        role: Any = await self._cluster.execute_command("ROLE", target_nodes=node)
        count = len(role[2]) if role and role[0] in (b"master", "master") else 0
        if count:
            self._had_replica[node.name] = now
        elif now - self._had_replica.get(node.name, float("-inf")) < REPLICA_MEMORY:
            # its replica's link is down, but the replica may be promoted all the same
            # (soak --lossy: the link cut, then the master killed): wait for it
            count = 1
        self._replicas[node.name] = (now, count)
        return count
