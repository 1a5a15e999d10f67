"""What one turn and one user may cost: checked before every model call.

The per-turn guard (model calls and tokens of one message, tool rounds included), the
user's daily tokens and daily money budget. Past one of them the turn ends with a
notice before any model call; a limit of 0 is no limit. With payments (STARS_USD) the
money budget is the day's free allowance, then the user's credit (bot/payments/): with
neither left, the notice carries the /buy button.
"""

from __future__ import annotations

import logging

from transcript import Node, TranscriptStore

from .. import choice_texts
from ..data.connection import Queued
from ..i18n import _, dollars, number
from ..payments import SpendReads, Stars, buy_button
from ..payments import texts as payment_texts
from ..usage.accounting import Accounting
from ..usage.calls import resets_at
from . import notices
from .values import Reply, Rules, Turn, TurnEnded

log = logging.getLogger("replychain.engine")


class Limits:
    """Checks a turn against the operator's rules (one per bot)."""

    def __init__(
        self, rules: Rules, *, store: TranscriptStore, accounting: Accounting, tool_rounds: int = 0,
        stars: Stars | None = None,
    ) -> None:  # fmt: skip
        self.rules, self.store, self.accounting = rules, store, accounting
        #: Tool rounds a turn may make besides its model calls (the tool loop's).
        self.tool_rounds = tool_rounds
        #: Payments (STARS_USD): spend draws the free allowance, then the credit.
        self.stars = stars

    def reads(self, user_id: int) -> SpendReads | None:
        """With payments, the asker's spend settled on the claim's round trip (the first
        check reads it there)."""
        return self.stars.reads(user_id) if self.stars is not None else None

    def settle(self, user_id: int) -> Queued | None:
        """With payments, the asker's spend drawn on the round trip recording a call's
        usage (queued after it)."""
        return self.stars.spending.queue_settle(user_id) if self.stars is not None else None

    async def check_input(self, turn: Turn, user: Node) -> None:
        """The message is not too long (else a notice: replying to it goes on without it)."""
        inbound, limit = turn.inbound, self.rules.max_input_chars
        if len(inbound.text) > limit:
            # kept, but replying to the notice continues without the over-long message
            parent = (await self.store.path(user.id))[-2]
            text = _(notices.TOO_LONG).format(length=number(len(inbound.text)), limit=number(limit))
            raise TurnEnded(Reply(text, parent.id, notice=True))

    async def check(self, turn: Turn, user: Node) -> None:
        """The per-turn guard and the user's daily limit: no model call past them."""
        await self.guard(turn, user)
        inbound, rules = turn.inbound, self.rules
        daily, budget = rules.user_daily_tokens, rules.user_daily_dollars
        if self.stars is not None:  # the free allowance and the credit, not the budget
            budget = 0.0
            await self.spend(turn, user)
        if daily or budget:
            today = await self.accounting.user_today(inbound.user_id)
            if daily and today.tokens >= daily:
                text = notices.daily_limit(daily, self.accounting.clock())
                raise TurnEnded(Reply(text, user.id, notice=True, personal=True))
            if budget and today.dollars >= budget:
                reset = resets_at(self.accounting.clock())  # as the token limit's
                text = _(choice_texts.BUDGET_REACHED).format(budget=dollars(budget, 2), reset=reset)
                raise TurnEnded(Reply(text, user.id, notice=True, personal=True))

    async def guard(self, turn: Turn, user: Node) -> None:
        """The per-turn guard alone (the model calls and tokens of one message)."""
        inbound, state, rules = turn.inbound, turn.state, self.rules
        spent = 0
        if rules.max_tokens_per_turn:
            spent = (await self.accounting.turn(inbound.scope, inbound.message_id)).tokens
        max_calls = rules.max_calls_per_turn + (self.tool_rounds)
        if state.calls > max_calls or (
            rules.max_tokens_per_turn and spent >= rules.max_tokens_per_turn
        ):
            log.warning(
                "turn for message %s in chat %s stopped: %d model calls, %d tokens",
                inbound.message_id, inbound.chat_id, state.calls - 1, spent,
            )  # fmt: skip
            raise TurnEnded(Reply(_(notices.TURN_GUARD), user.id, notice=True))

    async def spend(self, turn: Turn, user: Node) -> None:
        """Payments: the day's free allowance or the credit left, else the notice (with the
        /buy button); nothing without them. The first check uses what the claim read;
        later ones read again."""
        if self.stars is None:
            return
        allowance, turn.allowance = turn.allowance, None
        if allowance is None:
            allowance = await self.stars.spending.check(turn.inbound.user_id)
        if not allowance.ok:
            text = payment_texts.no_credit(allowance, self.accounting.clock())
            reply = Reply(text, user.id, notice=True, personal=True, markup=buy_button())
            raise TurnEnded(reply)


class Spending:
    """Whether a user's day is spent (USER_DAILY_TOKEN_LIMIT, USER_DAILY_BUDGET_USD; with
    payments, the day's free allowance and the credit in place of the budget, as
    :meth:`Limits.check`): the extras that cost money besides the answer (a voice note, a
    picture) are refused then, before their call. Without a limit it reads nothing."""

    def __init__(
        self, accounting: Accounting, *, daily_tokens: int, daily_dollars: float,
        stars: Stars | None = None,
    ) -> None:  # fmt: skip
        self.accounting, self.stars = accounting, stars
        self.daily_tokens = daily_tokens
        self.daily_dollars = 0.0 if stars is not None else daily_dollars

    async def spent(self, user_id: int) -> bool:
        """Whether ``user_id`` may spend no more today (a call recorded counts at once)."""
        if self.stars is not None and not (await self.stars.spending.check(user_id)).ok:
            return True
        if not (self.daily_tokens or self.daily_dollars):
            return False
        today = await self.accounting.user_today(user_id)
        if self.daily_tokens and today.tokens >= self.daily_tokens:
            return True
        return bool(self.daily_dollars) and today.dollars >= self.daily_dollars
