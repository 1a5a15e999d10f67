"""What the payments ledger (:mod:`bot.payments.ledger`) records and answers, and its
errors. Money is whole nano-dollars.

Errors::

    PaymentError
    ├── PaymentNotFoundError   no payment has that charge id
    ├── CreditSpentError       the credit a payment added is spent: refund it with force
    └── NotStarsError          a message that is no successful payment in Stars
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class PaymentError(Exception):
    """A payment operation that cannot be done as asked."""


class PaymentNotFoundError(PaymentError):
    """No payment has this charge id."""


class CreditSpentError(PaymentError):
    """The credit the payment added has been spent (in part): refunding it would take
    back what is not there. Refund with ``force`` to take back what is left."""

    def __init__(self, payment: Payment, balance: int) -> None:
        super().__init__(f"the credit of {payment.charge_id} is spent")
        self.payment, self.balance = payment, balance


class NotStarsError(PaymentError):
    """Not a successful payment in Telegram Stars (currency XTR): nothing to credit."""


@dataclass(frozen=True, slots=True)
class Payment:
    """One successful Stars payment, as recorded (never changed)."""

    charge_id: str  # telegram_payment_charge_id
    user_id: int
    stars: int
    credit: int  # nano-dollars added
    at: int  # unix seconds

    def record(self) -> str:
        return f"{self.user_id} {self.stars} {self.credit} {self.at}"

    @classmethod
    def parse(cls, charge_id: str, raw: bytes | str) -> Payment:
        user, stars, credit, at = map(int, text(raw).split(" "))
        return cls(charge_id, user, stars, credit, at)


@dataclass(frozen=True, slots=True)
class Refund:
    """A payment's refund: when, and the nano-dollars taken from the credit (less than
    the payment added when its credit had been spent)."""

    at: int
    taken: int

    @classmethod
    def parse(cls, raw: bytes | str) -> Refund:
        at, taken = map(int, text(raw).split(" "))
        return cls(at, taken)


@dataclass(frozen=True, slots=True)
class Entry:
    """A payment and its refund, if any."""

    payment: Payment
    refund: Refund | None = None
    #: A refund was begun and not finished (Telegram may have refunded the Stars).
    refunding: bool = False


@dataclass(frozen=True, slots=True)
class Credited:
    """What :meth:`Ledger.credit` did: ``new`` when this call added the credit."""

    payment: Payment  # as first recorded
    new: bool
    balance: int  # the credit after it, nano-dollars (spend not settled since excluded)


@dataclass(frozen=True, slots=True)
class Refunded:
    """What :meth:`Ledger.refund` did: ``new`` when this call finished the refund."""

    entry: Entry
    new: bool


@dataclass(frozen=True, slots=True)
class Balance:
    """A user's credit and how it came about, in nano-dollars:
    ``credit == credited - refunded - used`` (never below zero)."""

    credit: int = 0
    credited: int = 0
    refunded: int = 0
    used: int = 0
    #: Spend past the credit (the last call before it ran out), written off.
    lost: int = 0


@dataclass(frozen=True, slots=True)
class StarsTotals:
    """Stars received and refunded, over every bucket (for /stats)."""

    stars: int = 0
    payments: int = 0
    refunded_stars: int = 0
    refunds: int = 0


def text(value: Any) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
