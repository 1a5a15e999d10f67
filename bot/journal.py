"""The turn journal: how far the answer to one message got, so a crash can finish it.

A turn writes, in order: its user node, each answer part the moment Telegram
accepted it, its answer node, and finally ``done`` (the nodes are written with
idempotency keys derived from the message id, which doubles as their record).
A turn that runs again (a
restart, a redelivered update) reads the journal and continues: existing parts
are edited rather than sent a second time, a stored answer is shown rather than
asked for again, and a done turn is not repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis

from transcript import NodeId, guarded, keys

#: A finished turn's journal is kept this long (redeliveries come within hours).
DONE_TTL_SECONDS = 7 * 24 * 3600
#: A worker's claim on a turn; longer than any turn can run (timeouts bound it).
LEASE_MS = 15 * 60 * 1000


def root_idem(message_id: int) -> str:
    """Idempotency key of the root a standalone message starts."""
    return f"root:{message_id}"


def user_idem(message_id: int) -> str:
    """Idempotency key of the node holding the user's message."""
    return f"in:{message_id}"


def answer_idem(message_id: int) -> str:
    """Idempotency key of the node holding the answer to the message."""
    return f"answer:{message_id}"


@dataclass(slots=True)
class TurnState:
    user: NodeId | None = None
    answer: NodeId | None = None
    parts: list[int] = field(default_factory=list)
    done: bool = False
    calls: int = 0  # model calls this turn has made so far
    #: The model's answer, held in memory until Redis takes it (never persisted here).
    answer_text: str | None = None

    def carry(self, earlier: TurnState) -> None:
        """Take over what an earlier, failed run of this turn did but could not journal."""
        if len(earlier.parts) > len(self.parts):
            self.parts = earlier.parts
        if self.answer is None:
            self.answer_text = earlier.answer_text


class Journal:
    """Per-turn progress records in Redis (keys in :mod:`transcript.keys`)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def load(self, scope: str, message_id: int) -> TurnState:
        """One round trip: the journal, and the user and answer nodes written so far.

        Those nodes are found by the idempotency keys the turn writes them with
        (:func:`user_idem`, :func:`answer_idem`), so they need no journal entry.
        """
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.turn_key(scope, message_id), ["parts", "done", "calls"])
            pipe.hmget(keys.idem_key(scope), [user_idem(message_id), answer_idem(message_id)])
            (parts, done, calls), (user, answer) = await guarded(pipe.execute())
        return TurnState(
            user=NodeId.parse(scope, user) if user else None,
            answer=NodeId.parse(scope, answer) if answer else None,
            parts=[int(p) for p in parts.split(b",")] if parts else [],
            done=done == b"1",
            calls=int(calls) if calls else 0,
        )

    async def add_part(self, scope: str, message_id: int, parts: list[int]) -> None:
        """Record the parts sent so far (the last one is new)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.turn_key(scope, message_id), "parts", ",".join(map(str, parts)))
            pipe.hset(keys.pending_parts_key(scope), str(parts[-1]), str(message_id))
            await guarded(pipe.execute())

    async def finish(self, scope: str, message_id: int, parts: list[int]) -> None:
        """Mark the turn done; its parts no longer belong to a running turn."""
        key = keys.turn_key(scope, message_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "done", "1")
            pipe.expire(key, DONE_TTL_SECONDS)
            if parts:
                pipe.hdel(keys.pending_parts_key(scope), *map(str, parts))
            await guarded(pipe.execute())

    async def count_call(self, scope: str, message_id: int) -> int:
        """One more model call for this turn; returns the count (the per-turn guard)."""
        return int(await guarded(self._redis.hincrby(keys.turn_key(scope, message_id), "calls", 1)))

    async def turn_of_part(self, scope: str, part_id: int) -> int | None:
        """The message whose still-running turn sent ``part_id``, if any."""
        owner = await guarded(self._redis.hget(keys.pending_parts_key(scope), str(part_id)))
        return None if owner is None else int(owner)

    async def lease(self, scope: str, message_id: int, owner: str) -> bool:
        """Claim the turn for ``owner``; an owner may re-take its own claim (after a crash)."""
        key = keys.lease_key(scope, message_id)
        if await guarded(self._redis.set(key, owner, nx=True, px=LEASE_MS)):
            return True
        holder = await guarded(self._redis.get(key))
        return holder in (owner, owner.encode())

    async def release(self, scope: str, message_id: int) -> None:
        await guarded(self._redis.delete(keys.lease_key(scope, message_id)))
