"""The viewer's JSON API over HTTP: who may read what, and what the tree looks like.

The real server (bot/webapp/server.py) on loopback, the real aiogram Bot asking
tests/fakes/telegram.py for group membership, a real Redis; ``initData`` is signed
in the test from the Bot API's description (tests/viewer_data.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiohttp import web
from redis.asyncio import Redis

from bot.ops import conversations
from bot.prometheus import Health, MetricsServer, PrometheusMetrics
from bot.settings import Settings, SettingsError
from bot.settings_load import load_settings
from bot.telegram.session import BotApiSession
from bot.usage.calls import Prices
from bot.webapp.auth import MEMBER_TTL, Access
from bot.webapp.server import CSP, Sources, ViewerApp, ViewerServer, serve
from bot.webapp.texts import ERRORS, PAGE
from bot.webapp.view import MAX_DETAILS
from transcript import TranscriptStore

from .fakes.telegram import FakeTelegram
from .harness import OTHER_USER, USER
from .viewer_data import MARKDOWN, XSS, Seeded, seed_chain, seed_tree, sign_init_data

GROUP = -1001234567890
OWNER = 4242
MAX_AGE = 3600


@dataclass
class Viewer:
    base: str
    http: aiohttp.ClientSession
    tg: FakeTelegram
    now: list[float]

    def init_data(
        self, user: int = USER, *, age: float = 0, token: str | None = None, language: str = "en"
    ) -> str:
        return sign_init_data(
            token or self.tg.token, user, int(self.now[0] - age), language=language
        )

    async def get(
        self, path: str, init_data: str | None, **query: Any
    ) -> tuple[int, dict[str, Any], aiohttp.ClientResponse]:
        headers = {} if init_data is None else {"Authorization": f"tma {init_data}"}
        async with self.http.get(self.base + path, params=query, headers=headers) as response:
            body = await response.read()
            return response.status, json.loads(body), response


@pytest.fixture
async def viewer(tg: FakeTelegram, redis: Redis, store: TranscriptStore) -> AsyncIterator[Viewer]:
    tg.add_group(GROUP, "Team")
    tg.add_member(GROUP, USER)
    tg.add_user(OWNER)
    bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
    now = [time.time()]
    sources = Sources(bot, redis, store, Prices(1.0, 0.5, 2.0), audit_days=7)
    app = ViewerApp(
        sources,
        Access(bot, owners=frozenset({OWNER})),
        url="https://viewer.example/tg/viewer/",
        max_age=MAX_AGE,
        clock=lambda: now[0],
    )
    server = ViewerServer(app, ("127.0.0.1", 0))
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Viewer(f"http://127.0.0.1:{server.port}/tg/viewer/", http, tg, now)
    finally:
        await server.stop()
        await bot.session.close()


@pytest.fixture
async def seeded(redis: Redis, store: TranscriptStore) -> Seeded:
    return await seed_tree(redis, store, USER, user=USER)


async def test_a_valid_caller_gets_the_skeleton_without_the_texts(
    viewer: Viewer, seeded: Seeded
) -> None:
    status, body, response = await viewer.get(
        "api/tree", viewer.init_data(), chat=USER, message=seeded.messages["xss"]
    )
    assert status == 200, body
    assert response.headers["Content-Security-Policy"] == CSP
    assert response.headers["Cache-Control"] == "no-store"
    nodes = body["nodes"]
    refs = [n["k"] for n in nodes]
    assert refs[0] == "0.0" and len(refs) == 8
    selected = nodes[body["selected"]]
    assert selected["k"] == seeded.refs["xss"] and selected["m"] == 6
    path, at = [], body["selected"]
    while at >= 0:
        path.append(nodes[at]["k"])
        at = nodes[at]["p"]
    names = {ref: name for name, ref in seeded.refs.items()}
    assert [names[r] for r in reversed(path)] == [
        "root", "hello", "hi", "ask_tool", "tool", "xss"
    ]  # fmt: skip
    by_ref = {n["k"]: n for n in nodes}
    assert by_ref[seeded.refs["tool"]]["r"] == "tool"
    assert by_ref[seeded.refs["tool"]]["t"] == "search()"
    assert by_ref[seeded.refs["hi"]]["f"]["text"].startswith("The user greeted")
    # usage: the call sent up to "search the web" made the tool round
    used = by_ref[seeded.refs["tool"]]["u"]
    assert used["model"] == "test-model" and used["tokens"] == 1500
    assert used["cost"] == pytest.approx((1000 * 1.0 + 200 * 0.5 + 300 * 2.0) / 1e6)
    # lazy: only first lines; the Markdown answer's later lines are not in the skeleton
    assert by_ref[seeded.refs["md"]]["t"] == MARKDOWN.splitlines()[0]
    assert "print('hi')" not in json.dumps(body)
    assert body["texts"] == dict(PAGE)
    assert body["links"] == {
        "continue": f"https://t.me/{viewer.tg.username}?start=reply-",
        "kind": "private",
    }


async def test_the_page_and_its_errors_speak_the_callers_language(
    viewer: Viewer, seeded: Seeded
) -> None:
    """initData's user.language_code picks the page's texts and the errors' (Japanese)."""
    status, body, _ = await viewer.get(
        "api/tree", viewer.init_data(language="ja"), chat=USER, message=seeded.messages["xss"]
    )
    assert status == 200, body
    assert body["texts"]["title"] == "会話ツリー"
    assert body["texts"].keys() == PAGE.keys()
    status, body, _ = await viewer.get(
        "api/tree", viewer.init_data(language="ja"), chat=USER, message=999999
    )
    assert (status, body) == (
        404,
        {"error": "そのメッセージは、このチャットに保存されたどの会話にも属していません。"},
    )


