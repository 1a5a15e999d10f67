"""Media: Redis bytes per image, and assembling a chain with images, cold and hot.

Bytes: one ~150 KB photo that twenty branches (or five re-sends) share, stored
once content-addressed and referenced from the nodes, beside the per-turn
baseline that keeps the image (as the data URL a request carries) inside every
node that needs it.

Assembly: what a turn does before its model call, for a 100-exchange chain
with 10 photos (~150 KB each): load the chain, load the images' bytes, build
the request body. Cold: a new store and wire cache (a restarted process); hot:
the same ones again. Beside it, the same chain without images.
"""

from __future__ import annotations

import hashlib
import time

from redis.asyncio import Redis

from bot.data.connection import connect
from bot.model import WireCache
from bot.model.wire import data_url
from transcript import ChatMessage, Image, NodeId, TranscriptStore

from .common import median, redis_server, table

EXCHANGES = 100
IMAGES = 10
IMAGE_BYTES = 150_000
BRANCHES = 20
COLD_RUNS = 10
HOT_RUNS = 50
QUESTION = "What do you see here, and what should I change about it? " * 2
ANSWER = "It shows a chart; the axis labels overlap and the legend hides a line. " * 4


def _photo(i: int) -> bytes:
    block = hashlib.sha256(str(i).encode()).digest()
    return b"\xff\xd8\xff\xe0" + (block * (IMAGE_BYTES // 32 + 1))[:IMAGE_BYTES]


async def _bytes_used(redis: Redis, pattern: str) -> int:
    total = 0
    async for key in redis.scan_iter(match=pattern, count=1000):
        total += int(await redis.memory_usage(key, samples=0) or 0)
    return total


async def _chain(store: TranscriptStore, scope: str, images: bool) -> NodeId:
    node = (await store.start(scope, [ChatMessage("system", "You are helpful.")])).id
    every = EXCHANGES // IMAGES
    for i in range(EXCHANGES):
        photo: tuple[Image, ...] = ()
        if images and i % every == 0:
            digest = await store.put_blob(scope, _photo(i))
            photo = (Image(digest, "image/jpeg", 1280, 960),)
        node = (await store.append(node, [ChatMessage("user", QUESTION, images=photo)])).id
        node = (await store.append(node, [ChatMessage("assistant", ANSWER)])).id
    return node


async def _assemble(store: TranscriptStore, wire: WireCache, leaf: NodeId) -> int:
    history = await store.history(leaf)
    digests = [i.digest for m in history.messages for i in m.images]
    media = await store.blobs(leaf.scope, digests) if digests else None
    return len(wire.stream_body("model", history.messages, media=media))


async def _timed(redis: Redis, leaf: NodeId, runs: int, *, cold: bool) -> tuple[float, float, int]:
    store, wire = TranscriptStore(redis), WireCache()
    size = await _assemble(store, wire, leaf)
    times: list[float] = []
    trips = 0
    for _ in range(runs):
        if cold:
            store, wire = TranscriptStore(redis), WireCache()
        before = store.round_trips
        started = time.perf_counter()
        size = await _assemble(store, wire, leaf)
        times.append((time.perf_counter() - started) * 1000)
        trips = store.round_trips - before
    return median(times), float(trips), size


async def run() -> str:
    with redis_server() as server:
        redis = connect(server.url)
        try:
            return await _run(redis)
        finally:
            await redis.aclose()


async def _run(redis: Redis) -> str:
    store = TranscriptStore(redis)
    # ---- bytes: one photo, BRANCHES branches below it
    photo = _photo(0)
    digest = await store.put_blob("b1", photo)
    root = (await store.start("b1", [ChatMessage("system", "You are helpful.")])).id
    user = (await store.append(root, [ChatMessage("user", "this?", images=(
        Image(digest, "image/jpeg", 1280, 960),))])).id  # fmt: skip
    for b in range(BRANCHES):
        await store.append(user, [ChatMessage("user", f"branch {b}")])
    for r in range(5):  # the same photo sent again in new conversations
        again = (await store.start("b1", [ChatMessage("system", "You are helpful.")])).id
        await store.put_blob("b1", photo)
        await store.append(again, [ChatMessage("user", f"again {r}", images=(
            Image(digest, "image/jpeg", 1280, 960),))])  # fmt: skip
    ours = await _bytes_used(redis, "rc:{b1}:*")
    inline = data_url("image/jpeg", photo)
    base = TranscriptStore(redis)
    root = (await base.start("b2", [ChatMessage("system", "You are helpful.")])).id
    for b in range(BRANCHES):
        user = (await base.append(root, [ChatMessage("user", f"this?\n{inline}")])).id
        await base.append(user, [ChatMessage("user", f"branch {b}")])
    for r in range(5):
        again = (await base.start("b2", [ChatMessage("system", "You are helpful.")])).id
        await base.append(again, [ChatMessage("user", f"again {r}\n{inline}")])
    baseline = await _bytes_used(redis, "rc:{b2}:*")
    copies = BRANCHES + 5
    bytes_table = table(
        f"Redis bytes: one {len(photo) // 1000} KB photo in {BRANCHES} branches + 5 re-sends "
        f"({copies} uses)",
        ["layout", "Redis bytes", "per use", "copies of the image"],
        [
            ["stored once, by digest (ours)", ours, ours // copies, 1],
            ["inline in each node (baseline)", baseline, baseline // copies, copies],
        ],
    )
    # ---- assembly
    with_images = await _chain(store, "c1", images=True)
    without = await _chain(store, "c2", images=False)
    rows = []
    for name, leaf in (("10 images", with_images), ("no images", without)):
        cold_ms, cold_trips, size = await _timed(redis, leaf, COLD_RUNS, cold=True)
        hot_ms, hot_trips, _ = await _timed(redis, leaf, HOT_RUNS, cold=False)
        rows.append([name, cold_ms, int(cold_trips), hot_ms, int(hot_trips), size // 1000])
    assembly_table = table(
        f"Assembly of a {EXCHANGES}-exchange chain ({2 * EXCHANGES + 1} messages): load, "
        "image bytes, request body (median ms)",
        ["chain", "cold ms", "cold trips", "hot ms", "hot trips", "body KB"],
        rows,
    )
    return bytes_table + "\n" + assembly_table
