"""A user's own settings, the same in every chat and every process: how answers look,
and whether they are also spoken.

``/format rich`` or ``/format plain`` (bot/chat/style.py) and ``/voice on|off|auto``
(bot/chat/voice.py) are kept per user in a hash of their bucket
(:func:`bot.data.keys.user_prefs_key`); every turn reads the asker's on its claim round
trip (:class:`UserReads`), so a choice made through any process applies to the asker's
next answer everywhere, at no round trip of its own.
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
Voice = Literal["on", "off", "auto"]
VOICES: tuple[Voice, ...] = ("on", "off", "auto")


@dataclass(frozen=True, slots=True)
class UserPrefs:
    """A user's own settings (``None``: not chosen, the operator's setting applies)."""

    format: Format | None = None
    #: When answers are also spoken (``None``: ``auto``, a voice note for a voice note).
    voice: Voice | None = None


def _format_field(user_id: int) -> str:
    return f"f{user_id}"


def _voice_field(user_id: int) -> str:
    return f"v{user_id}"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _parse(values: list[Any]) -> UserPrefs:
    form, voice = map(_text, values)
    return UserPrefs(
        format=form if form in FORMATS else None, voice=voice if voice in VOICES else None
    )


def _queue(pipe: Pipeline | Redis, user_id: int) -> Any:
    return pipe.hmget(keys.user_prefs_key(user_id), _format_field(user_id), _voice_field(user_id))


class UserReads:
    """The asker's settings, read on the turn's claim round trip (a ``ClaimReads``)."""

    def __init__(self, user_id: int) -> None:
        self.user_id = user_id
        self.prefs = UserPrefs()

    def queue(self, pipe: Pipeline) -> None:
        _queue(pipe, self.user_id)

    def read(self, replies: list[Any]) -> None:
        self.prefs = _parse(replies[0])


async def user_prefs(redis: Redis, user_id: int) -> UserPrefs:
    """A user's settings, read now."""
    return _parse(await guarded(_queue(redis, user_id)))


async def set_format(redis: Redis, user_id: int, value: Format) -> None:
    """Keep how a user's answers look."""
    await guarded(redis.hset(keys.user_prefs_key(user_id), _format_field(user_id), value))


async def set_voice(redis: Redis, user_id: int, value: Voice) -> None:
    """Keep when a user's answers are also spoken."""
    await guarded(redis.hset(keys.user_prefs_key(user_id), _voice_field(user_id), value))
