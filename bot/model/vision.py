"""Which models cannot see images, and which images a model could not read: learned
from their answers, remembered in Redis.

A model that rejects an ``image_url`` part (a 400 naming images) is recorded
once in :data:`bot.data.keys.TEXT_ONLY_MODELS`; from then on its requests carry a
short placeholder instead of each picture, so a thread with a photo in it is
never stuck (every process on the Redis learns it; an operator who switches to a
vision model under the same name removes it with ``SREM``).

A vision model that could not read one image (a 400 about that image: its
format, size, bytes or content) gets the image's digest recorded in the chat's
:func:`bot.data.keys.unread_key`; from then on that model is sent a placeholder
instead of that image, and every other image of the thread as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript.outage import guarded

from ..data.keys import TEXT_ONLY_MODELS, unread_key


class Vision:
    """Asks and records whether a model can see images, and which it could not read."""

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

    async def unreadable(self, scope: str, model: str, digests: Sequence[str]) -> set[str] | None:
        """Which of the chat's images ``digests`` ``model`` could not read; ``None`` when
        it sees no images at all. One round trip (a pipeline, not a transaction: the
        text-only set is in a slot of its own)."""
        unique = list(dict.fromkeys(digests))
        if model in self._text_only:
            return None
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.sismember(TEXT_ONLY_MODELS, model)
            pipe.hmget(unread_key(scope), unique)
            text_only, found = await guarded(pipe.execute())
        if text_only:
            self._text_only.add(model)
            return None
        return {d for d, by in zip(unique, found, strict=True) if by == model.encode()}

    @staticmethod
    def queue_set_aside(pipe: Pipeline, scope: str, model: str, digest: str) -> None:
        """Remember that ``model`` could not read the chat's image ``digest`` (queued on a
        caller's transaction: the turn counts the call that retries without it)."""
        pipe.hset(unread_key(scope), digest, model)

    async def give_back(self, scope: str, digests: Sequence[str]) -> None:
        """Send the chat's images ``digests`` again (they were set aside on a guess)."""
        await guarded(self._redis.hdel(unread_key(scope), *digests))
