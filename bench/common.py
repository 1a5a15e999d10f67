"""Helpers shared by the benchmarks: a throwaway redis-server, table printing, and the
quick/full switch with progress lines.

``python -m bench`` runs quick sizes (tens of seconds) unless given ``--full``; a bench
reads the choice as :data:`FULL` (or picks a size with :func:`sized`) at run time, and
may report how far it got with :func:`progress`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from redis.asyncio import Redis

from tests.redis_server import RedisServer

T = TypeVar("T")

#: True for ``python -m bench --full`` (``make bench FULL=1``): the sizes the targets
#: in DESIGN.md are stated for. False (the default) for a quick run.
FULL = False

_STARTED = time.perf_counter()


def sized(quick: T, full: T) -> T:
    """*full* in a full run, *quick* otherwise; read it when the bench runs, not at import."""
    return full if FULL else quick


def progress(message: str) -> None:
    """One progress line on stderr (the tables go to stdout), with the time so far."""
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server (AOF everysec, like config/redis.conf) in a temp dir."""
    with tempfile.TemporaryDirectory(prefix="replychain-bench-") as tmp:
        server = RedisServer(Path(tmp), fsync="everysec")
        server.start()
        try:
            yield server
        finally:
            server.stop()


async def script_time(redis: Redis) -> tuple[int, float]:
    """(calls, µs in all) of EVAL and EVALSHA since the last CONFIG RESETSTAT."""
    stats = await redis.info("commandstats")
    calls, usec = 0, 0.0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        if name in stats:
            calls += int(stats[name]["calls"])
            usec += float(stats[name]["usec"])
    return calls, usec


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(lines) + "\n"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)
