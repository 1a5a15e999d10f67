"""The stop button across processes: a stop pressed under an answer another process writes.

Telegram sends the ``stopped_message_generation`` update to whichever process
polls; the answer may be streaming in another one (several processes share the
turns). A stop this process cannot act on goes on ``rc:relay``, a short stream
every process reads from its end (no consumer group: each one sees every stop)
and presses locally; the process writing that answer ends it, the others find
nothing to stop. A stop for an answer already finished ends nothing anywhere.

Telegram flood windows go on the same stream: a 429 one process meets holds the chat
in every process, and one started during the window holds what is left of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from redis.asyncio import Redis

from transcript import StoreUnavailableError
from transcript.outage import guarded

from ..data import keys
from ..retry import Outage
from ..telegram.drafts import StopButtons

log = logging.getLogger("replychain.stops")

#: Entries kept on the stream (approximately): only the last moments' are ever read.
RELAY_KEPT = 1000
#: How long one read of the stream waits for a stop (ms).
READ_BLOCK_MS = 2000
#: Entries a starting process reads back for flood windows still open.
RECENT = 200

# The stream's newest entries and the time now, both by the clock of the Redis that
# holds the stream (entry ids are its milliseconds), so no other clock is compared.
#   KEYS: the stream.  ARGV: how many entries.
_RECENT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])}
"""


class Relay:
    """Presses a stop here, or passes it on to the process that writes the answer; tells
    every process of a chat's flood window."""

    def __init__(
        self,
        redis: Redis,
        stops: StopButtons,
        outage: Outage,
        floods: Callable[[int, float], None] | None = None,
    ) -> None:
        """``floods(chat, seconds)``: hold this process's calls to a chat (another
        process met a 429 there)."""
        self._redis = redis
        self.stops = stops
        self.outage = outage
        self._floods = floods
        #: Flood windows being told to the others (kept until their write is done).
        self._telling: set[asyncio.Task[None]] = set()
        #: Set once :meth:`run` knows where the stream ends (stops from then on reach it).
        self.listening = asyncio.Event()
        self._recent = redis.register_script(_RECENT_LUA)

    async def press(self, chat_id: int, draft: int) -> bool:
        """The user pressed stop on ``draft``: ``True`` when an answer here ended; else
        the stop goes to the other processes (one write)."""
        if self.stops.press(chat_id, draft):
            return True
        fields: Any = {"c": chat_id, "d": draft}
        await guarded(self._redis.xadd(keys.RELAY_STREAM, fields, maxlen=RELAY_KEPT))
        return False

    def flood(self, chat_id: int, seconds: float) -> None:
        """Telegram opened a flood window of ``seconds`` on ``chat_id`` here: tell the
        other processes (one write, in the background: the caller is waiting it out
        already). Lost when Redis is away: the others then meet the 429 themselves."""

        async def tell() -> None:
            fields: Any = {"c": chat_id, "w": f"{seconds:g}"}
            with contextlib.suppress(StoreUnavailableError):
                await guarded(self._redis.xadd(keys.RELAY_STREAM, fields, maxlen=RELAY_KEPT))

        task = asyncio.create_task(tell())
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def run(self, stopping: asyncio.Event) -> None:
        """Press every stop other processes pass on, until ``stopping`` is set."""
        try:
            # from the stream's end: older stops ended their answers already, or nothing
            last = await self.outage.guard(self._end, on=(StoreUnavailableError,), until=stopping)
            self.listening.set()
            while not stopping.is_set():
                entries = await self.outage.guard(
                    partial(self._read, last), on=(StoreUnavailableError,), until=stopping
                )
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    self._pass_on(fields)
        except StoreUnavailableError:
            return  # stopping while Redis is away

    async def _end(self) -> str:
        """Where the stream ends. Flood windows other processes told before this one
        started and still open hold their chats here too (a process started during a
        window would otherwise meet the 429 itself); older stops are not pressed: they
        ended their answers already, or nothing."""
        now, newest = await guarded(self._recent(keys=[keys.RELAY_STREAM], args=[RECENT]))
        for entry_id, flat in reversed(newest):
            fields = dict(zip(flat[::2], flat[1::2], strict=True))  # a script's reply: flat
            with contextlib.suppress(KeyError, ValueError):
                told = int(entry_id.split(b"-")[0])
                left = (told + float(fields[b"w"]) * 1000 - int(now)) / 1000
                if left > 0 and self._floods is not None:
                    self._floods(int(fields[b"c"]), left)
        return str(newest[0][0].decode()) if newest else "0-0"

    async def _read(self, since: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
        streams: Any = {keys.RELAY_STREAM: since}
        found: Any = await guarded(self._redis.xread(streams, count=100, block=READ_BLOCK_MS))
        return list(found[0][1]) if found else []

    def _pass_on(self, fields: dict[bytes, bytes]) -> None:
        with contextlib.suppress(KeyError, ValueError):
            if b"w" in fields:
                if self._floods is not None:
                    self._floods(int(fields[b"c"]), float(fields[b"w"]))
                return
            chat_id, draft = int(fields[b"c"]), int(fields[b"d"])
            if self.stops.press(chat_id, draft):
                log.info("answer in chat %s stopped by the user (passed on)", chat_id)
