"""The transcript store against a real redis-server."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from bot.data.connection import connect
from bot.retry import Outage
from transcript import (
    ChatMessage,
    CorruptRecordError,
    MissingNodeError,
    NodeId,
    StaleCacheError,
    StoreUnavailableError,
    ToolCall,
    TranscriptStore,
    UnknownSchemaError,
    keys,
)

from .redis_server import RedisServer, free_port

SYSTEM = ChatMessage("system", "You are terse.")


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def bot(text: str) -> ChatMessage:
    return ChatMessage("assistant", text)


async def chain(store: TranscriptStore, scope: str, turns: int) -> list[NodeId]:
    """A linear chain: root, then user/assistant nodes; returns every node id."""
    node = await store.start(scope, [SYSTEM])
    ids = [node.id]
    for i in range(turns):
        node = await store.append(node.id, [user(f"q{i}")])
        ids.append(node.id)
        node = await store.append(node.id, [bot(f"a{i}")])
        ids.append(node.id)
    return ids


async def test_new_root_holds_the_system_prompt(store: TranscriptStore) -> None:
    root = await store.start("100", [SYSTEM])
    transcript = await store.history(root.id)
    assert transcript.messages == (SYSTEM,)
    assert transcript.depth == 0


async def test_continue_appends_and_counts_depth(store: TranscriptStore) -> None:
    root = await store.start("100", [SYSTEM])
    u1 = await store.append(root.id, [user("hello")])
    a1 = await store.append(u1.id, [bot("hi")])
    u2 = await store.append(a1.id, [user("more")])
    a2 = await store.append(u2.id, [bot("sure")])
    transcript = await store.history(a2.id)
    assert transcript.messages == (SYSTEM, user("hello"), bot("hi"), user("more"), bot("sure"))
    assert (a1.depth, a2.depth, transcript.depth) == (2, 4, 4)
    # a linear chain stays in one segment
    assert {n.seg for n in (root.id, u1.id, a1.id, u2.id, a2.id)} == {root.id.seg}


async def test_branches_share_the_prefix_and_never_see_each_other(store: TranscriptStore) -> None:
    root = await store.start("100", [SYSTEM])
    u1 = await store.append(root.id, [user("hello")])
    a1 = await store.append(u1.id, [bot("hi")])
    left = await store.append(await_id(await store.append(a1.id, [user("left")])), [bot("L")])
    right = await store.append(await_id(await store.append(a1.id, [user("right")])), [bot("R")])
    prefix = (SYSTEM, user("hello"), bot("hi"))
    assert (await store.history(left.id)).messages == (*prefix, user("left"), bot("L"))
    assert (await store.history(right.id)).messages == (*prefix, user("right"), bot("R"))
    assert left.depth == right.depth == 4
    # the prefix is stored once: only one copy of each prefix node exists
    fields = await store._redis.hkeys(keys.tree_key("100", root.id.tree))
    assert len([f for f in fields if f not in (b"#", b"w", b"R")]) == 7


async def overwrite(store: TranscriptStore, node: NodeId, data: bytes) -> None:
    """Corrupt a stored node behind the store's back."""
    await store._redis.hset(
        keys.tree_key(node.scope, node.tree), keys.node_field(node.seg, node.idx), data
    )


def await_id(node: object) -> NodeId:
    assert hasattr(node, "id")
    node_id = node.id
    assert isinstance(node_id, NodeId)
    return node_id


async def test_tool_calls_round_trip(store: TranscriptStore) -> None:
    root = await store.start("100", [SYSTEM])
    call = ChatMessage("assistant", None, (ToolCall("c1", "clock", "{}"),))
    result = ChatMessage("tool", "12:00", tool_call_id="c1", name="clock")
    node = await store.append(root.id, [user("time?"), call, result, bot("noon")])
    fresh = TranscriptStore(store._redis)
    transcript = await fresh.history(node.id)
    assert transcript.messages == (SYSTEM, user("time?"), call, result, bot("noon"))
    assert transcript.depth == 2  # an assistant message carrying tool calls is no answer


