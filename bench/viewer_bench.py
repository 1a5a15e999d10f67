"""The thread viewer: how fast a big tree opens in headless Chromium, and its API.

Trees of 100 and 1,000 nodes (a main chain with a side branch every tenth node,
2,000 characters a message) are stored in a private redis-server and served by
the real viewer server (bot/webapp/server.py); Debian's chromium (``make
chromium``) opens the page on a phone-sized screen with signed launch
parameters, each time in a fresh context (nothing cached). "Open" is the time
from navigation start until the tree is drawn (the page's ``tree-ready`` mark;
the wall time around it as Playwright sees it beside it; "data in" is when the
skeleton had arrived, its ``tree-fetched`` mark). The floor is the same
browser opening a static page of as many rows, already rendered by the server,
with the viewer's stylesheet: what any page of that size costs. The API table
puts the skeleton request beside ``/tree``'s text renderer on the same tree.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from collections.abc import Awaitable, Callable
from html import escape
from urllib.parse import quote

import aiohttp
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiohttp import web
from playwright.async_api import Browser, ViewportSize, async_playwright
from redis.asyncio import Redis

from bot.data.connection import connect
from bot.ops import conversations
from bot.telegram.session import BotApiSession
from bot.usage.calls import Prices
from bot.webapp.auth import Access
from bot.webapp.server import Sources, ViewerApp, ViewerServer
from tests.fakes.telegram import FakeTelegram
from tests.viewer_data import seed_chain, sign_init_data
from transcript import TranscriptStore

from .common import median, percentile, progress, redis_server, table

SIZES = (100, 1000)
RUNS = 7
TEXT_CHARS = 2000
PHONE: ViewportSize = {"width": 390, "height": 844}
USER = 1001


def _floor_page(rows: int) -> bytes:
    """A static page of ``rows`` rows shaped like the viewer's, already rendered."""
    body = "".join(
        f'<article class="node"><button class="head"><span class="role">User</span>'
        f'<span class="line">{escape(f"{i}: lorem ipsum dolor sit amet")}</span>'
        f'<span class="meta">depth {i}</span></button></article>'
        for i in range(rows)
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" '
        f'href="viewer.css"></head><body><main id="tree"><div class="run">{body}</div>'
        "</main></body></html>"
    ).encode()


async def run() -> str:
    chromium = shutil.which("chromium")
    with redis_server() as server:
        redis = connect(server.url)
        store = TranscriptStore(redis)
        async with FakeTelegram() as tg:
            tg.add_private_chat(USER)
            leaves = {}
            for chat, size in enumerate(SIZES, USER):
                tg.add_private_chat(chat)
                leaves[size] = (chat, await seed_chain(store, chat, size, text_chars=TEXT_CHARS))
            bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
            sources = Sources(bot, redis, store, Prices(), audit_days=7)
            app = ViewerApp(sources, Access(bot, owners=frozenset(range(USER, USER + 9))),
                            url="https://viewer.example/v/", max_age=3600)  # fmt: skip
            viewer = ViewerServer(app, ("127.0.0.1", 0))
            for size in SIZES:
                viewer.web.router.add_get(f"/v/floor-{size}", _floor_handler(_floor_page(size)))
            await viewer.start()
            base = f"http://127.0.0.1:{viewer.port}/v/"
            try:
                api = await _api(base, token=tg.token, redis=redis, store=store, leaves=leaves)
                browser = (
                    await _browser(chromium, base, tg.token, leaves)
                    if chromium
                    else "viewer in Chromium: skipped (no chromium: `make chromium`)\n"
                )
            finally:
                await viewer.stop()
                await bot.session.close()
        await redis.aclose()
    return api + "\n" + browser


def _floor_handler(page: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html")

    return handle


async def _api(
    base: str,
    *,
    token: str,
    redis: Redis,
    store: TranscriptStore,
    leaves: dict[int, tuple[int, int]],
) -> str:
    rows = []
    async with aiohttp.ClientSession() as http:
        for size, (chat, leaf) in leaves.items():
            progress(f"viewer: API on {size} nodes")
            headers = {"Authorization": f"tma {sign_init_data(token, chat, int(time.time()))}"}
            times, raw = [], b""
            for _ in range(RUNS):
                started = time.perf_counter()
                async with http.get(
                    base + "api/tree", params={"chat": chat, "message": leaf}, headers=headers
                ) as response:
                    raw = await response.read()
                    assert response.status == 200, raw[:200]
                times.append((time.perf_counter() - started) * 1000)
            text_times = []
            for _ in range(RUNS):
                started = time.perf_counter()
                await conversations.tree(redis, store, chat, leaf)
                text_times.append((time.perf_counter() - started) * 1000)
            nodes = len(json.loads(raw)["nodes"])
            rows.append([
                nodes, median(times), percentile(times, 95), len(raw) // 1024,
                len(gzip.compress(raw)) // 1024, median(text_times),
            ])  # fmt: skip
    return table(
        f"viewer API: the skeleton over HTTP (median of {RUNS}), beside /tree's text renderer",
        ["nodes", "skeleton ms", "p95 ms", "JSON KB", "gzip KB", "/tree text ms"],
        rows,
    )


async def _browser(chromium: str, base: str, token: str, leaves: dict[int, tuple[int, int]]) -> str:
    args = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ]  # fmt: skip
    rows = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=args)
        try:
            for size, (chat, leaf) in leaves.items():
                progress(f"viewer: opening {size} nodes in Chromium")
                fetched, ready, wall, floor = [], [], [], []
                for _ in range(RUNS):
                    signed = sign_init_data(token, chat, int(time.time()))
                    launch = f"tgWebAppData={quote(signed, safe='')}"
                    url = f"{base}?tgWebAppStartParam={chat}_{leaf}#{launch}"
                    data, drawn, seconds = await _open(browser, url, "html[data-ready='true']")
                    fetched.append(data)
                    ready.append(drawn)
                    wall.append(seconds)
                    *_, seconds = await _open(browser, f"{base}floor-{size}", "#tree")
                    floor.append(seconds)
                rows.append([
                    size, median(fetched), median(ready), max(ready), median(wall), median(floor)
                ])  # fmt: skip
        finally:
            await browser.close()
    return table(
        f"viewer in headless Chromium, phone-sized, fresh context each (median of {RUNS}; "
        "floor: a static page of as many rows)",
        ["nodes", "data in ms", "open ms", "max ms", "wall ms", "floor wall ms"],
        rows,
    )


async def _open(browser: Browser, url: str, ready: str) -> tuple[float, float, float]:
    """(the page's tree-fetched and tree-ready marks in ms from navigation start, 0
    where it has none; wall ms from goto to ``ready``)."""
    context = await browser.new_context(viewport=PHONE)
    page = await context.new_page()
    await page.route(
        "**/*",
        lambda route: route.continue_() if "127.0.0.1" in route.request.url else route.abort(),
    )
    try:
        started = time.perf_counter()
        await page.goto(url)
        await page.wait_for_selector(ready)
        wall = (time.perf_counter() - started) * 1000
        fetched, drawn = await page.evaluate(
            "['tree-fetched', 'tree-ready'].map("
            "n => (performance.getEntriesByName(n)[0] || {startTime: 0}).startTime)"
        )
        return float(fetched), float(drawn), wall
    finally:
        await context.close()
