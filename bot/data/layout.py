"""The version of the key layout a Redis holds, checked before anything else reads it.

A bot writes :data:`~bot.data.keys.LAYOUT_VERSION` to :data:`~bot.data.keys.LAYOUT_KEY`
on a Redis that has none (its first start) and refuses to run on a Redis holding
another version: the data there was written by a bot of another layout, and this
one would misread it. The operator's commands read the key and refuse the same
way; they never write it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from transcript.outage import guarded

from .keys import LAYOUT_KEY, LAYOUT_VERSION


class UnknownLayoutError(Exception):
    """The Redis holds data of a key layout this bot does not know (one line, for the
    operator)."""

    def __init__(self, found: str) -> None:
        super().__init__(
            f"Redis holds data of key layout version {found!r} ({LAYOUT_KEY}); this bot "
            f"knows only version {LAYOUT_VERSION!r}: point REDIS_URL at this bot's own "
            "Redis, or run the bot that wrote that data"
        )
        self.found = found


async def check_layout(redis: Redis, *, claim: bool) -> str | None:
    """The layout version ``redis`` holds, once this bot is known to read it.

    ``claim``: set this bot's version where none is set yet (SET NX; the bot at
    start-up), so the answer is never None. Raises :class:`UnknownLayoutError` for
    another version, :class:`~transcript.StoreUnavailableError` when Redis is away.
    """
    if claim:
        pipe = redis.pipeline(transaction=False)
        pipe.set(LAYOUT_KEY, LAYOUT_VERSION, nx=True)
        pipe.get(LAYOUT_KEY)
        _, raw = await guarded(pipe.execute())
    else:
        raw = await guarded(redis.get(LAYOUT_KEY))
    if raw is None:
        return None
    found = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if found != LAYOUT_VERSION:
        raise UnknownLayoutError(found[:40])
    return found
