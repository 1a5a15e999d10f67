"""Long polling by one process among several: the holder of the poller lease.

Every process runs a :class:`Poller`. The one that holds the lease
(``rc:poller``, :class:`bot.data.lease.Lease`) polls Telegram; the others only
run turns (they read the shared intake) and try the lease every fifth of its
length, so one of them polls within seconds after the poller died, and at once
after it stopped (a stopping poller lets the lease go). A poller that cannot
renew the lease (Redis away) stops polling before the lease could pass to
another process, so two processes never poll at once (Telegram would answer
409 Conflict).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiogram import Dispatcher

from transcript import StoreUnavailableError

from ..data.lease import Lease
from ..retry import cancel_until_done

log = logging.getLogger("replychain.polling")

#: Renewals (and, standing by, tries) per lease length.
TRIES_PER_LEASE = 5
#: Part of the lease after its last renewal that a poller keeps polling when Redis is away.
KEEP_SHARE = 0.6


class Poller:
    """Polls (``start()``, aiogram's polling) while this process holds the lease."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        lease: Lease,
        start: Callable[[], Coroutine[Any, Any, None]],
        *,
        stop_timeout: float,
    ) -> None:
        self.dispatcher = dispatcher
        self.lease = lease
        self._start = start
        self.stop_timeout = stop_timeout
        self._polling: asyncio.Task[None] | None = None
        #: Times this process started polling.
        self.terms = 0

    @property
    def polling(self) -> bool:
        return self._polling is not None

    async def run(self, stopping: asyncio.Event) -> None:
        """Poll while leader until ``stopping``; returns after letting the lease go."""
        every = self.lease.lease_ms / 1000 / TRIES_PER_LEASE
        renewed = float("-inf")
        standing_by = False
        try:
            while not stopping.is_set():
                try:
                    leader = await self.lease.take()
                    if leader:
                        renewed = time.monotonic()
                except StoreUnavailableError:
                    keep = self.lease.lease_ms / 1000 * KEEP_SHARE
                    leader = self.polling and time.monotonic() - renewed < keep
                if leader and self._polling is None:
                    log.info("polling Telegram (this process holds the poller lease)")
                    self.terms += 1
                    standing_by = False
                    self._polling = asyncio.create_task(self._start(), name="polling")
                elif not leader and self._polling is not None:
                    log.warning("stopped polling: this process no longer holds the poller lease")
                    await self._stop()
                if not leader and not standing_by:
                    standing_by = True
                    log.info("another process polls Telegram; answering turns from the intake")
                polling = self._polling
                waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(stopping.wait())}
                if polling is not None:
                    waits.add(polling)
                done, pending = await asyncio.wait(
                    waits, timeout=every, return_when=asyncio.FIRST_COMPLETED
                )
                for future in pending:
                    if future is not polling:
                        future.cancel()
                if polling is not None and polling in done:
                    self._polling = None
                    polling.result()  # polling ended on its own: surface why
        finally:
            await self._stop()
            with contextlib.suppress(StoreUnavailableError):
                await self.lease.release()

    async def _stop(self) -> None:
        """Stop polling; a handler waiting on Redis (its update unconfirmed) is cut off."""
        polling, self._polling = self._polling, None
        if polling is None:
            return
        with contextlib.suppress(RuntimeError):
            await self.dispatcher.stop_polling()
        try:
            await asyncio.wait_for(asyncio.shield(polling), self.stop_timeout)
        except TimeoutError:
            await cancel_until_done(polling)
