"""Albums: the photos of one ``media_group_id`` answered as one turn.

Telegram delivers an album as separate messages. The update handler notes each
photo in the album's hash (:meth:`Albums.note`) *before* the message enters the
intake stream, so from the moment Telegram's update is confirmed the photo is in
two durable places. Each photo's turn then asks :meth:`Albums.gather`: the first
to claim the album leads it, waits until no new photo has come for
``ALBUM_WAIT`` seconds, and closes the album (the list of its photos is fixed
once, in Redis, so a leader that crashed and runs again gathers the same
photos); the other photos' turns end without a reply (their photos are in the
leader's turn, and their message ids are aliased to its node). A photo noted
after the album closed is answered on its own. A crash while collecting loses
nothing: the leader's intake entry is read again and gathers from the hash.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from redis.asyncio import Redis

from transcript import StoreUnavailableError
from transcript.outage import guarded

from ..data.keys import album_key
from ..retry import Outage
from .inbound import Inbound

#: An album's hash outlives its turn by this long (seconds).
ALBUM_TTL = 2 * 24 * 3600
#: Longest a leader waits for an album to complete, in ``ALBUM_WAIT`` periods.
MAX_WAITS = 30
_LEAD, _GOT = b"lead", b"got"

# Closes the album once: fixes the list of its photos (message ids) in "got".
#   KEYS: album hash.  Returns the list, comma-separated.
_CLOSE_LUA = """
local got = redis.call('HGET', KEYS[1], 'got')
if got then return got end
local ids = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if field ~= 'lead' and field ~= 'got' then ids[#ids + 1] = tonumber(field) end
end
table.sort(ids)
got = table.concat(ids, ',')
redis.call('HSET', KEYS[1], 'got', got)
return got
"""


class Albums:
    """Collects the photos of each album into its first photo's turn."""

    def __init__(self, redis: Redis, outage: Outage, wait: float) -> None:
        self._redis = redis
        self.outage = outage
        self.wait = wait
        self._close = redis.register_script(_CLOSE_LUA)

    async def note(self, inbound: Inbound, stopping: asyncio.Event) -> bool:
        """Keep one photo of an album (before its intake entry); ``False`` if stopped."""
        key = album_key(inbound.scope, inbound.group or "")

        async def write() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hsetnx(key, str(inbound.message_id), inbound.encode())
                pipe.expire(key, ALBUM_TTL)
                await guarded(pipe.execute())

        try:
            await self.outage.guard(write, on=(StoreUnavailableError,), until=stopping)
        except StoreUnavailableError:
            return False
        return True

    async def started(self, chat_id: int, group: str, stopping: asyncio.Event) -> bool:
        """Whether a photo of this album was accepted (``True`` if stopped first: the
        caller then waits in :meth:`note`, never confirming the update)."""
        key = album_key(str(chat_id), group)
        try:
            found = await self.outage.guard(
                lambda: guarded(self._redis.exists(key)), on=(StoreUnavailableError,),
                until=stopping,
            )  # fmt: skip
        except StoreUnavailableError:
            return True
        return bool(found)

    async def gather(self, inbound: Inbound) -> tuple[Inbound, list[int]] | None:
        """The album as one message, with all its photos' message ids, for the turn
        that leads it; ``None`` for another photo's turn (it ends without a reply)."""
        key = album_key(inbound.scope, inbound.group or "")
        me = str(inbound.message_id).encode()
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, me, inbound.encode())
            pipe.hsetnx(key, _LEAD, me)
            pipe.expire(key, ALBUM_TTL)
            pipe.hmget(key, [_LEAD, _GOT])
            *_, (lead, got) = await guarded(pipe.execute())
        if lead != me:
            if got is not None and me not in got.split(b","):
                return replace(inbound, group=None), [inbound.message_id]  # came too late
            return None
        if got is None:
            await self._quiet(key)
        ids = [int(i) for i in (await guarded(self._close(keys=[key]))).split(b",")]
        raw = await guarded(self._redis.hmget(key, [str(i) for i in ids]))
        items = [m for m in (Inbound.decode(r) for r in raw if isinstance(r, bytes)) if m]
        items = items or [inbound]
        first = items[0]
        captions = [m.text.strip() for m in items if m.text.strip()]
        album = replace(
            inbound,
            text="\n".join(captions),
            media=tuple(ref for m in items for ref in m.media),
            reply_to=first.reply_to,
            reply_to_bot=first.reply_to_bot,
            reply_head=first.reply_head,
        )
        return album, [m.message_id for m in items]

    async def _quiet(self, key: str) -> None:
        """Wait until no photo has joined the album for ``wait`` seconds."""
        deadline = time.monotonic() + self.wait * MAX_WAITS
        count = await guarded(self._redis.hlen(key))
        while time.monotonic() < deadline:
            # a quiet period, not a retry: nothing failed (the retry policy is bot.retry's)
            await asyncio.sleep(self.wait)
            now = await guarded(self._redis.hlen(key))
            if now == count:
                return
            count = now
