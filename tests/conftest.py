"""Shared fixtures: a real redis-server for the whole session, flushed per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from transcript import TranscriptStore, connect

from .redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


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
