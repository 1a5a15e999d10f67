"""Metrics recorded into prometheus_client, for ``METRICS_LISTEN``.

Imported only when METRICS_LISTEN is set (bot/app.py): the client library and its
registry cost start-up time and memory a bot without a scraper has no use for.
What lives elsewhere (the transcript cache, the outages, the turns in flight) is
read when Prometheus scrapes, never counted on the hot path; the intake backlog is
read from Redis at scrape time (one pipelined round trip of O(1) commands).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .metrics import CHECK_TIMEOUT, Backlog, CacheStats, Metrics
from .retry import Outage

if TYPE_CHECKING:
    from .model import Usage

log = logging.getLogger("replychain.metrics")

PREFIX = "replychain"
#: Seconds: a model call or a whole turn (a slow model streams for minutes).
_LONG = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
#: Seconds until the first text is on screen.
_SHORT = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0)


class PrometheusMetrics(Metrics):
    """Every metric of one bot, in its own registry (several bots per process in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self._turns = Counter(
            f"{PREFIX}_turns", "Turns finished, by outcome", ["outcome"], registry=r
        )
        self._turn_seconds = Histogram(
            f"{PREFIX}_turn_seconds",
            "One run of a turn, from claiming it to its final write",
            buckets=_LONG,
            registry=r,
        )
        self._first_text = Histogram(
            f"{PREFIX}_first_text_seconds",
            "From the start of a turn to the first text of its answer on screen (draft or message)",
            buckets=_SHORT,
            registry=r,
        )
        self._model_seconds = Histogram(
            f"{PREFIX}_model_call_seconds",
            "Model calls (answers and summaries), failed ones too",
            buckets=_LONG,
            registry=r,
        )
        self._tokens = Counter(
            f"{PREFIX}_model_tokens",
            "Tokens of model calls as reported (or estimated); cached is part of prompt",
            ["kind"],
            registry=r,
        )
        self._model_errors = Counter(
            f"{PREFIX}_model_errors", "Failed model calls, by kind", ["kind"], registry=r
        )
        self._turn_retries = Counter(
            f"{PREFIX}_turn_retries",
            "Turn runs that failed and will run again, by cause",
            ["cause"],
            registry=r,
        )
        self._telegram_retries = Counter(
            f"{PREFIX}_telegram_retries",
            "Bot API calls tried again, by reason",
            ["reason"],
            registry=r,
        )
        self._telegram_429 = Counter(
            f"{PREFIX}_telegram_429",
            "Bot API calls answered 429 (flood control), by method",
            ["method"],
            registry=r,
        )
        for kind in ("prompt", "cached", "completion"):
            self._tokens.labels(kind)  # present from the first scrape, at 0
        self._backlog: Backlog | None = None
        self._read_backlog: Callable[[], Awaitable[Backlog]] | None = None

    # ---------------------------------------------------------- recording (hot path)

    def turn(self, outcome: str, started: float | None = None) -> None:
        """A turn ended: ``answer``, ``notice``, ``chat_unavailable``, ``rejected``, ``parked``."""
        self._turns.labels(outcome).inc()
        if started is not None:
            self._turn_seconds.observe(time.monotonic() - started)

    def first_text(self, started: float, shown_at: float | None) -> None:
        """The first text of an answer was on screen at ``shown_at`` (monotonic)."""
        if shown_at is not None:
            self._first_text.observe(shown_at - started)

    def model_call(self, usage: Usage, latency: float, error: str | None) -> None:
        self._model_seconds.observe(latency)
        tokens = self._tokens
        tokens.labels("prompt").inc(usage.prompt_tokens)
        tokens.labels("cached").inc(usage.cached_tokens)
        tokens.labels("completion").inc(usage.completion_tokens)
        if error is not None:
            self._model_errors.labels(error).inc()

    def turn_retry(self, cause: str) -> None:
        self._turn_retries.labels(cause).inc()

    def telegram_retry(self, reason: str) -> None:
        self._telegram_retries.labels(reason).inc()

    def telegram_429(self, method: str) -> None:
        self._telegram_429.labels(method).inc()

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
        self.registry.register(_Scraped(cache, in_flight, outages, self))
        self._read_backlog = backlog

    async def refresh(self) -> None:
        """Read what a scrape needs from Redis; absent from the scrape when Redis is not."""
        if self._read_backlog is None:
            return
        try:
            self._backlog = await asyncio.wait_for(self._read_backlog(), CHECK_TIMEOUT)
        except Exception as exc:  # Redis away: the outage metrics say so
            log.debug("metrics: intake backlog not read (%s)", type(exc).__name__)
            self._backlog = None


class _Scraped(Collector):
    """Values owned by other parts, read at scrape time."""

    def __init__(
        self,
        cache: CacheStats,
        in_flight: Callable[[], int],
        outages: Mapping[str, Outage],
        metrics: PrometheusMetrics,
    ) -> None:
        self.cache = cache
        self.in_flight = in_flight
        self.outages = dict(outages)
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        hits, misses, cache_bytes = self.cache()
        lookups = CounterMetricFamily(
            f"{PREFIX}_transcript_cache_lookups",
            "Transcript reads answered from memory (hit) or needing Redis (miss)",
            labels=["result"],
        )
        lookups.add_metric(["hit"], hits)
        lookups.add_metric(["miss"], misses)
        yield lookups
        yield GaugeMetricFamily(
            f"{PREFIX}_transcript_cache_hit_ratio",
            "Share of transcript reads answered from memory since start",
            value=hits / (hits + misses) if hits + misses else 0.0,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_transcript_cache_bytes",
            "Estimated bytes held by the transcript cache",
            value=cache_bytes,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_turns_in_flight", "Turns being answered now", value=self.in_flight()
        )
        outages = CounterMetricFamily(
            f"{PREFIX}_outages", "Times a service became unreachable", labels=["service"]
        )
        up = GaugeMetricFamily(
            f"{PREFIX}_up",
            "1 unless the bot is waiting out an outage of the service",
            labels=["service"],
        )
        for service, outage in self.outages.items():
            outages.add_metric([service], outage.count)
            up.add_metric([service], 0 if outage.since is not None else 1)
        yield outages
        yield up
        backlog = self.metrics._backlog
        if backlog is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_intake_backlog",
                "Messages accepted and not yet finished (waiting or being answered)",
                value=backlog.entries,
            )
            yield GaugeMetricFamily(
                f"{PREFIX}_intake_oldest_age_seconds",
                "Age of the oldest message not yet finished (0: none)",
                value=backlog.oldest_age,
            )
            yield GaugeMetricFamily(
                f"{PREFIX}_dead_letters",
                "Turns parked for the operator",
                value=backlog.dead_letters,
            )
