"""Wiring and lifecycle: build the parts, take updates, shut down gracefully.

Updates come by long polling (one process among several polls: the holder
of the poller lease, bot/chat/polling.py) or, with WEBHOOK_URL, by
Telegram's POSTs to this process's webhook server (bot/chat/webhook.py).

The parts, bottom up: the Redis client and the transcript store; the edges
(Telegram session and sending, the model client); the message bus (intake
stream, turn runner); usage accounting; the turn engine, which the runner
drives. On SIGTERM or SIGINT the bot stops taking updates, gives in-flight
answers ``SHUTDOWN_TIMEOUT`` seconds to finish, closes its connections and
exits 0: whatever is in flight, shutdown never takes much longer than that.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiogram import Bot, Dispatcher, Router
from aiogram.client.default import DefaultBotProperties
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import LinkPreviewOptions
from redis.asyncio import Redis

from transcript import StoreUnavailableError, TranscriptStore

from . import i18n
from .bus.albums import Albums
from .bus.intake import Intake
from .bus.relay import Relay
from .bus.runner import LEASE_SHARE, InFlight, TurnRunner
from .capabilities import capabilities
from .catalogue import Catalogue, Models
from .chat.menu import sync_menu
from .chat.polling import Poller
from .chat.routers import AccessControl, SkipUnknownUpdates, build_router
from .chat.sidebar import show_topic_sidebar
from .chat.viewer import continue_router
from .data import keys
from .data.connection import connect
from .data.layout import UnknownLayoutError, check_layout
from .data.lease import Lease
from .data.sweep import ColdSweep
from .metrics import Metrics
from .model import ModelClient, estimate_text
from .model.client import load_sdk
from .model.transcribe import Transcriber
from .model.vision import Vision
from .payments import Stars
from .retry import Outage, cancel_until_done, retrying
from .settings import Settings, webhook_rule
from .telegram.errors import UnknownMethodError
from .telegram.files import Files
from .telegram.notifier import Notifier
from .telegram.out import TelegramOut
from .telegram.outcomes import TelegramUnavailableError
from .telegram.session import BadResponseError, BotApiSession, FloodControl, UnreadableResultError
from .tools.box import Toolbox
from .tools.config import load_config
from .tools.retention import stub_old_results
from .turn.branch import Branches
from .turn.context import ContextWindow
from .turn.engine import Engine
from .turn.state import TurnStates
from .turn.tools import ToolLoop
from .turn.topics import TopicThreads, TopicTitles
from .turn.values import Rules
from .usage.accounting import Accounting
from .usage.calls import Clock, utc_now
from .usage.spend import SpendAlert

if TYPE_CHECKING:
    from .chat.webhook import WebhookServer
    from .prometheus import MetricsServer
    from .webapp.server import ViewerServer

#: The commands Telegram lists in its menu.

log = logging.getLogger("replychain")

#: How long start-up waits for Redis and Telegram while they are unreachable (a
#: Redis restarting, or started beside the bot): then it exits 1 with a clear line.
STARTUP_PATIENCE = 20.0
#: The poller lease: a dead poller is replaced within about this long.
POLLER_LEASE_MS = 8000
#: Longest one set-up call beside polling (deleteWebhook, setMyCommands) is waited for.
SETUP_TIMEOUT = 30.0


class StartupError(Exception):
    """The bot cannot start; the message says what to fix (one line, no secrets)."""


def lease_ms(settings: Settings) -> int:
    """How long a turn's lease lasts: a share of TAKEOVER_SECONDS (bot/bus/runner.py)."""
    return int(settings.takeover_seconds * 1000 * LEASE_SHARE)


