"""The viewer's HTTP side: the page, its two assets and a small JSON API.

Paths follow ``WEBAPP_URL``: the page is served at its path, the assets and
the API beside it (``viewer.js``, ``viewer.css``, ``api/tree``, ``api/nodes``,
``api/export``), so a reverse proxy forwarding that path is all the set-up.
Every API call carries ``Authorization: tma <initData>`` and a ``chat``; the
caller is checked (:mod:`.auth`) before anything of the chat is read, and what
is read is read inside that chat's scope. Errors are JSON ``{"error": text}``
with 400 (a damaged request), 401 (no, a forged or an expired ``initData``),
403 (not the caller's chat), 404 (no such message or node) or 503 (Redis or
Telegram unreachable).

Every response carries a strict Content-Security-Policy: scripts only from this
server and telegram.org, no inline script or style, requests only to this server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiogram import Bot
from aiogram.exceptions import TelegramNetworkError, TelegramRetryAfter, TelegramServerError
from aiohttp import web
from redis.asyncio import Redis

from transcript import MissingNodeError, StoreUnavailableError, TranscriptError, TranscriptStore

from ..http_site import open_site
from ..settings import Settings
from ..usage.calls import Prices
from . import view
from .auth import Access, AuthError, Viewer, check_init_data
from .texts import error_text, page_texts

if TYPE_CHECKING:
    from ..prometheus import MetricsServer

log = logging.getLogger("replychain.webapp")

STATIC = Path(__file__).resolve().parent / "static"
#: The page's own files: name -> content type.
ASSETS = {
    "viewer.js": "text/javascript; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
}
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self' https://telegram.org",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        # Telegram's web clients show a Mini App in a frame; its apps in a web view
        "frame-ancestors 'self' https://web.telegram.org https://*.telegram.org",
    ]
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
#: Seconds a stop gives requests in progress.
STOP_TIMEOUT = 2.0
_TELEGRAM_DOWN = (TelegramNetworkError, TelegramServerError, TelegramRetryAfter)

Api = Callable[[web.Request, Viewer, int], Awaitable[dict[str, Any]]]


def page_paths(url: str) -> tuple[str, str]:
    """The page's path and the folder its assets and API are in, from WEBAPP_URL."""
    path = urlsplit(url).path or "/"
    return path, path[: path.rfind("/") + 1]


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    response = web.Response(
        text=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        status=status,
        content_type="application/json",
        headers={**HEADERS, "Cache-Control": "no-store"},
    )
    if len(response.text or "") > 1024:
        response.enable_compression()
    return response


def _int(request: web.Request, name: str) -> int:
    value = request.query.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise view.ViewError(400, "bad_request") from None


@dataclass(frozen=True, slots=True)
class Sources:
    """What the viewer reads: the bot (identity, membership), Redis and the store."""

    bot: Bot
    redis: Redis
    store: TranscriptStore
    prices: Prices
    audit_days: int