async def test_several_outbound_ids_alias_one_node(store: TranscriptStore) -> None:
    root = await store.start("7", [SYSTEM])
    u = await store.append(root.id, [user("hi")], aliases=[10])
    a = await store.append(u.id, [bot("part 1 … part 3")])
    await store.alias("7", [11, 12, 13], a.id)
    fresh = TranscriptStore(store._redis)
    assert await fresh.resolve("7", 10) == u.id
    for message_id in (11, 12, 13):
        assert await fresh.resolve("7", message_id) == a.id
    assert await fresh.resolve("7", 14) is None


async def test_alias_keeps_its_first_node(store: TranscriptStore) -> None:
    root = await store.start("7", [SYSTEM])
    a = await store.append(root.id, [user("a")])
    b = await store.append(root.id, [user("b")])
    await store.alias("7", [5], a.id)
    await store.alias("7", [5], b.id)
    assert await TranscriptStore(store._redis).resolve("7", 5) == a.id


async def test_overlapping_message_ids_are_scoped_by_chat(store: TranscriptStore) -> None:
    root_a = await store.start("-100", [SYSTEM])
    root_b = await store.start("200", [ChatMessage("system", "other")])
    node_a = await store.append(root_a.id, [user("in A")], aliases=[57])
    node_b = await store.append(root_b.id, [user("in B")], aliases=[57])
    await store.alias("-100", [58], node_a.id)
    fresh = TranscriptStore(store._redis)
    assert await fresh.resolve("-100", 57) == node_a.id
    assert await fresh.resolve("200", 57) == node_b.id
    assert await fresh.resolve("200", 58) is None  # known in A only: unknown in B
    assert (await fresh.history(node_b.id)).messages == (
        ChatMessage("system", "other"),
        user("in B"),
    )
    with pytest.raises(ValueError, match="own scope"):
        await store.alias("200", [99], node_a.id)


async def test_idempotent_rewrite_returns_the_first_node(store: TranscriptStore) -> None:
    record = keys.scope_prefix("1") + "turn:5"  # a caller's hash of the same scope
    root = await store.start("1", [SYSTEM], record_in=(record, "r"))
    again = await store.start("1", [SYSTEM], record_in=(record, "r"))
    assert again.id == root.id
    first = await store.append(root.id, [user("x")], record_in=(record, "u"), aliases=[5])
    before = await store._redis.dbsize()
    for _ in range(3):
        repeat = await TranscriptStore(store._redis).append(
            root.id, [user("x")], record_in=(record, "u"), aliases=[5]
        )
        assert repeat == first
    assert await store._redis.dbsize() == before
    assert await store._redis.hget(record, "u") == first.id.ref.encode()
    with pytest.raises(ValueError, match="own scope"):
        await store.append(root.id, [user("y")], record_in=("rc:{2}:turn:5", "u"))
    # the chain did not fork: the next append still continues the segment
    nxt = await store.append(first.id, [bot("y")])
    assert nxt.id == NodeId("1", first.id.tree, first.id.seg, first.id.idx + 1)


async def test_a_guarded_node_is_placed_only_while_its_guard_holds(
    store: TranscriptStore,
) -> None:
    """``only_while``: a caller's claim, checked in the node's own atomic step."""
    redis = store._redis
    root = await store.start("1", [SYSTEM])
    claim = keys.scope_prefix("1") + "lease:9"
    placement = await store.child(root.id, [user("q")], aliases=[9], only_while=(claim, "me"))
    tree = keys.tree_key("1", root.id.tree)
    before = await redis.hgetall(tree)
    for holder in (None, "someone else"):
        if holder is not None:
            await redis.set(claim, holder)
        pipe = redis.pipeline(transaction=False)
        store.queue_place(pipe, placement)
        [reply, *_touched] = await pipe.execute()
        with pytest.raises(RuntimeError, match="guard did not hold"):
            await store.placed(placement, reply)
        assert await redis.hgetall(tree) == before  # nothing was written
        assert await redis.hget(keys.alias_key("1"), "9") is None
    await redis.set(claim, "me")
    pipe = redis.pipeline(transaction=False)
    store.queue_place(pipe, placement)
    [reply, *_touched] = await pipe.execute()
    node = await store.placed(placement, reply)
    assert await TranscriptStore(redis).resolve("1", 9) == node.id
    elsewhere = await store.child(root.id, [user("q")], only_while=("rc:{2}:lease:9", "me"))
    with pytest.raises(ValueError, match="own scope"):
        store.queue_place(redis.pipeline(transaction=False), elsewhere)


