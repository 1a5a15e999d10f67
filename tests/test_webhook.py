"""Webhook mode with real ``python -m bot`` processes.

The fake Bot API server POSTs updates like Telegram to ``webhook_target``: the
bot's own listener, or a small round-robin proxy standing for the load
balancer in front of several processes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import ClientError, ClientSession, web
from redis.asyncio import Redis

from bot.data import keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotProcess, answers_to, env_for
from .redis_server import RedisServer, free_port
from .test_scale_e2e import add_users, answered_once, processes

SECRET = "s3cret-Token_for-tests"
URL = "https://bot.example.org/tg/hook"


def webhook_env(
    tg: FakeTelegram, llm: FakeOpenAI, redis_url: str, port: int, **extra: str
) -> dict[str, str]:
    return env_for(
        tg,
        llm,
        redis_url,
        WEBHOOK_URL=URL,
        WEBHOOK_SECRET=SECRET,
        WEBHOOK_LISTEN=f"127.0.0.1:{port}",
        TAKEOVER_SECONDS="3",
        **extra,
    )


def forged_update(update_id: int, chat: int = USER) -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": 9000 + update_id,
            "date": 1700000000,
            "chat": {"id": chat, "type": "private", "first_name": "Ada"},
            "from": {"id": chat, "is_bot": False, "first_name": "Ada"},
            "text": "forged",
        },
    }


async def post(url: str, body: object, secret: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    async with ClientSession() as http, http.post(url, data=json.dumps(body), headers=headers) as r:
        return r.status


async def listening(port: int, timeout: float = 90.0) -> None:  # noqa: ASYNC109
    """Wait until something accepts connections on the port."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


async def intake_empty(redis: Redis, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait until every intake entry was acknowledged (just after the last answer shows)."""
    async with asyncio.timeout(timeout):
        while await redis.xlen(keys.INTAKE_STREAM):  # noqa: ASYNC110 - Redis has no event
            await asyncio.sleep(0.05)


@asynccontextmanager
async def round_robin(backends: list[str]) -> AsyncIterator[str]:
    """A load balancer: each POST goes to the next backend; 502 when it is down."""
    turn = itertools.count()

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        target = backends[next(turn) % len(backends)] + request.path
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        try:
            async with http.post(target, data=body, headers=headers) as answer:
                return web.Response(body=await answer.read(), status=answer.status)
        except (ClientError, OSError):
            return web.Response(status=502, text="Bad Gateway")

    app = web.Application()
    app.router.add_post("/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    async with ClientSession() as http:
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def test_webhook_mode_answers_telegram_and_refuses_anyone_else(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    port = free_port()
    local = f"http://127.0.0.1:{port}/tg/hook"
    tg.webhook_target = local
    async with processes(webhook_env(tg, llm, redis_server.url, port), tmp_path, ["a"]) as bots:
        await tg.wait_for(lambda: bool(tg.webhook_url), 30, what="setWebhook")
        (registered,) = [call for call in tg.calls if call.method == "setWebhook"]
        assert registered.params["url"] == URL
        assert registered.params["secret_token"] == SECRET
        assert "message" in registered.params["allowed_updates"]
        message = tg.send_user_message(USER, USER, "hello over the webhook")["message_id"]
        await tg.wait_for(lambda: answered_once(tg, {USER: message}), 30, what="the answer")
        assert (answers_to(tg, USER, message)[0].text or "").startswith("[depth:2] ")

        await listening(port)
        requests = len(llm.requests)
        assert await post(local, forged_update(500), None) == 401
        assert await post(local, forged_update(501), "wrong-secret") == 401
        assert await post(local, forged_update(502), SECRET[:-1]) == 401
        assert await post(local, {"not": "an update"}, SECRET) == 400
        # a real update after them is answered: the forged ones never reached a turn
        again = tg.send_user_message(USER, USER, "still there?")["message_id"]
        await tg.wait_for(lambda: answered_once(tg, {USER: again}), 30, what="the answer")
        assert len(llm.requests) == requests + 1
        await intake_empty(redis)
        assert [m for m in tg.bot_messages(USER) if m.reply_to and m.reply_to > 9000] == []
        assert not [c for c in tg.calls if c.method == "getUpdates"]
        # Telegram never got a 401: its secret was right (0: before the bot listened)
        assert {status for _update, status in tg.webhook_deliveries} <= {0, 200}
    assert SECRET not in bots["a"].text
    assert "Traceback" not in bots["a"].text

    # without WEBHOOK_URL the bot polls again: it deletes the webhook first
    async with processes(env_for(tg, llm, redis_server.url), tmp_path, ["a"]):
        await tg.wait_for(lambda: tg.polling, 30, what="polling again")
        assert tg.webhook_url == ""
        back = tg.send_user_message(USER, USER, "polling now")["message_id"]
        await tg.wait_for(lambda: answered_once(tg, {USER: back}), 30, what="the answer")


async def test_webhook_without_a_secret_stops_startup_with_one_line(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    env = env_for(tg, llm, redis_server.url, WEBHOOK_URL=URL)
    process = BotProcess(env, tmp_path)
    await process.start()
    assert await process.wait(60) == 2
    assert "WEBHOOK_SECRET is not set" in process.text
    assert "Traceback" not in process.text
    assert not [c for c in tg.calls if c.method == "setWebhook"]


async def test_two_webhook_processes_answer_once_and_finish_a_killed_ones_turns(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    users = add_users(tg, 16)
    ports = {"a": free_port(), "b": free_port()}
    backends = [f"http://127.0.0.1:{port}" for port in ports.values()]
    async with round_robin(backends) as proxy:
        tg.webhook_target = proxy + "/tg/hook"
        bots: dict[str, BotProcess] = {}
        async with (
            processes(webhook_env(tg, llm, redis_server.url, ports["a"]), tmp_path, ["a"]) as a,
            processes(webhook_env(tg, llm, redis_server.url, ports["b"]), tmp_path, ["b"]) as b,
        ):
            bots = {**a, **b}
            for port in ports.values():
                await listening(port)
            first = {u: tg.send_user_message(u, u, f"hi {u}")["message_id"] for u in users}
            await tg.wait_for(lambda: answered_once(tg, first), 60, what="16 answers")

            # every model call is held: the turns are mid-way when "a" dies
            llm.gate = asyncio.Event()
            asked = len(llm.requests)
            second = {u: tg.send_user_message(u, u, f"again {u}")["message_id"] for u in users}
            await tg.wait_for(lambda: len(llm.requests) >= asked + 16, 60, what="16 held")
            await bots["a"].kill()
            llm.gate.set()
            await tg.wait_for(lambda: answered_once(tg, second), 60, what="every turn finished")
            assert answered_once(tg, first)
            await intake_empty(redis)
            # both processes took updates (round robin) and ran turns
            assert "Traceback" not in bots["b"].text
        assert "taking over" in bots["b"].text
