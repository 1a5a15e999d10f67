"""Durable intake: a user's message is in a Redis Stream before Telegram forgets it.

The update handler appends the message to ``rc:intake`` (XADD) and only then
returns, so aiogram confirms the update to Telegram after it is stored (polling
runs handlers one at a time for this reason). Turn workers read the stream
through the consumer group ``turns`` and acknowledge an entry (XACK, then XDEL)
only when its turn is finished. Entries a crashed worker left unacknowledged
are read again at start-up (a process's own pending entries) or claimed after
they sat idle (other processes' entries), so several bot processes can share
the stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import msgpack
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from transcript import StoreUnavailableError, guarded, keys

from .turn import Inbound

log = logging.getLogger("replychain.intake")

_ENTRY_VERSION = 1
_FIELD = b"m"


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry; ``inbound`` is None for an entry that does not decode."""

    id: bytes
    inbound: Inbound | None


def encode(inbound: Inbound) -> bytes:
    data: bytes = msgpack.packb(
        [
            _ENTRY_VERSION,
            inbound.chat_id,
            inbound.message_id,
            inbound.user_id,
            inbound.text,
            inbound.reply_to,
            inbound.thread_id,
            inbound.is_group,
        ]
    )
    return data


def decode(data: bytes) -> Inbound | None:
    try:
        obj = msgpack.unpackb(data)
        version, chat, message, user, text, reply_to, thread, group = obj
        if version != _ENTRY_VERSION:
            return None
        return Inbound(chat, message, user, text, reply_to, thread, bool(group))
    except Exception:  # a damaged entry must not stop the bus
        return None


class Outage:
    """Logs one line when a service goes away and one when it is back, not one per failure."""

    def __init__(self, service: str = "Redis", consequence: str = "") -> None:
        self.service = service
        self.consequence = consequence or (
            "Unconfirmed messages stay queued at Telegram and nothing stored is lost."
        )
        self.since: float | None = None
        self.recoveries: list[float] = []

    def failed(self, exc: Exception) -> None:
        if self.since is None:
            self.since = time.monotonic()
            cause = exc.__cause__ or exc
            log.error(
                "%s is unreachable (%s); retrying with backoff. %s",
                self.service,
                type(cause).__name__,
                self.consequence,
            )

    def ok(self) -> None:
        if self.since is not None:
            took = time.monotonic() - self.since
            self.recoveries.append(took)
            log.warning("%s is reachable again after %.1fs; resuming", self.service, took)
            self.since = None


def backoff(attempt: int) -> float:
    return float(min(0.2 * 2**attempt, 5.0))


class Intake:
    """The stream of accepted messages, shared by every bot process on one Redis."""

    def __init__(self, redis: Redis, consumer: str, outage: Outage) -> None:
        self._redis = redis
        self.consumer = consumer
        self.outage = outage

    async def ensure_group(self) -> None:
        try:
            await guarded(
                self._redis.xgroup_create(
                    keys.INTAKE_STREAM, keys.INTAKE_GROUP, id="0", mkstream=True
                )
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def record(self, inbound: Inbound, stopping: asyncio.Event) -> bool:
        """Append ``inbound``, retrying while Redis is away; ``False`` if stopped first."""
        attempt = 0
        while True:
            try:
                await guarded(self._redis.xadd(keys.INTAKE_STREAM, {_FIELD: encode(inbound)}))
                self.outage.ok()
                return True
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
            if stopping.is_set():
                return False
            attempt += 1
            try:
                await asyncio.wait_for(stopping.wait(), backoff(attempt))
            except TimeoutError:
                continue
            return False

    async def read_own_pending(self, count: int) -> list[Entry]:
        """Entries delivered to this consumer before and never acknowledged."""
        return self._entries(
            await guarded(
                self._redis.xreadgroup(
                    keys.INTAKE_GROUP,
                    self.consumer,
                    {keys.INTAKE_STREAM: "0"},
                    count=count,
                )
            )
        )

    async def read_new(self, count: int, block_ms: int) -> list[Entry]:
        return self._entries(
            await guarded(
                self._redis.xreadgroup(
                    keys.INTAKE_GROUP,
                    self.consumer,
                    {keys.INTAKE_STREAM: ">"},
                    count=count,
                    block=block_ms,
                )
            )
        )

    async def claim_idle(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Entries other (dead) consumers left unacknowledged for ``min_idle_ms``."""
        result = await guarded(
            self._redis.xautoclaim(
                keys.INTAKE_STREAM,
                keys.INTAKE_GROUP,
                self.consumer,
                min_idle_time=min_idle_ms,
                start_id="0-0",
                count=count,
            )
        )
        return [Entry(entry_id, self._inbound(fields)) for entry_id, fields in result[1]]

    async def ack(self, entry_id: bytes) -> None:
        """The turn is finished: acknowledge and delete (the stream never grows)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(keys.INTAKE_STREAM, keys.INTAKE_GROUP, entry_id)
            pipe.xdel(keys.INTAKE_STREAM, entry_id)
            await guarded(pipe.execute())

    def _entries(self, response: Any) -> list[Entry]:
        entries: list[Entry] = []
        for _stream, items in response or []:
            for entry_id, fields in items:
                entries.append(Entry(entry_id, self._inbound(fields)))
        return entries

    @staticmethod
    def _inbound(fields: dict[Any, Any] | None) -> Inbound | None:
        if not fields or _FIELD not in fields:
            return None  # deleted or foreign entry
        return decode(fields[_FIELD])
