"""This worker's confirmed claims on the turns it runs: when each was last confirmed
(the claim, or a renewal that came back), so that a holder whose renewals stop coming
back sends nothing new (:meth:`bot.turn.state.TurnStates.holds`)."""

from __future__ import annotations

from time import monotonic

from transcript import StoreUnavailableError

#: A claim not confirmed within this share of the lease sends nothing new (see
#: :meth:`bot.turn.state.TurnStates.holds`).
HOLD_SHARE = 0.5
_CONFIRMED_KEPT = 10_000


class ClaimUnconfirmedError(StoreUnavailableError):
    """This worker's claim on a turn was not confirmed lately: it sends nothing new until
    a renewal comes back (a wait, like any while Redis is away)."""


class Confirmations:
    """When each running turn's claim was last confirmed, by (scope, turn)."""

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self._at: dict[tuple[str, str], float] = {}

    def __contains__(self, turn: tuple[str, str]) -> bool:
        return turn in self._at

    def recent(self, turn: tuple[str, str]) -> bool:
        """Confirmed within :data:`HOLD_SHARE` of the lease (or never claimed here)."""
        confirmed = self._at.get(turn)
        return confirmed is None or monotonic() - confirmed < self.lease_ms * HOLD_SHARE / 1000

    def confirm(self, turn: tuple[str, str]) -> None:
        now = monotonic()
        self._at[turn] = now
        if len(self._at) > _CONFIRMED_KEPT:  # turns long over (finished elsewhere)
            stale = now - self.lease_ms * 4 / 1000
            self._at = {k: v for k, v in self._at.items() if v > stale}

    def forget(self, turn: tuple[str, str]) -> None:
        self._at.pop(turn, None)