@pytest.mark.parametrize("case", ["missing", "no_scheme", "forged", "other_token", "expired"])
async def test_initdata_missing_forged_or_expired_is_401(
    viewer: Viewer, seeded: Seeded, case: str
) -> None:
    good = viewer.init_data()
    init_data = {
        "missing": None,
        "no_scheme": good,  # sent as "tma <data>" below only when it has the scheme
        "forged": good.replace("Ada", "Eve"),
        "other_token": viewer.init_data(token="654321:another-bots-token"),
        "expired": viewer.init_data(age=MAX_AGE + 5),
    }[case]
    headers = {"Authorization": init_data or ""} if case == "no_scheme" else None
    if headers is not None:
        async with viewer.http.get(
            viewer.base + "api/tree", params={"chat": USER, "message": 6}, headers=headers
        ) as response:
            status, body = response.status, await response.json()
    else:
        status, body, _ = await viewer.get("api/tree", init_data, chat=USER, message=6)
    assert status == 401
    key = {"missing": "missing", "no_scheme": "missing", "expired": "expired"}.get(case, "forged")
    assert body == {"error": ERRORS[key]}


async def test_initdata_from_the_future_or_without_user_is_401(
    viewer: Viewer, seeded: Seeded
) -> None:
    status, body, _ = await viewer.get("api/tree", viewer.init_data(age=-600), chat=USER, message=6)
    assert (status, body) == (401, {"error": ERRORS["expired"]})
    just_inside = viewer.init_data(age=MAX_AGE - 5)
    status, _, _ = await viewer.get("api/tree", just_inside, chat=USER, message=6)
    assert status == 200


async def test_another_users_private_chat_is_403_and_shows_nothing(
    viewer: Viewer, seeded: Seeded
) -> None:
    queries: list[tuple[str, dict[str, Any]]] = [
        ("api/tree", {"message": 6}),
        ("api/nodes", {"tree": seeded.tree, "ids": seeded.refs["md"]}),
        ("api/export", {"tree": seeded.tree, "node": seeded.refs["xss"]}),
    ]
    for path, query in queries:
        status, body, _ = await viewer.get(path, viewer.init_data(OTHER_USER), chat=USER, **query)
        assert (status, body) == (403, {"error": ERRORS["forbidden"]}), path


