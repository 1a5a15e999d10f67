"""Transcript store: assembly time and round trips, Redis bytes per node, branch cost.

Baselines in the same run: a naive parent-pointer store (one key per node, one
GET per ancestor, a plain dict as cache) and, for branching, a store that
copies the whole transcript per branch.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import msgpack
from redis.asyncio import Redis

from bot.data.connection import connect
from transcript import ChatMessage, NodeId, TranscriptStore, keys

from .common import median, redis_server, table

R = TypeVar("R")
DEPTHS = (10, 100, 1000)
COLD_RUNS = 30
HOT_RUNS = 300
MESSAGE = "lorem ipsum dolor sit amet " * 8  # ~216 characters


def _message(i: int) -> ChatMessage:
    return ChatMessage("user" if i % 2 == 0 else "assistant", f"{i}: {MESSAGE}")


class NaiveStore:
    """Baseline: one key per node holding [parent, messages]; walk leaf → root."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.cache: dict[str, list[Any]] = {}
        self.round_trips = 0

    async def put(self, node: str, parent: str | None, message: ChatMessage) -> None:
        await self.redis.set(
            f"naive:{node}", msgpack.packb([parent, [[message.role, message.content]]])
        )

    async def history(self, leaf: str) -> list[list[Any]]:
        chain: list[list[Any]] = []
        current: str | None = leaf
        while current is not None:
            record = self.cache.get(current)
            if record is None:
                self.round_trips += 1
                record = msgpack.unpackb(await self.redis.get(f"naive:{current}"))
                self.cache[current] = record
            chain.append(record[1])
            current = record[0]
        return [m for messages in reversed(chain) for m in messages]


async def _build(store: TranscriptStore, scope: str, depth: int) -> tuple[NodeId, int]:
    """A linear chain of ``depth`` messages below a root; returns leaf and content bytes."""
    node = await store.start(scope, [ChatMessage("system", "You are a benchmark.")])
    content = len("You are a benchmark.")
    for i in range(depth):
        node = await store.append(node.id, [_message(i)])
        content += len(_message(i).content or "")
    return node.id, content


async def _timed(
    make: Callable[[], R], read: Callable[[R], Awaitable[object]], cold_runs: int
) -> tuple[float, float, R]:
    """Median ms of reads by fresh readers (cold) and by the last one again (hot)."""
    cold, hot = [], []
    reader = make()
    for _ in range(cold_runs):
        reader = make()
        started = time.perf_counter()
        await read(reader)
        cold.append(time.perf_counter() - started)
    trips = getattr(reader, "round_trips", 0)
    for _ in range(HOT_RUNS):
        started = time.perf_counter()
        await read(reader)
        hot.append(time.perf_counter() - started)
    setattr(reader, "round_trips", trips)  # noqa: B010 - report the cold reader's trips
    return median(cold) * 1e3, median(hot) * 1e3, reader


async def _assembly(redis: Redis) -> str:
    rows: list[tuple[object, ...]] = []
    for depth in DEPTHS:
        leaf, _ = await _build(TranscriptStore(redis), f"asm{depth}", depth)
        naive = NaiveStore(redis)
        parent = None
        for i in range(depth + 1):
            await naive.put(f"{depth}.{i}", parent, _message(i))
            parent = f"{depth}.{i}"
        cold, hot, store = await _timed(
            lambda: TranscriptStore(redis), partial(TranscriptStore.history, leaf=leaf), COLD_RUNS
        )
        naive_cold, naive_hot, naive = await _timed(
            lambda: NaiveStore(redis), partial(NaiveStore.history, leaf=f"{depth}.{depth}"), 5
        )
        rows.append((depth, store.round_trips, cold, hot, naive.round_trips, naive_cold, naive_hot))
    # a branched chain: the leaf hangs three branch points below the trunk
    writer = TranscriptStore(redis)
    trunk, _ = await _build(writer, "asmbr", 990)
    node = await writer.node(trunk)
    for i in range(3):
        await writer.append(node.id, [_message(0)])  # takes the continuation slot
        node = await writer.append(node.id, [_message(i)])
    leaf = (await writer.append(node.id, [_message(1)])).id
    cold, hot, store = await _timed(
        lambda: TranscriptStore(redis), lambda s: s.history(leaf), COLD_RUNS
    )
    depth = (await store.node(leaf)).depth
    rows.append((f"{depth} (4 segments)", store.round_trips, cold, hot, *"---"))
    return table(
        "Transcript assembly (median ms; targets: cold depth 1000 <= 4 round trips and "
        "<= 15 ms, hot <= 0.5 ms)",
        ["depth", "cold RTs", "cold ms", "hot ms", "naive RTs", "naive cold ms", "naive hot ms"],
        rows,
    )


async def _scope_bytes(redis: Redis, scope: str) -> int:
    total = 0
    async for key in redis.scan_iter(match=keys.scope_prefix(scope) + "*"):
        total += int(await redis.memory_usage(key, samples=0) or 0)
    return total


async def _metadata(redis: Redis) -> str:
    rows = []
    for depth in DEPTHS:
        scope = f"meta{depth}"
        store = TranscriptStore(redis)
        node = await store.start(scope, [ChatMessage("system", "s")])
        base = await _scope_bytes(redis, scope)
        content = 0
        for i in range(depth):
            message = _message(i)
            node = await store.append(node.id, [message])
            content += len((message.content or "").encode())
        used = await _scope_bytes(redis, scope) - base
        rows.append((depth, depth, used, content, (used - content) / depth))
    return table(
        "Redis bytes per node beyond message content (MEMORY USAGE of the scope's keys; "
        "target <= 120 B, flat in depth)",
        ["depth", "nodes", "bytes used", "content bytes", "meta B/node"],
        rows,
    )


async def _branches(redis: Redis) -> str:
    scope = "branches"
    store = TranscriptStore(redis)
    node = await store.start(scope, [ChatMessage("system", "s")])
    prefix: list[ChatMessage] = [ChatMessage("system", "s")]
    while sum(len(m.content or "") for m in prefix) < 20_000:
        message = ChatMessage("user" if len(prefix) % 2 else "assistant", "z" * 500)
        node = await store.append(node.id, [message])
        prefix.append(message)
    before = await _scope_bytes(redis, scope)
    for i in range(20):
        await store.append(node.id, [ChatMessage("user", f"branch {i}")])
    added = await _scope_bytes(redis, scope) - before
    # baseline: each branch stores a full copy of its transcript
    copy_bytes = 0
    for i in range(20):
        messages = [[m.role, m.content] for m in (*prefix, ChatMessage("user", f"branch {i}"))]
        await redis.set(f"copy:{i}", msgpack.packb(messages))
        copy_bytes += int(await redis.memory_usage(f"copy:{i}", samples=0) or 0)
    one_copy = copy_bytes / 20
    return table(
        "20 branches off a 20 KB prefix (target: add < 10 % of one prefix copy)",
        ["layout", "bytes added", "% of one prefix copy"],
        [
            ("replychain (shared prefix)", added, 100 * added / one_copy),
            ("baseline (copy per branch)", copy_bytes, 100 * copy_bytes / one_copy),
        ],
    )


async def run() -> str:
    with redis_server() as server:
        redis = connect(server.url)
        try:
            parts = [await _assembly(redis), await _metadata(redis), await _branches(redis)]
        finally:
            await redis.aclose()
    return "\n".join(parts)
