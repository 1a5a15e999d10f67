"""Telegram Stars buy credit for model spend (STARS_USD), credited exactly once.

- :mod:`~bot.payments.terms`: the settings as integers (nano-dollars).
- :mod:`~bot.payments.invoices`: /buy's invoices (XTR, a signed payload naming the
  pack and the user) and the pre-checkout decision.
- :mod:`~bot.payments.ledger`: payments, refunds and credit in Redis, each step one
  script in the user's slot, once per ``telegram_payment_charge_id``
  (:mod:`~bot.payments.records`: what it records and answers, its errors).
- :mod:`~bot.payments.spending`: a user's spend drawn from the day's free allowance,
  then the credit; the check before a model call.
- :mod:`~bot.payments.texts`: what users read about it, in their language.
- :mod:`~bot.payments.stars`: all of it built once from the settings (``None``:
  payments off), for the handlers (bot/chat/buying.py) and the turns.

How a payment flows, and what closes each crash window::

    /buy                 Invoices.invoices(chat, user)      -> sendInvoice per pack
    pre_checkout_query   Invoices.answer(query)             -> answerPreCheckoutQuery
                         (no Redis, no network: Telegram's 10 s)
    successful_payment   Invoices.payment(message) -> the intake (an Inbound of kind
                         PAYMENT), then in its turn (bot/turn/paying.py):
                         Ledger.credit(payment)             once per charge id
                         Spending.check(user)               the balance to show,
                                                            noted in the turn's record
                         texts.paid(...)                    the confirmation, once
    a turn               Spending.check(user) before each model call, the first on
                         the claim's round trip (SpendReads) (ok false:
                         texts.no_credit, no call); Spending.queue_settle(user) rides
                         on the round trip that records the answer's usage, so its
                         cost is drawn at once (a crash in between: the next check
                         draws it)
    refund CHARGE_ID     Ledger.refund(charge, refund_stars=..., force=...)
                         (python -m bot refund: bot/ops/payments.py)
"""

from .invoices import CURRENCY, Invoices, Order, order_of, payload_of, signing_key
from .ledger import Ledger
from .records import (
    Balance,
    Credited,
    CreditSpentError,
    Entry,
    NotStarsError,
    Payment,
    PaymentError,
    PaymentNotFoundError,
    Refund,
    Refunded,
    StarsTotals,
)
from .spending import Allowance, Spending, owed, split
from .stars import BUY_DATA, SpendReads, Stars, buy_button
from .terms import NANO_PER_USD, Terms, nano

__all__ = [
    "BUY_DATA",
    "CURRENCY",
    "NANO_PER_USD",
    "Allowance",
    "Balance",
    "CreditSpentError",
    "Credited",
    "Entry",
    "Invoices",
    "Ledger",
    "NotStarsError",
    "Order",
    "Payment",
    "PaymentError",
    "PaymentNotFoundError",
    "Refund",
    "Refunded",
    "SpendReads",
    "Spending",
    "Stars",
    "StarsTotals",
    "Terms",
    "buy_button",
    "nano",
    "order_of",
    "owed",
    "payload_of",
    "signing_key",
    "split",
]
