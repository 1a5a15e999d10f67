"""The viewer in a real browser: Debian's headless Chromium, driven by Playwright.

The page is served by the real server (bot/webapp/server.py) from a tree stored in
a redis-server of this module's own. The browser, the server and the tests share
one event loop for the session (Playwright's async API), so that the browser is
started once. Launch parameters are signed as
Telegram signs them and passed in the URL fragment, as Telegram passes them.
Nothing leaves the machine: every request not to the test server is aborted
(Telegram's telegram-web-app.js among them: the page works without it), except
where a test serves a stand-in for that script. One browser for the session; each
test a fresh phone-sized context. Screenshots go to ``tests/artifacts/viewer/``.

`make test` installs the browser (`make chromium`: Debian's ``chromium`` package).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
import pytest_asyncio
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from playwright.async_api import Browser, Page, Route, ViewportSize, async_playwright

from bot.data.connection import connect
from bot.telegram.session import BotApiSession
from bot.usage.calls import Prices
from bot.webapp.auth import Access
from bot.webapp.server import Sources, ViewerApp, ViewerServer
from bot.webapp.texts import ERRORS, PAGE
from transcript import TranscriptStore

from .fakes.telegram import FakeTelegram
from .harness import ROOT, USER
from .redis_server import RedisServer
from .viewer_data import SUMMARY, XSS, Seeded, seed_tree, sign_init_data

ARTIFACTS = ROOT / "tests" / "artifacts" / "viewer"
PHONE: ViewportSize = {"width": 390, "height": 844}
#: Chromium flags that work in a container as root without a GPU or a network.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
LIGHT = {"bg_color": "#ffffff", "text_color": "#000000", "button_color": "#3390ec",
         "secondary_bg_color": "#f1f1f1", "hint_color": "#707579"}  # fmt: skip
DARK = {"bg_color": "#212121", "text_color": "#ffffff", "button_color": "#8774e1",
        "secondary_bg_color": "#181818", "hint_color": "#aaaaaa"}  # fmt: skip
TIMEOUT_MS = 10_000

pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.asyncio(loop_scope="session")]


class Stage:
    """The viewer's server, a Bot API test server and a stored tree."""

    def __init__(self, base: str, token: str, seeded: Seeded) -> None:
        self.base = base
        self.token = token
        self.seeded = seeded

    def url(self, *, theme: dict[str, str] | None = None, age: float = 0, data: bool = True) -> str:
        """The page as Telegram opens it from the /tree button on the XSS answer."""
        assert self.seeded is not None
        launch = {"tgWebAppVersion": "9.0", "tgWebAppPlatform": "web"}
        if data:
            launch["tgWebAppData"] = sign_init_data(self.token, USER, int(time.time() - age))
        if theme is not None:
            launch["tgWebAppThemeParams"] = json.dumps(theme)
        start = urlencode({"tgWebAppStartParam": f"{USER}_{self.seeded.messages['xss']}"})
        return f"{self.base}?{start}#{urlencode(launch)}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stage(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stage]:
    redis_server = RedisServer(tmp_path_factory.mktemp("viewer-redis"))
    redis_server.start()
    try:
        async with FakeTelegram() as tg:
            tg.add_private_chat(USER, "Ada")
            redis = connect(redis_server.url)
            store = TranscriptStore(redis)
            seeded = await seed_tree(redis, store, USER, user=USER)
            bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
            sources = Sources(bot, redis, store, Prices(1.0, 0.5, 2.0), audit_days=7)
            app = ViewerApp(
                sources,
                Access(bot, owners=frozenset()),
                url="https://viewer.example/viewer/",
                max_age=3600,
            )
            server = ViewerServer(app, ("127.0.0.1", 0))
            await server.start()
            try:
                yield Stage(f"http://127.0.0.1:{server.port}/viewer/", tg.token, seeded)
            finally:
                await server.stop()
                await bot.session.close()
                await redis.aclose()
    finally:
        redis_server.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: `make chromium` installs Debian's package")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser, stage: Stage) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=PHONE)
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    local = stage.base.rsplit("/viewer/", 1)[0]

    async def only_local(route: Route) -> None:
        if route.request.url.startswith(local):
            await route.continue_()
        else:
            await route.abort()  # telegram.org's script and anything else: nothing leaves

    await page.route("**/*", only_local)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "Security Policy" in m.text else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    yield page
    await context.close()
    assert not problems, problems  # no CSP violation, no script error


