"""What the bot records, as an interface: :class:`Metrics`.

:class:`Metrics` is what the parts of a turn (engine, runner, accounting, the Telegram
session) record, one call each. By itself it records nothing: without
``METRICS_LISTEN`` nothing is served and prometheus_client is not even imported.
With it, :mod:`bot.prometheus` records into a registry of its own and serves
``/metrics`` and ``/healthz`` on that address.

Labels are small fixed sets (an outcome, a kind, a service, a Bot API method):
never a chat id, a user id, a name or any text of a message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .retry import Outage

if TYPE_CHECKING:
    from .model import Usage

#: The longest a health check or a scrape waits on Redis or Telegram.
CHECK_TIMEOUT = 3.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """The intake stream at one moment (see :meth:`bot.bus.intake.Intake.backlog`)."""

    #: Messages accepted and not yet finished (waiting, or being answered).
    entries: int
    #: Seconds since the oldest of them was accepted (0 when there is none).
    oldest_age: float
    #: Turns given up and parked for the operator.
    dead_letters: int


#: The transcript cache: reads answered from memory, reads needing Redis, bytes held.
CacheStats = Callable[[], tuple[int, int, int]]


class Metrics:
    """What a running bot records; this one records nothing (METRICS_LISTEN unset)."""

    # ---------------------------------------------------------- recording (hot path)

    def turn(self, outcome: str, started: float | None = None) -> None:
        """A turn ended: ``answer``, ``notice``, ``chat_unavailable``, ``rejected``, ``parked``."""

    def first_text(self, started: float, shown_at: float | None) -> None:
        """The first text of an answer was on screen at ``shown_at`` (monotonic)."""

    def model_call(self, usage: Usage, latency: float, error: str | None) -> None:
        """A model call ended (``error``: its kind, if it failed)."""

    def turn_retry(self, cause: str) -> None:
        """A turn run failed and will run again."""

    def telegram_retry(self, reason: str) -> None:
        """A Bot API call is tried again."""

    def telegram_429(self, method: str) -> None:
        """A Bot API call was answered 429 (flood control)."""

    # ---------------------------------------------------------- the cold sweep

    def cold_tree(self, hot_bytes: int, cold_bytes: int) -> None:
        """The sweep compacted a tree: its records' bytes, its cold value's bytes."""

    def trees(self, *, hot: int, cold: int, eligible: int, hot_bytes: int, cold_bytes: int) -> None:
        """The conversation trees as the sweep last counted them (the sweeping process):
        hot ones, cold ones, hot ones at rest for COLD_AFTER_DAYS; the hot trees' bytes
        (estimated from a sample) and the cold values' bytes."""

    # ---------------------------------------------------------- read at scrape time

    def watch(
        self,
        *,
        cache: CacheStats,
        in_flight: Callable[[], int],
        outages: Mapping[str, Outage],
        backlog: Callable[[], Awaitable[Backlog]],
    ) -> None:
        """Read these when scraped: the cache, turns in flight, outages, the intake."""
