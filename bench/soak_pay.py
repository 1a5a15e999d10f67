"""The chaos soak's payments (bench/soak.py): Telegram Stars bought at random among the
messages, their updates delivered again, a few refunds by the owner's command, and the
check that every payment was credited exactly once and every credit adds up.

With payments on (the default; ``--no-payments`` turns them off) the bots run with
:data:`SETTINGS`: one Star buys a cent, the model's tokens have prices, and each user
has a small free allowance a day, so their answers draw on their credit within
seconds. What users do (every user of every chat, each with a private chat with the
bot)::

    the first payment    0.3-3 s into the run, the pack of OPENING_STARS (the user
                         presses Pay again, as a user does, until one goes through:
                         with no credit their answers would be refused)
    more payments        at random (mean PAY_GAP s apart per user), a pack of
                         STAR_PACKS at random
    a forged payment     one payment in FORGED is made with a payload made out to
                         another user (an invoice forwarded to them): the bot must
                         refuse its pre-checkout query
    redeliveries         the ``successful_payment`` update of an accepted payment is
                         delivered again: at once (REDELIVER_AT_ONCE) or 0.5-10 s
                         later (REDELIVER_LATER)

A payment is Telegram's ``pre_checkout_query`` for the payload /buy's invoice carries
(:func:`bot.payments.payload_of`, signed with the bot's key), as if the user pressed
Pay on it; once the bot answers ok, the test server sends the ``successful_payment``
message. A query the bot leaves unanswered for 10 s (it was down) is given up by
Telegram and the user: counted apart, and paid again.

Refunds: every REFUND_GAP s or so the owner runs ``python -m bot refund CHARGE_ID`` (a
subprocess, as an operator would) for a random payment whose user has that payment's
credit and REFUND_MARGIN more left (so the refund leaves them credit: with none their
answers would be refused, which the message checks would count as lost); a run that
fails (Redis restarting) is run again, and some refunds are run a second time, which
must answer "refunded already".

What is checked at the end (:meth:`Payments.check`), from Telegram's records (the
charges it made and refunded) against the bot's (the ledger's readers of
:mod:`bot.payments`; each user's spend settled first with :meth:`Spending.check`):

* every charge credited, to its payer, exactly once (the Stars received the ledger
  counts equal Telegram's); a refused pre-checkout charged nothing;
* each payment confirmed once in the payer's chat (a second confirmation whose first
  copy Telegram accepted within 250 ms of a SIGKILL is the documented window);
* each refund: refundStarPayment once, the credit the payment added taken back; the
  user told of it at most once (a reply to Telegram's ``refunded_payment`` message);
* per user, to the nano-dollar: credit = Σ payments − Σ refunds − spend, where the
  payments are Telegram's charges, the refunds what the ledger took back and the spend
  what the ledger drew; and what it drew (plus what it wrote off) is the user's
  spend of the day over the free allowance, as the usage totals hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bot.ops.payments import usd
from bot.payments import (
    Ledger,
    Order,
    PaymentNotFoundError,
    Spending,
    Terms,
    nano,
    owed,
    payload_of,
    signing_key,
)
from bot.usage.calls import day_of, utc_now
from bot.usage.reads import UsageReads
from tests.fakes.telegram import FakeTelegram, StoredMessage
from tests.harness import ROOT

from .soak_check import CRASH_WINDOW

#: The bots' settings with payments on: a Star buys a cent; prices make every answer
#: cost something; the free allowance lasts a user's first few answers.
STARS_USD = "0.01"
FREE_DAILY_USD = "0.002"
STAR_PACKS = (50, 250, 1000)
SETTINGS = {
    "STARS_USD": STARS_USD,
    "STAR_PACKS": ",".join(map(str, STAR_PACKS)),
    "FREE_DAILY_USD": FREE_DAILY_USD,
    "PRICE_INPUT_PER_MTOK": "2",
    "PRICE_OUTPUT_PER_MTOK": "8",
}
#: Each user's first payment (Stars): enough for the run's answers.
OPENING_STARS = 1000
#: Mean seconds between a user's further payments.
PAY_GAP = 90.0
#: Chances that a payment is made with another user's payload (refused).
FORGED = 0.1
#: Chances that an accepted payment's update is delivered again at once / later.
REDELIVER_AT_ONCE = 0.2
REDELIVER_LATER = 0.2
#: Seconds a user waits for the pre-checkout answer before paying again (Telegram's 10).
CHECKOUT_WAIT = 12.0
#: Mean seconds between the owner's refunds.
REFUND_GAP = 20.0
#: A refund is made only while the user has the payment's credit and this much more.
REFUND_MARGIN = nano(Decimal("1"))
#: Chances that a refund done is run again (it must answer "refunded already").
REFUND_AGAIN = 0.5


@dataclass
class Paid:
    """A payment Telegram accepted, as the soak saw it."""

    user: int
    stars: int
    charge: str
    at: float
    redeliveries: int = 0


@dataclass
class PayResult:
    """What the end-of-run check found."""

    users: int = 0
    asked: int = 0  # pre-checkout queries sent
    made: int = 0  # Telegram's charges
    stars: int = 0
    forged: int = 0
    forged_accepted: int = 0  # failures
    refused: int = 0  # pre-checkout answered ok: false (for a payload of the user's own)
    unanswered: int = 0  # not answered within 10 s: given up, paid again
    late_answers: int = 0  # answerPreCheckoutQuery after 10 s (the test server's violation)
    redelivered: int = 0
    credited: int = 0
    not_credited: int = 0  # failures
    credited_twice: int = 0  # failures
    wrong_payer_or_amount: int = 0  # failures
    confirmed_once: int = 0
    confirmed_twice_window: int = 0
    confirmed_twice: int = 0  # failures
    not_confirmed: int = 0  # failures
    refunds: int = 0
    refunds_again: int = 0
    refund_retries: int = 0
    refund_refused: int = 0
    refund_mismatches: int = 0  # failures
    #: The user told of a refund (a reply to Telegram's refunded_payment message): once;
    #: twice (failures); never (a SIGKILL between noting it and sending it, say).
    refund_told: int = 0
    refund_told_twice: int = 0
    refund_never_told: int = 0
    credit_mismatches: int = 0  # failures: credit != payments - refunds - spend
    spend_mismatches: int = 0  # failures: drawn + written off != spend over the allowance
    spend_unchecked: str = ""
    credit_total: int = 0
    paid_total: int = 0
    refunded_total: int = 0
    spent_total: int = 0
    lost_total: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.forged_accepted
            or self.not_credited
            or self.credited_twice
            or self.wrong_payer_or_amount
            or self.confirmed_twice
            or self.not_confirmed
            or self.refund_mismatches
            or self.refund_told_twice
            or self.credit_mismatches
            or self.spend_mismatches
        )


class Payments:
    """The soak's payers and its owner's refunds (see the module)."""

    def __init__(
        self,
        tg: FakeTelegram,
        users: Sequence[int],
        *,
        seed: int,
        note: Callable[[str], None],
        spawn: Callable[[Coroutine[Any, Any, Any]], None],
        chaos_over: Callable[[], bool],
        env: Callable[[], dict[str, str]],
        cwd: Path,
        redis: Callable[[], Redis | None],
    ) -> None:
        self.tg, self.users = tg, list(users)
        self.rng = random.Random(seed * 15485863 + 7)
        self.note, self.spawn, self.chaos_over = note, spawn, chaos_over
        self.env, self.cwd, self.redis = env, cwd, redis
        self.key = signing_key(tg.token)
        self.terms = Terms(
            nano_per_star=nano(Decimal(STARS_USD)),
            packs=STAR_PACKS,
            free_daily=nano(Decimal(FREE_DAILY_USD)),
        )
        self.paid: dict[str, Paid] = {}
        self.asked = self.forged = self.forged_accepted = 0
        self.refused = self.unanswered = self.redelivered = 0
        self.refunded: set[str] = set()
        self.refunds_again = self.refund_retries = self.refund_refused = 0
        #: Refunds run again that did not answer "refunded already".
        self.again_not_done = 0
        #: refundStarPayment calls by charge id (answered 200), from the after_call hook.
        self.refund_calls: Counter[str] = Counter()
        self.first_day = day_of(utc_now())

    # ------------------------------------------------------------------ users

    async def run(self, chaos: float) -> None:
        """Every user's payments and the owner's refunds, for ``chaos`` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + chaos
        tasks = [asyncio.create_task(self.payer(user, end)) for user in self.users]
        tasks.append(asyncio.create_task(self.owner(end)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def payer(self, user: int, end: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.rng.uniform(0.3, 3.0))
        while not await self.pay(user, OPENING_STARS) and loop.time() < end:
            pass
        while await self.pause(self.rng.expovariate(1 / PAY_GAP), end):
            if self.rng.random() < FORGED:
                await self.pay_forged(user)
            else:
                await self.pay(user, self.rng.choice(STAR_PACKS))

    async def pause(self, seconds: float, end: float) -> bool:
        """Sleep ``seconds``, or until ``end`` (the loop's clock): whether the chaos
        goes on after it."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(min(seconds, end - loop.time()), 0))
        return loop.time() < end and not self.chaos_over()

    async def pay(self, user: int, stars: int) -> bool:
        """The user pays for a pack: whether the payment went through."""
        payload = payload_of(Order(stars, user), self.key)
        query = self.tg.checkout(user, payload, stars)
        self.asked += 1
        self.note(f"SOAK pay user {user} {stars} Stars (pre-checkout {query})")
        ok = await self.answered(query)
        checkout = self.tg.stars.checkouts[query]
        if ok is None:
            self.unanswered += 1
            self.tg.expire_checkout(query)
            self.note(f"SOAK pre-checkout {query} unanswered within 10 s: paying again")
            return False
        if not ok or checkout.charge_id is None:
            self.refused += 1
            self.note(f"SOAK pre-checkout {query} refused: {checkout.error_message}")
            return False
        paid = Paid(user, stars, checkout.charge_id, asyncio.get_running_loop().time())
        self.paid[paid.charge] = paid
        self.note(f"SOAK paid user {user} {stars} Stars as {paid.charge}")
        roll = self.rng.random()
        if roll < REDELIVER_AT_ONCE:
            self.redeliver(paid, 0.0)
        elif roll < REDELIVER_AT_ONCE + REDELIVER_LATER:
            self.spawn(self.redeliver_later(paid, self.rng.uniform(0.5, 10)))
        return True

    async def pay_forged(self, user: int) -> None:
        """An invoice made out to another user, paid by ``user``: must be refused."""
        other = self.rng.choice([u for u in self.users if u != user] or [user + 1])
        stars = self.rng.choice(STAR_PACKS)
        query = self.tg.checkout(user, payload_of(Order(stars, other), self.key), stars)
        self.asked += 1
        self.forged += 1
        self.note(f"SOAK pay user {user} {stars} Stars with user {other}'s invoice ({query})")
        ok = await self.answered(query)
        if ok is None:
            self.tg.expire_checkout(query)
        elif ok:
            self.forged_accepted += 1
            self.note(f"SOAK pre-checkout {query} ACCEPTED another user's invoice")

    async def answered(self, query: str) -> bool | None:
        """The bot's answer to the pre-checkout query (None: none within CHECKOUT_WAIT)."""
        checkout = self.tg.stars.checkouts[query]
        with contextlib.suppress(AssertionError):  # (wait_for's timeout)
            await self.tg.wait_for(lambda: checkout.ok is not None, CHECKOUT_WAIT)
        return checkout.ok

    def redeliver(self, paid: Paid, delay: float) -> None:
        update = self.update_of(paid.charge)
        if update is None:
            return
        update_id = self.tg.redeliver(update)
        paid.redeliveries += 1
        self.redelivered += 1
        self.note(f"SOAK redeliver payment {paid.charge} as update {update_id} (+{delay:.1f}s)")

    async def redeliver_later(self, paid: Paid, delay: float) -> None:
        await asyncio.sleep(delay)
        if not self.chaos_over():
            self.redeliver(paid, delay)

    def update_of(self, charge: str) -> int | None:
        """The ``successful_payment`` update of the charge (the first one sent)."""
        for update_id, update in self.tg.stars.updates.items():
            paid = (update.get("message") or {}).get("successful_payment") or {}
            if paid.get("telegram_payment_charge_id") == charge:
                return update_id
        return None

    # ------------------------------------------------------------------ the owner

    async def owner(self, end: float) -> None:
        """Refunds at random, by ``python -m bot refund`` (see the module)."""
        while await self.pause(self.rng.expovariate(1 / REFUND_GAP), end):
            charge = await self.refundable()
            if charge is None:
                continue
            if await self.refund(charge) and self.rng.random() < REFUND_AGAIN:
                await asyncio.sleep(self.rng.uniform(0.5, 5))
                if await self.refund(charge, again=True):
                    self.refunds_again += 1

    async def refundable(self) -> str | None:
        """A payment whose user has its credit and REFUND_MARGIN more (None: none)."""
        redis = self.redis()
        if redis is None:
            return None
        candidates = [p for c, p in self.paid.items() if c not in self.refunded]
        self.rng.shuffle(candidates)
        for paid in candidates[:5]:
            with contextlib.suppress(Exception):  # Redis away: another time
                async with asyncio.timeout(3):
                    credit = (await Spending(redis, self.terms).check(paid.user)).credit
                if credit >= self.terms.credit_of(paid.stars) + REFUND_MARGIN:
                    return paid.charge
        return None

    async def refund(self, charge: str, *, again: bool = False) -> bool:
        """``python -m bot refund CHARGE`` until it answers (it is idempotent)."""
        for attempt in range(8):
            code, out = await self.command("refund", charge)
            self.note(f"SOAK refund {charge}{' again' if again else ''}: {code} {out}")
            if code == 0:
                if again and "refunded already" not in out:
                    self.again_not_done += 1
                    self.note(f"SOAK refund {charge} run again did not say 'refunded already'")
                self.refunded.add(charge)
                return True
            if "is spent" in out:
                self.refund_refused += 1
                return False
            self.refund_retries += 1
            await asyncio.sleep(1.0 + attempt)
        return False

    async def command(self, *args: str) -> tuple[int, str]:
        env = {**self.env(), "PYTHONPATH": str(ROOT)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", *args, cwd=self.cwd, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            async with asyncio.timeout(60):
                out, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, "timed out"
        return process.returncode or 0, out.decode(errors="replace").strip().replace("\n", " | ")

    def on_refund_call(self, params: dict[str, Any], ok: bool) -> None:
        """The fake Telegram's after_call saw refundStarPayment."""
        if ok:
            self.refund_calls[str(params.get("telegram_payment_charge_id"))] += 1

    # ------------------------------------------------------------------ the check

    def payment_messages(self) -> dict[str, StoredMessage]:
        """Charge id -> the ``successful_payment`` message in the payer's chat."""
        found: dict[str, StoredMessage] = {}
        for user in self.users:
            for message in self.tg.messages(user):
                paid = message.raw.get("successful_payment")
                if paid:
                    found[paid["telegram_payment_charge_id"]] = message
        return found

    def confirmations(self) -> dict[str, list[StoredMessage]]:
        """Charge id -> the bot's replies to its payment message."""
        messages = self.payment_messages()
        replies: dict[str, list[StoredMessage]] = {charge: [] for charge in messages}
        by_message = {(m.chat_id, m.message_id): charge for charge, m in messages.items()}
        for user in self.users:
            for message in self.tg.bot_messages(user):
                charge = by_message.get((user, message.reply_to or 0))
                if charge is not None and not message.deleted:
                    replies[charge].append(message)
        return replies

    def is_confirmation(self, message: StoredMessage) -> bool:
        """A bot reply to a payment (kept out of the message checks)."""
        if not message.is_bot or message.reply_to is None:
            return False
        with contextlib.suppress(KeyError):
            replied = self.tg.message(message.chat_id, message.reply_to)
            return "successful_payment" in replied.raw or "refunded_payment" in replied.raw
        return False

    def settled(self) -> bool:
        """Every accepted payment confirmed (the drain waits for it)."""
        replies = self.confirmations()
        return all(replies.get(charge) for charge in self.tg.stars.charges)

    async def check(
        self,
        redis: Redis,
        *,
        accepted_at: dict[tuple[int, int], float],
        requested_at: dict[tuple[int, int], float],
        kill_times: Sequence[float],
    ) -> PayResult:
        """Telegram's payments against the ledger (see the module); Redis still up."""
        result = PayResult(users=len(self.users), asked=self.asked, forged=self.forged)
        result.forged_accepted, result.refused = self.forged_accepted, self.refused
        result.unanswered, result.redelivered = self.unanswered, self.redelivered
        result.late_answers = sum(
            v.startswith("answerPreCheckoutQuery") for v in self.tg.violations
        )
        result.refunds_again, result.refund_retries = self.refunds_again, self.refund_retries
        result.refund_refused = self.refund_refused
        result.refund_mismatches = self.again_not_done
        charges = self.tg.stars.charges
        result.made = len(charges)
        result.stars = sum(c.total_amount for c in charges.values())
        ledger, spending = Ledger(redis), Spending(redis, self.terms)
        credited: set[str] = set()
        for charge_id, charge in charges.items():
            try:
                entry = await ledger.find(charge_id)
            except PaymentNotFoundError:
                result.not_credited += 1
                result.problems.append(f"{charge_id} (user {charge.user_id}): never credited")
                continue
            credited.add(charge_id)
            payment = entry.payment
            expected = self.terms.credit_of(charge.total_amount)
            if (payment.user_id, payment.stars, payment.credit) != (
                charge.user_id, charge.total_amount, expected,
            ):  # fmt: skip
                result.wrong_payer_or_amount += 1
                result.problems.append(f"{charge_id}: credited as {payment}")
            if charge.refunded != (entry.refund is not None):
                result.refund_mismatches += 1
                result.problems.append(
                    f"{charge_id}: Telegram refunded {charge.refunded}, the ledger {entry.refund}"
                )
            if charge.refunded:
                result.refunds += 1
                if self.refund_calls[charge_id] != 1:
                    result.refund_mismatches += 1
                    result.problems.append(
                        f"{charge_id}: refundStarPayment called "
                        f"{self.refund_calls[charge_id]} times"
                    )
                if entry.refund is not None and entry.refund.taken != payment.credit:
                    result.refund_mismatches += 1
                    result.problems.append(
                        f"{charge_id}: refund took {entry.refund.taken} of {payment.credit}"
                    )
        self.check_refund_notices(result)
        result.credited = len(credited)
        totals = await ledger.stars_received()
        result.credited_twice = max(totals.payments - result.credited, 0)
        if totals.stars != sum(charges[c].total_amount for c in credited):
            result.wrong_payer_or_amount += 1
            result.problems.append(f"the ledger counts {totals.stars} Stars received")
        self.check_confirmations(result, accepted_at, requested_at, kill_times)
        await self.check_credit(result, ledger, spending, UsageReads(redis, clock=utc_now))
        return result

    def check_refund_notices(self, result: PayResult) -> None:
        """Each refund's notice: the bot's replies to its refunded_payment message."""
        for user in self.users:
            told: Counter[int] = Counter(
                m.reply_to for m in self.tg.bot_messages(user) if m.reply_to and not m.deleted
            )
            for message in self.tg.messages(user):
                refunded = message.raw.get("refunded_payment")
                if not refunded:
                    continue
                n = told[message.message_id]
                if n == 1:
                    result.refund_told += 1
                elif n == 0:
                    result.refund_never_told += 1
                else:
                    result.refund_told_twice += 1
                    charge = refunded["telegram_payment_charge_id"]
                    result.problems.append(f"{charge}: told of its refund {n} times")

    def check_confirmations(
        self,
        result: PayResult,
        accepted_at: dict[tuple[int, int], float],
        requested_at: dict[tuple[int, int], float],
        kill_times: Sequence[float],
    ) -> None:
        replies = self.confirmations()
        for charge_id in self.tg.stars.charges:
            found = replies.get(charge_id, [])
            if not found:
                result.not_confirmed += 1
                result.problems.append(f"{charge_id}: no confirmation")
            elif len(found) == 1:
                result.confirmed_once += 1
            else:
                first, second = found[0], found[1]
                at = accepted_at.get((first.chat_id, first.message_id))
                asked = requested_at.get((first.chat_id, first.message_id))
                then = accepted_at.get((second.chat_id, second.message_id))
                window = any(
                    asked is not None and asked < kill and (at is None or at >= kill - CRASH_WINDOW)
                    and (then is None or then > kill)
                    for kill in kill_times
                )  # fmt: skip
                if window and len(found) == 2:
                    result.confirmed_twice_window += 1
                else:
                    result.confirmed_twice += 1
                    result.problems.append(f"{charge_id}: confirmed {len(found)} times")

    async def check_credit(
        self, result: PayResult, ledger: Ledger, spending: Spending, usage: UsageReads
    ) -> None:
        """Per user, to the nano-dollar: credit = payments - refunds - spend; and the
        spend drawn (with what was written off) = the day's spend over the allowance."""
        same_day = day_of(utc_now()) == self.first_day
        if not same_day:
            result.spend_unchecked = " (not checked: the run crossed midnight UTC)"
        for user in self.users:
            await spending.check(user)  # the spend so far, drawn
            balance = await ledger.balance(user)
            paid = sum(
                self.terms.credit_of(c.total_amount)
                for c in self.tg.stars.charges.values()
                if c.user_id == user
            )
            entries = await ledger.payments_of(user, last=10_000)
            taken = sum(e.refund.taken for e in entries if e.refund is not None)
            result.credit_total += balance.credit
            result.paid_total += paid
            result.refunded_total += taken
            result.spent_total += balance.used
            result.lost_total += balance.lost
            if balance.credit != paid - taken - balance.used:
                result.credit_mismatches += 1
                result.problems.append(
                    f"user {user}: credit {balance.credit} != payments {paid} - refunds "
                    f"{taken} - spend {balance.used}"
                )
            if same_day:
                spent = (await usage.user_today(user)).cost
                due = owed(spent, self.terms.free_daily)
                if balance.used + balance.lost != due:
                    result.spend_mismatches += 1
                    result.problems.append(
                        f"user {user}: drew {balance.used} + wrote off {balance.lost} != "
                        f"{due}, the day's spend {spent} over the free allowance"
                    )

    @staticmethod
    def verdict(result: PayResult) -> str:
        """The payments' verdict in one line."""
        off = result.credit_mismatches
        return (
            f"payments: {result.made} paid, {result.credited} credited, "
            f"{result.credited_twice} credited twice, {result.not_credited} never; "
            f"credit = payments - refunds - spend for every payer: "
            f"{'ok' if not off else f'{off} users off by a nano-dollar or more'}; "
            f"{'ok' if not result.failed else 'FAIL'}"
        )

    @staticmethod
    def rows(result: PayResult) -> list[tuple[str, object]]:
        """The verdict's payment rows."""
        return [
            (
                "payments: pre-checkouts asked / forged (refused) / unanswered in 10 s",
                f"{result.asked} / {result.forged} ({result.forged - result.forged_accepted}) / "
                f"{result.unanswered}",
            ),
            ("  pre-checkouts refused for the payer's own invoice", result.refused),
            ("  pre-checkouts answered after 10 s (Telegram refuses them)", result.late_answers),
            ("  forged payloads accepted (failures)", result.forged_accepted),
            ("payments made (Telegram's charges), Stars", f"{result.made}, {result.stars:,}"),
            ("  payment updates redelivered", result.redelivered),
            ("  credited", result.credited),
            ("  never credited (failures)", result.not_credited),
            ("  credited twice (must be 0)", result.credited_twice),
            ("  credited to the wrong user or amount", result.wrong_payer_or_amount),
            ("  confirmed once", result.confirmed_once),
            ("  confirmed twice, the first within 250 ms of a SIGKILL",
             result.confirmed_twice_window),
            ("  confirmed twice otherwise / never (failures)",
             f"{result.confirmed_twice} / {result.not_confirmed}"),
            (
                "refunds made / run again / retried / refused (credit spent)",
                f"{result.refunds} / {result.refunds_again} / {result.refund_retries} / "
                f"{result.refund_refused}",
            ),
            ("  refunds not as Telegram's (failures)", result.refund_mismatches),
            ("  users told of the refund once / never / twice (failures)",
             f"{result.refund_told} / {result.refund_never_told} / {result.refund_told_twice}"),
            (
                f"credit = payments - refunds - spend, {result.users} users ($)",
                f"{usd(result.credit_total)} = {usd(result.paid_total)} - "
                f"{usd(result.refunded_total)} - {usd(result.spent_total)}",
            ),
            ("  users whose credit is off by a nano-dollar or more", result.credit_mismatches),
            (
                "  users whose spend drawn != their spend over the allowance"
                + result.spend_unchecked,
                f"{result.spend_mismatches} (written off {usd(result.lost_total)})",
            ),
        ]  # fmt: skip