async def opened(page: Page, url: str) -> Page:
    await page.goto(url)
    await page.wait_for_selector("html[data-ready]")
    return page


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def row(page: Page, stage: Stage, name: str) -> str:
    assert stage.seeded is not None
    return f'.node[data-ref="{stage.seeded.refs[name]}"]'


async def expand(page: Page, stage: Stage, name: str) -> None:
    selector = row(page, stage, name)
    await page.click(f"{selector} > .head")
    await page.wait_for_selector(f"{selector} > .body .actions")


@pytest.mark.parametrize(("scheme", "theme", "background"), [
    ("light", LIGHT, "rgb(255, 255, 255)"),
    ("dark", DARK, "rgb(33, 33, 33)"),
])  # fmt: skip
async def test_the_tree_opens_on_the_message_with_its_path_in_either_theme(
    page: Page, stage: Stage, scheme: str, theme: dict[str, str], background: str
) -> None:
    assert stage.seeded is not None
    await opened(page, stage.url(theme=theme))
    assert await page.get_attribute("html", "data-ready") == "true"
    assert await page.evaluate("typeof window.Telegram") == "undefined"  # its script never loaded
    assert await page.text_content("#title") == PAGE["title"]
    refs = stage.seeded.refs
    on_path = await page.eval_on_selector_all(".node.on-path", "els => els.map(e => e.dataset.ref)")
    path = ["root", "hello", "hi", "ask_tool", "tool", "xss"]
    assert on_path == [refs[n] for n in path]
    assert await page.eval_on_selector_all(
        ".node.selected", "els => els.map(e => e.dataset.ref)"
    ) == [refs["xss"]]
    assert await page.is_visible(row(page, stage, "xss"))
    # the other branch is drawn collapsed: its toggle, not its nodes
    assert await page.query_selector(row(page, stage, "ask_md")) is None
    toggles = await page.eval_on_selector_all(
        ".branch > .toggle", "els => els.map(e => e.textContent)"
    )
    assert [t.split(": ", 1)[1].split(" — ")[0] for t in toggles] == [
        "show me markdown", "search the web"
    ]  # fmt: skip
    meta = await page.text_content(f"{row(page, stage, 'tool')} .meta") or ""
    assert "test-model" in meta and "1500 tokens" in meta and "$0.0017" in meta
    assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == background
    assert await page.get_attribute("html", "data-scheme") == scheme
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await shot(page, f"tree-{scheme}")


async def test_a_node_expands_to_its_text_rendered_from_markdown(page: Page, stage: Stage) -> None:
    await opened(page, stage.url(theme=LIGHT))
    await page.click(".branch:not(.on-path) > .toggle")
    await expand(page, stage, "md")
    body = f"{row(page, stage, 'md')} > .body"
    assert await page.text_content(f"{body} strong") == "bold"
    assert await page.text_content(f"{body} em") == "italic"
    assert await page.text_content(f"{body} p code") == "code"
    assert await page.text_content(f"{body} pre code") == "print('hi')"
    items = await page.eval_on_selector_all(f"{body} ul li", "els => els.map(e => e.textContent)")
    assert items == ["one", "two"]
    await shot(page, "node-markdown")