async def test_a_group_member_reads_it_a_non_member_does_not_and_answers_are_kept(
    viewer: Viewer, redis: Redis, store: TranscriptStore
) -> None:
    await seed_tree(redis, store, GROUP, user=USER)
    status, body, _ = await viewer.get("api/tree", viewer.init_data(USER), chat=GROUP, message=6)
    assert status == 200 and len(body["nodes"]) == 8
    assert body["links"] == {"continue": "https://t.me/c/1234567890/", "kind": "group"}
    status, body, _ = await viewer.get(
        "api/tree", viewer.init_data(OTHER_USER), chat=GROUP, message=6
    )
    assert (status, body) == (403, {"error": ERRORS["forbidden"]})
    asked = [c for c in viewer.tg.calls if c.method == "getChatMember"]
    assert len(asked) == 2
    for user in (USER, OTHER_USER):  # both answers are remembered for MEMBER_TTL
        await viewer.get("api/tree", viewer.init_data(user), chat=GROUP, message=6)
    assert len([c for c in viewer.tg.calls if c.method == "getChatMember"]) == 2
    assert MEMBER_TTL <= 120  # "cached briefly": someone who left loses access soon


async def test_owners_read_any_chat(viewer: Viewer, seeded: Seeded) -> None:
    status, body, _ = await viewer.get("api/tree", viewer.init_data(OWNER), chat=USER, message=6)
    assert status == 200 and body["nodes"][body["selected"]]["k"] == seeded.refs["xss"]


async def test_details_give_whole_messages_of_the_chats_own_nodes(
    viewer: Viewer, seeded: Seeded, redis: Redis, store: TranscriptStore
) -> None:
    ids = ",".join([seeded.refs["md"], seeded.refs["tool"], seeded.refs["xss"]])
    status, body, _ = await viewer.get(
        "api/nodes", viewer.init_data(), chat=USER, tree=seeded.tree, ids=ids
    )
    assert status == 200
    nodes = body["nodes"]
    assert nodes[seeded.refs["md"]] == [{"r": "assistant", "c": MARKDOWN}]
    assert nodes[seeded.refs["xss"]] == [{"r": "assistant", "c": XSS}]  # data, as it was
    call, result = nodes[seeded.refs["tool"]]
    assert call["calls"] == [{"id": "call_1", "name": "search", "args": '{"q": "weather"}'}]
    assert result == {"r": "tool", "c": "sunny, 21 °C", "name": "search", "id": "call_1"}
    # the same refs in OTHER_USER's own chat are OTHER_USER's nodes, never USER's
    await seed_chain(store, OTHER_USER, 12, text_chars=20)
    status, body, _ = await viewer.get(
        "api/nodes", viewer.init_data(OTHER_USER), chat=OTHER_USER, tree=1, ids=seeded.refs["md"]
    )
    assert status == 200 and "markdown" not in json.dumps(body).lower()


@pytest.mark.parametrize(
    ("query", "status", "key"),
    [
        ({"ids": "1.x"}, 400, "bad_request"),
        ({"ids": ""}, 400, "bad_request"),
        ({"ids": ",".join(f"0.{i}" for i in range(MAX_DETAILS + 1))}, 400, "bad_request"),
        ({"ids": "0.99"}, 404, "not_found"),
        ({"ids": "0.1", "tree": "x"}, 400, "bad_request"),
        ({"ids": "0.1", "tree": "77"}, 404, "not_found"),
    ],
)
async def test_damaged_or_unknown_detail_requests(
    viewer: Viewer, seeded: Seeded, query: dict[str, str], status: int, key: str
) -> None:
    params = {"chat": str(USER), "tree": str(seeded.tree), **query}
    got, body, _ = await viewer.get("api/nodes", viewer.init_data(), **params)
    assert (got, body) == (status, {"error": ERRORS[key]})


async def test_unknown_message_or_damaged_chat_is_a_clear_answer(
    viewer: Viewer, seeded: Seeded
) -> None:
    status, body, _ = await viewer.get("api/tree", viewer.init_data(), chat=USER, message=999)
    assert (status, body) == (404, {"error": ERRORS["not_found"]})
    status, body, _ = await viewer.get("api/tree", viewer.init_data(), chat="me", message=1)
    assert (status, body) == (400, {"error": ERRORS["bad_request"]})