async def test_concurrent_loads_extending_one_cached_segment_do_not_collide(
    redis: Redis,
) -> None:
    """Regression (chaos run): two turns extending the same cached segment raced."""
    writer = TranscriptStore(redis)
    ids = await chain(writer, "9", 10)
    branch = await writer.append(ids[4], [user("branch")])
    fresh = TranscriptStore(redis)  # a restarted process: empty cache
    await fresh.history(branch.id)  # caches segment 0 only up to the branch point
    tip = ids[-1]
    nodes = await asyncio.gather(*(fresh.node(tip) for _ in range(4)))
    assert {n.id for n in nodes} == {tip}
    assert (await fresh.history(tip)).messages == (await writer.history(tip)).messages


async def test_nodes_are_never_overwritten(store: TranscriptStore) -> None:
    root = await store.start("1", [SYSTEM])
    first = await store.append(root.id, [user("first")])
    # A second child of the same parent must not replace the first one.
    second = await store.append(root.id, [user("second")])
    assert second.id != first.id
    fresh = TranscriptStore(store._redis)
    assert (await fresh.history(first.id)).messages[-1] == user("first")
    assert (await fresh.history(second.id)).messages[-1] == user("second")


async def test_corrupt_record_is_a_typed_error_naming_the_node(store: TranscriptStore) -> None:
    ids = await chain(store, "9", 3)
    bad = ids[2]
    await overwrite(store, bad, b"\xc1not msgpack")
    with pytest.raises(CorruptRecordError) as info:
        await TranscriptStore(store._redis).history(ids[-1])
    assert info.value.ref == str(bad)
    assert str(bad) in str(info.value)


async def test_malformed_record_is_a_typed_error(store: TranscriptStore) -> None:
    ids = await chain(store, "9", 2)
    bad = ids[1]
    await overwrite(store, bad, msgpack.packb([1, "n", 1, [[9, "x"]]]))
    with pytest.raises(CorruptRecordError, match=str(bad)):
        await TranscriptStore(store._redis).history(ids[-1])


async def test_unknown_schema_version_is_a_typed_error(store: TranscriptStore) -> None:
    ids = await chain(store, "9", 2)
    bad = ids[1]
    await overwrite(store, bad, msgpack.packb([99, "n", 1, []]))
    with pytest.raises(UnknownSchemaError) as info:
        await TranscriptStore(store._redis).history(ids[-1])
    assert info.value.ref == str(bad)
    assert info.value.version == 99


async def test_missing_ancestor_is_a_typed_error_never_a_shorter_chain(
    store: TranscriptStore,
) -> None:
    ids = await chain(store, "9", 3)
    branch_user = await store.append(ids[2], [user("branch")])
    leaf = await store.append(branch_user.id, [bot("b")])
    gone = ids[1]
    await store._redis.hdel(keys.tree_key("9", gone.tree), keys.node_field(gone.seg, gone.idx))
    for leaf_id in (ids[-1], leaf.id):
        with pytest.raises(MissingNodeError) as info:
            await TranscriptStore(store._redis).history(leaf_id)
        assert info.value.ref == str(gone)


async def test_branch_without_its_ancestors_is_a_typed_error(store: TranscriptStore) -> None:
    ids = await chain(store, "9", 1)
    await store.append(ids[0], [user("taken")])
    branch = await store.append(ids[0], [user("branch")])
    assert branch.id.idx == 0
    await overwrite(store, branch.id, msgpack.packb([1, "n", 1, [[1, "branch"]]]))
    with pytest.raises(CorruptRecordError, match="lacks its ancestors"):
        await TranscriptStore(store._redis).history(branch.id)


async def test_cold_chain_loads_in_a_handful_of_round_trips(store: TranscriptStore) -> None:
    ids = await chain(store, "5", 100)
    # nested branches: each one leaves the previous branch above its tip
    parent = ids[150]
    for _ in range(3):
        node = await store.append(parent, [user("b")])
        await store.append(node.id, [bot("taken")])  # occupies the continuation
        parent = node.id
    leaf = (await store.append(parent, [bot("c")])).id
    cold = TranscriptStore(store._redis)
    transcript = await cold.history(ids[-1])
    assert cold.round_trips == 1  # linear: record and nodes in one pipeline
    assert transcript.depth == 200
    cold = TranscriptStore(store._redis)
    transcript = await cold.history(leaf)
    assert cold.round_trips == 2  # own segment, then one MGET for every ancestor run
    assert transcript.depth == 150 + 3 + 1
    assert transcript.messages[-5:] == (bot("a74"), user("b"), user("b"), user("b"), bot("c"))
    hot_before = cold.round_trips
    assert (await cold.history(leaf)) == transcript
    assert cold.round_trips == hot_before


