"""Cold trees (issue 47): a tree at rest compacted in place into one value
(transcript/compact.py), read as it was without being changed, warmed back by the next
write; the sweep that compacts them (bot/data/sweep.py), in one process at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.data import keys as bot_keys
from bot.data import sweep as sweep_module
from bot.data.sweep import ColdSweep
from bot.ops import conversations
from bot.ops.doctor import doctor
from bot.ops.forget import forget_chat
from bot.usage.accounting import Accounting
from bot.usage.calls import Prices, utc_now
from bot.webapp import view
from transcript import ChatMessage, Node, NodeId, TranscriptStore, keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotFactory, answers_to, ask, settings_for
from .redis_server import RedisServer
from .test_cluster import cluster, cluster_redis  # noqa: F401 (fixtures)
from .test_ops import line_of
from .test_transcript_store import SYSTEM, bot, user

CHAT = 700
SCOPE = str(CHAT)
#: Aliases of the grown tree's nodes (message ids).
ALIASES = (10, 11, 12, 13, 14, 15, 16)


class Crash(Exception):
    """The process died here."""


async def grown_tree(store: TranscriptStore, redis: Redis, scope: str = SCOPE) -> list[Node]:
    """A tree with two branches, a fold, a choice, aliases and its usage detail; its
    nodes root first (the last two are the leaves)."""
    root = await store.start(scope, [SYSTEM])
    q1 = await store.append(root.id, [user("hello")], aliases=[10])
    a1 = await store.append(q1.id, [bot("hi")], aliases=[11])
    q2 = await store.append(a1.id, [user("left")], aliases=[12])
    a2 = await store.append(q2.id, [bot("L")], aliases=[13, 14])
    q3 = await store.append(a1.id, [user("right")], aliases=[15])
    a3 = await store.append(q3.id, [bot("R")], aliases=[16])
    await store.put_fold(a1.id, [ChatMessage("system", "summary: hello, hi")])
    await store.choose(q3.id, "m", "other-model")
    usage = keys.scope_prefix(scope) + bot_keys.tree_companions(root.id.tree)[0]
    await redis.hset(usage, a1.id.ref, "10 5 0 1 #abcdefgh ")
    await redis.expire(usage, 3600)
    return [root, q1, a1, q2, a2, q3, a3]


async def snapshot(redis: Redis, tree: int, scope: str = SCOPE) -> dict[str, Any]:
    """What Redis holds of a hot tree, less its hot-only fields."""
    fields = await redis.hgetall(keys.tree_key(scope, tree))
    aliases = await redis.hgetall(keys.alias_key(scope))
    usage = keys.scope_prefix(scope) + bot_keys.tree_companions(tree)[0]
    return {
        "fields": {k: v for k, v in fields.items() if k not in (b"w", b"R")},
        "aliases": aliases,
        "usage": await redis.hgetall(usage),
    }


async def reads(store: TranscriptStore, leaves: list[Node]) -> list[Any]:
    """Everything a turn reads of a tree: chains, folds, choices."""
    found: list[Any] = []
    for leaf in leaves:
        found += [await store.history(leaf.id), await store.fold_on_path(leaf.id)]
        found.append(await store.choices_on_path(leaf.id))
    return found


async def state_of(redis: Redis, tree: int, scope: str = SCOPE) -> tuple[bool, bool]:
    """(hot, cold) of a tree: its hash, its cold value."""
    hot = bool(await redis.exists(keys.tree_key(scope, tree)))
    return hot, bool(await redis.exists(keys.cold_key(scope, tree)))


async def compact(store: TranscriptStore, tree: int, scope: str = SCOPE) -> str:
    done = await store.compact(scope, [tree], cold_after=0, companions=bot_keys.tree_companions)
    return done[tree].outcome


async def test_a_cold_tree_reads_as_it_was_and_a_write_warms_it_back(
    store: TranscriptStore, redis: Redis
) -> None:
    nodes = await grown_tree(store, redis)
    tree, leaves = nodes[0].id.tree, nodes[-3::2]
    hot = await snapshot(redis, tree)
    before = await reads(TranscriptStore(redis), leaves)
    hot_bytes = sum([
        int(await redis.memory_usage(keys.tree_key(SCOPE, tree), samples=0) or 0),
        int(await redis.memory_usage(keys.alias_key(SCOPE), samples=0) or 0),
        int(await redis.memory_usage(f"rc:{{{SCOPE}}}:u:n:{tree}", samples=0) or 0),
    ])  # fmt: skip

    assert await compact(store, tree) == "cold"
    assert await state_of(redis, tree) == (False, True)
    assert not await redis.exists(keys.alias_key(SCOPE))  # its aliases moved, compact
    assert await redis.hlen(keys.cold_alias_key(SCOPE)) == 1  # ids 10..16: one field
    assert not await redis.exists(keys.scope_prefix(SCOPE) + f"u:n:{tree}")
    cold_bytes = sum([
        int(await redis.memory_usage(keys.cold_key(SCOPE, tree), samples=0) or 0),
        int(await redis.memory_usage(keys.cold_alias_key(SCOPE), samples=0) or 0),
    ])  # fmt: skip
    assert cold_bytes < hot_bytes

    # a reply to any message finds the tree: one round trip brings all of it
    reader = TranscriptStore(redis)
    assert await reader.resolve(SCOPE, 14) == nodes[4].id
    assert reader.round_trips == 1
    assert await reads(reader, leaves) == before
    assert reader.round_trips == 1  # chains, folds and choices came with it
    assert await TranscriptStore(redis).known(SCOPE, 16)
    assert await TranscriptStore(redis).resolve(SCOPE, 99) is None
    assert await reader.companion(SCOPE, tree, f"u:n:{tree}") == hot["usage"]
    dumped = await TranscriptStore(redis).dump(SCOPE, tree)
    assert dumped is not None and set(dumped.aliases) == set(ALIASES)
    assert await state_of(redis, tree) == (False, True)  # reads change nothing

    # the next write warms it: one round trip more than on a hot tree
    writer = TranscriptStore(redis)
    parent = await writer.resolve(SCOPE, 16)
    assert parent is not None
    trips = writer.round_trips
    child = await writer.append(parent, [user("again")], aliases=[17])
    assert writer.round_trips - trips == 2  # warm, then the append
    assert child.depth == nodes[-1].depth + 1
    assert await state_of(redis, tree) == (True, False)
    assert not await redis.exists(keys.cold_alias_key(SCOPE))
    warm = await snapshot(redis, tree)
    new = {keys.node_field(child.id.seg, child.id.idx).encode(), b"#"}
    assert {k: v for k, v in warm["fields"].items() if k not in new} == {
        k: v for k, v in hot["fields"].items() if k != b"#"
    }
    assert warm["aliases"] == {**hot["aliases"], b"17": child.id.ref.encode()}
    assert warm["usage"] == hot["usage"]
    assert 0 < await redis.ttl(keys.scope_prefix(SCOPE) + f"u:n:{tree}") <= 3600
    index = keys.idle_key(keys.idle_bucket(SCOPE))
    assert await redis.zscore(index, keys.idle_member(SCOPE, tree)) is not None
    assert await reads(TranscriptStore(redis), leaves) == before


async def test_a_write_into_a_tree_gone_cold_since_it_was_read_warms_it_first(
    store: TranscriptStore, redis: Redis
) -> None:
    """A process that cached the tree hot appends after a sweep made it cold: the append
    script refuses, the store warms the tree and places the node; so do a fold and a
    choice."""
    nodes = await grown_tree(store, redis)
    tree = nodes[0].id.tree
    assert await compact(TranscriptStore(redis), tree) == "cold"
    child = await store.append(nodes[-1].id, [user("late")], aliases=[20])  # cached hot
    assert await state_of(redis, tree) == (True, False)
    assert (await TranscriptStore(redis).history(child.id)).depth == child.depth
    for write in (
        lambda: store.choose(child.id, "m", "third-model"),
        lambda: store.put_fold(child.id, [ChatMessage("system", "summary")]),
    ):
        assert await compact(TranscriptStore(redis), tree) == "cold"
        await write()
        assert await state_of(redis, tree) == (True, False)
    fresh = TranscriptStore(redis)
    assert [c.name for c in await fresh.choices_on_path(child.id)][-1] == "third-model"
    assert (await fresh.fold_on_path(child.id)) is not None


@pytest.mark.parametrize("step", ["read", "encode", "swap", "index", "warm"])
async def test_a_crash_at_every_step_leaves_the_tree_whole_hot_or_cold(
    store: TranscriptStore, redis: Redis, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Killed between any two steps of the compaction (after reading the tree, after
    building its value, after the swap before the index entry is written) or of the
    warm (the value read, the script not sent), the tree is hot or cold, never both nor
    neither, and reads whole; the next sweep finishes the work."""
    await redis.set(keys.IDLE_BACKFILLED, 1)  # (no scan for trees of older bots)
    nodes = await grown_tree(store, redis)
    tree, leaves = nodes[0].id.tree, nodes[-3::2]
    before = await reads(TranscriptStore(redis), leaves)
    dying = TranscriptStore(redis)
    if step == "warm":
        assert await compact(dying, tree) == "cold"
        monkeypatch.setattr(type(dying), "queue_touch", _crash)  # queued with the script
        with pytest.raises(Crash):
            await dying.append(nodes[-1].id, [user("lost")])
    else:
        target = {"read": "_encode", "encode": "_swap", "swap": "compact"}.get(step)
        if target is not None:
            monkeypatch.setattr(dying, target, _crashing(getattr(dying, target), step == "swap"))
        sweep = ColdSweep(redis, dying, "dying", cold_after_days=0, every=1)
        if step == "index":
            monkeypatch.setattr(sweep, "redis", _CrashingPipelines(redis))
        with pytest.raises(Crash):
            await sweep.tick()
    assert sum(await state_of(redis, tree)) == 1  # hot or cold, never both nor neither
    assert await reads(TranscriptStore(redis), leaves) == before
    for message_id in ALIASES:
        assert await TranscriptStore(redis).resolve(SCOPE, message_id) is not None
    monkeypatch.undo()
    await ColdSweep(redis, TranscriptStore(redis), "next", cold_after_days=0, every=1).sweep()
    assert await state_of(redis, tree) == (False, True)
    assert await redis.zcard(keys.idle_key(keys.idle_bucket(SCOPE))) == 0
    assert await reads(TranscriptStore(redis), leaves) == before


