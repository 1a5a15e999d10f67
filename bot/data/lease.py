"""One holder at a time among the bot processes on one Redis: a lease, not a fight.

Used for polling (Telegram answers 409 Conflict to a second getUpdates): the
process holding the lease polls; the others stand by as turn workers and take
the lease once its holder stopped renewing it (it died) or let it go (it
stopped). A holder renews the lease every fifth of its length; one that cannot
renew it in time stops acting as the holder before anyone else can take it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from transcript.outage import guarded

# Takes or renews the lease for ARGV[1]; 0 while another holds it.
#   KEYS: lease.  ARGV: owner, lease ms.
_TAKE_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Lets go of the lease if ARGV[1] holds it.  KEYS: lease.  ARGV: owner.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Lease:
    """A named lease in Redis held by one owner (a ``BOT_INSTANCE``) at a time."""

    def __init__(self, redis: Redis, key: str, owner: str, *, lease_ms: int) -> None:
        self._redis = redis
        self.key = key
        self.owner = owner
        self.lease_ms = lease_ms
        self._take = redis.register_script(_TAKE_LUA)
        self._release = redis.register_script(_RELEASE_LUA)

    async def take(self) -> bool:
        """Take the lease, or renew it when held already; ``False`` while another holds it."""
        return bool(await guarded(self._take(keys=[self.key], args=[self.owner, self.lease_ms])))

    async def holder(self) -> str | None:
        """The owner holding the lease now, if any."""
        value = await guarded(self._redis.get(self.key))
        return value.decode(errors="replace") if isinstance(value, bytes) else value

    async def release(self) -> None:
        """Let go (a graceful stop), so another process takes over at once."""
        await guarded(self._release(keys=[self.key], args=[self.owner]))
