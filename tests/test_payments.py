"""Payments' core against a real Redis: each Stars payment credited exactly once (twice
applied, two clients at once, a crash between steps, a Redis restart), refunds (once,
never below zero, spent credit refused unless forced), spend drawn from the free
allowance then the credit to the nano-dollar, and a random run of all of them that
ends with credit = payments - refunds - spend exactly.

Spend is what :class:`~bot.usage.accounting.Accounting` records (at 1 USD per million
prompt tokens a token costs 1,000 nano-dollars), as in the bot.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.catalogue import Prices
from bot.data import keys
from bot.data.connection import Queued, connect
from bot.i18n import speaking
from bot.model import Usage
from bot.payments import (
    Allowance,
    Balance,
    CreditSpentError,
    Ledger,
    Payment,
    PaymentNotFoundError,
    Spending,
    StarsTotals,
    Terms,
    owed,
    split,
    texts,
)
from bot.usage.accounting import Accounting
from bot.usage.calls import CallRecord
from transcript import NodeId

from .harness import OTHER_USER, USER
from .redis_server import RedisServer

CENT = 10_000_000  # nano-dollars
#: A Star buys a cent; 5,000 nano-dollars (5 prompt tokens) free a day.
TERMS = Terms(nano_per_star=CENT, packs=(50, 250, 1000), free_daily=5_000)


class Clock:
    """A settable clock for the ledger, the spending and the usage totals."""

    def __init__(self) -> None:
        self.now = datetime(2026, 5, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def paid(charge: str, user: int = USER, stars: int = 50, at: int = 1_777_000_000) -> Payment:
    return Payment(charge, user, stars, TERMS.credit_of(stars), at)


@dataclass
class Stars:
    """Telegram's side of refunds: each charge refunded once, "already refunded" after
    (which a refund_stars takes for done); ``fail`` makes the next call fail first."""

    refunded: list[str] = field(default_factory=list)
    fail: BaseException | None = None

    async def __call__(self, payment: Payment) -> None:
        if self.fail is not None:
            failure, self.fail = self.fail, None
            raise failure
        if payment.charge_id not in self.refunded:
            self.refunded.append(payment.charge_id)


class Spender:
    """Model calls a user makes, recorded by the real accounting."""

    def __init__(self, redis: Redis, clock: Callable[[], datetime]) -> None:
        self.accounting = Accounting(redis, clock=clock, prices=Prices(input=1.0))
        self.calls = 0

    async def spend(self, user: int, nano: int, *, with_writes: Queued | None = None) -> list[Any]:
        """One call costing ``nano``; ``with_writes`` ride on its record's round trip."""
        assert nano % 1000 == 0
        self.calls += 1
        sent = NodeId(str(user), 1, 0, self.calls)
        call = CallRecord(user, user, self.calls, sent, "m", Usage(nano // 1000, 0), 0.1)
        return await self.accounting.record(call, with_writes=with_writes)


@pytest.fixture
def clock() -> Clock:
    return Clock()


# ------------------------------------------------------------------ exactly once


async def test_a_payment_applied_twice_is_credited_once(redis: Redis) -> None:
    ledger = Ledger(redis)
    first = await ledger.credit(paid("c1"))
    again = await ledger.credit(paid("c1", at=1_777_000_999))  # a redelivery, later
    assert first.new and not again.new
    assert again.payment == first.payment == paid("c1")  # the record kept is the first
    assert first.balance == again.balance == 50 * CENT
    assert await ledger.balance(USER) == Balance(credit=50 * CENT, credited=50 * CENT)
    assert await ledger.stars_received() == StarsTotals(stars=50, payments=1)
    assert [entry.payment for entry in await ledger.payments_of(USER)] == [paid("c1")]
    assert (await ledger.find("c1")).payment == paid("c1")


async def test_payments_applied_concurrently_from_two_clients_are_each_credited_once(
    redis: Redis, redis_server: RedisServer
) -> None:
    other = connect(redis_server.url)
    try:
        ledgers = [Ledger(redis), Ledger(other)]
        charges = [paid(f"c{i}", stars=(50, 250)[i % 2]) for i in range(10)]
        tries = [ledger.credit(p) for p in charges for ledger in ledgers for _ in range(5)]
        done = await asyncio.gather(*tries)
    finally:
        await other.aclose()
    assert sorted(c.payment.charge_id for c in done if c.new) == sorted(
        p.charge_id for p in charges
    )
    total = sum(p.credit for p in charges)
    assert await ledgers[0].balance(USER) == Balance(credit=total, credited=total)
    assert (await ledgers[0].stars_received()).payments == 10
    assert len(await ledgers[0].payments_of(USER, 100)) == 10


async def test_every_step_done_again_after_a_crash_changes_nothing(
    redis: Redis, clock: Clock
) -> None:
    """Each step of a payment's life run twice, as a run after a crash at any point
    would: the credit (the confirmation not yet sent), the settling of spend (the turn
    recorded its call, then died), the refund's steps (Telegram away; Telegram done and
    the ledger not)."""
    ledger, spending = Ledger(redis, clock=clock), Spending(redis, TERMS, clock=clock)
    spender = Spender(redis, clock)
    credited = await ledger.credit(paid("c1", stars=250))
    assert await ledger.credit(paid("c1", stars=250)) == replace(credited, new=False)
    await ledger.credit(paid("c2", stars=50))  # the same numbers to confirm with, once

    await spender.spend(USER, 5_000 + 30_000)  # 30,000 past the free allowance
    first, second = await spending.check(USER), await spending.check(USER)
    assert first == second == Allowance(300 * CENT - 30_000, 5_000, 35_000)

    stars = Stars(fail=ConnectionError("Telegram away"))
    with pytest.raises(ConnectionError):
        await ledger.refund("c1", refund_stars=stars)
    entry = await ledger.find("c1")
    assert entry.refunding and entry.refund is None  # begun, nothing taken yet
    assert (await ledger.balance(USER)).credit == 300 * CENT - 30_000
    await spender.spend(USER, 60 * CENT)  # meanwhile the user spends part of it
    left = (await spending.check(USER)).credit
    assert left == 240 * CENT - 30_000 < 250 * CENT
    # Telegram refunded the Stars, and the process died before the ledger knew: the
    # refund begun goes on (no check now: the Stars are gone), to zero, not below
    stars.refunded.append("c1")
    done = await ledger.refund("c1", refund_stars=stars)  # "already refunded": done
    assert done.new and stars.refunded == ["c1"]
    assert done.entry.refund is not None and done.entry.refund.taken == left
    again = await ledger.refund("c1", refund_stars=stars)
    assert not again.new and again.entry == done.entry
    assert await ledger.balance(USER) == Balance(
        credit=0, credited=300 * CENT, refunded=left, used=60 * CENT + 30_000
    )
    assert await ledger.stars_received() == StarsTotals(300, 2, 250, 1)


@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill"])
async def test_a_payment_is_credited_once_across_a_redis_restart(
    private_redis: RedisServer, crash: bool
) -> None:
    """AOF (fsync always here; the shipped everysec can lose the last second, and with
    it everything after the lost write too: the payment's intake entry is then not
    acknowledged either, and it is credited when its turn runs again)."""
    client = connect(private_redis.url)
    try:
        ledger = Ledger(client)
        assert (await ledger.credit(paid("c1"))).new
        if crash:  # and a refund begun: the Stars went back, the ledger did not hear
            with pytest.raises(ConnectionError):
                await ledger.refund("c1", refund_stars=Stars(fail=ConnectionError()))
    finally:
        await client.aclose()
    private_redis.restart(crash=crash)
    client = connect(private_redis.url)
    try:
        ledger = Ledger(client)
        assert not (await ledger.credit(paid("c1"))).new
        assert (await ledger.balance(USER)).credit == 50 * CENT
        if crash:  # a refund begun before the crash goes on after it
            assert (await ledger.find("c1")).refunding
            assert (await ledger.refund("c1", refund_stars=Stars())).new
            assert (await ledger.balance(USER)).credit == 0
    finally:
        await client.aclose()


# ------------------------------------------------------------------ refunds


async def test_a_refund_is_made_once_and_takes_back_what_the_payment_added(redis: Redis) -> None:
    ledger, stars = Ledger(redis), Stars()
    await ledger.credit(paid("c1", stars=250))
    await ledger.credit(paid("c2", stars=50))
    first = await ledger.refund("c2", refund_stars=stars)
    second = await ledger.refund("c2", refund_stars=stars)
    assert first.new and not second.new and stars.refunded == ["c2"]
    assert first.entry.refund == second.entry.refund
    assert await ledger.balance(USER) == Balance(
        credit=250 * CENT, credited=300 * CENT, refunded=50 * CENT
    )
    listed = {entry.payment.charge_id: entry.refund for entry in await ledger.payments_of(USER)}
    assert listed["c1"] is None and listed["c2"] is not None
    with pytest.raises(PaymentNotFoundError):
        await ledger.refund("nope", refund_stars=stars)


async def test_a_refund_of_spent_credit_is_refused_unless_forced_and_never_goes_below_zero(
    redis: Redis, clock: Clock
) -> None:
    ledger, spending, stars = (
        Ledger(redis, clock=clock),
        Spending(redis, TERMS, clock=clock),
        Stars(),
    )
    await ledger.credit(paid("c1", stars=50))
    await Spender(redis, clock).spend(USER, 5_000 + 30 * CENT)
    assert (await spending.check(USER)).credit == 20 * CENT
    with pytest.raises(CreditSpentError) as refused:
        await ledger.refund("c1", refund_stars=stars)
    assert refused.value.balance == 20 * CENT and refused.value.payment == paid("c1")
    assert stars.refunded == [] and not (await ledger.find("c1")).refunding  # nothing done
    forced = await ledger.refund("c1", refund_stars=stars, force=True)
    assert forced.entry.refund is not None and forced.entry.refund.taken == 20 * CENT
    assert stars.refunded == ["c1"]
    assert await ledger.balance(USER) == Balance(
        credit=0, credited=50 * CENT, refunded=20 * CENT, used=30 * CENT
    )


# ------------------------------------------------------------------ spending


def test_a_calls_cost_is_split_between_the_free_allowance_and_the_credit() -> None:
    assert split(3_000, 0, 5_000) == (3_000, 0)
    assert split(4_000, 3_000, 5_000) == (2_000, 2_000)
    assert split(100, 6_000, 5_000) == (0, 100)
    assert split(100, 0, 0) == (0, 100)
    assert split(7, 0, None) == (7, 0)  # unlimited: payments off
    assert owed(6_000, 5_000) == 1_000 and owed(4_000, 5_000) == 0 and owed(9, None) == 0


async def test_spend_draws_the_free_allowance_then_the_credit_to_the_nano_dollar(
    redis: Redis, clock: Clock
) -> None:
    ledger, spending = Ledger(redis, clock=clock), Spending(redis, TERMS, clock=clock)
    spender = Spender(redis, clock)
    assert not (await spending.check(USER)).credit
    await ledger.credit(paid("c1", stars=1))  # 10,000,000 nano-dollars
    await spender.spend(USER, 3_000)
    assert await spending.check(USER) == Allowance(CENT, 5_000, 3_000)  # free: 2,000 left
    await spender.spend(USER, 4_000)  # 2,000 free, 2,000 from the credit
    assert await spending.check(USER) == Allowance(CENT - 2_000, 5_000, 7_000)
    await spender.spend(OTHER_USER, 9_000)  # someone else's spend is theirs
    await spender.spend(USER, 1_000)
    allowance = await spending.check(USER)
    assert allowance == Allowance(CENT - 3_000, 5_000, 8_000)
    assert allowance.free_left == 0 and allowance.ok
    # a call recorded just before midnight is drawn after it; the new day is free again
    clock.now = clock.now.replace(hour=23, minute=59)
    await spender.spend(USER, 2_000)
    clock.now += timedelta(minutes=2)
    assert await spending.check(USER) == Allowance(CENT - 5_000, 5_000, 0)
    await spender.spend(USER, 5_000)
    assert await spending.check(USER) == Allowance(CENT - 5_000, 5_000, 5_000)
    # the last call allowed costs more than the credit left: it goes to zero, not below
    await spender.spend(USER, CENT)
    allowance = await spending.check(USER)
    assert allowance == Allowance(0, 5_000, 5_000 + CENT) and not allowance.ok
    assert await ledger.balance(USER) == Balance(0, CENT, 0, CENT, lost=5_000)
    with speaking("en"):
        assert "/buy" in texts.no_credit(allowance, clock.now)


def test_paysupport_names_pay_support_or_the_owner_and_terms_name_the_free_allowance() -> None:
    now = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)
    cent = 10_000_000
    without = Terms(nano_per_star=cent)
    with speaking("en"):
        assert texts.pay_support(without).startswith(
            "Help with a payment or a refund: ask the person who runs this bot."
        )
        assert "mailto:x@example.com." in texts.pay_support(
            Terms(nano_per_star=cent, support="mailto:x@example.com")
        )
        assert "Each day" not in texts.payment_terms(without, now)  # no free allowance: no line
        free = texts.payment_terms(Terms(nano_per_star=cent, free_daily=5 * cent), now)
        assert "one Star buys $0.01" in free
        assert "\n\nEach day $0.05 of answers are free (renewed at " in free
        assert free.endswith(" UTC); credit pays for the rest.")
    with speaking("de"):  # in the asker's language, the contact as the owner wrote it
        german = texts.pay_support(Terms(nano_per_star=cent, support="@hilfe"))
        assert german.startswith("Hilfe bei einer Zahlung oder Erstattung: @hilfe.")
        assert "Jeden Tag" in texts.payment_terms(Terms(nano_per_star=cent, free_daily=cent), now)


async def test_without_payments_nothing_is_drawn_and_with_no_free_allowance_credit_is_needed(
    redis: Redis, clock: Clock
) -> None:
    await Spender(redis, clock).spend(USER, 50_000)
    off = Spending(redis, Terms(), clock=clock)
    assert (await off.check(USER)).ok
    assert not await redis.exists(keys.credit_key(USER))  # not even read
    paid_only = Spending(redis, Terms(nano_per_star=CENT, packs=(50,), free_daily=0), clock=clock)
    assert not (await paid_only.check(OTHER_USER)).ok  # a new user must buy first
    await Ledger(redis).credit(paid("c1", user=OTHER_USER))
    assert (await paid_only.check(OTHER_USER)).ok


# ------------------------------------------------------------------ property


@dataclass
class Model:
    """The reference: what the ledger must hold, computed the plain way."""

    balance: int = 0
    credited: int = 0
    refunded: int = 0
    used: int = 0
    lost: int = 0
    spent: dict[str, int] = field(default_factory=dict)  # by day
    drawn: dict[str, int] = field(default_factory=dict)  # by day

    def settle(self, days: list[str], free: int) -> None:
        for day in days:
            due = max(self.spent.get(day, 0) - free, 0) - self.drawn.get(day, 0)
            if due > 0:
                take = min(due, self.balance)
                self.balance, self.used, self.lost = (
                    self.balance - take,
                    self.used + take,
                    self.lost + due - take,
                )
                self.drawn[day] = self.drawn.get(day, 0) + due


class RandomRun:
    """Random payments, redeliveries, model calls, refunds and days going by, each
    checked against :class:`Model` as it happens."""

    def __init__(self, redis: Redis, clock: Clock, seed: int) -> None:
        self.rng, self.clock = random.Random(seed), clock
        self.ledger = Ledger(redis, clock=clock)
        self.spending = Spending(redis, TERMS, clock=clock)
        self.spender = Spender(redis, clock)
        self.models = {USER: Model(), OTHER_USER: Model()}
        self.payments: dict[str, Payment] = {}
        self.refunded: set[str] = set()
        self.stars = Stars()
        #: What the run went through (it must go through each).
        self.seen: Counter[str] = Counter()

    def days(self) -> list[str]:
        return [(self.clock.now - timedelta(days=back)).strftime("%Y%m%d") for back in (0, 1)]

    async def check(self, user: int) -> Allowance:
        allowance = await self.spending.check(user)
        self.models[user].settle(self.days(), TERMS.free_daily or 0)
        return allowance

    async def step(self, step: int) -> None:
        user, roll = self.rng.choice([USER, OTHER_USER]), self.rng.random()
        if roll < 0.12:
            await self.pay(user, f"c{step}")
        elif roll < 0.18 and self.payments:  # an old payment delivered again
            assert not (await self.ledger.credit(self.rng.choice([*self.payments.values()]))).new
            self.seen["redelivered"] += 1
        elif roll < 0.75:
            await self.call(user)
        elif roll < 0.9 and self.payments:
            await self.refund(self.rng.choice(list(self.payments)), self.rng.random() < 0.5)
        else:  # a UTC day goes by, now and then
            self.clock.now += timedelta(hours=self.rng.choice([1, 6, 13]))
        found = await self.ledger.balance(user)
        assert found.credit == found.credited - found.refunded - found.used >= 0

    async def pay(self, user: int, charge: str) -> None:
        """A payment, sometimes delivered two or three times at once."""
        payment = paid(charge, user, self.rng.choice(TERMS.packs))
        self.payments[charge] = payment
        tries = [self.ledger.credit(payment) for _ in range(self.rng.choice([1, 1, 2, 3]))]
        assert sum(c.new for c in await asyncio.gather(*tries)) == 1
        model = self.models[user]
        model.balance, model.credited = (
            model.balance + payment.credit,
            model.credited + payment.credit,
        )

    async def call(self, user: int) -> None:
        """A model call: the turn checks before it and settles after it."""
        if not (await self.check(user)).ok:
            return
        cost = self.rng.choice([1, 4, 50, 900, 20_000, 400_000, 2_000_000, 6_000_000]) * 1000
        model, day = self.models[user], self.days()[0]
        model.spent[day] = model.spent.get(day, 0) + cost
        if self.rng.random() < 0.2:  # killed before the settle: the next check draws it
            await self.spender.spend(user, cost)
            await self.check(user)
            return
        # the settle rides on the round trip that records the call's usage
        settle = self.spending.queue_settle(user)
        [reply] = await self.spender.spend(user, cost, with_writes=settle)
        model.settle(self.days(), TERMS.free_daily or 0)
        assert self.spending.allowance(user, reply).credit == model.balance

    async def refund(self, charge: str, force: bool) -> None:
        """A refund (the command settles the user's spend first)."""
        payment, ledger, stars = self.payments[charge], self.ledger, self.stars
        owner = self.models[payment.user_id]
        await self.check(payment.user_id)
        if charge in self.refunded:
            assert not (await ledger.refund(charge, refund_stars=stars)).new
        elif not force and owner.balance < payment.credit:
            with pytest.raises(CreditSpentError):
                await ledger.refund(charge, refund_stars=stars)
            self.seen["refused"] += 1
        else:
            done = await ledger.refund(charge, refund_stars=stars, force=force)
            take = min(payment.credit, owner.balance)
            assert done.new and done.entry.refund is not None
            assert done.entry.refund.taken == take
            owner.balance, owner.refunded = owner.balance - take, owner.refunded + take
            self.refunded.add(charge)
            self.seen["refunded short" if take < payment.credit else "refunded"] += 1


async def test_random_payments_redeliveries_refunds_and_spends_add_up_exactly(
    redis: Redis, clock: Clock
) -> None:
    run = RandomRun(redis, clock, seed=46)
    for step in range(300):
        await run.step(step)
    for user, model in run.models.items():
        await run.check(user)
        found = await run.ledger.balance(user)
        assert found == Balance(
            model.balance, model.credited, model.refunded, model.used, model.lost
        )
        theirs = [p for p in run.payments.values() if p.user_id == user]
        assert found.credited == sum(p.credit for p in theirs)
        # credit = payments - refunds - spend over the free allowance, to the nano-dollar
        spend = sum(owed(s, TERMS.free_daily) for s in model.spent.values())
        assert found.credit == found.credited - found.refunded - (spend - found.lost)
    assert sorted(run.stars.refunded) == sorted(run.refunded)
    assert {"redelivered", "refused", "refunded", "refunded short"} <= set(run.seen), run.seen
    assert all(m.lost and m.used for m in run.models.values())
    assert len(run.models[USER].spent) > 3  # days went by
    totals = await run.ledger.stars_received()
    assert totals.payments == len(run.payments) and totals.refunds == len(run.refunded)
    assert totals.stars == sum(p.stars for p in run.payments.values())


def test_every_key_of_a_users_payments_is_in_the_slot_of_their_usage_totals() -> None:
    from redis.crc import key_slot  # noqa: PLC0415

    for user in (USER, OTHER_USER, 7, 10**12):
        bucket = keys.usage_bucket(user)
        found: list[Any] = [
            keys.payments_key(bucket), keys.refunds_key(bucket), keys.credit_key(user),
            keys.user_payments_key(user), keys.bucket_payments_key(bucket), keys.stars_key(bucket),
            keys.usage_total_key(bucket, "u", user, "20260501"),
        ]  # fmt: skip
        assert len({key_slot(key.encode()) for key in found}) == 1, found
