"""The ledger: every Telegram Stars payment, every refund, and each user's credit.

The key layout is in :mod:`bot.data.keys` ("Payments"): a user's payments and credit
live in the user's totals bucket, so each step below is one Lua script in one Redis
Cluster slot, and on a cluster each returns only once a replica holds it
(:func:`~bot.data.connection.run_kept`; a master that dies first fails the step, which
is then made again on the promoted replica). Money is whole nano-dollars.

- :meth:`Ledger.credit` writes the payment's record under its
  ``telegram_payment_charge_id`` with HSETNX; only the script call that wrote the
  record adds its credit, in the same atomic step. Whatever runs it again (a
  redelivered update, a turn run again after a crash, another process) finds the
  record and adds nothing.
- :meth:`Ledger.refund` is three steps, each idempotent against the refund's record:
  *begin* (the payment's credit must still be there, unless forced; "?<charge>" notes
  the refund begun), Telegram's ``refundStarPayment`` (the caller's; an "already
  refunded" answer counts as done), *finish* (the record, and the credit taken back,
  never below zero). Run again after a crash anywhere, it goes on from there.
- :meth:`Ledger.refund_told` notes, once, that the user was told of a refund
  ("!<charge>" beside its record), so a redelivered ``refunded_payment`` tells them once.

The values it answers with, and its errors, are in :mod:`bot.payments.records`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript.outage import guarded

from ..data import keys
from ..data.connection import replica_ack, run_kept
from ..usage.calls import Clock, utc_now
from .records import (
    Balance,
    Credited,
    CreditSpentError,
    Entry,
    Payment,
    PaymentNotFoundError,
    Refund,
    Refunded,
    StarsTotals,
    text,
)

# KEYS payments, credit, the user's charge ids, the bucket's, stars; ARGV charge id,
# record "user stars credit at", stars, credit. Answers {1 if credited now, the record
# kept, the balance}.
_CREDIT = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return {0, redis.call('HGET', KEYS[1], ARGV[1]), redis.call('HGET', KEYS[2], 'b') or '0'}
end
local b = redis.call('HINCRBY', KEYS[2], 'b', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'in', ARGV[4])
redis.call('LPUSH', KEYS[3], ARGV[1])
redis.call('LPUSH', KEYS[4], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'in', ARGV[3])
redis.call('HINCRBY', KEYS[5], 'n', 1)
return {1, ARGV[2], b}
"""
# KEYS refunds, credit; ARGV charge id, the payment's credit, force (1/0), now. Answers
# {"done", record} | {"go", ""} | {"spent", balance}; "go" notes the refund begun, and
# a refund begun goes on without the check (Telegram may have refunded the Stars).
_BEGIN = """
local done = redis.call('HGET', KEYS[1], ARGV[1])
if done then return {'done', done} end
local begun = '?' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], begun) == 1 then return {'go', ''} end
local b = redis.call('HGET', KEYS[2], 'b') or '0'
if ARGV[3] ~= '1' and tonumber(b) < tonumber(ARGV[2]) then return {'spent', b} end
redis.call('HSET', KEYS[1], begun, ARGV[4])
return {'go', ''}
"""
# KEYS refunds, credit, stars; ARGV charge id, the payment's credit, its stars, now.
# Takes back the payment's credit, or what is left of it (the balance never goes below
# zero). Answers {1 if refunded now, the record "at taken"}.
_FINISH = """
local done = redis.call('HGET', KEYS[1], ARGV[1])
if done then return {0, done} end
local b = tonumber(redis.call('HGET', KEYS[2], 'b') or '0')
local take = math.min(tonumber(ARGV[2]), math.max(b, 0))
local record = ARGV[4] .. ' ' .. string.format('%d', take)
redis.call('HSET', KEYS[1], ARGV[1], record)
redis.call('HDEL', KEYS[1], '?' .. ARGV[1])
redis.call('HINCRBY', KEYS[2], 'b', string.format('%d', -take))
redis.call('HINCRBY', KEYS[2], 'back', string.format('%d', take))
redis.call('HINCRBY', KEYS[3], 'out', ARGV[3])
redis.call('HINCRBY', KEYS[3], 'r', 1)
return {1, record}
"""