async def test_deep_branching_beyond_inline_ancestors_still_assembles(
    store: TranscriptStore,
) -> None:
    small = TranscriptStore(store._redis, inline_ancestors=2)
    root = await small.start("3", [SYSTEM])
    expected = [SYSTEM]
    parent = root.id
    for i in range(12):
        # a decoy child takes the continuation slot, forcing the next node to branch
        await small.append(parent, [user(f"decoy{i}")])
        node = await small.append(parent, [user(f"u{i}")])
        expected.append(user(f"u{i}"))
        parent = node.id
    cold = TranscriptStore(store._redis, inline_ancestors=2)
    transcript = await cold.history(parent)
    assert transcript.messages == tuple(expected)
    assert transcript.depth == 12


async def test_cache_counts_the_heap_it_holds(redis: Redis) -> None:
    """TRANSCRIPT_CACHE_BYTES bounds real memory: the cache's count of its bytes is at most a
    tenth under and a quarter over the Python heap its conversations take (traced), so
    an operator's bound is not silently exceeded."""
    store = TranscriptStore(redis)
    await chain(store, "warm", 1)
    gc.collect()
    tracemalloc.start()
    try:
        before, counted = tracemalloc.get_traced_memory()[0], store.cache.bytes_used
        for c in range(300):  # a root, then a question and its answer twice, aliased
            node = await store.start(f"chat{c % 10}", [SYSTEM])
            for i in range(4):
                said = user(f"question {i} of {c}") if i % 2 == 0 else bot(f"answer {i} " * 20)
                node = await store.append(node.id, [said], aliases=[c * 10 + i])
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = store.cache.bytes_used - counted
    assert 0.9 * heap <= counted <= 1.25 * heap, (counted, heap)


async def test_cache_is_bounded_in_bytes_and_refills_lazily(redis: Redis) -> None:
    small = TranscriptStore(redis, cache_bytes=60_000)
    leaves = []
    for c in range(20):
        ids = await chain(small, f"chat{c}", 10)
        leaves.append(ids[-1])
        assert small.cache.bytes_used <= 60_000
    # early chains were evicted; assembling them reloads from Redis correctly
    trips = small.round_trips
    transcript = await small.history(leaves[0])
    assert small.round_trips > trips
    assert transcript.depth == 20
    assert transcript.messages[-1] == bot("a9")
    assert small.cache.bytes_used <= 60_000
    # the most recent chain is still hot
    trips = small.round_trips
    await small.history(leaves[0])
    assert small.round_trips == trips


async def test_record_larger_than_the_cache_is_served_uncached(redis: Redis) -> None:
    tiny = TranscriptStore(redis, cache_bytes=2_000)
    root = await tiny.start("1", [SYSTEM])
    node = await tiny.append(root.id, [user("x" * 10_000)])
    assert (await tiny.history(node.id)).messages[-1].content == "x" * 10_000
    assert tiny.cache.bytes_used <= 2_000


async def test_two_stores_see_each_others_writes(redis: Redis) -> None:
    one, two = TranscriptStore(redis), TranscriptStore(redis)
    ids = await chain(one, "42", 2)
    assert (await one.history(ids[-1])).depth == 4  # one has the segment cached
    # two extends one's chain; one still holds a shorter cached prefix
    u = await two.append(ids[-1], [user("from two")], aliases=[900])
    assert await one.resolve("42", 900) == u.id
    seen = await one.history(u.id)
    assert seen.messages[-1] == user("from two")
    assert seen.depth == 5
    # one appends below the same parent: the slot is taken, so it branches
    mine = await one.append(ids[-1], [user("from one")])
    assert mine.id.seg != u.id.seg
    assert (await two.history(mine.id)).messages[-1] == user("from one")


