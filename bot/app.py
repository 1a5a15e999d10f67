"""Wiring and lifecycle: build the parts, poll Telegram, shut down gracefully.

On SIGTERM or SIGINT the bot stops taking updates, gives in-flight answers
``SHUTDOWN_TIMEOUT`` seconds to finish, closes its connections and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from urllib.parse import urlsplit

from aiogram import Bot, Dispatcher
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramNetworkError,
    TelegramUnauthorizedError,
)
from redis.asyncio import Redis

from transcript import StoreUnavailableError, TranscriptStore, connect

from .accounting import Accounting, Clock, Prices, utc_now
from .context import ContextWindow
from .engine import Engine, Limits
from .handlers import COMMANDS, build_router
from .intake import Intake, Outage
from .journal import Journal
from .model import ModelClient
from .runner import TurnRunner
from .settings import Settings
from .telegram import FloodControl, LenientSession, SkipUnknownUpdates, TelegramOut

log = logging.getLogger("replychain")

STARTUP_ATTEMPTS = 3


class StartupError(Exception):
    """The bot cannot start; the message says what to fix (one line, no secrets)."""


def redis_location(url: str) -> str:
    """host:port of a Redis URL, never its credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


async def _retrying(what: str, attempt_once: object) -> None:
    assert callable(attempt_once)
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        try:
            await attempt_once()
            return
        except (StoreUnavailableError, TelegramNetworkError) as exc:
            if attempt == STARTUP_ATTEMPTS:
                raise StartupError(f"{what}: {exc}") from None
            log.warning("%s (attempt %d of %d); retrying", what, attempt, STARTUP_ATTEMPTS)
            await asyncio.sleep(float(attempt))


class App:
    """Every long-lived part of a running bot."""

    def __init__(self, settings: Settings, *, clock: Clock = utc_now) -> None:
        self.settings = settings
        session = LenientSession(api=TelegramAPIServer.from_base(settings.telegram_api_url))
        self.flood = FloodControl()
        session.middleware(self.flood)
        self.bot = Bot(settings.telegram_bot_token.get_secret_value(), session=session)
        self.redis: Redis = connect(settings.redis_url)
        self.store = TranscriptStore(self.redis, cache_bytes=settings.transcript_cache_bytes)
        self.model = ModelClient(
            api_key=settings.api_key(),
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
        )
        self.out = TelegramOut(self.bot)
        self.journal = Journal(self.redis)
        self.accounting = Accounting(
            self.redis,
            clock=clock,
            audit_days=settings.model_audit_days,
            prices=Prices(
                settings.price_input_per_mtok,
                settings.price_cached_input_per_mtok,
                settings.price_output_per_mtok,
            ),
        )
        self.context = ContextWindow.for_budget(
            self.store,
            self.model,
            self.accounting,
            budget=settings.context_token_budget,
            fold_at=settings.context_fold_at,
            keep_recent=settings.context_keep_recent,
            summary_tokens=settings.summary_max_tokens,
        )
        self.engine = Engine(
            self.store,
            self.model,
            self.out,
            self.journal,
            self.accounting,
            self.context,
            system_prompt=settings.resolved_system_prompt(),
            limits=Limits(
                max_input_chars=settings.max_input_chars,
                user_daily_tokens=settings.user_daily_token_limit,
                max_calls_per_turn=settings.turn_max_model_calls,
                max_tokens_per_turn=settings.turn_max_tokens,
            ),
        )
        self.intake = Intake(self.redis, settings.bot_instance, Outage())
        self.runner = TurnRunner(self.engine, self.intake, self.journal)
        self.dispatcher = Dispatcher()
        self.dispatcher.update.outer_middleware(SkipUnknownUpdates())
        self.dispatcher.include_router(build_router(settings.allowed_user_ids))
        self.dispatcher["runner"] = self.runner
        self.dispatcher["intake"] = self.intake
        self.dispatcher["out"] = self.out
        self.dispatcher["accounting"] = self.accounting
        self.dispatcher["store"] = self.store
        self.dispatcher["settings"] = settings
        self.stopping = asyncio.Event()

    async def check(self) -> None:
        """Reach Redis and Telegram before polling; clear errors when they are wrong."""
        where = redis_location(self.settings.redis_url)

        async def ping_redis() -> None:
            try:
                await self.redis.ping()
            except Exception as exc:
                raise StoreUnavailableError(type(exc).__name__) from None

        await _retrying(
            f"cannot reach Redis at {where}: start it (`make run` starts a local one) "
            "or set REDIS_URL",
            ping_redis,
        )

        async def get_me() -> None:
            try:
                await self.bot.get_me()
            except TelegramUnauthorizedError:
                raise StartupError(
                    "TELEGRAM_BOT_TOKEN was rejected by Telegram (401 Unauthorized): "
                    "copy the token again from @BotFather"
                ) from None

        await _retrying(
            f"cannot reach the Telegram Bot API at {self.settings.telegram_api_url}", get_me
        )
        me = await self.bot.me()
        log.info("connected as @%s; Redis at %s; model %s", me.username, where, self.model.model)

    async def run(self, *, install_signals: bool = True) -> int:
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, sig.name)
        try:
            await self.check()
            await self._prepare_polling()
            self.runner.start()
            polling = asyncio.create_task(
                self.dispatcher.start_polling(
                    self.bot,
                    # one update at a time: the handler stores the message in the
                    # intake stream before aiogram confirms the update to Telegram
                    handle_as_tasks=False,
                    handle_signals=False,
                    close_bot_session=False,
                    allowed_updates=self.dispatcher.resolve_used_update_types(),
                )
            )
            stop = asyncio.create_task(self.stopping.wait())
            done, _ = await asyncio.wait({polling, stop}, return_when=asyncio.FIRST_COMPLETED)
            if polling in done:
                polling.result()  # polling ended on its own: surface why
            with contextlib.suppress(RuntimeError):
                await self.dispatcher.stop_polling()
            await polling
            await self.runner.drain(self.settings.shutdown_timeout)
            log.info("stopped cleanly")
            return 0
        finally:
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            await self.close()

    async def _prepare_polling(self) -> None:
        """Drop a webhook (polling needs none) and register the commands menu.

        Neither is needed to answer messages, so a failure is only logged.
        """
        for what, call in (
            ("delete the webhook", self.bot.delete_webhook(drop_pending_updates=False)),
            ("register the commands", self.bot.set_my_commands(COMMANDS)),
        ):
            try:
                await call
            except TelegramAPIError as exc:
                log.warning("could not %s: %s", what, exc.message)

    def stop(self, reason: str = "stop") -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        log.info("%s: finishing answers in flight, taking no new messages", reason)
        self.runner.accepting = False
        self.stopping.set()

    async def close(self) -> None:
        await self.bot.session.close()
        await self.model.close()
        await self.redis.aclose()


async def run(settings: Settings) -> int:
    return await App(settings).run()
