"""The pipeline client (bot/data/pipeline_client.py) against a real redis-server: it
must answer exactly as redis-py's pipeline does, and fail the way the turn already handles."""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import AuthenticationError, BusyLoadingError, DataError, ResponseError

from bot.data.connection import BotRedis, connect, run_together
from bot.data.pipeline_client import PipelineClient, pack, pipeline_client_for
from transcript import StoreUnavailableError

from .redis_server import RedisServer, free_port

SCRIPT = (
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return {redis.call('HLEN', KEYS[1]), ARGV[2]}"
)


def _writes(pipe: Pipeline) -> None:
    pipe.eval(SCRIPT, 1, "h", "f", "é")
    pipe.hsetnx("h", "g", 1)
    pipe.hsetnx("h", "g", 2)
    pipe.sadd("s", 1, 2)
    pipe.hgetall("h")
    pipe.expire("s", 60)
    pipe.get("missing")


def _client(redis: Redis) -> PipelineClient:
    assert isinstance(redis, BotRedis) and redis.pipelines is not None
    return redis.pipelines


async def test_the_pipeline_client_answers_as_redis_py_pipeline_does(redis: Redis) -> None:
    client = _client(redis)
    [by_client] = await run_together(redis, _writes)
    await redis.flushall()
    pipe = redis.pipeline(transaction=False)
    _writes(pipe)
    assert by_client == await pipe.execute()
    assert by_client[:4] == [[1, "é".encode()], True, False, 2]  # callbacks applied
    assert client._idle  # the connection went back for the next round trip


async def test_replies_are_split_by_queue(redis: Redis) -> None:
    def one(pipe: Pipeline) -> int:
        pipe.set("a", 1)
        return 99  # what a queue returns is not a count

    def two(pipe: Pipeline) -> None:
        pipe.incr("a")
        pipe.incr("a")

    assert await run_together(redis, one, two, lambda pipe: None) == [[True], [2, 3], []]


async def test_an_error_reply_is_raised_after_every_reply_was_read(redis: Redis) -> None:
    await redis.set("text", "x")

    def writes(pipe: Pipeline) -> None:
        pipe.set("before", 1)
        pipe.incr("text")  # WRONGTYPE-ish: not an integer
        pipe.set("after", 2)

    with pytest.raises(ResponseError, match="not an integer"):
        await run_together(redis, writes)
    # redis-py's semantics: the commands around the failed one ran
    assert await redis.mget("before", "after") == [b"1", b"2"]
    # and the connection is still in step: the next round trip reads its own replies
    assert await run_together(redis, lambda pipe: pipe.get("before")) == [[b"1"]]


async def test_a_value_redis_cannot_take_is_refused_before_sending(redis: Redis) -> None:
    with pytest.raises(DataError):
        pack([("SET", "k", True)])
    assert pack([("CLIENT SETNAME", "x")]) == pack([("CLIENT", "SETNAME", "x")])


async def test_a_redis_restart_is_noticed_and_a_new_connection_taken(
    private_redis: RedisServer,
) -> None:
    client = connect(private_redis.url)
    try:
        await run_together(client, lambda pipe: pipe.set("k", 1))
        stale = list(_client(client)._idle)
        private_redis.restart()
        assert await client.get("k") == b"1"  # redis-py's pool notices too
        # the idle connection is dead: the pipeline client notices when it takes it, and answers
        assert await run_together(client, lambda pipe: pipe.get("k")) == [[b"1"]]
        assert all(connection not in _client(client)._open for connection in stale)
    finally:
        await client.aclose()


async def test_an_unreachable_redis_is_an_outage_without_secrets() -> None:
    url = f"redis://:hunter2secret@127.0.0.1:{free_port()}/0"
    client = connect(url, socket_timeout=0.5, connect_timeout=0.5)
    try:
        with pytest.raises(StoreUnavailableError) as info:
            await asyncio.wait_for(run_together(client, lambda pipe: pipe.get("k")), 10)
        assert "hunter2secret" not in str(info.value)
        assert "hunter2secret" not in repr(info.value.__cause__)
    finally:
        await client.aclose()


