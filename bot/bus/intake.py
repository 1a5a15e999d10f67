"""Durable intake: a user's message is in a Redis Stream before Telegram forgets it.

The update handler appends the message to ``rc:intake`` (XADD) and only then
returns, so aiogram confirms the update to Telegram after it is stored (polling
runs handlers one at a time for this reason). Turn workers read the stream
through the consumer group ``turns`` and acknowledge an entry (XACK, then XDEL)
only when its turn is finished. Entries a crashed worker left unacknowledged
are read again at start-up (a process's own pending entries) or claimed by
another process once they sat idle for the takeover time: a live process's
heartbeat keeps the idle time of its entries near zero (:meth:`Intake.keep`),
so only a dead process's entries are ever claimed. Several bot processes share
the stream. A turn that keeps failing is *parked* in ``rc:deadletter`` with the
type of its error, where the operator sees it (and can put it back).

With TOPIC_THREADS a message of a private chat's topic also joins the topic's queue as
it is appended (:func:`join_topic`): here, one update after the other, is where a
topic's messages are in the order they were sent, and its turns are answered in that
order (bot/turn/topics.py).

On a Redis Cluster the append returns only once a replica of the stream's master
holds it too (:class:`~bot.data.connection.ReplicaAck`): the update is confirmed to
Telegram right after, and a failover must not lose what Telegram no longer keeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ResponseError
from redis.typing import EncodableT, FieldT

from transcript import StoreUnavailableError
from transcript.outage import guarded

from ..data import keys
from ..data.connection import Queued, replica_ack, run_together
from ..metrics import Backlog
from ..retry import Outage
from .inbound import Inbound

_FIELD = b"m"
#: A topic's queue (rc:{S}:queue:<t>) outlives its newest addition by this long: a
#: turn still in it then is long gone (Telegram keeps an update one day).
TOPIC_QUEUE_TTL = 2 * 24 * 3600

# Resets the idle time of entries still pending for consumer ARGV[2] (XCLAIM
# JUSTID to itself: the delivery count stays), skipping entries that another
# consumer claimed meanwhile.  KEYS: stream.  ARGV: group, consumer, ids...
_KEEP_LUA = """
local kept = 0
for i = 3, #ARGV do
  local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #held > 0 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    kept = kept + 1
  end