def _crash(*_args: Any, **_kwargs: Any) -> None:
    raise Crash


def _crashing(call: Callable[..., Awaitable[Any]], after: bool) -> Callable[..., Awaitable[Any]]:
    async def crashing(*args: Any, **kwargs: Any) -> Any:
        if after:
            await call(*args, **kwargs)
        raise Crash

    return crashing


class _CrashingPipelines:
    """A client whose pipelines die before they are sent (the sweep's index write)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    def pipeline(self, **kwargs: Any) -> Any:
        pipe = self._redis.pipeline(**kwargs)
        setattr(pipe, "execute", _async_crash)  # noqa: B010
        return pipe


async def _async_crash(*_args: Any, **_kwargs: Any) -> Any:
    raise Crash


async def test_unfinished_work_that_wrote_into_a_tree_blocks_its_compaction(
    store: TranscriptStore, redis: Redis
) -> None:
    """A node placed with its ref recorded in a hash (a turn's record) ties that record
    to the tree: while the record exists the tree stays hot."""
    nodes = await grown_tree(store, redis)
    tree = nodes[0].id.tree
    record = keys.scope_prefix(SCOPE) + "turn:77"
    await redis.hset(record, "c", 1)  # the claim made it
    await store.append(nodes[-1].id, [user("q")], record_in=(record, "u"))
    assert await compact(store, tree) == "busy"
    assert await state_of(redis, tree) == (True, False)
    await redis.delete(record)  # the turn's end
    assert await compact(store, tree) == "cold"


async def test_a_tree_written_less_than_cold_after_ago_stays_hot(
    store: TranscriptStore, redis: Redis
) -> None:
    nodes = await grown_tree(store, redis)
    done = await store.compact(SCOPE, [nodes[0].id.tree], cold_after=3600)
    assert done[nodes[0].id.tree].outcome == "fresh"
    assert done[nodes[0].id.tree].written > 0


async def test_the_sweep_runs_in_one_process_at_a_time_and_a_bounded_tick(
    store: TranscriptStore, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep_module, "TICK_TREES", 4)
    trees = []
    for chat in range(10):
        root = await store.start(f"80{chat}", [SYSTEM])
        await store.append(root.id, [user("hi")], aliases=[1])
        trees.append((f"80{chat}", root.id.tree))
    first = ColdSweep(redis, TranscriptStore(redis), "first", cold_after_days=0, every=1)
    second = ColdSweep(redis, TranscriptStore(redis), "second", cold_after_days=0, every=1)
    assert await first.lease.take()
    tick = await first.tick()
    assert tick.looked_at == 4 and tick.outcomes == {"cold": 4}
    assert await second.sweep() == 0  # the first holds the lease
    assert sum([(await state_of(redis, t, s))[1] for s, t in trees]) == 4
    assert await first.sweep() == 6
    assert first.ticks >= 3  # four at a time
    assert all([(await state_of(redis, t, s)) == (False, True) for s, t in trees])
    await first.lease.release()
    assert await second.sweep() == 0  # nothing left


async def test_trees_older_than_the_index_are_found_by_one_scan(
    store: TranscriptStore, redis: Redis
) -> None:
    nodes = await grown_tree(store, redis)
    await redis.delete(keys.idle_key(keys.idle_bucket(SCOPE)))  # written by an older bot
    await redis.hdel(keys.tree_key(SCOPE, nodes[0].id.tree), "w")
    assert await ColdSweep(redis, store, "one", cold_after_days=0, every=1).sweep() == 1
    assert await redis.exists(keys.IDLE_BACKFILLED)
    assert await state_of(redis, nodes[0].id.tree) == (False, True)


async def test_operators_and_the_viewer_read_a_cold_tree_as_a_hot_one(
    store: TranscriptStore, redis: Redis
) -> None:
    nodes = await grown_tree(store, redis)
    tree = nodes[0].id.tree

    async def read_all() -> list[Any]:
        fresh = TranscriptStore(redis)
        return [
            await conversations.export(redis, fresh, CHAT, 14),
            await conversations.tree(redis, fresh, CHAT, 16),
            await view.skeleton(
                redis, fresh, chat_id=CHAT, message_id=13, audit_days=0, prices=Prices()
            ),
        ]

    usage = Accounting(redis, clock=utc_now)
    hot = [*await read_all(), await usage.chain(CHAT, [n.id for n in nodes[:5]])]
    assert await compact(store, tree) == "cold"
    assert [*await read_all(), await usage.chain(CHAT, [n.id for n in nodes[:5]])] == hot
    assert hot[-1].calls == 1  # (the usage per node went cold with the tree)
    assert await state_of(redis, tree) == (False, True)
    erased = await forget_chat(redis, store, CHAT)
    assert (erased.conversations, erased.messages) == (1, len(ALIASES))
    assert await state_of(redis, tree) == (False, False)
    assert not await redis.exists(keys.cold_alias_key(SCOPE))
    assert await store.known(SCOPE, 13) and await store.resolve(SCOPE, 13) is None


async def test_on_a_cluster_a_cold_tree_stays_in_its_chat_slot(cluster_redis: Redis) -> None:  # noqa: F811
    store = TranscriptStore(cluster_redis)
    nodes = await grown_tree(store, cluster_redis, "702")
    tree, leaves = nodes[0].id.tree, nodes[-3::2]
    before = await reads(TranscriptStore(cluster_redis), leaves)
    sweep = ColdSweep(cluster_redis, store, "one", cold_after_days=0, every=1)
    assert await sweep.sweep() == 1
    routed: Any = cluster_redis  # a RedisCluster (connect types it as Redis)
    slot = routed.keyslot(keys.tree_key("702", tree))
    for key in (keys.cold_key("702", tree), keys.cold_alias_key("702"), keys.alias_key("702")):
        assert routed.keyslot(key) == slot
        assert await cluster_redis.exists(key) or key == keys.alias_key("702")
    assert not await cluster_redis.exists(keys.tree_key("702", tree))
    reader = TranscriptStore(cluster_redis)
    leaf = await reader.resolve("702", 16)
    assert leaf == nodes[-1].id
    assert await reads(reader, leaves) == before
    child = await reader.append(leaf, [user("more")], aliases=[30])
    assert await cluster_redis.exists(keys.tree_key("702", tree))
    assert not await cluster_redis.exists(keys.cold_key("702", tree))
    assert (await TranscriptStore(cluster_redis).history(child.id)).depth == child.depth


# ---------------------------------------------------------------- the real bot

REST = 1 / 86400  # COLD_AFTER_DAYS of one second


async def rest_and_sweep(app: Any) -> int:
    await asyncio.sleep(1.1)  # the trees' last writes are a second old
    assert app.sweep is not None
    compacted: int = await app.sweep.sweep()
    return compacted


async def test_a_reply_to_a_cold_tree_goes_on_at_its_depth_with_the_same_request_prefix(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot(cold_after_days=REST, cold_sweep_seconds=3600) as app:
        first, text = await ask(tg, app, USER, "hello")
        [answer] = answers_to(tg, USER, first)
        top = answer.message_id
        second, text = await ask(tg, app, USER, "tell me more", reply_to=top)
        assert text.startswith("[depth:4] ")
        [answer] = answers_to(tg, USER, second)
        asked = llm.requests[-1].messages
        assert await rest_and_sweep(app) == 1
        assert not [k async for k in redis.scan_iter(match="rc:{*}:t:*")]
    async with start_bot(cold_after_days=REST, cold_sweep_seconds=3600) as app:  # a new process
        _, text = await ask(tg, app, USER, "and then?", reply_to=answer.message_id)
        assert text.startswith("[depth:6] ")
        sent = llm.requests[-1].messages
        assert sent[: len(asked)] == asked  # the same request prefix, byte for byte
        assert [m["role"] for m in sent[len(asked) :]] == ["assistant", "user"]
        # a reply into the middle of the thread, cold again, branches at its depth
        assert await rest_and_sweep(app) == 1
        _, text = await ask(tg, app, USER, "back here", reply_to=top)
        assert text.startswith("[depth:4] ")


async def test_a_running_turn_blocks_the_compaction_of_its_tree(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot(cold_after_days=REST, cold_sweep_seconds=3600) as app:
        first, _ = await ask(tg, app, USER, "hello")
        [answer] = answers_to(tg, USER, first)
        llm.gate = asyncio.Event()
        tg.send_user_message(USER, USER, "slow one", reply_to=answer.message_id)
        await tg.wait_for(lambda: len(llm.requests) == 2, 10)  # claimed, asking the model
        assert await rest_and_sweep(app) == 0
        assert not [k async for k in redis.scan_iter(match="rc:{*}:z:*")]
        llm.gate.set()
        await tg.wait_for(lambda: app.runner.completed >= 2, 10)
        assert await rest_and_sweep(app) == 1


async def test_doctor_warns_past_80_percent_of_maxmemory_with_the_trees_at_rest(
    tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    redis = private_redis_client = Redis.from_url(private_redis.url)
    store = TranscriptStore(redis)
    for _ in range(3):
        root = await store.start(SCOPE, [SYSTEM])
        await store.append(root.id, [user("hi")])
    await asyncio.sleep(1)  # at rest for COLD_AFTER_DAYS below
    used = int((await redis.info("memory"))["used_memory"])
    await redis.config_set("maxmemory", used + used // 10)
    settings = settings_for(tg, llm, private_redis.url, cold_after_days=0.00001)
    try:
        lines, _ = await doctor(settings)
    finally:
        await redis.config_set("maxmemory", 0)
        await private_redis_client.aclose()
    line = line_of("\n".join(lines), "⚠ Redis memory:")
    assert "of maxmemory" in line and "3 of 3 hot conversation trees" in line


def test_the_index_members_parse_back() -> None:
    assert keys.parse_idle_member(keys.idle_member("-100123", 42)) == ("-100123", 42)
    assert NodeId.parse("1", "3:0.2").tree == 3
