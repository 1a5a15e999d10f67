"""The values of usage accounting: one model call as recorded, totals, days, prices.

Money is whole nano-dollars (:data:`NANO` a dollar), so sums in Redis are exact; a
day is a UTC day named ``yyyymmdd``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

from transcript import NodeId

from .. import catalogue
from ..bus.inbound import Inbound
from ..i18n import clock_time
from ..model import Usage

#: USD per million tokens (the catalogue's; named here for usage's readers).
Prices = catalogue.Prices

Clock = Callable[[], datetime]

USER_DAY_TTL = 400 * 24 * 3600

#: Default days the per-turn and per-node detail is kept (like the call markers were).
DETAIL_DAYS = 90

#: Nano-dollars: a call's cost is counted in whole ones (exact sums in Redis).
NANO = 1e9

#: The audit record's fields, in the order of its msgpack array. Records in a chat's
#: audit hash leave out what its key tells: ``user`` is nil when the user is the chat
#: (a private chat) and ``sent`` is the node's ref without the chat ("tree:seg.idx").
AUDIT_FIELDS = (
    "at", "model", "user", "message", "sent", "prompt", "completion", "cached", "estimated",
    "latency", "error", "view",
)  # fmt: skip

#: The views recorded for calls that answer no one: a fold's summary, a topic's title
#: (an answer call's view is the window it sent).
SUMMARY_VIEW = "summary"

TITLE_VIEW = "title"


@dataclass(frozen=True, slots=True)
class Totals:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    calls: int = 0
    estimated: int = 0
    errors: int = 0
    #: What the calls cost, in nano-dollars (calls of models without prices add nothing).
    cost: int = 0
    #: The same per model (tokens, calls and cost), where the records tell.
    models: Mapping[str, Totals] = field(default_factory=dict, compare=False)

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    @property
    def dollars(self) -> float:
        return self.cost / NANO

    def __add__(self, other: Totals) -> Totals:
        models = dict(self.models)
        for name, totals in other.models.items():
            models[name] = models[name] + totals if name in models else totals
        return Totals(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cached + other.cached,
            self.calls + other.calls,
            self.estimated + other.estimated,
            self.errors + other.errors,
            self.cost + other.cost,
            models,
        )

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Totals:
        values: dict[str, int] = {}
        for key, value in raw.items():
            if value is not None:
                values[_text(key)] = int(value)
        models: dict[str, dict[str, int]] = {}
        for name, value in values.items():
            field_name, _, model = name.partition(":")
            if model:
                models.setdefault(model, {})[field_name] = value

        def of(found: Mapping[str, int]) -> Totals:
            get = found.get
            return cls(get("p", 0), get("c", 0), get("k", 0), get("n", 0), get("e", 0),
                       get("x", 0), get("d", 0))  # fmt: skip

        totals = of(values)
        return replace(totals, models={m: of(f) for m, f in sorted(models.items())})


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call, as recorded."""

    chat_id: int
    user_id: int
    message_id: int  # the user's message this turn answers
    sent: NodeId  # the chain up to this node is what the model was sent
    model: str
    usage: Usage
    latency: float
    error: str | None = None
    #: The view sent: the fold node it started from ("" for the full history).
    view: str = ""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: The call's cost in nano-dollars when it is not priced by its tokens (a speech or
    #: image call: bot/usage/costs.py); None: by its tokens, at its model's prices.
    cost: int | None = None

    @classmethod
    def of(
        cls,
        inbound: Inbound,
        sent: NodeId,
        *,
        model: str,
        usage: Usage,
        latency: float,
        error: str | None,
        view: str,
    ) -> CallRecord:
        """A call made for the turn answering ``inbound``."""
        return cls(
            inbound.chat_id,
            inbound.user_id,
            inbound.message_id,
            sent,
            model,
            usage,
            latency,
            error=error,
            view=view,
        )


def utc_now() -> datetime:
    return datetime.now(UTC)


def day_of(moment: datetime) -> str:
    return _day_name(moment.astimezone(UTC).date())


@lru_cache(maxsize=8)
def _day_name(day: date) -> str:
    """``yyyymmdd`` (a few days are named on every turn: the done sets, the buckets)."""
    return day.strftime("%Y%m%d")


def next_reset(moment: datetime) -> datetime:
    """The next UTC midnight, when daily limits reset."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, utc.day, tzinfo=UTC) + timedelta(days=1)


def resets_at(moment: datetime) -> str:
    """When daily limits and allowances renew next (UTC midnight), as a time of day in
    the current language."""
    return clock_time(next_reset(moment))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
