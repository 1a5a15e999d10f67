"""A loopback web server for the reading tests and bench: pages, a PDF, redirects, slow
and endless answers, and a SearXNG stand-in (``/search?q=…&format=json``).

Every request is recorded (:attr:`PageServer.requests`), so a test can say that a
refused fetch never reached it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from ..reading_files import text_pdf

ARTICLE_TEXT = (
    "The lighthouse keeper logged every ship that passed the headland, and in the winter "
    "of 1911 the log ran to four volumes. "
)
ARTICLE = (
    "<!DOCTYPE html><html><head><title>Keeper's log</title>"
    "<script>window.TRACKING_SCRIPT = 'should not be read';</script>"
    "<style>.nav { color: red }</style></head><body>"
    "<nav><a href='/'>Home</a> | <a href='/about'>About</a> | SITE_NAVIGATION</nav>"
    "<article><h1>The keeper's log</h1>" + f"<p>{ARTICLE_TEXT * 5}</p>" * 3 + "</article>"
    "<footer>FOOTER_COPYRIGHT 2026</footer></body></html>"
)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    query: dict[str, str] = field(default_factory=dict)


class PageServer:
    """``async with PageServer(host) as server``: ``server.url(path)``."""

    def __init__(self, host: str = "127.0.0.1", *, tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.tls = tls
        self.requests: list[Seen] = []
        #: What the SearXNG stand-in answers (its ``results``), and its status.
        self.search_results: list[dict[str, Any]] = []
        self.search_status = 200
        #: A redirect target for ``/away``.
        self.away = ""
        self.big = b""
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str, host: str | None = None) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    async def __aenter__(self) -> PageServer:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/article", self._article)
        app.router.add_get("/report.pdf", self._pdf)
        app.router.add_get("/download", self._download)
        app.router.add_get("/photo.png", self._png)
        app.router.add_get("/missing", self._missing)
        app.router.add_get("/away", self._away)
        app.router.add_get("/hop/{n}", self._hop)
        app.router.add_get("/cookie", self._cookie)
        app.router.add_get("/big", self._big)
        app.router.add_get("/endless", self._endless)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/search", self._search)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, ssl_context=self.tls)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append(Seen(request.path, dict(request.headers), dict(request.query)))
        response: web.StreamResponse = await handler(request)
        return response

    async def _article(self, request: web.Request) -> web.Response:
        return web.Response(text=ARTICLE, content_type="text/html", charset="utf-8")

    async def _pdf(self, request: web.Request) -> web.Response:
        pages = ["Report page one: the dam holds.", "Report page two: the river fell."]
        return web.Response(body=text_pdf(pages), content_type="application/pdf")

    async def _download(self, request: web.Request) -> web.Response:
        """The PDF as a server that does not know its type sends it."""
        pdf = text_pdf(["Downloaded: the minutes of the meeting."])
        return web.Response(body=pdf, content_type="application/octet-stream")

    async def _png(self, request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")

    async def _missing(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="no such page")

    async def _away(self, request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": self.away})  # as it is, bad or not

    async def _hop(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            raise web.HTTPFound("/article")
        raise web.HTTPFound(f"/hop/{n - 1}")

    async def _cookie(self, request: web.Request) -> web.Response:
        response = web.HTTPFound("/article")
        response.set_cookie("session", "s3cret")
        raise response

    async def _big(self, request: web.Request) -> web.Response:
        return web.Response(body=self.big, content_type="text/html")

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        chunk = b"endless " * 8192
        while True:  # until the client hangs up
            await response.write(chunk)

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="too late")

    async def _search(self, request: web.Request) -> web.Response:
        if self.search_status != 200:
            return web.Response(status=self.search_status, text="forbidden")
        body = {"query": request.query.get("q", ""), "results": self.search_results}
        return web.Response(text=json.dumps(body), content_type="application/json")

    def hits(self, path: str | None = None) -> int:
        """Requests that reached the server (to ``path``, or at all)."""
        return sum(1 for seen in self.requests if path is None or seen.path == path)