end
return kept
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry; ``inbound`` is None for an entry that does not decode."""

    id: bytes
    inbound: Inbound | None
    raw: bytes = b""
    #: The intake stream (shard) holding it.
    stream: str = keys.INTAKE_STREAM


class Intake:
    """The stream of accepted messages, shared by every bot process on one Redis."""

    def __init__(
        self, redis: Redis, consumer: str, *, shards: int = 1, topic_threads: bool = False
    ) -> None:
        self._redis = redis
        self.consumer = consumer
        #: TOPIC_THREADS: a message of a private chat's topic joins the topic's queue as it
        #: is appended (its turn waits for those before it: bot/turn/topics.py).
        self.topic_threads = topic_threads
        #: The intake streams: ``shards`` of them, a chat's messages always in the same one.
        self.streams = [keys.intake_stream(shard) for shard in range(shards)]
        self._keep = redis.register_script(_KEEP_LUA)
        #: Replica acknowledgement of appends (Redis Cluster only).
        self.replicas = replica_ack(redis)
        self.outage = Outage(
            "Redis", "Unconfirmed messages stay queued at Telegram and nothing stored is lost."
        )

    def stream_of(self, chat_id: int) -> str:
        """The stream a chat's messages go to."""
        return self.streams[keys.intake_shard(chat_id, len(self.streams))]

    async def ensure_group(self) -> None:
        for stream in self.streams:
            try:
                await guarded(
                    self._redis.xgroup_create(stream, keys.INTAKE_GROUP, id="0", mkstream=True)
                )
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def record(self, inbound: Inbound, stopping: asyncio.Event) -> bool:
        """Append ``inbound``, retrying while Redis is away; ``False`` if stopped first."""
        try:
            await self.outage.guard(
                lambda: guarded(self._append(inbound)), on=(StoreUnavailableError,), until=stopping
            )
        except StoreUnavailableError:
            return False
        return True

    async def _append(self, inbound: Inbound) -> None:
        stream = self.stream_of(inbound.chat_id)
        fields: dict[FieldT, EncodableT] = {_FIELD: inbound.encode()}
        queues: list[Queued] = []
        topic = inbound.private_topic if self.topic_threads else None
        if topic is not None:
            # (an append made again after a failure is the same member; the stream's
            # slot may be another than the chat's)
            queues.append(lambda pipe: join_topic(pipe, inbound, topic))
        if self.replicas is None:
            await run_together(self._redis, *queues, lambda pipe: pipe.xadd(stream, fields))
        else:
            if queues:
                await run_together(self._redis, *queues)
            await self.replicas.write(stream, lambda pipe: pipe.xadd(stream, fields))

    async def read_pending(
        self, after: bytes, count: int, stream: str = keys.INTAKE_STREAM
    ) -> list[Entry]:
        """Entries delivered to this consumer before and never acknowledged, after ``after``."""
        return self._entries(
            await guarded(
                self._redis.xreadgroup(
                    keys.INTAKE_GROUP, self.consumer, {stream: after}, count=count
                )
            )
        )

    async def read_new(
        self, count: int, block_ms: int, stream: str = keys.INTAKE_STREAM
    ) -> list[Entry]:
        return self._entries(
            await guarded(
                self._redis.xreadgroup(
                    keys.INTAKE_GROUP, self.consumer, {stream: ">"}, count=count, block=block_ms
                )
            )
        )

    async def keep(self, entries: Sequence[Entry]) -> int:
        """Heartbeat: reset the idle time of the entries this consumer still holds.

        An entry another consumer has claimed meanwhile is left alone. Returns
        how many were kept. On a Redis Cluster it returns once a replica holds the
        renewal, as the append does (a failover must not lose it, or another process
        would take the entries over while this one still runs their turns).
        """
        by_stream: dict[str, list[bytes]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.id)
        kept = 0
        for stream, ids in by_stream.items():
            args: list[str | bytes] = [keys.INTAKE_GROUP, self.consumer, *ids]
            if self.replicas is None:
                kept += int(await guarded(self._keep(keys=[stream], args=args)))
                continue

            def renewal(
                pipe: Pipeline, stream: str = stream, args: list[str | bytes] = args
            ) -> None:
                pipe.eval(_KEEP_LUA, 1, stream, *args)

            [reply] = await guarded(self.replicas.write(stream, renewal))
            kept += int(reply)
        return kept

    async def claim_idle(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Entries other (dead) consumers left unacknowledged for ``min_idle_ms``.

        A live consumer's heartbeat (:meth:`keep`) keeps its entries from ever
        being idle that long.
        """
        found: list[Entry] = []
        for stream in self.streams:
            if len(found) >= count:
                break
            result = await guarded(
                self._redis.xautoclaim(
                    stream,
                    keys.INTAKE_GROUP,
                    self.consumer,
                    min_idle_time=min_idle_ms,
                    start_id="0-0",
                    count=count - len(found),
                )
            )
            found += [self._entry(entry_id, fields, stream) for entry_id, fields in result[1]]
        return found

    async def ack(self, entry_id: bytes, stream: str = keys.INTAKE_STREAM) -> None:
        """The turn is finished: acknowledge and delete (the stream never grows)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            self.queue_ack(pipe, entry_id, stream)
            await guarded(pipe.execute())

    @staticmethod
    def queue_ack(pipe: Pipeline, entry_id: bytes, stream: str = keys.INTAKE_STREAM) -> None:
        """:meth:`ack`, queued on a caller's pipeline (the turn's final round trip)."""
        pipe.xack(stream, keys.INTAKE_GROUP, entry_id)
        pipe.xdel(stream, entry_id)

    async def park(self, entry: Entry, reason: str) -> None:
        """Give up on an entry: into the dead-letter stream, then out of the intake.

        One round trip, not a transaction: the two streams may live in different
        Redis Cluster slots. Cut short, the entry is parked twice or run again;
        both are harmless (a finished turn is never repeated).
        """
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xadd(
                keys.DEAD_LETTER_STREAM,
                {_FIELD: entry.raw, b"why": reason, b"at": str(int(time.time()))},
            )
            pipe.xack(entry.stream, keys.INTAKE_GROUP, entry.id)
            pipe.xdel(entry.stream, entry.id)
            await guarded(pipe.execute())

    async def parked(self) -> list[tuple[bytes, Inbound | None, str, int]]:
        """Every parked entry: its id, the message, why it was parked, when (Unix time)."""
        found: Any = await guarded(self._redis.xrange(keys.DEAD_LETTER_STREAM))
        result = []
        for entry_id, fields in found or []:
            raw, why, at = fields.get(_FIELD), fields.get(b"why", b""), fields.get(b"at", b"0")
            inbound = Inbound.decode(raw) if isinstance(raw, bytes) else None
            result.append((entry_id, inbound, bytes(why).decode(errors="replace"), int(at)))
        return result

    async def replay_parked(self) -> int:
        """Put every parked entry back into the intake (the operator fixed the cause)."""
        moved = 0
        parked: Any = await guarded(self._redis.xrange(keys.DEAD_LETTER_STREAM))
        for entry_id, fields in parked or []:
            # back first, then out (one round trip; the streams may be in different slots)
            async with self._redis.pipeline(transaction=False) as pipe:
                raw = (fields or {}).get(_FIELD, b"")
                inbound = Inbound.decode(raw) if isinstance(raw, bytes) else None
                stream = self.streams[0] if inbound is None else self.stream_of(inbound.chat_id)
                pipe.xadd(stream, {_FIELD: raw})
                pipe.xdel(keys.DEAD_LETTER_STREAM, entry_id)
                await guarded(pipe.execute())
            moved += 1
        return moved

    async def backlog(self) -> Backlog:
        """Entries not finished, the oldest one's age, parked turns: one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.INTAKE_STREAM)
            pipe.xrange(keys.INTAKE_STREAM, count=1)
            pipe.xlen(keys.DEAD_LETTER_STREAM)
            pipe.time()  # the entry ids are Redis's clock too
            entries, first, parked, (seconds, micros) = await guarded(pipe.execute())
        oldest = 0.0
        if first:
            accepted_ms = int(bytes(first[0][0]).split(b"-")[0])
            oldest = max(0.0, seconds + micros / 1e6 - accepted_ms / 1e3)
        return Backlog(int(entries), oldest, int(parked))

    def _entries(self, response: Any) -> list[Entry]:
        return [
            self._entry(entry_id, fields, _text(stream))
            for stream, items in _streams(response)
            for entry_id, fields in items
        ]

    @staticmethod
    def _entry(entry_id: bytes, fields: dict[Any, Any] | None, stream: str) -> Entry:
        raw = fields.get(_FIELD) if fields else None
        if not isinstance(raw, bytes):
            return Entry(entry_id, None, stream=stream)  # deleted or foreign entry
        return Entry(entry_id, Inbound.decode(raw), raw, stream)


def join_topic(pipe: Pipeline, inbound: Inbound, topic: int) -> None:
    """``inbound``'s turn joins the queue of ``topic`` (rc:{S}:queue:<t>), scored by its
    message id: the topic's later turns wait for it (bot/turn/topics.py). Its end takes
    it out (bot/turn/state.py)."""
    key = keys.topic_queue_key(inbound.scope, topic)
    pipe.zadd(key, {inbound.turn: inbound.message_id})
    pipe.expire(key, TOPIC_QUEUE_TTL)


def _streams(response: Any) -> list[tuple[Any, Any]]:
    """XREADGROUP's answer as (stream, entries) pairs (RESP2 list or RESP3 map)."""
    if isinstance(response, dict):
        return list(response.items())
    return [(stream, items) for stream, items in response or []]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