class Ledger:
    """Payments, refunds and credit in Redis (a single server or a Redis Cluster)."""

    def __init__(self, redis: Redis, *, clock: Clock = utc_now) -> None:
        self.redis = redis
        #: Replica acknowledgement of each step (Redis Cluster only).
        self.replicas = replica_ack(redis)
        self.clock = clock

    async def credit(self, payment: Payment) -> Credited:
        """Add ``payment``'s credit, once per charge id however often this is called
        (concurrently too). Raises :class:`~transcript.StoreUnavailableError` when
        Redis is away: call it again."""
        user, bucket = payment.user_id, keys.usage_bucket(payment.user_id)
        found = [
            keys.payments_key(bucket), keys.credit_key(user), keys.user_payments_key(user),
            keys.bucket_payments_key(bucket), keys.stars_key(bucket),
        ]  # fmt: skip
        args = [payment.charge_id, payment.record(), payment.stars, payment.credit]
        new, record, balance = await self._script(_CREDIT, found, args)
        return Credited(Payment.parse(payment.charge_id, record), bool(new), int(balance))

    async def refund(
        self,
        charge_id: str,
        *,
        refund_stars: Callable[[Payment], Awaitable[None]],
        force: bool = False,
    ) -> Refunded:
        """Refund a payment: ``refund_stars`` gives the Stars back (Telegram's
        ``refundStarPayment``; it must take "already refunded" for done), then the
        credit it added is taken back, never below zero. Refused with
        :class:`CreditSpentError` when that credit is not all there, unless ``force``
        (settle the user's spend first: :meth:`Spending.check`). Idempotent: a refund
        done is answered as it is, one begun goes on."""
        entry = await self.find(charge_id)
        if entry.refund is not None:
            return Refunded(entry, new=False)
        payment = entry.payment
        bucket = keys.usage_bucket(payment.user_id)
        refunds, credit = keys.refunds_key(bucket), keys.credit_key(payment.user_id)
        now = int(self.clock().timestamp())
        args = [charge_id, payment.credit, int(force), now]
        state, value = await self._script(_BEGIN, [refunds, credit], args)
        if text(state) == "done":
            return Refunded(replace(entry, refund=Refund.parse(value)), new=False)
        if text(state) == "spent":
            raise CreditSpentError(payment, int(value))
        await refund_stars(payment)
        found = [refunds, credit, keys.stars_key(bucket)]
        args = [charge_id, payment.credit, payment.stars, now]
        new, record = await self._script(_FINISH, found, args)
        return Refunded(Entry(payment, Refund.parse(record)), new=bool(new))

    async def find(self, charge_id: str) -> Entry:
        """The payment with this charge id, whoever made it (the buckets are read in one
        round trip); :class:`PaymentNotFoundError` if none."""
        pipe = self.redis.pipeline(transaction=False)
        for bucket in range(keys.USAGE_BUCKETS):
            pipe.hget(keys.payments_key(bucket), charge_id)
            pipe.hmget(keys.refunds_key(bucket), [charge_id, "?" + charge_id])
        replies = await guarded(pipe.execute())
        for record, (refund, begun) in zip(replies[::2], replies[1::2], strict=True):
            if record is not None:
                return _entry(charge_id, record, refund, begun)
        raise PaymentNotFoundError(charge_id)

    async def balance(self, user_id: int) -> Balance:
        """The user's credit as recorded (spend not yet settled is not in it:
        :meth:`Spending.check` settles it first)."""
        names = ("b", "in", "back", "used", "lost")
        values = await guarded(self.redis.hmget(keys.credit_key(user_id), names))
        return Balance(*(int(v or 0) for v in values))

    async def payments_of(self, user_id: int, last: int = 10) -> list[Entry]:
        """The user's last ``last`` payments, newest first."""
        ids = await guarded(self.redis.lrange(keys.user_payments_key(user_id), 0, last - 1))
        return await self._entries(keys.usage_bucket(user_id), [text(i) for i in ids])

    async def recent(self, last: int = 20) -> list[Entry]:
        """The last ``last`` payments of everyone, newest first (two round trips)."""
        pipe = self.redis.pipeline(transaction=False)
        for bucket in range(keys.USAGE_BUCKETS):
            pipe.lrange(keys.bucket_payments_key(bucket), 0, last - 1)
        found: list[Entry] = []
        for bucket, ids in enumerate(await guarded(pipe.execute())):
            found += await self._entries(bucket, [text(i) for i in ids]) if ids else []
        return sorted(found, key=lambda e: (-e.payment.at, e.payment.charge_id))[:last]

    async def refund_told(self, entry: Entry) -> bool:
        """Note that the user is told of the refund of ``entry``: ``True`` the first time
        only (a field beside the refund's record, in the same slot)."""
        payment = entry.payment
        found = keys.refunds_key(keys.usage_bucket(payment.user_id))
        return bool(await guarded(self.redis.hsetnx(found, "!" + payment.charge_id, 1)))

    async def stars_received(self) -> StarsTotals:
        """Stars received and refunded by the bot, over every bucket (one round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        for bucket in range(keys.USAGE_BUCKETS):
            pipe.hmget(keys.stars_key(bucket), ["in", "n", "out", "r"])
        sums = [0, 0, 0, 0]
        for values in await guarded(pipe.execute()):
            sums = [a + int(v or 0) for a, v in zip(sums, values, strict=True)]
        return StarsTotals(*sums)

    async def _entries(self, bucket: int, ids: list[str]) -> list[Entry]:
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(keys.payments_key(bucket), ids)
        pipe.hmget(keys.refunds_key(bucket), [*ids, *("?" + i for i in ids)])
        records, refunds = await guarded(pipe.execute())
        begun = refunds[len(ids) :]
        return [
            _entry(charge, record, refund, started)
            for charge, record, refund, started in zip(ids, records, refunds, begun, strict=False)
            if record is not None
        ]

    async def _script(self, lua: str, found: list[str], args: list[Any]) -> list[Any]:
        """One script in ``found``'s slot, kept by a replica on a Redis Cluster."""

        def queue(pipe: Pipeline) -> None:
            pipe.eval(lua, len(found), *found, *args)

        [[reply]] = await run_kept(self.redis, self.replicas, found[0], queue)
        return list(reply)


def _entry(charge_id: str, record: Any, refund: Any, begun: Any) -> Entry:
    return Entry(
        Payment.parse(charge_id, record),
        Refund.parse(refund) if refund is not None else None,
        refunding=refund is None and begun is not None,
    )
