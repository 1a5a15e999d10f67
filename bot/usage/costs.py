"""What a speech or image call costs, in whole nano-dollars (as accounting counts money).

A chat call is priced by its tokens inside :class:`~bot.usage.accounting.Accounting`; a
speech call by the characters it read (``price_per_1m_chars``) and an image call by the
pictures it made (``price_per_image``), priced here and recorded with their cost
(:attr:`~bot.usage.accounting.CallRecord.cost`). Prices are read as whole nano-dollars
first (USD to nine places, as the catalogue states them), so the arithmetic after that is
exact: a price per million characters is rounded once per call, half up.
"""

from __future__ import annotations

from ..catalogue import Prices

#: Nano-dollars in a dollar.
NANO_PER_USD = 1_000_000_000
_MILLION = 1_000_000


def nano(usd: float) -> int:
    """``usd`` in whole nano-dollars."""
    return round(usd * NANO_PER_USD)


def speech_cost(prices: Prices, characters: int) -> int:
    """Nano-dollars of reading ``characters`` characters aloud at ``prices.per_1m_chars``."""
    if characters < 0:
        raise ValueError("characters must be at least 0")
    per_million = nano(prices.per_1m_chars)
    return (characters * per_million + _MILLION // 2) // _MILLION


def image_cost(prices: Prices, pictures: int = 1) -> int:
    """Nano-dollars of ``pictures`` pictures at ``prices.per_image``."""
    if pictures < 0:
        raise ValueError("pictures must be at least 0")
    return pictures * nano(prices.per_image)
