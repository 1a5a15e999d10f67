"""Building the parts of a running bot, bottom up, and wiring them together.

The parts: the Redis client and the transcript store; the edges (Telegram session
and sending, the model client); the message bus (intake stream, turn runner); usage
accounting; the turn engine, which the runner drives; the dispatcher and its routers;
the optional servers (webhook, thread viewer, metrics) and the poller. Building
connects to nothing: :mod:`bot.app_startup` reaches Redis and Telegram, :mod:`bot.app`
runs and stops the whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from aiogram import Bot, Dispatcher, Router
from aiogram.client.default import DefaultBotProperties
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode
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
from .chat.polling import Poller
from .chat.routers import AccessControl, SkipUnknownUpdates, build_router
from .chat.viewer import continue_router
from .data import keys
from .data.connection import connect
from .data.lease import Lease
from .data.sweep import ColdSweep
from .metrics import Metrics
from .model import ModelClient
from .model.transcribe import Transcriber
from .model.vision import Vision
from .payments import Stars
from .retry import Outage
from .settings import Settings
from .telegram.files import Files
from .telegram.notifier import Notifier
from .telegram.out import TelegramOut
from .telegram.outcomes import TelegramUnavailableError
from .telegram.session import BotApiSession, FloodControl
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

log = logging.getLogger("replychain")

#: The poller lease: a dead poller is replaced within about this long.
POLLER_LEASE_MS = 8000


def lease_ms(settings: Settings) -> int:
    """How long a turn's lease lasts: a share of TAKEOVER_SECONDS (bot/bus/runner.py)."""
    return int(settings.takeover_seconds * 1000 * LEASE_SHARE)


class Parts:
    """Every long-lived part of a running bot, built from the settings."""

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
            outputs=able.outputs,
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
