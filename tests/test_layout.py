"""The key layout's version in Redis (``rc:layout``): the bot writes it on a fresh Redis,
starts on the version it knows and refuses any other with one line, in process and as
``python -m bot`` (the operator commands: tests/test_ops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.app import App
from bot.app_startup import StartupError
from bot.data import keys
from bot.data.connection import connect
from bot.data.layout import UnknownLayoutError, check_layout

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotFactory, BotProcess, ask, env_for, settings_for
from .redis_server import RedisServer

#: What the bot says of a Redis holding layout version "99" (it knows "3", and reads "2").
REFUSED = (
    "Redis holds data of key layout version '99' (rc:layout); this bot knows only "
    "version '3': point REDIS_URL at this bot's own Redis, or run the bot that wrote that data"
)


async def holding(server: RedisServer, version: str) -> Redis:
    """A client of ``server`` (a test's own: the session's must not keep a foreign
    version), whose Redis now holds layout ``version``; the caller closes it."""
    redis = connect(server.url)
    await redis.set(keys.LAYOUT_KEY, version)
    return redis


async def test_a_fresh_redis_gets_the_layout_version(
    tg: FakeTelegram, start_bot: BotFactory, redis: Redis
) -> None:
    assert not await redis.exists(keys.LAYOUT_KEY)
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] echo: hello"
        assert await redis.get(keys.LAYOUT_KEY) == b"3"


async def test_a_redis_of_the_known_version_starts(
    tg: FakeTelegram, start_bot: BotFactory, redis: Redis
) -> None:
    await redis.set(keys.LAYOUT_KEY, "3")
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] echo: hello"
    assert await redis.get(keys.LAYOUT_KEY) == b"3"


async def test_a_redis_of_layout_2_is_read_as_it_is_and_marked_3(redis: Redis) -> None:
    """Layout 3 adds cold trees, which a bot of layout 2 would misread: a Redis of
    layout 2 holds none, so this bot reads it and marks it 3 (older bots then refuse)."""
    await redis.set(keys.LAYOUT_KEY, "2")
    assert await check_layout(redis, claim=False) == "2"
    assert await redis.get(keys.LAYOUT_KEY) == b"2"  # the operator's check writes nothing
    assert await check_layout(redis, claim=True) == "3"
    assert await redis.get(keys.LAYOUT_KEY) == b"3"


async def test_a_redis_of_an_unknown_version_is_refused_before_anything_is_written(
    tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    redis = await holding(private_redis, "99")
    with pytest.raises(StartupError) as raised:
        await App(settings_for(tg, llm, private_redis.url)).run(install_signals=False)
    assert str(raised.value) == REFUSED
    assert [k async for k in redis.scan_iter()] == [b"rc:layout"]  # no stream, no group
    assert await redis.get(keys.LAYOUT_KEY) == b"99"
    assert not tg.calls_to("getMe")  # refused before Telegram was asked anything
    await redis.aclose()


async def test_the_operator_check_reads_and_never_writes(redis: Redis) -> None:
    assert await check_layout(redis, claim=False) is None
    assert not await redis.exists(keys.LAYOUT_KEY)
    assert await check_layout(redis, claim=True) == "3"
    assert await check_layout(redis, claim=False) == "3"
    await redis.set(keys.LAYOUT_KEY, "99")
    for claim in (False, True):
        with pytest.raises(UnknownLayoutError) as raised:
            await check_layout(redis, claim=claim)
        assert str(raised.value) == REFUSED
    assert await redis.get(keys.LAYOUT_KEY) == b"99"
    await redis.delete(keys.LAYOUT_KEY)  # the session's Redis: later tests may not flush it


async def test_the_bot_process_exits_1_with_one_line_on_an_unknown_layout(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    await (await holding(private_redis, "99")).aclose()
    process = BotProcess(env_for(tg, llm, private_redis.url), tmp_path)
    await process.start()
    assert await process.wait(timeout=60) == 1
    assert process.text.strip().splitlines()[-1] == f"replychain: {REFUSED}"
    assert "Traceback" not in process.text
    assert not tg.calls
