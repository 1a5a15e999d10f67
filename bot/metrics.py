"""Metrics and the health check, served inside the bot's event loop.

:class:`Metrics` is what the parts of a turn (engine, runner, accounting, the Telegram
session) record, one call each. By itself it records nothing: without
``METRICS_LISTEN`` nothing is served and prometheus_client is not even imported.
With it, :class:`bot.prometheus.PrometheusMetrics` records into a registry of its
own, and :class:`MetricsServer` (aiohttp, already installed with aiogram) serves
``/metrics`` and ``/healthz`` on that address.

Labels are small fixed sets (an outcome, a kind, a service, a Bot API method):
never a chat id, a user id, a name or any text of a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .retry import Outage

if TYPE_CHECKING:
    from aiohttp import web

    from .model import Usage
    from .prometheus import PrometheusMetrics

log = logging.getLogger("replychain.metrics")

#: How long /healthz trusts its last getMe (Telegram is not asked on every probe).
TELEGRAM_CHECK_EVERY = 30.0
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


# ----------------------------------------------------------------------------- serving


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9100`` for IPv6) as host and port."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)  # empty: every address


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

    def __init__(self, metrics: PrometheusMetrics, health: Health, listen: str) -> None:
        self.metrics = metrics
        self.health = health
        self.host, self.port = split_listen(listen)
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
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])  # the port given, or the one picked for 0
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
