"""Start-up: reach Redis and Telegram, then prepare to take updates.

Updates come by long polling (one process among several polls: the holder of the
poller lease, bot/chat/polling.py) or, with WEBHOOK_URL, by Telegram's POSTs to this
process's webhook server (bot/chat/webhook.py). Start-up checks Redis (and its key
layout) and Telegram with some patience, then registers the webhook or drops it and
sets up the bot's profile; a problem that stops the bot is one :class:`StartupError`
line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramServerError,
    TelegramUnauthorizedError,
)

from transcript import StoreUnavailableError

from .app_parts import Parts
from .chat.menu import sync_menu
from .chat.sidebar import show_topic_sidebar
from .data.layout import UnknownLayoutError, check_layout
from .retry import retrying
from .settings import webhook_rule
from .telegram.errors import UnknownMethodError
from .telegram.session import BadResponseError, UnreadableResultError

if TYPE_CHECKING:
    from .chat.webhook import WebhookServer

log = logging.getLogger("replychain")

#: How long start-up waits for Redis and Telegram while they are unreachable (a
#: Redis restarting, or started beside the bot): then it exits 1 with a clear line.
STARTUP_PATIENCE = 20.0
#: Longest one set-up call beside polling (deleteWebhook, setMyCommands) is waited for.
SETUP_TIMEOUT = 30.0


class StartupError(Exception):
    """The bot cannot start; the message says what to fix (one line, no secrets)."""


class Startup(Parts):
    """The parts, and their start: the checks and the set-up before updates are taken."""

    async def check(self) -> None:
        """Reach Redis (holding a key layout this bot knows) and Telegram before polling;
        one clear line when they are wrong."""
        where = self.settings.redis_location
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
