"""The turn's hot round trips, written and read without redis-py's per-command toll.

A turn waits for Redis three times (the claim, the answer, the final write), each a
pipeline of a few commands queued by :func:`bot.data.connection.run_together`.
redis-py spends CPU per round trip before and after the wire: its
pool's condition, a timeout per reply read, the retry wrapper, the command
packer's per-argument encoder, its observability hooks. That was most of the bot's
own cost per turn (``python -m bench bot``). The pipeline client sends the same queued
commands on connections of its own: one write, one read loop over a hiredis
reader, one timeout for the whole round trip. It speaks RESP3 (as redis-py does) to one
server (``redis://`` and ``unix://`` URLs); a TLS URL or a cluster keeps redis-py's
pipeline (:func:`pipeline_client_for` gives ``None``).

Semantics are redis-py's, so callers cannot tell the two apart:

- replies go through the client's response callbacks; error replies become
  redis-py's typed errors (``BaseParser.parse_error``), and the first one is
  raised once every reply has been read;
- a lost connection, a timeout or "loading the dataset" is raised as redis-py's
  ``ConnectionError`` / ``TimeoutError`` (:func:`~bot.data.connection.guarded` turns
  those into an outage, whose policy the caller applies: nothing is retried here);
- the commands of a pipeline may be sent twice (the caller's retry after a lost
  reply), as with redis-py: every write the turn queues is idempotent.

A connection is returned to the pipeline client only after all its replies were read; one
that failed or was cancelled mid-way is closed, and so are the idle ones (after a
Redis restart they are all dead). An idle connection the server closed meanwhile is
noticed when it is taken (its end of stream arrived) and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import hiredis
from redis import exceptions as rx
from redis._parsers import BaseParser
from redis.asyncio.connection import ConnectKwargs, UnixDomainSocketConnection, parse_url

#: One queued command as redis-py's pipeline keeps it: its arguments and options.
Command = tuple[tuple[Any, ...], Mapping[str, Any]]
#: Options a reply callback does not take (redis-py drops them before the call).
_NOT_FOR_CALLBACKS = frozenset({"keys", "NEVER_DECODE", "EMPTY_RESPONSE"})
_READ_SIZE = 65536


def pack(commands: Sequence[tuple[Any, ...]]) -> bytes:
    """The commands in RESP, encoded as redis-py's encoder would (UTF-8 text, ints and
    floats as their digits, bytes as they are), by hiredis's packer."""
    packed = []
    for queued in commands:
        name = queued[0]
        # "CLIENT SETNAME" is two words on the wire
        command = (*name.split(), *queued[1:]) if isinstance(name, str) and " " in name else queued
        try:
            packed.append(hiredis.pack_command(command))
        except TypeError as exc:  # a bool, None or an object: redis-py refuses them too
            raise rx.DataError(f"cannot send {name!r}: {exc}") from None
    return b"".join(packed)


