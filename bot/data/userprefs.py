"""A user's own settings, the same in every chat and every process: how answers look.

``/format rich`` or ``/format plain`` (bot/chat/style.py) is kept per user in a
hash of their bucket (:func:`bot.data.keys.user_prefs_key`); every turn reads the
asker's on its claim round trip (:class:`UserReads`), so a choice made through any
process applies to the asker's next answer everywhere, at no round trip of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript.outage import guarded

from . import keys

Format = Literal["rich", "plain"]
FORMATS: tuple[Format, ...] = ("rich", "plain")


@dataclass(frozen=True, slots=True)
class UserPrefs:
    """A user's own settings (``None``: not chosen, the operator's setting applies)."""

    format: Format | None = None


def _format_field(user_id: int) -> str:
    return f"f{user_id}"


def _parse(value: Any) -> UserPrefs:
    text = value.decode() if isinstance(value, bytes) else value
    return UserPrefs(format=text if text in FORMATS else None)


class UserReads:
    """The asker's settings, read on the turn's claim round trip (a ``ClaimReads``)."""

    def __init__(self, user_id: int) -> None:
        self.user_id = user_id
        self.prefs = UserPrefs()

    def queue(self, pipe: Pipeline) -> None:
        pipe.hget(keys.user_prefs_key(self.user_id), _format_field(self.user_id))

    def read(self, replies: list[Any]) -> None:
        self.prefs = _parse(replies[0])


async def user_prefs(redis: Redis, user_id: int) -> UserPrefs:
    """A user's settings, read now."""
    return _parse(await guarded(redis.hget(keys.user_prefs_key(user_id), _format_field(user_id))))


async def set_format(redis: Redis, user_id: int, value: Format) -> None:
    """Keep how a user's answers look."""
    await guarded(redis.hset(keys.user_prefs_key(user_id), _format_field(user_id), value))
