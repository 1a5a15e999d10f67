"""Metrics recorded into prometheus_client and served, for ``METRICS_LISTEN``.

:class:`PrometheusMetrics` records what :class:`bot.metrics.Metrics` names;
:class:`MetricsServer` (aiohttp, already installed with aiogram) serves ``/metrics``
and ``/healthz`` (:class:`Health`) in the bot's event loop. Imported only when
METRICS_LISTEN is set (bot/app.py): the client library and its registry cost
start-up time and memory a bot without a scraper has no use for.
What lives elsewhere (the transcript cache, the outages, the turns in flight) is
read when Prometheus scrapes, never counted on the hot path; the intake backlog is
read from Redis at scrape time (one pipelined round trip of O(1) commands).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .http_site import open_site
from .metrics import CHECK_TIMEOUT, Backlog, CacheStats, Metrics
from .retry import Outage

if TYPE_CHECKING:
    from aiohttp import web

    from .model import Usage

log = logging.getLogger("replychain.metrics")

#: How long /healthz trusts its last getMe (Telegram is not asked on every probe).
TELEGRAM_CHECK_EVERY = 30.0

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
        self._compacted = Counter(
            f"{PREFIX}_cold_compacted_bytes",
            "Bytes of the trees the cold sweep compacted, as records (hot) and as values (cold)",
            ["form"],
            registry=r,
        )
        self._trees = Gauge(
            f"{PREFIX}_trees",
            "Conversation trees as the cold sweep last counted them: hot, cold, and hot ones "
            "at rest for COLD_AFTER_DAYS (eligible)",
            ["state"],
            registry=r,
        )
        self._tree_bytes = Gauge(
            f"{PREFIX}_tree_bytes",
            "Redis bytes of conversation trees as the cold sweep last counted them: hot "
            "(estimated from a sample of tree hashes) and cold (their values)",
            ["state"],
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

    def cold_tree(self, hot_bytes: int, cold_bytes: int) -> None:
        self._compacted.labels("hot").inc(hot_bytes)
        self._compacted.labels("cold").inc(cold_bytes)

    def trees(self, *, hot: int, cold: int, eligible: int, hot_bytes: int, cold_bytes: int) -> None:
        self._trees.labels("hot").set(hot)
        self._trees.labels("cold").set(cold)
        self._trees.labels("eligible").set(eligible)
        self._tree_bytes.labels("hot").set(hot_bytes)
        self._tree_bytes.labels("cold").set(cold_bytes)

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


# ----------------------------------------------------------------------------- serving


Check = Callable[[], Awaitable[object]]


class Health:
    """Whether Redis and Telegram are reachable, for ``/healthz``.

    A service in a known outage (the bot's :class:`Outage`) is unhealthy without
    asking it. Otherwise Redis gets a PING (cheap) and Telegram a getMe, at most
    once per ``telegram_every`` seconds; probes in between reuse its answer.
    """

    def __init__(
        self,
        *,
        redis_ping: Check,
        telegram_ping: Check,
        outages: Mapping[str, Outage],
        telegram_every: float = TELEGRAM_CHECK_EVERY,
    ) -> None:
        self._checks = {"redis": redis_ping, "telegram": telegram_ping}
        self.outages = dict(outages)
        self.telegram_every = telegram_every
        self._telegram: tuple[float, str] | None = None  # (when, problem or "")
        self._telegram_lock = asyncio.Lock()

    async def check(self) -> tuple[bool, list[str]]:
        """(healthy, one line per service)."""
        redis, telegram = await asyncio.gather(self._service("redis"), self._service("telegram"))
        lines = [f"redis: {redis or 'ok'}", f"telegram: {telegram or 'ok'}"]
        return not (redis or telegram), lines

    async def _service(self, name: str) -> str:
        outage = self.outages.get(name)
        if outage is not None and outage.since is not None:
            return f"unreachable for {time.monotonic() - outage.since:.0f}s"
        if name != "telegram":
            return await self._ask(name)
        async with self._telegram_lock:  # concurrent probes share one getMe
            now = time.monotonic()
            if self._telegram is None or now - self._telegram[0] >= self.telegram_every:
                self._telegram = (now, await self._ask(name))
            return self._telegram[1]

    async def _ask(self, name: str) -> str:
        try:
            await asyncio.wait_for(self._checks[name](), CHECK_TIMEOUT)
        except Exception as exc:
            return f"unreachable ({type(exc).__name__})"
        return ""


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``host:port``, in the running event loop."""

    def __init__(
        self, metrics: PrometheusMetrics, health: Health, address: tuple[str, int]
    ) -> None:
        self.metrics = metrics
        self.health = health
        self.host, self.port = address
        self._runner: web.AppRunner | None = None
        self._export: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
        #: More routes served on this address (the thread viewer sharing it).
        self.mounts: list[Callable[[web.Application], None]] = []

    async def start(self) -> None:
        # imported here: the server (aiohttp.web) costs start-up time only when it is on
        from aiohttp import web  # noqa: PLC0415
        from prometheus_client.aiohttp import make_aiohttp_handler  # noqa: PLC0415

        self._export = make_aiohttp_handler(self.metrics.registry)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        for mount in self.mounts:
            mount(app)
        self._runner, self.port = await open_site(app, self.host, self.port, shutdown_timeout=1.0)
        log.info("metrics at http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        assert self._export is not None  # set by start(), before any request
        await self.metrics.refresh()
        return await self._export(request)

    async def _healthz(self, _request: web.Request) -> web.Response:
        from aiohttp import web  # noqa: PLC0415 (loaded by start())

        healthy, lines = await self.health.check()
        return web.Response(status=200 if healthy else 503, text="\n".join(lines) + "\n")