@pytest.mark.parametrize("crash", [False, True])
async def test_chains_survive_a_redis_restart(private_redis: RedisServer, crash: bool) -> None:
    client = connect(private_redis.url)
    store = TranscriptStore(client)
    ids = await chain(store, "77", 20)
    branch = await store.append(ids[10], [user("branch")], aliases=[5])
    before_main = await store.history(ids[-1])
    before_branch = await store.history(branch.id)
    private_redis.restart(crash=crash)
    # the same client reconnects (a connection the restart closed may fail one call:
    # the caller's outage policy tries again); a fresh store has an empty cache
    fresh = TranscriptStore(client)
    outage = Outage("Redis", "")
    assert (
        await outage.guard(lambda: fresh.history(ids[-1]), on=(StoreUnavailableError,))
        == before_main
    )
    assert await fresh.history(branch.id) == before_branch
    assert await fresh.resolve("77", 5) == branch.id
    # writing goes on where it stopped
    nxt = await fresh.append(ids[-1], [user("after restart")])
    assert nxt.id.idx == ids[-1].idx + 1
    await client.aclose()


async def test_redis_unreachable_is_a_typed_error_without_secrets() -> None:
    url = f"redis://:hunter2secret@127.0.0.1:{free_port()}/0"
    client = connect(url, socket_timeout=0.5, connect_timeout=0.5)
    store = TranscriptStore(client)
    with pytest.raises(StoreUnavailableError) as info:
        await asyncio.wait_for(store.start("1", [SYSTEM]), timeout=10)
    assert "hunter2secret" not in str(info.value)
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(store.resolve("1", 1), timeout=10)
    await client.aclose()


# --------------------------------------------------------------- property

# A program is a list of (parent choice, message kind) steps building a tree.
steps = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from("ua")),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=steps, inline=st.integers(min_value=1, max_value=4))
def test_every_leaf_assembles_to_its_path(
    redis_server: RedisServer, program: list[tuple[int, str]], inline: int
) -> None:
    async def run() -> None:
        client = connect(redis_server.url)
        await client.delete(*[k async for k in client.scan_iter(match="rc:{prop}*")] or ["x"])
        store = TranscriptStore(client, inline_ancestors=inline)
        root = await store.start("prop", [SYSTEM])
        paths: dict[NodeId, tuple[ChatMessage, ...]] = {root.id: (SYSTEM,)}
        order = [root.id]
        for n, (choice, kind) in enumerate(program):
            parent = order[choice % len(order)]
            message = user(f"u{n}") if kind == "u" else bot(f"a{n}")
            node = await store.append(parent, [message])
            paths[node.id] = (*paths[parent], message)
            order.append(node.id)
        for reader in (store, TranscriptStore(client, inline_ancestors=inline)):
            for node_id, expected in paths.items():
                transcript = await reader.history(node_id)
                assert transcript.messages == expected
                assert transcript.depth == sum(1 for m in expected if m.role != "system")
        await client.aclose()

    asyncio.run(run())


async def test_path_lists_the_nodes_root_to_leaf(store: TranscriptStore) -> None:
    ids = await chain(store, "8", 3)
    taken = await store.append(ids[2], [user("taken")])
    branch = await store.append(ids[2], [user("branch")])
    path = await TranscriptStore(store._redis).path(branch.id)
    assert [n.id for n in path] == [*ids[:3], branch.id]
    assert taken.id not in [n.id for n in path]
    assert [n.depth for n in path] == [0, 1, 2, 3]


async def test_a_fold_stands_for_its_prefix_without_deleting_it(store: TranscriptStore) -> None:
    ids = await chain(store, "6", 5)  # root + 10 nodes
    summary = ChatMessage("system", "Summary: q0..q2 were asked and answered.")
    fold = await store.put_fold(ids[6], [summary])
    assert fold.depth == 6
    # a second fold at the same node does not replace the first
    again = await store.put_fold(ids[6], [ChatMessage("system", "other")])
    assert again.messages == (summary,)
    fresh = TranscriptStore(store._redis)
    found = await fresh.fold_on_path(ids[-1])
    assert found == fold
    view = await fresh.active(ids[-1], found)
    assert view.messages == (SYSTEM, summary, user("q3"), bot("a3"), user("q4"), bot("a4"))
    assert view.depth == 10  # the whole chain, folded part included
    assert view.folded == fold
    assert len((await fresh.history(ids[-1])).messages) == 11  # originals all there


