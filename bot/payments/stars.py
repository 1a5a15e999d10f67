"""The bot's Telegram Stars, built once from the settings: what the handlers (/buy,
/balance, the pre-checkout answer, a payment taken in) and the turns (the spend check, a
payment's confirmation) share. ``None`` in their place means payments are off."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from ..i18n import _
from ..settings import Settings
from ..usage.calls import Clock, utc_now
from . import texts
from .invoices import Invoices
from .ledger import Ledger
from .spending import Allowance, Spending
from .terms import Terms

#: Callback data of the /buy button under the notice that nothing is left.
BUY_DATA = "buy"


@dataclass(frozen=True, slots=True)
class Stars:
    """Terms, invoices, the ledger and spending, for one bot (STARS_USD set)."""

    terms: Terms
    invoices: Invoices
    ledger: Ledger
    spending: Spending

    @classmethod
    def of(cls, settings: Settings, redis: Redis, *, clock: Clock = utc_now) -> Stars | None:
        """The bot's Stars; ``None`` without STARS_USD (no payments)."""
        terms = Terms.of(settings)
        if not terms.on:
            return None
        token = settings.telegram_bot_token.get_secret_value()
        return cls(
            terms, Invoices(terms, token), Ledger(redis, clock=clock),
            Spending(redis, terms, clock=clock),
        )  # fmt: skip

    def reads(self, user_id: int) -> SpendReads:
        """The user's spend settled, and what is left, on the turn's claim round trip."""
        return SpendReads(self.spending, user_id)


class SpendReads:
    """:meth:`Spending.check` queued on the turn's claim round trip (a ``ClaimReads`` of
    bot/turn/record.py): its reads and its settling cost no round trip of their own."""

    def __init__(self, spending: Spending, user_id: int) -> None:
        self.spending, self.user_id = spending, user_id
        self.allowance: Allowance | None = None

    def queue(self, pipe: Pipeline) -> None:
        self.spending.queue_settle(self.user_id)(pipe)

    def read(self, replies: list[Any]) -> None:
        self.allowance = self.spending.allowance(self.user_id, replies[0])


def buy_button() -> InlineKeyboardMarkup:
    """The button under the notice that nothing is left: /buy's invoices for the presser."""
    button = InlineKeyboardButton(text=_(texts.BUY_BUTTON), callback_data=BUY_DATA)
    return InlineKeyboardMarkup(inline_keyboard=[[button]])