async def test_a_silent_redis_times_out_as_an_outage(private_redis: RedisServer) -> None:
    client = connect(private_redis.url, socket_timeout=0.3)
    assert private_redis.proc is not None
    try:
        await run_together(client, lambda pipe: pipe.set("k", 1))
        private_redis.proc.send_signal(19)  # SIGSTOP: the socket stays open, no answer
        with pytest.raises(StoreUnavailableError, match="TimeoutError"):
            await asyncio.wait_for(run_together(client, lambda pipe: pipe.get("k")), 10)
        assert not _client(client)._open  # a connection that timed out is not used again
    finally:
        private_redis.proc.send_signal(18)  # SIGCONT
        await client.aclose()


async def test_a_cancelled_round_trip_closes_its_connection(private_redis: RedisServer) -> None:
    client = connect(private_redis.url)
    assert private_redis.proc is not None
    try:
        await run_together(client, lambda pipe: pipe.set("k", 1))
        private_redis.proc.send_signal(19)
        waiting = asyncio.create_task(run_together(client, lambda pipe: pipe.incr("k")))
        await asyncio.sleep(0.05)  # let it write and wait for the reply
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # its reply, arriving later, must not be read as another command's
        assert not _client(client)._open
        private_redis.proc.send_signal(18)
        assert await run_together(client, lambda pipe: pipe.get("k")) in ([[b"1"]], [[b"2"]])
        assert await run_together(client, lambda pipe: pipe.set("j", 5)) == [[True]]
    finally:
        private_redis.proc.send_signal(18)
        await client.aclose()


async def test_loading_the_dataset_is_an_outage_until_the_data_is_in() -> None:
    """Redis answers -LOADING while it reads its data after a restart: the pipeline client raises
    it at once (redis-py's BusyLoadingError, an outage to the caller, whose policy
    retries), and the next round trip gets the answer once the data is in."""
    answers = [b"-LOADING Redis is loading the dataset in memory\r\n", b"+PONG\r\n"]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests = hiredis.Reader()
        try:
            while data := await reader.read(4096):
                requests.feed(data)
                while (request := requests.gets()) is not False:
                    # HELLO: an empty map (RESP3); PING: the next answer
                    writer.write(b"%0\r\n" if request[0] == b"HELLO" else answers.pop(0))
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = pipeline_client_for(f"redis://127.0.0.1:{port}/0", **_SETTINGS)
    assert client is not None
    try:
        with pytest.raises(BusyLoadingError):
            await client.execute([(("PING",), {})])
        assert await client.execute([(("PING",), {})]) == [b"PONG"]
        assert not answers
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_password_and_database_from_the_url(private_redis: RedisServer) -> None:
    plain = connect(private_redis.url)
    await plain.config_set("requirepass", "s3cret")
    await plain.aclose()
    client = connect(f"redis://:s3cret@127.0.0.1:{private_redis.port}/3")
    try:
        await run_together(client, lambda pipe: pipe.set("k", "in db 3"))
        assert await client.get("k") == b"in db 3"  # read by redis-py's own connection
    finally:
        await client.aclose()
    wrong = connect(f"redis://:nope@127.0.0.1:{private_redis.port}/0")
    try:
        # as with redis-py's own connections: an outage the operator sees, no secret in it
        with pytest.raises(StoreUnavailableError, match="AuthenticationError") as info:
            await run_together(wrong, lambda pipe: pipe.get("k"))
        assert "nope" not in str(info.value)
        assert isinstance(info.value.__cause__, AuthenticationError)
    finally:
        await wrong.aclose()


_SETTINGS: dict[str, Any] = {
    "callbacks": {},
    "max_connections": 2,
    "timeout": 1.0,
    "connect_timeout": 1.0,
}


def test_tls_keeps_redis_py_pipelines() -> None:
    assert pipeline_client_for("rediss://127.0.0.1:1/0", **_SETTINGS) is None
    assert pipeline_client_for("unix:///tmp/redis.sock", **_SETTINGS) is not None