class _Connection:
    """One socket to Redis and the reader of its replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stream, self.writer = reader, writer
        self.parser = hiredis.Reader(
            protocolError=rx.InvalidResponse, replyError=BaseParser.parse_error
        )

    async def round_trip(self, payload: bytes, count: int) -> list[Any]:
        """Write ``payload`` and read ``count`` replies (errors among them as values)."""
        self.writer.write(payload)
        await self.writer.drain()
        replies: list[Any] = []
        parser, stream = self.parser, self.stream
        while len(replies) < count:
            reply = parser.gets()
            if reply is False:
                data = await stream.read(_READ_SIZE)
                if not data:
                    raise rx.ConnectionError("Redis closed the connection")
                parser.feed(data)
            else:
                replies.append(reply)
        return replies

    def close(self) -> None:
        self.writer.close()


class PipelineClient:
    """Pipelines of queued commands on connections of the pipeline client's own (see the module)."""

    def __init__(
        self,
        found: ConnectKwargs,
        *,
        callbacks: Mapping[str, Callable[..., Any]],
        max_connections: int,
        timeout: float,
        connect_timeout: float,
    ) -> None:
        self._path: str | None = found.get("path")
        self._host = str(found.get("host", "localhost"))
        self._port = int(found.get("port", 6379))
        # RESP3, as redis-py speaks it by default: the client's reply callbacks
        # (HGETALL's dict, ...) expect its shapes
        hello: tuple[Any, ...] = ("HELLO", 3)
        password = found.get("password")
        if password:
            hello = (*hello, "AUTH", found.get("username") or "default", password)
        self._handshake: list[tuple[Any, ...]] = [hello]
        if int(found.get("db", 0) or 0):
            self._handshake.append(("SELECT", int(found.get("db", 0) or 0)))
        self._callbacks = callbacks
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Send the commands in one write and return their replies, as redis-py's
        ``Pipeline.execute()`` would (callbacks applied, the first error raised)."""
        if not commands:
            return []
        payload, count = pack([args for args, _ in commands]), len(commands)
        try:
            replies = await self._send(payload, count)
        except (rx.ConnectionError, rx.TimeoutError):
            self._drop_idle()
            raise
        return await self._shaped(commands, replies)

    async def _send(self, payload: bytes, count: int) -> list[Any]:
        async with self._slots:
            connection = self._take_idle()
            try:
                async with asyncio.timeout(self._timeout):
                    if connection is None:
                        connection = await self._connect()
                    replies = await connection.round_trip(payload, count)
            except BaseException as exc:
                if connection is not None:
                    self._discard(connection)
                # as redis-py's: an outage (bot.data.connection.guarded)
                if isinstance(exc, TimeoutError):  # asyncio.timeout's, a kind of OSError
                    raise rx.TimeoutError("Redis did not answer in time") from exc
                if isinstance(exc, OSError):
                    name = type(exc).__name__
                    raise rx.ConnectionError(f"Redis connection failed ({name})") from exc
                raise
            self._idle.append(connection)
        for reply in replies:
            if isinstance(reply, rx.ConnectionError):  # "loading the dataset": retried
                raise reply
        return replies

    async def _connect(self) -> _Connection:
        async with asyncio.timeout(self._connect_timeout):
            if self._path is not None:
                reader, writer = await asyncio.open_unix_connection(self._path)
            else:
                reader, writer = await asyncio.open_connection(self._host, self._port)
        connection = _Connection(reader, writer)
        self._open.add(connection)
        try:
            replies = await connection.round_trip(pack(self._handshake), len(self._handshake))
            for reply in replies:
                if isinstance(reply, Exception):  # a wrong password: redis-py's typed error
                    raise reply
        except BaseException:
            self._discard(connection)
            raise
        return connection

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    def _take_idle(self) -> _Connection | None:
        """An idle connection still open at the server's end, if any."""
        while self._idle:
            connection = self._idle.pop()
            if not (connection.stream.at_eof() or connection.writer.is_closing()):
                return connection
            self._discard(connection)  # the server closed it (a restart)
        return None

    def _drop_idle(self) -> None:
        # the idle connections most likely share the failed one's fate (a restart)
        idle, self._idle = self._idle, []
        for connection in idle:
            self._discard(connection)

    async def _shaped(self, commands: Sequence[Command], replies: list[Any]) -> list[Any]:
        shaped: list[Any] = []
        first_error: rx.ResponseError | None = None
        for (args, options), reply in zip(commands, replies, strict=True):
            if isinstance(reply, rx.ResponseError):
                if "EMPTY_RESPONSE" in options:
                    shaped.append(options["EMPTY_RESPONSE"])
                    continue
                first_error = first_error or reply
                shaped.append(reply)
                continue
            callback = self._callbacks.get(args[0])
            if callback is not None:
                extra = {k: v for k, v in options.items() if k not in _NOT_FOR_CALLBACKS}
                value = callback(reply, **extra)
                shaped.append(await value if inspect.isawaitable(value) else value)
                continue
            shaped.append(reply)
        if first_error is not None:
            raise first_error
        return shaped

    async def aclose(self) -> None:
        """Close every connection of the pipeline client, and wait until they are closed."""
        self._idle = []
        closing = list(self._open)
        for connection in closing:
            self._discard(connection)
        for connection in closing:
            with contextlib.suppress(Exception):  # closed already, or by the server
                await connection.writer.wait_closed()


def pipeline_client_for(url: str, **settings: Any) -> PipelineClient | None:
    """A pipeline client for ``url``, or ``None`` where redis-py's own pipeline is kept (TLS)."""
    found = parse_url(url)
    if "connection_class" in found and found["connection_class"] is not UnixDomainSocketConnection:
        return None
    return PipelineClient(found, **settings)
