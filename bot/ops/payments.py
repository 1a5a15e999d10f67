"""The owner's payment commands: ``python -m bot payments [--user ID]`` lists payments
and credit; ``python -m bot refund CHARGE_ID [--force]`` gives the Stars back
(``refundStarPayment``) and takes back the credit the payment added.

A refund is :meth:`~bot.payments.Ledger.refund`'s three steps, each idempotent: run
the command again after any failure (Telegram or Redis away, a kill) and it goes on
from where it stopped; run it after it succeeded and it says so. A refund whose credit
was spent (in part) is refused unless ``--force``: then the Stars go back all the same
and the credit goes to zero, never below.
"""

from __future__ import annotations

import time

from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramAPIError
from redis.asyncio import Redis

from ..data.connection import connect
from ..data.layout import check_layout
from ..payments import (
    CreditSpentError,
    Entry,
    Ledger,
    Payment,
    PaymentNotFoundError,
    Spending,
    Terms,
)
from ..settings import Settings
from ..telegram.errors import ChargeRefundedError
from ..telegram.session import BotApiSession
from . import run_read
from .conversations import OpsError

#: Payments the listings show.
LISTED = 20


def usd(amount: int) -> str:
    """Nano-dollars as dollars, exactly: $2.50, $0.000123456."""
    whole, fraction = divmod(abs(amount), 10**9)
    digits = f"{fraction:09d}".rstrip("0").ljust(2, "0")
    return f"{'-' if amount < 0 else ''}${whole:,}.{digits}"


def _when(at: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def _line(entry: Entry) -> str:
    payment, refund = entry.payment, entry.refund
    text = (
        f"  {_when(payment.at)}  {payment.charge_id}  user {payment.user_id}  "
        f"{payment.stars} Stars  {usd(payment.credit)}"
    )
    if refund is not None:
        text += f"  refunded {_when(refund.at)} ({usd(refund.taken)} taken back)"
    elif entry.refunding:
        text += "  refund begun, not finished: run refund again"
    return text


def list_payments(settings: Settings, user_id: int | None) -> int:
    """``payments``: Stars received and the last payments, or one user's credit."""

    async def work() -> str:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster)
        try:
            await check_layout(redis, claim=False)
            ledger = Ledger(redis)
            if user_id is None:
                totals, entries = await ledger.stars_received(), await ledger.recent(LISTED)
                head = [
                    f"Stars received: {totals.stars:,} in {totals.payments:,} payment(s); "
                    f"{totals.refunded_stars:,} refunded in {totals.refunds:,} refund(s)"
                ]
            else:
                head = await _credit_lines(redis, settings, ledger, user_id)
                entries = await ledger.payments_of(user_id, LISTED)
            title = f"last {len(entries)} payment(s), newest first:" if entries else "no payments"
            return "\n".join([*head, title, *map(_line, entries)])
        finally:
            await redis.aclose()

    return run_read("payments", work)


async def _credit_lines(redis: Redis, settings: Settings, ledger: Ledger, user: int) -> list[str]:
    allowance = await Spending(redis, Terms.of(settings)).check(user)  # settled first
    balance = await ledger.balance(user)
    lines = [
        f"user {user}: credit {usd(balance.credit)} (credited {usd(balance.credited)}, "
        f"refunded {usd(balance.refunded)}, spent {usd(balance.used)}, written off "
        f"{usd(balance.lost)})"
    ]
    free, left = allowance.free, allowance.free_left
    if free is not None and left is not None:
        lines.append(f"free allowance today: {usd(left)} of {usd(free)} left")
    return lines


def refund(settings: Settings, charge_id: str, *, force: bool) -> int:
    """``refund``: refundStarPayment, then the credit taken back (idempotent)."""

    async def work() -> str:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster)
        session = BotApiSession(api=TelegramAPIServer.from_base(settings.telegram_api_url))
        bot = Bot(settings.telegram_bot_token.get_secret_value(), session=session)
        try:
            await check_layout(redis, claim=False)
            return await _refund(redis, bot, settings, charge_id, force=force)
        finally:
            await session.close()
            await redis.aclose()

    return run_read("refund", work)


async def _refund(redis: Redis, bot: Bot, settings: Settings, charge: str, *, force: bool) -> str:
    ledger = Ledger(redis)
    try:
        entry = await ledger.find(charge)
    except PaymentNotFoundError:
        raise OpsError(f"no payment has the charge id {charge}") from None
    user = entry.payment.user_id
    await Spending(redis, Terms.of(settings)).check(user)  # the spend so far, drawn

    async def refund_stars(payment: Payment) -> None:
        try:
            await bot.refund_star_payment(
                user_id=payment.user_id, telegram_payment_charge_id=payment.charge_id
            )
        except ChargeRefundedError:
            pass  # an earlier run refunded the Stars and stopped before the credit
        except TelegramAPIError as exc:
            raise OpsError(
                f"Telegram did not refund {charge} ({exc.message}); nothing else changed: "
                "run the command again"
            ) from None

    try:
        done = await ledger.refund(charge, refund_stars=refund_stars, force=force)
    except CreditSpentError as exc:
        raise OpsError(
            f"the credit {charge} added ({usd(exc.payment.credit)}) is spent: user {user} has "
            f"{usd(exc.balance)} left. Nothing was refunded; --force refunds the Stars all "
            f"the same and takes the credit to {usd(0)}"
        ) from None
    payment, taken = done.entry.payment, done.entry.refund.taken if done.entry.refund else 0
    credit = (await ledger.balance(user)).credit
    if not done.new:
        return (
            f"replychain: {charge} was refunded already; {usd(taken)} was taken back "
            f"(user {user}'s credit is {usd(credit)})"
        )
    short = "" if taken == payment.credit else f" of the {usd(payment.credit)} it added"
    return (
        f"replychain: refunded {payment.stars} Stars to user {user} ({charge}); "
        f"{usd(taken)}{short} taken back from their credit, now {usd(credit)}"
    )
