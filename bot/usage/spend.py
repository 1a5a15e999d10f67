"""The daily spend alert (DAILY_SPEND_ALERT_USD): the owners are told once per UTC day
when the day's total cost of model calls passes the limit.

The day's total is the sum of the usage buckets' shares, so it is not read after
every call: each priced call's bucket answers with its own share of the day
(:attr:`Accounting.on_spent`), and only once some share reaches 1/USAGE_BUCKETS of
the limit (the total cannot pass it before) are the buckets summed. The message goes
out once per day across every process: the first to find the total past the limit
takes ``rc:spend-alert:<day>`` (SET NX).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from transcript.outage import guarded

from .. import choice_texts
from ..data import keys
from ..i18n import _, dollars, speaking
from .accounting import Accounting
from .calls import NANO, day_of

log = logging.getLogger("replychain.accounting")

#: How long the day's "sent" mark is kept (a day, and a margin for late calls).
ALERT_TTL = 3 * 24 * 3600


class SpendAlert:
    """Watches the day's spend; ``tell`` sends the alert's text to the owners."""

    def __init__(
        self,
        redis: Redis,
        accounting: Accounting,
        *,
        limit_usd: float,
        tell: Callable[[str], Awaitable[None]],
    ) -> None:
        self.redis, self.accounting = redis, accounting
        self.limit = round(limit_usd * NANO)
        self.tell = tell
        #: The day this process knows the alert went out (or is going out).
        self._done_day = ""
        self._checking: asyncio.Task[None] | None = None

    def spent(self, bucket_cost: int) -> None:
        """A priced call was counted; its bucket's share of the day is ``bucket_cost``."""
        day = day_of(self.accounting.clock())
        if self._done_day == day or bucket_cost * keys.USAGE_BUCKETS < self.limit:
            return
        if self._checking is None or self._checking.done():
            self._checking = asyncio.create_task(self._check(day), name="spend-alert")

    async def _check(self, day: str) -> None:
        try:
            total = await self.day_total(day)
            if total < self.limit:
                return
            self._done_day = day
            first = await guarded(
                self.redis.set(keys.spend_alert_key(day), "1", nx=True, ex=ALERT_TTL)
            )
            if first:
                log.warning("the day's model spend passed DAILY_SPEND_ALERT_USD")
                # to the owners, not in the language of the user whose call passed it
                with speaking(None):
                    text = _(choice_texts.SPEND_ALERT).format(
                        limit=dollars(self.limit / NANO, 2),
                        spent=dollars(total / NANO, 2),
                        day=f"{day[:4]}-{day[4:6]}-{day[6:]}",
                    )
                await self.tell(text)
        except (
            Exception
        ) as exc:  # an alert is never worth failing a turn; the next call checks again
            self._done_day = ""
            log.warning("the spend alert failed: %s", type(exc).__name__)

    async def day_total(self, day: str) -> int:
        """The day's cost over every bucket, in nano-dollars (one round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        for bucket in range(keys.USAGE_BUCKETS):
            pipe.hget(keys.usage_total_key(bucket, "d", day), "d")
        return sum(int(v) for v in await guarded(pipe.execute()) if v is not None)
