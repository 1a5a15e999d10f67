"""Every text the bot writes about payments and credit (/buy, invoices, pre-checkout
refusals, the confirmation, /balance, the notice when nothing is left, refunds, /stats'
line), as message ids (:func:`bot.i18n.N_`) in one place for translation, and the
functions that render them in the current language."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..i18n import N_, _, day, dollars, ngettext, number
from ..usage.calls import resets_at
from .records import Credited, Entry, StarsTotals
from .spending import Allowance
from .terms import Terms

# An invoice: its title (at most 32 characters), description (at most 255) and price.
INVOICE_TITLE = N_("Credit: {stars}")
INVOICE_DESCRIPTION = N_(
    "{credit} of credit for this bot's answers. It is used once your free allowance for "
    "the day is spent, and it does not expire."
)
BUY_INTRO = N_(
    "Credit pays for answers once your free allowance for the day is spent; one Star buys "
    "{star}. Choose a pack:"
)
BUY_BUTTON = N_("⭐ Buy credit")
PAYMENTS_OFF = N_("This bot takes no payments.")

# Pre-checkout refusals (Telegram shows them to the user paying).
REFUSED_FORGED = N_("This invoice is not valid. Send /buy for a new one.")
REFUSED_NOT_YOURS = N_("This invoice was made for someone else. Send /buy for your own.")
REFUSED_PACK_GONE = N_("This pack is no longer offered. Send /buy for the current ones.")
REFUSED_NOT_ALLOWED = N_("This bot is not open to you, so it takes no payment from you.")

PAID = N_("Thank you! {stars} added {credit} to your credit, which is now {balance}.")
BALANCE_CREDIT = N_("Credit: {credit}")
BALANCE_FREE = N_("Free today: {left} of {free} left (renewed at {reset} UTC)")
BALANCE_LAST = N_("Last payments:")
BALANCE_PAYMENT = N_("{day}: {stars}, {credit}")
BALANCE_REFUNDED = N_("{day}: {stars}, {credit} (refunded)")
BALANCE_NONE = N_("No payments yet: /buy adds credit.")
NO_CREDIT = N_(
    "You have used today's free allowance and have no credit left. Send /buy to add "
    "credit, or wait until {reset} UTC."
)
NO_CREDIT_PAID_ONLY = N_("You have no credit left. Send /buy to add credit.")
REFUNDED = N_(
    "Your payment of {stars} was refunded; {taken} was taken from your credit, which is "
    "now {balance}."
)
PAY_SUPPORT = N_(
    "Help with a payment or a refund: {contact}. Name the payment by its day and Stars, "
    "as /balance lists them."
)
PAY_SUPPORT_OWNER = N_(
    "Help with a payment or a refund: ask the person who runs this bot. Name the payment "
    "by its day and Stars, as /balance lists them."
)
TERMS = N_(
    "Credit pays for this bot's answers: one Star buys {star}. It does not expire, and it "
    "is not money: it cannot be withdrawn or given to someone else. Refunds are up to the "
    "person who runs this bot; ask through /paysupport."
)
TERMS_FREE = N_(
    "Each day {free} of answers are free (renewed at {reset} UTC); credit pays for the rest."
)
STARS_RECEIVED = N_("Stars received: {stars} in {payments} payments, {refunded} refunded.")


def stars(count: int) -> str:
    """``count`` Stars, in the current language."""
    return ngettext("{count} Star", "{count} Stars", count).format(count=number(count))


def money(amount: int) -> str:
    """``amount`` nano-dollars in dollars: to the cent when it is whole cents, else to
    a hundredth of a cent, rounded down (a credit is never shown larger than it is)."""
    places = 2 if amount % 10_000_000 == 0 else 4
    step = 10 ** (9 - places)
    return dollars(amount // step * step / 1e9, places)


def invoice_title(count: int) -> str:
    return _(INVOICE_TITLE).format(stars=stars(count))


def invoice_description(credit: int) -> str:
    return _(INVOICE_DESCRIPTION).format(credit=money(credit))


def buy_intro(terms: Terms) -> str:
    """What /buy says above its invoices."""
    return _(BUY_INTRO).format(star=money(terms.nano_per_star))


def pay_support(terms: Terms) -> str:
    """/paysupport: where to get help with a payment (PAY_SUPPORT), else the owner."""
    if not terms.support:
        return _(PAY_SUPPORT_OWNER)
    return _(PAY_SUPPORT).format(contact=terms.support)


def payment_terms(terms: Terms, now: datetime) -> str:
    """/terms: what a Star buys, what credit is, and the free allowance if there is one."""
    text = _(TERMS).format(star=money(terms.nano_per_star))
    if terms.free_daily:
        free = money(terms.free_daily)
        text += "\n\n" + _(TERMS_FREE).format(free=free, reset=resets_at(now))
    return text


def paid(credited: Credited, balance: int) -> str:
    """The confirmation of a payment, with the credit after it (``balance``, settled)."""
    payment = credited.payment
    return _(PAID).format(
        stars=stars(payment.stars), credit=money(payment.credit), balance=money(balance)
    )


def credit_lines(allowance: Allowance, now: datetime) -> list[str]:
    """The credit and today's free allowance left (/balance's first lines, and /usage's)."""
    lines = [_(BALANCE_CREDIT).format(credit=money(allowance.credit))]
    left, free = allowance.free_left, allowance.free
    if left is not None and free:
        reset = resets_at(now)
        lines.append(_(BALANCE_FREE).format(left=money(left), free=money(free), reset=reset))
    return lines


def balance(allowance: Allowance, entries: Sequence[Entry], now: datetime) -> str:
    """/balance: the credit, today's free allowance left, the last payments."""
    lines = credit_lines(allowance, now)
    if not entries:
        return "\n".join([*lines, "", _(BALANCE_NONE)])
    lines += ["", _(BALANCE_LAST)]
    for entry in entries:
        payment = entry.payment
        text = BALANCE_REFUNDED if entry.refund is not None else BALANCE_PAYMENT
        when = day(datetime.fromtimestamp(payment.at, UTC).date())
        lines.append(
            _(text).format(day=when, stars=stars(payment.stars), credit=money(payment.credit))
        )
    return "\n".join(lines)


def no_credit(allowance: Allowance, now: datetime) -> str:
    """The notice instead of a model call when nothing is left (with the /buy button)."""
    if allowance.free:
        return _(NO_CREDIT).format(reset=resets_at(now))
    return _(NO_CREDIT_PAID_ONLY)


def refunded(entry: Entry, credit: int) -> str:
    """The user's line about a refund of ``entry``; ``credit``: their credit after it."""
    taken = entry.refund.taken if entry.refund is not None else 0
    return _(REFUNDED).format(
        stars=stars(entry.payment.stars), taken=money(taken), balance=money(credit)
    )


def stars_received(totals: StarsTotals) -> str:
    """/stats' line of the Stars received."""
    return _(STARS_RECEIVED).format(
        stars=number(totals.stars),
        payments=number(totals.payments),
        refunded=number(totals.refunded_stars),
    )