async def test_a_fold_serves_branches_below_and_not_above(store: TranscriptStore) -> None:
    ids = await chain(store, "6", 5)
    fold = await store.put_fold(ids[6], [ChatMessage("system", "S")])
    below = await store.append(ids[8], [user("below")])  # branch under the fold
    above = await store.append(ids[4], [user("above")])  # branch that left above it
    fresh = TranscriptStore(store._redis)
    assert await fresh.fold_on_path(below.id) == fold
    assert await fresh.fold_on_path(above.id) is None
    assert await fresh.fold_on_path(ids[6]) == fold  # the folded node itself
    deeper = await store.put_fold(ids[8], [ChatMessage("system", "S2")])
    assert await TranscriptStore(store._redis).fold_on_path(below.id) == deeper
    # a fold on another branch (a segment of its own) is not on this path
    aside = await store.put_fold(above.id, [ChatMessage("system", "A")])
    assert await TranscriptStore(store._redis).fold_on_path(below.id) == deeper
    assert await TranscriptStore(store._redis).fold_on_path(above.id) == aside
    assert (await fresh.active(below.id, deeper)).messages == (
        SYSTEM,
        ChatMessage("system", "S2"),
        user("below"),
    )
    with pytest.raises(ValueError, match="not on the path"):
        await fresh.active(above.id, fold)


async def lose_last_writes(store: TranscriptStore, scope: str, *nodes: NodeId) -> None:
    """What a Redis Cluster failover (or a restart from an AOF missing its last second)
    does to acknowledged writes: the nodes' records and aliases are gone, behind the
    store's back, and the counters that allocated them are back where they were."""
    for node in nodes:
        await store._redis.hdel(
            keys.tree_key(node.scope, node.tree), keys.node_field(node.seg, node.idx)
        )
    aliases = await store._redis.hgetall(keys.alias_key(scope))
    refs = {node.ref.encode() for node in nodes}
    lost = [field for field, ref in aliases.items() if ref in refs]
    if lost:
        await store._redis.hdel(keys.alias_key(scope), *lost)


async def test_a_process_that_cached_lost_nodes_never_appends_below_their_reused_ids(
    store: TranscriptStore, redis: Redis
) -> None:
    """Soak --cluster --lossy (seed 3904): a failover lost a turn's question; another
    process placed another thread's question at its id, and the process that had cached
    the lost one stored its answer below that id: a thread holding another's question
    (a reply to the answer was asked with it). An append below a parent that Redis no
    longer holds as cached is refused, and the tree is read again from Redis."""
    root = await store.start("101", [SYSTEM])
    asked = await store.append(root.id, [user("lost question")], aliases=[10])
    await lose_last_writes(store, "101", asked.id)
    other_process = TranscriptStore(redis)
    other = await other_process.append(root.id, [user("another thread")], aliases=[12])
    assert other.id == asked.id  # the same id, handed out again

    with pytest.raises(StaleCacheError):
        await store.append(asked.id, [bot("the lost question's answer")], aliases=[11])
    # nothing was written below the other thread's question
    assert await store.resolve("101", 11) is None
    assert await redis.hget(keys.tree_key("101", root.id.tree), "0.2") is None
    # run again, the step reads Redis: the other thread is what it finds there
    assert (await store.history(asked.id)).messages == (SYSTEM, user("another thread"))
    answer = await store.append(other.id, [bot("its answer")], aliases=[13])
    assert (await other_process.history(answer.id)).messages == (
        SYSTEM, user("another thread"), bot("its answer"),
    )  # fmt: skip