async def test_export_is_the_export_commands_markdown(
    viewer: Viewer, seeded: Seeded, redis: Redis, store: TranscriptStore
) -> None:
    status, body, _ = await viewer.get(
        "api/export", viewer.init_data(), chat=USER, tree=seeded.tree, node=seeded.refs["xss"]
    )
    assert status == 200
    command = await conversations.export(redis, store, USER, seeded.messages["xss"])
    title, _, rest = body["markdown"].partition("\n")
    assert rest == command.partition("\n")[2]  # the same renderer; the title names the node
    assert title == f"# Conversation in chat {USER}, up to node {seeded.refs['xss']}"
    assert body["name"] == f"conversation-{USER}-{seeded.tree}-{seeded.refs['xss']}.md"
    assert "show me markdown" not in body["markdown"]  # only that branch


async def test_the_page_and_its_assets_carry_a_strict_policy(viewer: Viewer) -> None:
    for path, kind in [("", "text/html"), ("viewer.js", "text/javascript"),
                       ("viewer.css", "text/css")]:  # fmt: skip
        async with viewer.http.get(viewer.base + path) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith(kind)
            assert response.headers["Content-Security-Policy"] == CSP
            assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP
    async with viewer.http.get(viewer.base + "../etc/passwd") as response:
        assert response.status == 404
    async with viewer.http.get(viewer.base + "index.html") as response:
        assert response.status == 404  # only the page's own path and its two assets


async def test_a_thousand_node_tree_is_a_small_skeleton(
    viewer: Viewer, store: TranscriptStore
) -> None:
    """Texts of 2,000 characters each: 2 MB of messages, a skeleton of a fraction."""
    leaf = await seed_chain(store, USER, 1000, text_chars=2000)
    status, body, response = await viewer.get(
        "api/tree", viewer.init_data(), chat=USER, message=leaf
    )
    assert status == 200 and len(body["nodes"]) == 1000
    size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    assert size < 200_000, size  # about 170 B a node: the first 120 characters and ids
    assert max(len(n["t"]) for n in body["nodes"]) <= 120
    assert response.headers.get("Content-Encoding") in ("gzip", "deflate")  # compressed


def test_the_viewer_shares_the_webhook_or_metrics_address_when_told(
    tg: FakeTelegram,
) -> None:
    bot = Bot(tg.token)
    sources = Sources(bot, Redis(), TranscriptStore(Redis()), Prices(), audit_days=7)
    base: dict[str, Any] = {"telegram_bot_token": tg.token, "openai_api_key": "k",
            "webapp_url": "https://v.example/view/"}  # fmt: skip
    shared = web.Application()
    settings = Settings(_env_file=None, webapp_listen="127.0.0.1:8080", **base)  # type: ignore[call-arg]
    assert serve(settings, sources, webhook=shared) is None
    assert any(
        r.resource and r.resource.canonical == "/view/api/tree" for r in shared.router.routes()
    )
    metrics = MetricsServer(
        PrometheusMetrics(),
        Health(redis_ping=bot.get_me, telegram_ping=bot.get_me, outages={}),
        ("0.0.0.0", 9108),
    )
    settings = Settings(
        _env_file=None, webapp_listen="0.0.0.0:9108", metrics_listen=":9108", **base
    )  # type: ignore[call-arg]
    assert serve(settings, sources, metrics=metrics) is None and len(metrics.mounts) == 1
    settings = Settings(_env_file=None, **base)  # type: ignore[call-arg]
    own = serve(settings, sources, webhook=shared, metrics=metrics)
    assert own is not None and (own.host, own.port) == ("127.0.0.1", 8081)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "WEBAPP_URL",
            "http://viewer.example/",
            "WEBAPP_URL is invalid: must be the public https://",
        ),
        ("WEBAPP_URL", "https://viewer.example/?a=1", "without ?query or #fragment"),
        (
            "WEBAPP_LISTEN",
            "8081",
            "WEBAPP_LISTEN is invalid: must be host:port, e.g. 127.0.0.1:8081",
        ),
        ("WEBAPP_AUTH_MAX_AGE", "0", "WEBAPP_AUTH_MAX_AGE is invalid"),
    ],
)
def test_bad_viewer_settings_get_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_settings(env_file=None)
    assert says in str(raised.value) and "\n" not in str(raised.value)
