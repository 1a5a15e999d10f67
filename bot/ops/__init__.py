"""The operator's commands: ``python -m bot doctor | export | tree | why | payments |
refund``.

They read the same settings as the bot and never start polling. Each prints
what it found on stdout and, when it cannot, one line on stderr with a
non-zero exit code: never a traceback, never a secret. ``doctor`` checks a
set-up (:mod:`bot.ops.doctor`); ``export``, ``tree`` and ``why`` read stored
threads and audit records (:mod:`bot.ops.conversations`, :mod:`bot.ops.why`), from
a Redis whose key layout this bot knows (:mod:`bot.data.layout`); ``payments`` and
``refund`` list and refund Telegram Stars payments (:mod:`bot.ops.payments`).

This package is imported lazily by :mod:`bot.__main__` (it pulls in redis,
aiogram and openai).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from redis.exceptions import ConnectionError, TimeoutError

from transcript import StoreUnavailableError, TranscriptError

from ..data.layout import UnknownLayoutError, check_layout
from ..settings import Settings
from .conversations import OpsError

EXIT_OK = 0
EXIT_FAILED = 1

__all__ = ["EXIT_FAILED", "EXIT_OK", "OpsError", "read_thread", "run_read"]
#: Node records a reading command caches (it reads one thread or tree).
_CACHE_BYTES = 8 * 1024 * 1024


def read_thread(command: str, settings: Settings, chat_id: int, message_id: int) -> int:
    """``export``, ``tree`` or ``why`` of one message of one chat, printed on stdout."""
    from transcript import TranscriptStore  # noqa: PLC0415

    from ..data.connection import connect  # noqa: PLC0415
    from . import conversations, why  # noqa: PLC0415

    async def work() -> str:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster)
        store = TranscriptStore(redis, cache_bytes=_CACHE_BYTES)
        try:
            await check_layout(redis, claim=False)
            if command == "export":
                return await conversations.export(redis, store, chat_id, message_id)
            if command == "tree":
                return await conversations.tree(redis, store, chat_id, message_id)
            return await why.why(
                redis, store, chat_id, message_id, audit_days=settings.model_audit_days
            )
        finally:
            await redis.aclose()

    return run_read(command, work)


def run_read(name: str, work: Callable[[], Coroutine[Any, Any, str]]) -> int:
    """Run one reading command; its text goes to stdout, a failure is one line on stderr."""
    try:
        text = asyncio.run(work())
    except (OpsError, UnknownLayoutError) as exc:
        return _fail(str(exc))
    except StoreUnavailableError as exc:
        return _fail(f"{exc}; check REDIS_URL")
    except (ConnectionError, TimeoutError, OSError) as exc:  # a SCAN outside the store
        return _fail(f"Redis is unreachable ({type(exc).__name__}); check REDIS_URL")
    except TranscriptError as exc:
        return _fail(f"the stored thread cannot be read: {exc}")
    except KeyboardInterrupt:
        return EXIT_FAILED
    except Exception as exc:  # an operator tool prints one line, never a traceback
        return _fail(f"{name} failed unexpectedly ({type(exc).__name__})")
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`
        pass
    return EXIT_OK


def _fail(line: str) -> int:
    print(f"replychain: {line}", file=sys.stderr)
    return EXIT_FAILED