def redis_location(url: str) -> str:
    """host:port of a Redis URL, never its credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


class App:
    """Every long-lived part of a running bot."""

    def _bot(self, settings: Settings) -> tuple[Bot, FloodControl]:
        """aiogram's Bot on our session, and the session's flood control."""
        session = BotApiSession(api=TelegramAPIServer.from_base(settings.telegram_api_url))
        floods = FloodControl(max_wait=settings.flood_wait_max, metrics=self.metrics)
        session.middleware(floods)
        bot = Bot(
            settings.telegram_bot_token.get_secret_value(),
            session=session,
            # link_preview, not link_preview_is_disabled: that one also sends the deprecated
            # disable_web_page_preview (Bot API 7.0) with every message
            default=DefaultBotProperties(
                parse_mode=ParseMode.HTML, link_preview=LinkPreviewOptions(is_disabled=True)
            ),
        )
        return bot, floods

    def __init__(self, settings: Settings, *, clock: Clock = utc_now) -> None:
        self.settings = settings
        self.metrics = self._metrics(settings)
        self.bot, floods = self._bot(settings)
        self.redis: Redis = connect(
            settings.redis_url,
            max_connections=max(64, settings.max_concurrent_turns),
            cluster=settings.redis_cluster,
        )
        self.store = TranscriptStore(self.redis, cache_bytes=settings.transcript_cache_bytes)
        self.models = Models(
            settings.catalogue(),
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
            voice=settings.tts_voice,
        )
        self.transcriber = Transcriber(
            api_key=settings.api_key(),
            base_url=settings.transcribe_base_url or settings.openai_base_url,
            model=settings.transcribe_model,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
        )
        self.out = TelegramOut(self.bot, rich=settings.rich_messages != "off", floods=floods)
        self.notifier = Notifier(self.out, lambda chat, ids: self.store.unthreaded(str(chat), ids))
        self.intake = Intake(
            self.redis, settings.bot_instance, shards=settings.intake_shards,
            topic_threads=settings.topic_threads,
        )  # fmt: skip
        self.accounting = Accounting(
            self.redis,
            clock=clock,
            outage=self.intake.outage,
            audit_days=settings.model_audit_days,
            detail_days=settings.usage_detail_days,
            prices=self.catalogue.default_model.prices,
            model_prices=self.catalogue.prices,  # the speech and image models' too
            metrics=self.metrics,
        )
        self.context = ContextWindow.for_budget(
            self.store,
            self.model,
            self.accounting,
            budget=settings.context_token_budget,
            fold_at=settings.context_fold_at,
            keep_recent=settings.context_keep_recent,
            summary_tokens=settings.summary_max_tokens,
            vision=Vision(self.redis),
        )
        in_flight = InFlight()
        self.topics = TopicTitles(
            self.redis, store=self.store, model=self.model, out=self.out,
            accounting=self.accounting, enabled=settings.topic_titles,
        )  # fmt: skip
        states = TurnStates(
            self.redis, self.store, settings.bot_instance, lease_ms=lease_ms(settings),
            clock=clock,
        )  # fmt: skip
        #: Telegram Stars buy credit (STARS_USD), else ``None``.
        self.stars = Stars.of(settings, self.redis, clock=clock)
        able = capabilities(
            settings, store=self.store, redis=self.redis, transcriber=self.transcriber,
            files=Files(self.bot, local_files=settings.telegram_local_files),
            models=self.models, accounting=self.accounting, context=self.context,
            stars=self.stars,
        )  # fmt: skip
        hub = None
        if settings.mcp_config is not None:  # checked by load_settings
            # the mcp SDK takes a while to import: only when tools are configured
            from .tools.hub import ToolHub  # noqa: PLC0415

            hub = ToolHub(
                load_config(settings.mcp_config),
                allowed=settings.allowed_tools,
                call_timeout=settings.tool_timeout,
            )
        #: The tools offered to the model: MCP_CONFIG's servers and the built-in ones.
        self.tools = (
            Toolbox(hub, able.tools, able.footers) if hub is not None or able.tools else None
        )
        tool_loop: ToolLoop | None = None
        if self.tools is not None:
            tool_loop = ToolLoop(
                self.tools,
                self.model,
                self.store,
                states,
                max_rounds=settings.tool_max_rounds,
                in_groups=settings.tools_in_groups,
                max_result_chars=settings.context_token_budget,  # about a quarter of it
            )
            self.context.shape = stub_old_results
        self.albums = Albums(self.redis, self.intake.outage, settings.album_wait)
        self.engine = Engine(
            store=self.store,
            model=self.model,
            out=self.out,
            states=states,
            accounting=self.accounting,
            context=self.context,
            in_flight=in_flight,
            redis_outage=self.intake.outage,
            rules=Rules(
                system_prompt=settings.resolved_system_prompt() + able.rules,
                max_input_chars=settings.max_input_chars,
                user_daily_tokens=settings.user_daily_token_limit,
                max_calls_per_turn=settings.turn_max_model_calls,
                max_tokens_per_turn=settings.turn_max_tokens,
                show_reasoning=settings.show_reasoning,
                user_daily_dollars=settings.user_daily_budget_usd,
                rich=settings.rich_messages,
            ),
            inputs=able.inputs,
            voice=able.voice,
            albums=self.albums,
            branches=self._models_and_money(settings, able.rules),
            topics=self.topics,
            threads=(
                TopicThreads(self.redis, out=self.out, titles=self.topics)
                if settings.topic_threads
                else None
            ),
            tools=tool_loop,
            speech=able.speech,
            pictures=able.pictures,
            stars=self.stars,
        )
        telegram_outage = Outage(
            "Telegram", "Answers being written are kept and finished when it is back."
        )
        self.runner = TurnRunner(
            self.engine,
            self.intake,
            outages={
                StoreUnavailableError: self.intake.outage,
                TelegramUnavailableError: telegram_outage,
            },
            in_flight=in_flight,
            max_concurrent=settings.max_concurrent_turns,
            max_per_user=settings.user_max_concurrent_turns,
            max_attempts=settings.turn_max_attempts,
            metrics=self.metrics,
            leases=states,
        )
        outages = {"redis": self.intake.outage, "telegram": telegram_outage}
        store = self.store
        self.metrics.watch(
            cache=lambda: (store.cache_hits, store.cache_misses, store.cache.bytes_used),
            in_flight=lambda: self.runner.in_flight_count,
            outages=outages,
            backlog=self.intake.backlog,
        )
        self.metrics_server = self._metrics_server(settings, outages)
        self.stopping = asyncio.Event()
        # no finite-state machine: a conversation's state is its reply chain, in Redis
        self.dispatcher = Dispatcher(disable_fsm=True)
        self.dispatcher.update.outer_middleware(SkipUnknownUpdates())
        i18n.force(settings.bot_language)
        i18n.LanguageMiddleware().setup(self.dispatcher)  # every handler, in the sender's language
        self.dispatcher.include_routers(*self._routers(settings))
        # stops: Telegram's stop button, for the answers being generated here or elsewhere;
        # and the flood windows every process must honour
        self.stops = Relay(self.redis, self.engine.stops, self.intake.outage, floods.hold)
        floods.tell = self.stops.flood
        self.dispatcher.workflow_data.update(
            notifier=self.notifier, intake=self.intake, albums=self.albums,
            stopping=self.stopping, accounting=self.accounting, store=self.store,
            redis=self.redis, settings=settings, stops=self.stops, topics=self.topics,
            branches=self.engine.branches, catalogue=self.catalogue, stars=self.stars,
        )  # fmt: skip
        self.webhook, self.viewer = self._servers(settings)
        self.poller = self._poller(settings)
        #: Compacts trees at rest in place, in one process at a time (COLD_AFTER_DAYS).
        self.sweep: ColdSweep | None = None
        if settings.cold_after_days > 0:
            self.sweep = ColdSweep(
                self.redis, self.store, settings.bot_instance, metrics=self.metrics,
                cold_after_days=settings.cold_after_days, every=settings.cold_sweep_seconds,
            )  # fmt: skip

    @property
    def model(self) -> ModelClient:
        """The catalogue's default model (the OPENAI_* model without MODELS_FILE)."""
        return self.models.default

    @property
    def catalogue(self) -> Catalogue:
        """The models and personas (MODELS_FILE, else the one OPENAI_* model)."""
        return self.models.catalogue

    def _models_and_money(self, settings: Settings, rules: str) -> Branches | None:
        """The branches' choice of models and personas (``None`` with only the OPENAI_*
        settings: nothing to choose, every turn runs as before), ``rules`` after every
        root prompt; and the daily spend alert to the owners (DAILY_SPEND_ALERT_USD)."""
        if settings.daily_spend_alert_usd:
            alert = SpendAlert(
                self.redis, self.accounting, limit_usd=settings.daily_spend_alert_usd,
                tell=lambda text: self._tell_owners(settings, text),
            )  # fmt: skip
            self.accounting.on_spent = alert.spent
        if self.catalogue.path is None:
            return None
        return Branches(
            self.redis, self.store, self.models,
            system_prompt=settings.resolved_system_prompt() + rules,
            summary_model=settings.summary_model, rules=rules,
        )  # fmt: skip

    async def _tell_owners(self, settings: Settings, text: str) -> None:
        """A message to each owner (OWNER_USER_IDS) in their private chat with the bot."""
        if not settings.owner_user_ids:
            log.warning("no OWNER_USER_IDS to tell: %s", text)
        for owner in settings.owner_user_ids:
            send = partial(self.out.send_text, owner, text, reply_to=None, thread_id=None)
            self.notifier.run(send, name=f"alert-{owner}", chat_id=owner)

    @staticmethod
    def _metrics(settings: Settings) -> Metrics:
        """Prometheus metrics with METRICS_LISTEN; else nothing is recorded (and the
        client library is not imported)."""
        if not settings.metrics_listen:
            return Metrics()
        from .prometheus import PrometheusMetrics  # noqa: PLC0415

        return PrometheusMetrics()

    def _metrics_server(
        self, settings: Settings, outages: dict[str, Outage]
    ) -> MetricsServer | None:
        """``/metrics`` and ``/healthz`` on METRICS_LISTEN, else None."""
        address = settings.metrics_listen_address
        if address is None:
            return None
        from .prometheus import Health, MetricsServer, PrometheusMetrics  # noqa: PLC0415

        assert isinstance(self.metrics, PrometheusMetrics)  # see _metrics
        health = Health(redis_ping=self.redis.ping, telegram_ping=self.bot.get_me, outages=outages)
        return MetricsServer(self.metrics, health, address)

    @staticmethod
    def _routers(settings: Settings) -> list[Router]:
        """The bot's routers; the viewer's "continue here" link before /start's own handler."""
        first = [continue_router(AccessControl(settings.allowed_user_ids))]
        return [*(first if settings.webapp_url else []), build_router(settings.allowed_user_ids)]

    def _servers(self, settings: Settings) -> tuple[WebhookServer | None, ViewerServer | None]:
        """The webhook's server (webhook mode) and the thread viewer's (WEBAPP_URL set)
        when it has one of its own (it may share the webhook's or the metrics' address)."""
        webhook = self._webhook_server(settings)
        if not settings.webapp_url:
            return webhook, None
        from .webapp.server import Sources, serve  # noqa: PLC0415 (aiohttp's server: only when on)

        sources = Sources(self.bot, self.redis, self.store, self.accounting.prices,
                          settings.model_audit_days)  # fmt: skip
        shared = webhook.app if webhook else None
        return webhook, serve(settings, sources, webhook=shared, metrics=self.metrics_server)

    def _poller(self, settings: Settings) -> Poller:
        """Polls Telegram while this process holds the poller lease (polling mode)."""
        lease = Lease(
            self.redis,
            keys.POLLER_LEASE,
            settings.bot_instance,
            lease_ms=min(POLLER_LEASE_MS, lease_ms(settings)),
        )
        return Poller(
            self.dispatcher, lease, self._start_polling, stop_timeout=settings.shutdown_timeout
        )

    def _webhook_server(self, settings: Settings) -> WebhookServer | None:
        """The webhook's HTTP server in webhook mode (WEBHOOK_URL set), else None."""
        if not (settings.webhook_url and settings.webhook_secret):
            return None
        # aiohttp's server and aiogram's webhook handler: imported only in webhook mode
        from .chat.webhook import WebhookServer  # noqa: PLC0415

        return WebhookServer(
            self.dispatcher,
            self.bot,
            url=settings.webhook_url,
            secret=settings.webhook_secret.get_secret_value(),
            listen=settings.webhook_listen_address,
        )

    async def check(self) -> None:
        """Reach Redis (holding a key layout this bot knows) and Telegram before polling;
        one clear line when they are wrong."""
        where = redis_location(self.settings.redis_url)
        server = self.settings.telegram_api_url
        try:
            await self._startup_step(
                f"cannot reach Redis at {where}: start it (`make run` starts a local one) "
                "or set REDIS_URL",
                lambda: check_layout(self.redis, claim=True),  # its round trip reaches Redis
                (StoreUnavailableError,),
            )
        except UnknownLayoutError as exc:
            raise StartupError(str(exc)) from None
        try:
            await self._startup_step(
                f"cannot reach the Telegram Bot API at {server}",
                self.bot.me,  # cached: the one getMe before polling
                (TelegramNetworkError, TelegramServerError),
            )
        except TelegramUnauthorizedError:
            raise StartupError(
                "TELEGRAM_BOT_TOKEN was rejected by Telegram (401 Unauthorized): "
                "copy the token again from @BotFather"
            ) from None
        except (BadResponseError, UnreadableResultError) as exc:
            raise StartupError(
                f"the Bot API server at {server} answered getMe with something this bot "
                f"cannot read: {exc.message}; check TELEGRAM_API_URL"
            ) from None
        except UnknownMethodError as exc:
            raise StartupError(
                f"the Bot API server at {server} lacks getMe ({exc.message}); check "
                "TELEGRAM_API_URL"
            ) from None
        me = await self.bot.me()
        log.info("connected as @%s; Redis at %s; model %s", me.username, where, self.model.model)

    async def _startup_step(
        self,
        what: str,
        call: Callable[[], Awaitable[object]],
        transient: tuple[type[Exception], ...],
    ) -> None:
        def warn(exc: BaseException) -> None:
            log.warning("%s (%s); retrying", what, type(exc).__name__)

        try:
            await retrying(
                call, on=transient, within=STARTUP_PATIENCE, until=self.stopping, on_retry=warn
            )
        except transient as exc:
            detail = getattr(exc, "message", None) or str(exc)
            raise StartupError(f"{what}: {detail}") from None

    async def run(self, *, install_signals: bool = True) -> int:
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, sig.name)
        relaying: asyncio.Task[None] | None = None
        setting_up: asyncio.Task[None] | None = None
        loading: asyncio.Task[None] | None = None
        sweeping: asyncio.Task[None] | None = None
        try:
            await self._serve_metrics()
            await self._serve_viewer()
            await self.check()
            if self.webhook is None:
                # beside polling, never before it: neither call is needed to take updates
                setting_up = asyncio.create_task(self._prepare_polling(), name="set-up")
            else:
                await self._prepare_webhook(self.webhook)
            receiving = asyncio.create_task(self._receive())
            # the model SDK's import, off the event loop, once updates are being taken in
            loading = asyncio.create_task(asyncio.to_thread(_settle), name="load-sdk")
            if self.tools is not None:
                # updates are taken in meanwhile; turns wait for the tools (a server that
                # fails is logged and skipped)
                await self.tools.start()
                if self.tools.spec_bytes:
                    self.context.reserve(estimate_text(self.tools.spec_bytes.decode()))
            self.runner.start()
            relaying = asyncio.create_task(self.stops.run(self.stopping), name="stop-relay")
            if self.sweep is not None:
                sweeping = asyncio.create_task(self.sweep.run(self.stopping), name="cold-sweep")
            stop = asyncio.create_task(self.stopping.wait())
            done, _ = await asyncio.wait({receiving, stop}, return_when=asyncio.FIRST_COMPLETED)
            if receiving in done:
                stop.cancel()
                receiving.result()  # polling ended on its own: surface why
            await receiving
            await self.runner.drain(self.settings.shutdown_timeout)
            await self.notifier.drain(1.0)
            log.info("stopped cleanly")
            return 0
        finally:
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            for task in (relaying, setting_up, loading, sweeping):
                if task is not None:
                    await cancel_until_done(task)
            await self.close()

    async def _serve_metrics(self) -> None:
        if self.metrics_server is not None:
            try:
                await self.metrics_server.start()
            except OSError as exc:
                raise StartupError(
                    f"METRICS_LISTEN: cannot listen on {self.settings.metrics_listen} "
                    f"({exc.strerror or type(exc).__name__}); choose a free host:port"
                ) from None

    async def _serve_viewer(self) -> None:
        if self.viewer is not None:
            try:
                await self.viewer.start()
            except OSError as exc:
                raise StartupError(
                    f"WEBAPP_LISTEN: cannot listen on {self.settings.webapp_listen} "
                    f"({exc.strerror or type(exc).__name__}); choose a free host:port"
                ) from None

    async def _receive(self) -> None:
        """Take updates until stopping: serve the webhook, or poll when this process may."""
        if self.webhook is None:
            await self.poller.run(self.stopping)
            return
        try:
            await self.stopping.wait()
        finally:
            await self.webhook.stop()

    async def _prepare_webhook(self, webhook: WebhookServer) -> None:
        """Register WEBHOOK_URL with Telegram and listen on WEBHOOK_LISTEN (both must work)."""
        url, secret = self.settings.webhook_url, self.settings.webhook_secret
        assert url is not None and secret is not None  # checked with the settings
        try:
            await self._startup_step(
                "cannot register the webhook with Telegram",
                lambda: self.bot.set_webhook(
                    url,
                    secret_token=secret.get_secret_value(),
                    allowed_updates=self.dispatcher.resolve_used_update_types(),
                    drop_pending_updates=False,
                ),
                (TelegramNetworkError, TelegramServerError),
            )
        except TelegramBadRequest as exc:
            raise StartupError(
                f"the Bot API server refused WEBHOOK_URL: {exc.message}; "
                f"{webhook_rule(self.settings.telegram_api_url)}"
            ) from None
        await self._set_up(self._profile())
        try:
            await webhook.start()
        except OSError as exc:
            raise StartupError(
                f"cannot listen on WEBHOOK_LISTEN {self.settings.webhook_listen}: "
                f"{exc.strerror or exc}"
            ) from None

    def _start_polling(self) -> Coroutine[Any, Any, None]:
        return self.dispatcher.start_polling(
            self.bot,
            # one update at a time: the handler stores the message in the
            # intake stream before aiogram confirms the update to Telegram
            handle_as_tasks=False,
            handle_signals=False,
            close_bot_session=False,
            allowed_updates=self.dispatcher.resolve_used_update_types(),
        )

    async def _prepare_polling(self) -> None:
        """Drop a webhook (polling needs none) and set up the bot's profile (the commands
        menu, the topic sidebar), beside polling: a partial or failing Bot API server
        never delays it. The webhook goes first: while one is set, Telegram answers
        getUpdates 409, which aiogram's polling retries.
        """
        await self._set_up(
            [
                ("delete the webhook", lambda: self.bot.delete_webhook(drop_pending_updates=False)),
                *self._profile(),
            ]
        )

    def _profile(self) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
        """The set-up calls of the bot's profile: the commands menu, and with
        TOPIC_THREADS the topic sidebar (bot/chat/sidebar.py)."""
        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("register the commands", lambda: sync_menu(self.bot, payments=bool(self.stars))),
        ]
        if self.settings.topic_threads:
            steps.append(("list the topics in the sidebar", lambda: show_topic_sidebar(self.bot)))
        return steps

    @staticmethod
    async def _set_up(steps: list[tuple[str, Callable[[], Awaitable[object]]]]) -> None:
        """Set-up calls, one after the other. None is needed to answer messages, so a
        failure is one warning line (a method the server lacks: the session's line); each
        call is waited for SETUP_TIMEOUT seconds at most."""
        for what, call in steps:
            try:
                async with asyncio.timeout(SETUP_TIMEOUT):
                    await call()
            except TimeoutError:
                log.warning("could not %s: no answer within %.0f s", what, SETUP_TIMEOUT)
            except UnknownMethodError:
                pass  # the session's one line says what is missing
            except Exception as exc:
                detail = getattr(exc, "message", None) or type(exc).__name__
                log.warning("could not %s: %s", what, detail)

    def stop(self, reason: str = "stop") -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        log.info("%s: finishing answers in flight, taking no new messages", reason)
        self.stopping.set()

    async def close(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.viewer is not None:
            await self.viewer.stop()
        if self.tools is not None:
            await self.tools.close()
        if self.webhook is not None:
            await self.webhook.stop()
        await self.bot.session.close()
        await self.models.close()
        await self.transcriber.close()
        await self.redis.aclose()


def _settle() -> None:
    """Import the model SDK, then keep what start-up built out of the collector's sight.

    The imports leave hundreds of thousands of objects the collector tracks, which live
    as long as the process; every full collection walked them all (``python -m bench
    process`` shows the cost per turn). ``gc.freeze`` moves them to a generation the
    collector skips; objects made later are collected as before.
    """
    load_sdk()
    gc.freeze()


async def run(settings: Settings) -> int:
    return await App(settings).run()