async def test_a_node_read_before_its_tree_left_the_cache_still_guards_its_child(
    store: TranscriptStore, redis: Redis
) -> None:
    """Soak --cluster --lossy (seed 3908, after the fix above): a process took over a
    turn whose question it held in its cache from before a failover that lost it; the
    question's id now held another thread's question. The turn read the lost question,
    asked the model with it, and another turn of the same process then met the check
    and dropped the tree from the cache; the answer's append, reading its parent from
    Redis afresh, checked nothing and stored the lost question's answer below the other
    thread's question (whose own turn then showed it). The node the turn read carries
    its record's digest: the append below it is checked against that."""
    root = await store.start("103", [SYSTEM])
    asked = await store.append(root.id, [user("lost question")], aliases=[10])
    await lose_last_writes(store, "103", asked.id)
    other_process = TranscriptStore(redis)
    other = await other_process.append(root.id, [user("another thread")], aliases=[12])
    assert other.id == asked.id
    read = await store.node(asked.id)  # the turn reads its question from the cache
    assert read.messages == (user("lost question"),)
    store.cache.forget_tree("103", asked.id.tree)  # another turn met the check meanwhile
    with pytest.raises(StaleCacheError):
        await store.append(read, [bot("the lost question's answer")], aliases=[11])
    assert await redis.hget(keys.tree_key("103", root.id.tree), "0.2") is None
    # a node read afresh (from Redis) takes its child
    fresh = await store.node(asked.id)
    answer = await store.append(fresh, [bot("its answer")], aliases=[13])
    assert (await store.history(answer.id)).messages == (
        SYSTEM, user("another thread"), bot("its answer"),
    )  # fmt: skip


async def test_a_node_shown_again_is_checked_against_redis(
    store: TranscriptStore, redis: Redis
) -> None:
    """An answer an earlier run stored is shown again from its id (no append below it to
    check): a cached node Redis lost and handed out again is never shown for it."""
    root = await store.start("104", [SYSTEM])
    asked = await store.append(root.id, [user("q")], aliases=[1])
    lost = await store.append(asked.id, [bot("the lost answer")], aliases=[2])
    await lose_last_writes(store, "104", lost.id)
    other = await TranscriptStore(redis).append(asked.id, [bot("the answer")], aliases=[3])
    assert other.id == lost.id
    assert (await store.node(lost.id)).messages == (bot("the lost answer"),)  # cached
    assert (await store.current(lost.id)).messages == (bot("the answer"),)
    assert (await store.node(lost.id)).messages == (bot("the answer"),)  # the cache too
    # unchanged: the cached node, after one read
    assert (await store.current(asked.id)).messages == (user("q"),)


async def test_an_append_below_an_unchanged_parent_is_not_refused(
    store: TranscriptStore, redis: Redis
) -> None:
    """The check costs nothing where nothing was lost: parents cached from a write or
    from a read, by this process or another, take their children."""
    root = await store.start("102", [SYSTEM])
    asked = await store.append(root.id, [user("q")], aliases=[1])
    reader = TranscriptStore(redis)
    loaded = await reader.node(asked.id)  # cached from a read
    answer = await reader.append(loaded.id, [bot("a")], aliases=[2])
    again = await store.append(answer.id, [user("q2")], aliases=[3])  # parent read from Redis
    assert (await store.history(again.id)).messages == (SYSTEM, user("q"), bot("a"), user("q2"))


async def test_an_id_redis_hands_out_again_after_losing_writes_never_mixes_threads(
    store: TranscriptStore, redis: Redis
) -> None:
    """Soak --cluster --lossy (seed 3902): a failover lost a turn's nodes; Redis handed
    their ids out again to another thread, and the process that had cached the lost
    nodes answered that thread with the lost one's history. A new node placed where
    the cache holds one proves the cache stale: the tree is read again from Redis."""
    root = await store.start("100", [SYSTEM])
    asked = await store.append(root.id, [user("lost question")], aliases=[10])
    answered = await store.append(asked.id, [bot("lost answer")], aliases=[11])
    assert (await store.history(answered.id)).messages[-1] == bot("lost answer")
    await lose_last_writes(store, "100", asked.id, answered.id)

    other = await store.append(root.id, [user("another thread")], aliases=[12])
    assert other.id == asked.id  # the same id, handed out again
    assert (await store.history(other.id)).messages == (SYSTEM, user("another thread"))
    reply = await store.append(other.id, [bot("its answer")], aliases=[13])
    assert (await store.history(reply.id)).messages == (
        SYSTEM, user("another thread"), bot("its answer"),
    )  # fmt: skip
    # and a reply to the lost answer is not taken into the new thread
    assert await store.resolve("100", 11) is None
    # another process, whose cache never held the lost nodes, reads the same
    fresh = TranscriptStore(redis)
    assert (await fresh.history(reply.id)).messages == (await store.history(reply.id)).messages
