"""Which models cannot see images: learned from their answers, remembered in Redis.

A model that rejects an ``image_url`` part (a 400 naming images) is recorded
once in :data:`bot.data.keys.TEXT_ONLY_MODELS`; from then on its requests carry a
short placeholder instead of each picture, so a thread with a photo in it is
never stuck (every process on the Redis learns it; an operator who switches to a
vision model under the same name removes it with ``SREM``).
"""

from __future__ import annotations

from redis.asyncio import Redis

from ..data.connection import guarded
from ..data.keys import TEXT_ONLY_MODELS


class Vision:
    """Asks and records whether a model can see images."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        #: Text-only models seen by this process (a model never regains sight here).
        self._text_only: set[str] = set()

    async def sees_images(self, model: str) -> bool:
        if model in self._text_only:
            return False
        if await guarded(self._redis.sismember(TEXT_ONLY_MODELS, model)):
            self._text_only.add(model)
            return False
        return True

    async def text_only(self, model: str) -> None:
        """Remember that ``model`` rejected images."""
        await guarded(self._redis.sadd(TEXT_ONLY_MODELS, model))
        self._text_only.add(model)
