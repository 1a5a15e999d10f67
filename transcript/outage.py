"""Which failures of a Redis round trip are an outage, and the one guard that says so.

Everything that talks to Redis (the transcript store and the bot's own data) awaits
its round trips through :func:`guarded`: a lost connection, a timeout, a Redis Cluster
with slots not served, or a connection another task closed meanwhile becomes
:class:`~transcript.errors.StoreUnavailableError`, whose policy the caller applies;
anything else is raised as it is (a bug or a misuse, never an outage).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from types import TracebackType
from typing import TypeVar

from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    RedisClusterException,
    TimeoutError,
    TryAgainError,
)

from .errors import StoreUnavailableError

T = TypeVar("T")

#: Redis cannot serve now: unreachable, too slow, or a Redis Cluster with slots not
#: served (CLUSTERDOWN while a replica is promoted; TRYAGAIN while a slot migrates).
UNAVAILABLE = (ConnectionError, TimeoutError, OSError, ClusterDownError, TryAgainError)

_REDIS_CONNECTION = "redis/asyncio/connection.py"
_ASYNCIO = "/asyncio/"


async def guarded(awaitable: Awaitable[T]) -> T:
    """Await one Redis round trip; an outage becomes :class:`StoreUnavailableError`."""
    started = time.monotonic()
    try:
        return await awaitable
    except UNAVAILABLE as exc:
        raise _unavailable(exc, started) from exc
    except (AttributeError, TypeError) as exc:
        if not closed_under_us(exc):
            raise  # a bug, not an outage
        raise _unavailable(exc, started) from exc
    except RedisClusterException as exc:
        if not isinstance(exc.__cause__, UNAVAILABLE):
            raise  # a misuse of the cluster client, not an outage
        # none of the cluster nodes the client knows answers (e.g. at start-up)
        raise _unavailable(exc, started) from exc


def closed_under_us(exc: AttributeError | TypeError) -> bool:
    """Whether redis-py wrote to or read from a connection that was torn down meanwhile:
    another task closed it (a Redis Cluster client does, when a node fails), leaving its
    stream reader or writer ``None``, or the peer reset it and the event loop cleared
    the transport's internals. redis-py then raises ``'NoneType' object has no
    attribute …`` or ``… is not callable`` instead of a connection error. A lost
    connection, not a bug: the failure passed through redis-py's connection and ended
    there or in asyncio's streams and transports, on a ``None``."""
    if "NoneType" not in str(exc):
        return False
    files = _files(exc.__traceback__)
    if not files or not any(name.endswith(_REDIS_CONNECTION) for name in files):
        return False
    return files[-1].endswith(_REDIS_CONNECTION) or _ASYNCIO in files[-1]


def _files(tb: TracebackType | None) -> list[str]:
    """The source file of each frame of a traceback, outermost first."""
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    return files


def _unavailable(exc: Exception, started: float) -> StoreUnavailableError:
    waited = time.monotonic() - started
    return StoreUnavailableError(f"Redis is unreachable ({type(exc).__name__} after {waited:.1f}s)")
