"""What the owner's payment settings mean, as integers: STARS_USD, STAR_PACKS and
FREE_DAILY_USD in nano-dollars (the unit of every cost the usage totals hold)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from ..settings import Settings

#: Nano-dollars in a dollar: costs, credits and allowances are whole nano-dollars.
NANO_PER_USD = 10**9


def nano(usd: Decimal | float | int) -> int:
    """``usd`` dollars in whole nano-dollars, exactly for a decimal (a float is read as the
    shortest decimal that is that float: 0.05 is 50,000,000)."""
    amount = usd if isinstance(usd, Decimal) else Decimal(repr(usd))
    return int((amount * NANO_PER_USD).to_integral_value(ROUND_HALF_EVEN))


@dataclass(frozen=True, slots=True)
class Terms:
    """What a Star buys, the packs offered, the free allowance and who may pay."""

    #: Nano-dollars of credit one Star buys; 0: payments are off.
    nano_per_star: int = 0
    #: The packs /buy offers, in Stars.
    packs: tuple[int, ...] = ()
    #: What each user may spend per UTC day before their credit is drawn on, in
    #: nano-dollars; None: unlimited (payments off: nothing is drawn on).
    free_daily: int | None = None
    #: ALLOWED_USER_IDS (empty: everyone).
    allowed: frozenset[int] = frozenset()
    #: Where users get help with a payment (PAY_SUPPORT; empty: the bot's owner).
    support: str = ""

    @property
    def on(self) -> bool:
        """Whether users can buy credit."""
        return self.nano_per_star > 0

    def credit_of(self, stars: int) -> int:
        """The credit ``stars`` Stars buy, in nano-dollars."""
        return stars * self.nano_per_star

    def allows(self, user_id: int) -> bool:
        """Whether ``user_id`` may use the bot (and so pay)."""
        return not self.allowed or user_id in self.allowed

    @classmethod
    def of(cls, settings: Settings) -> Terms:
        """The terms the settings name (FREE_DAILY_USD's default: USER_DAILY_BUDGET_USD
        when set, else 0; without STARS_USD nothing is drawn on: unlimited)."""
        if settings.stars_usd is None:
            return cls(allowed=settings.allowed_user_ids)
        if settings.free_daily_usd is not None:
            free = nano(settings.free_daily_usd)
        else:
            free = nano(settings.user_daily_budget_usd)
        return cls(
            nano_per_star=nano(settings.stars_usd),
            packs=settings.star_packs,
            free_daily=free,
            allowed=settings.allowed_user_ids,
            support=(settings.pay_support or "").strip(),
        )
