"""Webhook mode: Telegram POSTs updates to WEBHOOK_URL; this process serves them.

aiogram's aiohttp integration (:class:`SimpleRequestHandler`) checks the
``X-Telegram-Bot-Api-Secret-Token`` header: a request without the right secret
gets 401 and never reaches a handler. Unlike aiogram's default, a request is
answered only after its update went through the handlers, so the message is
in the durable intake before Telegram gets its 200 (a crash after the 200
loses nothing; a crash or an unreachable Redis before it means no 200, and
Telegram delivers the update again). aiogram's own webhook path answers 200
after 55 s even if the handler has not finished; this one never does.
Several processes behind a load balancer may serve the same URL: whichever
receives an update records it, and any process runs its turn.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from aiogram import Bot, Dispatcher
from aiogram.webhook.aiohttp_server import SimpleRequestHandler
from aiohttp import web

from ..http_site import open_site

log = logging.getLogger("replychain.webhook")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: Seconds requests in progress get at shutdown (storing an update takes milliseconds).
STOP_TIMEOUT = 5.0


class DurableRequestHandler(SimpleRequestHandler):
    """Answers 200 only once the update went through the handlers (into the intake)."""

    async def handle(self, request: web.Request) -> web.Response:
        if not self.verify_secret(request.headers.get(SECRET_HEADER, ""), self.bot):
            return web.Response(text="Unauthorized", status=401)
        try:
            update = await request.json(loads=self.bot.session.json_loads)
        except ValueError:
            return web.Response(text="Bad Request: the body is not JSON", status=400)
        if not isinstance(update, dict) or "update_id" not in update:
            return web.Response(text="Bad Request: not an update", status=400)
        await self.dispatcher.feed_raw_update(self.bot, update, **self.data)
        return web.json_response({})


def webhook_path(url: str) -> str:
    """The path of WEBHOOK_URL, served locally (a reverse proxy forwards to it)."""
    return urlsplit(url).path or "/"


class WebhookServer:
    """The HTTP server of webhook mode."""

    def __init__(
        self, dispatcher: Dispatcher, bot: Bot, *, url: str, secret: str, listen: tuple[str, int]
    ) -> None:
        handler = DurableRequestHandler(
            dispatcher, bot, handle_in_background=False, secret_token=secret
        )
        self.app = web.Application()
        # not handler.register(): that would close the bot's session with the server
        self.app.router.add_post(webhook_path(url), handler.handle)
        self.listen = listen
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on WEBHOOK_LISTEN; OSError when the address cannot be bound."""
        host, port = self.listen
        self._runner, port = await open_site(
            self.app, host, port, shutdown_timeout=STOP_TIMEOUT, handler_cancellation=True
        )
        log.info("serving the webhook on %s:%d", host, port)

    async def stop(self) -> None:
        """Stop taking requests; one still waiting for Redis is cut off (not answered 200)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
