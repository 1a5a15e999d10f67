"""A payment's turn: a Telegram Stars ``successful_payment`` the intake took in (an
:class:`~bot.bus.inbound.Inbound` of kind ``PAYMENT``), credited once and confirmed once.

It runs as every turn runs (bot/turn/engine.py): claimed, its steps idempotent against
the turn's record, finished by the one final write that records its part, marks it done
and acknowledges the intake entry. Its steps::

    credit the payment        Ledger.credit: once per charge id, whoever runs it
    note the credit to show   the turn's record ('b'), unless an earlier run noted it
    the confirmation          one message (no conversation's), as a notice: announced in
                              the chat's part ledger, sent, recorded by the final write

What closes each crash window:

- taken in, not credited: the intake entry is acknowledged only by the final write; the
  process run again (or another one, taking over) credits it.
- credited, the credit to show not noted: a run again finds the payment recorded and
  adds nothing; it notes the credit then (nothing was shown).
- noted, the confirmation sent or being sent: the part ledger; a run again edits the part
  with the noted numbers instead of sending another (save the one tolerated duplicate of
  every part, docs/architecture.md: Telegram accepted it and the bot died before its id
  was noted).
- the same update twice, two processes: the turn's claim and done mark; the ledger's
  charge id for the credit.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis

from ..payments import Ledger, Payment, Spending, texts
from .parts import Durably
from .state import TurnStates
from .values import Reply, Turn

log = logging.getLogger("replychain.payments")


class Paying:
    """Credits and confirms payments (one per bot)."""

    def __init__(
        self, redis: Redis, states: TurnStates, *, spending: Spending | None, durably: Durably
    ) -> None:
        """``spending``: the bot's (``None`` with payments off: a payment taken in before
        they were turned off is credited all the same, its credit fixed when taken in)."""
        self.ledger = Ledger(redis, clock=states.clock)
        self.states, self.spending, self._durably = states, spending, durably

    async def confirmation(self, turn: Turn) -> Reply:
        """Credit the turn's payment (once per charge id) and the confirmation to show,
        with the credit after it: the same numbers however often this runs."""
        inbound, state = turn.inbound, turn.state
        paid = inbound.payment
        assert paid is not None  # (Inbound.decode: a PAYMENT always has its payment)
        payment = Payment(paid.charge_id, inbound.user_id, paid.stars, paid.credit, paid.at)
        credited = await self._durably(lambda: self.ledger.credit(payment))
        if credited.new:
            log.info(
                "user %s paid %d Stars (%s): %d nano-dollars of credit",
                inbound.user_id, paid.stars, paid.charge_id, credited.payment.credit,
            )  # fmt: skip
        balance = state.paid_balance
        if balance is None:
            balance = credited.balance
            if self.spending is not None:  # the spend so far drawn first: the credit left
                balance = (await self.spending.check(inbound.user_id)).credit
            await self._durably(lambda: self.states.paid(state, balance))
        return Reply(texts.paid(credited, balance), None, notice=True)
