"""Spending: a user's model spend is drawn first from the day's free allowance, then
from their paid credit; with neither left, no model call.

What a user spent is what the usage totals already hold: the cost of each call, counted
once (:mod:`bot.usage.accounting`), in the user's day totals (``d`` of
``rc:{usage:<k>}:u:<user>:<day>``). The credit lives in the same bucket, so settling is
one script that reads the day's spend and draws what is over the free allowance and
not yet drawn: each day's drawn amount is kept (``w`` of the credit hash), so settling
again draws nothing twice, and a call whose record was repeated (or finished by
another process) was counted once there in the first place. Nothing of a call is
remembered here: there is no second exactly-once mechanism to keep in step.

Settling covers today and yesterday (a call recorded just before midnight UTC is
settled just after it). A call's spend past the credit (the credit ran out during the
last call allowed) is written off (``lost``): the credit never goes below zero, and
the next question is refused before any model call. Per call, what is drawn is
:func:`split`; per day, :func:`owed`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from ..data import keys
from ..data.connection import Queued, run_together
from ..usage.calls import Clock, day_of, utc_now
from .terms import Terms

log = logging.getLogger("replychain.payments")

#: Days settled by each check: today and yesterday.
WINDOW_DAYS = 2

# KEYS the credit hash, then the user's totals of each day of the window (today first);
# ARGV the free allowance, then the window's day names. Answers the balance, today's
# spend, what was drawn now and what was written off now.
_SETTLE = """
local credit, free = KEYS[1], tonumber(ARGV[1])
local b = tonumber(redis.call('HGET', credit, 'b') or '0')
local drawn, w = {}, redis.call('HGET', credit, 'w')
if w then for day, n in string.gmatch(w, '(%d+):(%d+)') do drawn[day] = tonumber(n) end end
local took, lost, marks, today = 0, 0, {}, nil
for i = 2, #KEYS do
  local day = ARGV[i]
  local spent = tonumber(redis.call('HGET', KEYS[i], 'd') or '0')
  today = today or spent
  local owed, done = math.max(spent - free, 0), drawn[day] or 0
  if owed > done then
    local take = math.min(owed - done, math.max(b, 0))
    b, took, lost, done = b - take, took + take, lost + owed - done - take, owed
  end
  if done > 0 then marks[#marks + 1] = day .. ':' .. string.format('%d', done) end
end
if took > 0 then
  redis.call('HINCRBY', credit, 'b', string.format('%d', -took))
  redis.call('HINCRBY', credit, 'used', string.format('%d', took))
end
if lost > 0 then redis.call('HINCRBY', credit, 'lost', string.format('%d', lost)) end
local kept = table.concat(marks, ' ')
if kept ~= (w or '') then
  if kept == '' then redis.call('HDEL', credit, 'w') else redis.call('HSET', credit, 'w', kept) end
end
return {string.format('%d', b), string.format('%d', today), string.format('%d', took),
        string.format('%d', lost)}
"""


def owed(day_spend: int, free: int | None) -> int:
    """What a day's spend draws from the credit: what is over the free allowance
    (nano-dollars; ``free`` None: unlimited, nothing)."""
    return 0 if free is None else max(day_spend - free, 0)


def split(cost: int, spent_before: int, free: int | None) -> tuple[int, int]:
    """What a call costing ``cost`` takes from the free allowance and from the credit,
    when the user had spent ``spent_before`` earlier that UTC day (nano-dollars)."""
    from_credit = owed(spent_before + cost, free) - owed(spent_before, free)
    return cost - from_credit, from_credit


@dataclass(frozen=True, slots=True)
class Allowance:
    """What a user may still spend, after settling their spend so far (nano-dollars)."""

    credit: int
    #: The day's free allowance (None: unlimited).
    free: int | None
    spent_today: int = 0

    @property
    def free_left(self) -> int | None:
        """What is left of today's free allowance (None: unlimited)."""
        return None if self.free is None else max(self.free - self.spent_today, 0)

    @property
    def ok(self) -> bool:
        """Whether a model call may be made: free allowance or credit left."""
        left = self.free_left
        return left is None or left > 0 or self.credit > 0


class Spending:
    """Draws spend from the free allowance, then the credit, and says what is left."""

    def __init__(self, redis: Redis, terms: Terms, *, clock: Clock = utc_now) -> None:
        self.redis, self.terms, self.clock = redis, terms, clock

    async def check(self, user_id: int) -> Allowance:
        """Settle the user's spend so far and say what is left: the one call a turn makes
        before each model call (``ok`` false: no call). One round trip; none while
        payments are off (unlimited)."""
        if self.terms.free_daily is None:
            return Allowance(credit=0, free=None)
        [[reply]] = await run_together(self.redis, self.queue_settle(user_id))
        return self.allowance(user_id, reply)

    def queue_settle(self, user_id: int) -> Queued:
        """Queues the settling script (to ride on a round trip made anyway: after the
        usage totals of a call, in the same bucket, it draws that call's spend); its
        reply goes to :meth:`allowance`. Nothing is queued while payments are off."""
        free = self.terms.free_daily
        now, bucket = self.clock(), keys.usage_bucket(user_id)
        days = [day_of(now - timedelta(days=back)) for back in range(WINDOW_DAYS)]
        found = [keys.credit_key(user_id)]
        found += [keys.usage_total_key(bucket, "u", user_id, day) for day in days]

        def queue(pipe: Pipeline) -> None:
            if free is not None:
                pipe.eval(_SETTLE, len(found), *found, free, *days)

        return queue

    def allowance(self, user_id: int, reply: Any) -> Allowance:
        """The allowance the settling script's reply tells."""
        balance, today, took, lost = (int(value) for value in reply)
        if lost:
            log.info(
                "user %s spent %d nano-dollars more than their credit; written off", user_id, lost
            )
        if took:
            log.debug("drew %d nano-dollars from the credit of user %s", took, user_id)
        return Allowance(credit=balance, free=self.terms.free_daily, spent_today=today)