async def test_a_tool_round_shows_the_call_and_its_result(page: Page, stage: Stage) -> None:
    await opened(page, stage.url(theme=LIGHT))
    await expand(page, stage, "tool")
    body = f"{row(page, stage, 'tool')} > .body"
    assert await page.text_content(f"{body} pre.call") == 'search({"q": "weather"})'
    assert "sunny, 21 °C" in (await page.text_content(body) or "")
    await shot(page, "tool-round")


async def test_the_fold_shows_its_summary_and_the_originals_on_a_tap(
    page: Page, stage: Stage
) -> None:
    await opened(page, stage.url(theme=LIGHT))
    assert await page.text_content(".fold h2") == PAGE["fold_title"]
    assert await page.text_content(".fold .summary") == SUMMARY
    assert not await page.is_visible(row(page, stage, "hello"))
    await page.click(".fold .toggle")
    assert await page.is_visible(row(page, stage, "hello")) and await page.is_visible(
        row(page, stage, "hi")
    )
    assert await page.eval_on_selector_all(".fold .originals .node", "els => els.length") == 2
    await shot(page, "fold-originals")


async def test_a_branch_exports_as_markdown(page: Page, stage: Stage) -> None:
    await opened(page, stage.url(theme=LIGHT))
    await expand(page, stage, "xss")
    await page.click(f'{row(page, stage, "xss")} [data-action="export"]')
    await page.wait_for_selector("#panel:not([hidden]) pre.export")
    text = await page.text_content("#panel pre.export") or ""
    assert text.startswith(f"# Conversation in chat {USER}, up to node ")
    assert "## User\n\nsearch the web" in text and "show me markdown" not in text
    assert await page.get_attribute("#panel-actions a[download]", "download", timeout=TIMEOUT_MS)
    await shot(page, "export")


async def test_a_script_in_a_message_stays_text(page: Page, stage: Stage) -> None:
    await opened(page, stage.url(theme=LIGHT))
    await expand(page, stage, "xss")
    body = f"{row(page, stage, 'xss')} > .body"
    assert "<script>window.__xss = 1</script>" in (await page.text_content(body) or "")
    assert await page.text_content(f"{row(page, stage, 'xss')} .line") == XSS.splitlines()[0]
    assert await page.eval_on_selector_all(f"{row(page, stage, 'xss')} img, .node script",
                                     "els => els.length") == 0  # fmt: skip
    assert await page.evaluate("window.__xss") is None
    await shot(page, "xss-inert")


async def test_the_page_uses_telegrams_script_when_it_is_there(page: Page, stage: Stage) -> None:
    """A stand-in for telegram-web-app.js: initData and the dark theme come from it."""
    init_data = json.dumps(sign_init_data(stage.token, USER, int(time.time())))
    stand_in = (
        f"window.Telegram = {{WebApp: {{initData: {init_data}, themeParams: {json.dumps(DARK)},"
        " colorScheme: 'dark', ready() { window.__ready = true; }, expand() {},"
        " onEvent() {}, openTelegramLink(url) { window.__opened = url; }, openLink() {}}};"
    )
    await page.route(
        "https://telegram.org/js/telegram-web-app.js",
        lambda route: route.fulfill(body=stand_in, content_type="text/javascript"),
    )
    await opened(page, stage.url(data=False))
    assert await page.get_attribute("html", "data-ready") == "true"
    assert await page.evaluate("window.__ready") is True
    assert (
        await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(33, 33, 33)"
    )
    await expand(page, stage, "xss")
    await page.click(f'{row(page, stage, "xss")} [data-action="continue"]')
    await page.click('#panel [data-action="open-chat"]')
    assert await page.evaluate("window.__opened") == "https://t.me/replychain_bot?start=reply-6"
    await shot(page, "telegram-script-dark")


async def test_an_expired_launch_says_so(page: Page, stage: Stage) -> None:
    await opened(page, stage.url(theme=LIGHT, age=7200))
    assert await page.text_content("#tree .error") == ERRORS["expired"]
    await shot(page, "expired")