class ViewerApp:
    """The page and the API, installed on an aiohttp application."""

    def __init__(
        self,
        sources: Sources,
        access: Access,
        *,
        url: str,
        max_age: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sources = sources
        self.access = access
        self.page, self.folder = page_paths(url)
        self.max_age = max_age
        self.clock = clock
        self._files = {name: (STATIC / name).read_bytes() for name in ["index.html", *ASSETS]}

    def install(self, app: web.Application) -> None:
        """Add the viewer's routes to ``app``."""
        app.router.add_get(self.page, self._index)
        for name in ASSETS:
            app.router.add_get(self.folder + name, self._asset)
        app.router.add_get(self.folder + "api/tree", self._api(self._tree))
        app.router.add_get(self.folder + "api/nodes", self._api(self._nodes))
        app.router.add_get(self.folder + "api/export", self._api(self._export))

    async def _index(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=self._files["index.html"],
            content_type="text/html",
            charset="utf-8",
            headers={**HEADERS, "Cache-Control": "no-cache"},
        )

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        return web.Response(
            body=self._files[name],
            headers={**HEADERS, "Content-Type": ASSETS[name], "Cache-Control": "no-cache"},
        )

    def _api(self, handler: Api) -> Callable[[web.Request], Awaitable[web.Response]]:
        """A handler run only for a valid caller who may read the request's ``chat``."""

        async def run(request: web.Request) -> web.Response:
            language: str | None = None
            try:
                scheme, _, init_data = request.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "tma":
                    init_data = ""
                caller = check_init_data(
                    self.sources.bot.token, init_data.strip(), max_age=self.max_age,
                    now=self.clock(),
                )  # fmt: skip
                language = caller.language
                chat = _int(request, "chat")
                await self.access.check(caller.user_id, chat)
                return _json(await handler(request, caller, chat))
            except (AuthError, view.ViewError) as exc:
                return _json({"error": error_text(exc.key, language)}, exc.status)
            except MissingNodeError:
                return _json({"error": error_text("not_found", language)}, 404)
            except (StoreUnavailableError, *_TELEGRAM_DOWN) as exc:
                log.warning("viewer: %s unreachable (%s)", _what(exc), type(exc).__name__)
                return _json({"error": error_text("unavailable", language)}, 503)
            except TranscriptError as exc:
                log.warning("viewer: a thread could not be read: %s", exc)
                return _json({"error": error_text("unavailable", language)}, 503)

        return run

    async def _tree(self, request: web.Request, caller: Viewer, chat: int) -> dict[str, Any]:
        s = self.sources
        body = await view.skeleton(
            s.redis, s.store, chat_id=chat, message_id=_int(request, "message"),
            audit_days=s.audit_days, prices=s.prices,
        )  # fmt: skip
        body["texts"] = page_texts(caller.language)
        body["links"] = await self._links(chat)
        return body

    async def _nodes(self, request: web.Request, _caller: Viewer, chat: int) -> dict[str, Any]:
        refs = [r for r in request.query.get("ids", "").split(",") if r]
        return await view.details(self.sources.store, chat, _int(request, "tree"), refs)

    async def _export(self, request: web.Request, _caller: Viewer, chat: int) -> dict[str, Any]:
        s = self.sources
        tree, node = _int(request, "tree"), request.query.get("node", "")
        return await view.export(s.redis, s.store, chat, tree=tree, ref=node)

    async def _links(self, chat: int) -> dict[str, str]:
        """Where "continue here" leads: a deep link back to the private chat (its
        bot quotes the message), or the message itself in a supergroup."""
        if chat > 0:
            me = await self.sources.bot.me()
            return {"continue": f"https://t.me/{me.username}?start=reply-", "kind": "private"}
        if chat <= -1_000_000_000_000:  # a supergroup: t.me/c/<id without -100>/<message>
            return {"continue": f"https://t.me/c/{-chat - 1_000_000_000_000}/", "kind": "group"}
        return {"kind": "none"}


def _what(exc: BaseException) -> str:
    return "Redis" if isinstance(exc, StoreUnavailableError) else "Telegram"


class ViewerServer:
    """The viewer on an HTTP server of its own (WEBAPP_LISTEN)."""

    def __init__(self, app: ViewerApp, listen: tuple[str, int]) -> None:
        self.web = web.Application()
        app.install(self.web)
        self.host, self.port = listen
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on WEBAPP_LISTEN; OSError when the address cannot be bound."""
        self._runner, self.port = await open_site(
            self.web, self.host, self.port, shutdown_timeout=STOP_TIMEOUT
        )
        log.info("serving the thread viewer on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def serve(
    settings: Settings,
    sources: Sources,
    *,
    webhook: web.Application | None = None,
    metrics: MetricsServer | None = None,
) -> ViewerServer | None:
    """The viewer for WEBAPP_URL: on the webhook's or the metrics' server when
    WEBAPP_LISTEN is their address (None is returned), else on a server of its own."""
    assert settings.webapp_url is not None
    access = Access(sources.bot, owners=settings.owner_user_ids, allowed=settings.allowed_user_ids)
    app = ViewerApp(sources, access, url=settings.webapp_url, max_age=settings.webapp_auth_max_age)
    address = settings.webapp_listen_address
    if webhook is not None and address == settings.webhook_listen_address:
        app.install(webhook)
        return None
    if metrics is not None and address == settings.metrics_listen_address:
        metrics.mounts.append(app.install)
        return None
    return ViewerServer(app, address)
