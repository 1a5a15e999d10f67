"""Shared fixtures: a real redis-server for the whole session, flushed per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.app import App
from bot.data.connection import connect
from bot.usage.calls import Clock, utc_now
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import OTHER_USER, USER, BotFactory, BotProcess, running_bot, settings_for
from .redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
async def no_bot_process_outlives_its_test() -> AsyncIterator[None]:
    yield
    await BotProcess.kill_leftovers()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    if redis_server.proc is None:  # a test stopped it and failed before restarting
        redis_server.start_same_port()
    client = connect(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
async def store(redis: Redis) -> TranscriptStore:
    return TranscriptStore(redis)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, for tests that stop, kill or restart it."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """A Bot API test server with two private chats (USER and OTHER_USER)."""
    async with FakeTelegram() as server:
        server.add_private_chat(USER, "Ada")
        server.add_private_chat(OTHER_USER, "Bob")
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
def start_bot(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> BotFactory:
    def factory(clock: Clock = utc_now, **extra: Any) -> AbstractAsyncContextManager[App]:
        return running_bot(settings_for(tg, llm, redis_server.url, **extra), clock)

    return factory
