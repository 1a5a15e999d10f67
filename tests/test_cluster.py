"""The bot on a real 3-master Redis Cluster (REDIS_CLUSTER=true).

The suite starts the cluster itself from ``redis-server --cluster-enabled yes``
(tests/redis_server.py). The whole conversation flow runs on it, its keys land
on every master, and a restart of the bot and of the cluster keeps the threads.
On a cluster with a replica, a message enters the intake only once the replica
holds it too (a failover right after must not lose it).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.bus.inbound import EDIT, Inbound
from bot.bus.intake import Intake
from bot.data import keys
from bot.data.connection import connect, replica_ack
from bot.model import Usage
from bot.model.vision import Vision
from bot.turn.state import TurnStates
from bot.usage.accounting import Accounting
from bot.usage.calls import CallRecord, Totals, day_of, utc_now
from transcript import ChatMessage, NodeId, StoreUnavailableError, TranscriptStore
from transcript import keys as transcript_keys
from transcript.outage import guarded

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import OTHER_USER, USER, answers_to, ask, running_bot, said, settings_for
from .redis_server import RedisCluster, cluster_supported
from .test_drafts import stop_passed_on

OWNER = USER


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    reason = cluster_supported()
    if reason is not None:
        pytest.skip(f"no Redis Cluster: {reason}")
    started = RedisCluster(tmp_path_factory.mktemp("cluster"))
    started.start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One master holding every slot, and its replica."""
    reason = cluster_supported()
    if reason is not None:
        pytest.skip(f"no Redis Cluster: {reason}")
    started = RedisCluster(tmp_path_factory.mktemp("replicated"), masters=1, replicas=1)
    started.start()
    yield started
    started.stop()


@contextlib.asynccontextmanager
async def own_cluster(path: Path, **shape: int) -> AsyncIterator[tuple[RedisCluster, Redis]]:
    """A Redis Cluster of the test's own (for tests that kill its nodes), and a client."""
    reason = cluster_supported()
    if reason is not None:
        pytest.skip(f"no Redis Cluster: {reason}")
    started = RedisCluster(path, **shape)
    started.start()
    client = connect(started.url, cluster=True)
    try:
        yield started, client
    finally:
        await client.aclose()
        started.stop()


@pytest.fixture
async def cluster_redis(cluster: RedisCluster) -> AsyncIterator[Redis]:
    client = connect(cluster.url, cluster=True)
    for port in cluster.ports:
        node = connect(f"redis://127.0.0.1:{port}/0")
        await node.flushall()
        await node.aclose()
    yield client
    await client.aclose()


async def keys_per_master(cluster: RedisCluster) -> list[int]:
    counts = []
    for port in cluster.ports:
        node = connect(f"redis://127.0.0.1:{port}/0")
        counts.append(int(await node.dbsize()))
        await node.aclose()
    return counts


async def command_reply(tg: FakeTelegram, chat: int, text: str, reply_to: int | None = None) -> str:
    message_id = tg.send_user_message(chat, chat, text, reply_to=reply_to)["message_id"]
    await tg.wait_for(lambda: bool(answers_to(tg, chat, message_id)), 30, what=text)
    return answers_to(tg, chat, message_id)[0].text or ""


async def test_the_conversation_flow_runs_on_a_cluster_and_survives_restarts(
    tg: FakeTelegram, llm: FakeOpenAI, cluster: RedisCluster, cluster_redis: Redis
) -> None:
    settings = settings_for(
        tg,
        llm,
        cluster.url,
        redis_cluster=True,
        owner_user_ids=frozenset({OWNER}),
        intake_shards=4,
    )
    chats = [USER, OTHER_USER, *range(3001, 3009)]
    for chat in chats[2:]:
        tg.add_private_chat(chat, f"User{chat}")
    topical = tg.add_private_chat(3009)  # a private chat with topics (TOPIC_THREADS)
    tg.private_topics(topical)
    async with running_bot(settings) as app:
        first, text = await ask(tg, app, USER, "root question")
        assert text == "[depth:2] echo: root question"
        [answer] = answers_to(tg, USER, first)
        left, text = await ask(tg, app, USER, "left", reply_to=answer.message_id)
        assert text == "[depth:4] echo: left"
        _, text = await ask(tg, app, USER, "right", reply_to=answer.message_id)
        assert text == "[depth:4] echo: right"
        assert ("user", "left") not in said(llm)  # branches never see each other
        for chat in chats[1:]:  # chats whose keys spread over the slots
            _, text = await ask(tg, app, chat, f"hello from {chat}", user=chat)
            assert text == f"[depth:2] echo: hello from {chat}"
        usage = await command_reply(tg, USER, "/usage", reply_to=answer.message_id)
        assert "This conversation" in usage
        stats = await command_reply(tg, USER, "/stats")
        assert f"{OTHER_USER}:" in stats
        # a new conversation opens a topic; the topic's next message waits for its answer
        tg.send_user_message(topical, topical, "topic root")
        await tg.wait_for(lambda: any(c.status == 200 for c in tg.calls_to("createForumTopic")))
        opened = [c.result for c in tg.calls_to("createForumTopic") if c.status == 200]
        topic = opened[0]["message_thread_id"]
        _, text = await ask(tg, app, topical, "in the topic", user=topical, thread_id=topic)
        assert text == "[depth:4] echo: in the topic"
    spread = await keys_per_master(cluster)
    assert all(count > 0 for count in spread), spread  # no master is left out

    # the bot restarts: the thread continues where it was
    [left_answer] = answers_to(tg, USER, left)
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "deeper", reply_to=left_answer.message_id)
        assert text == "[depth:6] echo: deeper"
        contents = [content for _, content in said(llm)]
        assert "left" in contents and "right" not in contents

    # the whole cluster restarts (its data on disk): still the same thread
    cluster.restart()
    [deeper] = [m for m in tg.bot_messages(USER) if m.text == "[depth:6] echo: deeper"]
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "and deeper", reply_to=deeper.message_id)
        assert text == "[depth:8] echo: and deeper"


async def test_usage_keys_spread_over_the_masters_and_stats_sum_them(
    cluster: RedisCluster, cluster_redis: Redis
) -> None:
    accounting = Accounting(cluster_redis, clock=utc_now)
    users = range(4001, 4013)
    for n, user in enumerate(users):  # each user in a chat of their own, two calls each
        for turn in (1, 3):
            sent = NodeId(str(user), 1, 0, turn)
            usage = Usage(100 * (n + 1), turn)
            await accounting.record(CallRecord(user, user, turn, sent, "m", usage, 0.1))
    per_user, [(_, today)] = await accounting.stats(days=1, users=3)
    assert today == Totals(sum(200 * (n + 1) for n in range(12)), 4 * 12, 0, 24)
    assert [user for user, _, _ in per_user] == [4012, 4011, 4010]
    assert per_user[0][1] == per_user[0][2] == Totals(2400, 4, 0, 2)
    assert await accounting.chain(4001, [NodeId("4001", 1, 0, 1)]) == Totals(100, 1, 0, 1)
    masters: list[set[str]] = []
    for port in cluster.ports:  # which kinds of usage key each master holds
        node = connect(f"redis://127.0.0.1:{port}/0")
        names = [_text(k) async for k in node.scan_iter(match="rc:*")]
        await node.aclose()
        masters.append({kind(name) for name in names})
    assert sum("totals" in found for found in masters) > 1, masters
    assert sum("detail" in found for found in masters) > 1, masters


async def test_turn_states_and_done_marks_keep_each_script_in_its_chat_slot(
    cluster: RedisCluster, cluster_redis: Redis
) -> None:
    """Begin (lease, state, three days' done sets), finish (the done set, with a write
    of another slot on the same round trip), read and failed, for chats on every master:
    a script or transaction touching two slots would fail with CROSSSLOT."""
    states = TurnStates(cluster_redis, TranscriptStore(cluster_redis), "node-a")
    chats = range(5001, 5013)
    for chat in chats:
        for message in (Inbound(chat, 7, chat, "hi"), Inbound(chat, 7, chat, "hey", kind=EDIT)):
            state = await states.begin(message)
            assert state is not None and not state.done
            assert await states.failed(message) == 1

            def other_slot(pipe: Pipeline, chat: int = chat) -> None:
                pipe.set(f"rc:{{elsewhere:{chat}}}", "1")

            await states.finish(message, state, [], with_writes=[other_slot])
            again = await states.begin(message)
            assert again is not None and again.done
            assert (await states.read(message)).done
            assert await states.failed(message) == 0
    spread = await keys_per_master(cluster)
    assert all(count > 0 for count in spread), spread


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else name


def kind(name: str) -> str:
    return "totals" if name.startswith("rc:{usage:") else "detail"


async def test_an_image_set_aside_and_the_turns_call_count_share_one_transaction(
    cluster_redis: Redis,
) -> None:
    vision = Vision(cluster_redis)
    states = TurnStates(cluster_redis, TranscriptStore(cluster_redis), "node-a")
    scope, digests = str(USER), ["a" * 64, "b" * 64]
    state = await states.begin(Inbound(USER, 7, USER, "hi"))  # counts call 1
    assert state is not None
    for digest, calls in zip(digests, (2, 3), strict=True):

        def aside(pipe: Pipeline, digest: str = digest) -> None:
            Vision.queue_set_aside(pipe, scope, "m", digest)

        await states.count_call(state, with_writes=aside)
        assert state.calls == calls
    assert await vision.unreadable(scope, "m", digests) == set(digests)
    assert await vision.unreadable(scope, "other-model", digests) == set()
    await vision.give_back(scope, digests[:1])
    assert await vision.unreadable(scope, "m", [*digests, digests[1]]) == {digests[1]}


async def test_a_stop_reaches_another_process_on_a_cluster(cluster_redis: Redis) -> None:
    await stop_passed_on(cluster_redis)


async def waits_sent(ports: list[int]) -> int:
    """WAIT commands the nodes have run (INFO commandstats)."""
    total = 0
    for port in ports:
        node = connect(f"redis://127.0.0.1:{port}/0")
        total += int((await node.info("commandstats")).get("cmdstat_wait", {}).get("calls", 0))
        await node.aclose()
    return total


async def replica_entries(replicated: RedisCluster) -> int:
    node = connect(f"redis://127.0.0.1:{replicated.ports[1]}/0")
    await node.readonly()  # a replica answers reads of its slots
    count = int(await node.xlen(keys.INTAKE_STREAM))
    await node.aclose()
    return count


async def test_a_turn_records_its_answer_parts_and_end_once_the_replica_holds_them(
    replicated: RedisCluster,
) -> None:
    """The answer's node goes on screen next, a part is on screen before it is
    recorded, the answer before the turn's end is written: a failover that lost one of
    these writes would show them twice (the turn run again) or leave the parts aliased
    to a lost node. So, like the intake's append, each returns once the replica holds
    it."""
    client = connect(replicated.url, cluster=True)
    store = TranscriptStore(client)
    states = TurnStates(client, store, "node-a")
    accounting = Accounting(client, clock=utc_now)
    assert states.replicas is not None and accounting.replicas is not None
    assert states.replicas is accounting.replicas  # one per client: one view of the replicas
    states.replicas.timeout_ms = accounting.replicas.timeout_ms = 30_000
    message = Inbound(OTHER_USER, 1, OTHER_USER, "hi")
    state = await states.begin(message)
    assert state is not None
    root = await store.start(str(OTHER_USER), [ChatMessage("system", "s")])
    user = await store.append(root.id, [ChatMessage("user", "hi")], aliases=[1])
    replica = replicated.nodes[1].proc
    assert replica is not None
    node = connect(f"redis://127.0.0.1:{replicated.ports[1]}/0")
    await node.readonly()  # the replica: promoted, what would it know?
    waited = await waits_sent(replicated.ports)

    async def answer() -> None:
        placement = await states.answer_placement(state, user, "hello", [10])
        call = CallRecord(OTHER_USER, OTHER_USER, 1, user.id, "m", Usage(10, 2), 0.1)
        [reply, *_others] = await accounting.record(
            call, with_writes=partial(store.queue_place, placement=placement)
        )
        await states.answer_placed(state, placement, reply)

    writes: list[Callable[[], Coroutine[Any, Any, None]]] = [
        answer,
        lambda: states.add_part(message, state, [10]),
        lambda: states.finish(message, state, [10]),
    ]
    for write in writes:
        replica.send_signal(signal.SIGSTOP)  # the replica falls behind
        try:
            writing = asyncio.create_task(write())
            done, _ = await asyncio.wait({writing}, timeout=0.5)
            assert not done  # the master has it, the replica not yet: not done
        finally:
            replica.send_signal(signal.SIGCONT)
        await asyncio.wait_for(writing, 30)
        if state.parts and not state.done:  # the part is in the ledger
            assert await node.hget(keys.pending_parts_key(str(OTHER_USER)), "10") == b"1"
    assert state.answer is not None  # ... and the answer's node on the replica
    tree = transcript_keys.tree_key(str(OTHER_USER), state.answer.tree)
    field = transcript_keys.node_field(state.answer.seg, state.answer.idx)
    assert await node.hexists(tree, field)
    assert states.replicas.unacknowledged == accounting.replicas.unacknowledged == 0
    assert await waits_sent(replicated.ports) == waited + 3
    done_key = keys.done_key(str(OTHER_USER), day_of(utc_now()), "1")
    assert await node.sismember(done_key, "1")  # the turn was answered
    await node.aclose()
    await client.aclose()


async def test_a_message_enters_the_intake_once_the_replica_holds_it(
    replicated: RedisCluster,
) -> None:
    """The update is confirmed to Telegram right after the append: a failover then
    must not lose it, so the append waits for the replica (WAIT on its connection)."""
    client = connect(replicated.url, cluster=True)
    intake = Intake(client, "a")
    await intake.ensure_group()
    assert intake.replicas is not None
    stopping = asyncio.Event()
    waited = await waits_sent(replicated.ports)  # (the module's other tests wait too)
    assert await intake.record(Inbound(USER, 1, USER, "hello"), stopping)
    assert await waits_sent(replicated.ports) == waited + 1
    assert await replica_entries(replicated) == 1

    replica = replicated.nodes[1].proc
    assert replica is not None
    intake.replicas.timeout_ms = 30_000
    replica.send_signal(signal.SIGSTOP)  # the replica falls behind
    try:
        appending = asyncio.create_task(intake.record(Inbound(USER, 2, USER, "again"), stopping))
        done, _ = await asyncio.wait({appending}, timeout=0.5)
        assert not done  # the master has it, the replica not yet: not confirmed
    finally:
        replica.send_signal(signal.SIGCONT)
    assert await asyncio.wait_for(appending, 30)
    assert await replica_entries(replicated) == 2
    assert intake.replicas.unacknowledged == 0

    # the replica stopped and its link cut (soak --lossy): the master lists no replica,
    # but the replica would be promoted if the master died now, so the append waits
    replica.send_signal(signal.SIGSTOP)
    try:
        master = connect(f"redis://127.0.0.1:{replicated.ports[0]}/0")
        await master.execute_command("CLIENT", "KILL", "TYPE", "replica")  # type: ignore[no-untyped-call]
        await master.aclose()
        intake.replicas._replicas.clear()  # asked again now (ROLE), not in 5 s
        appending = asyncio.create_task(intake.record(Inbound(USER, 5, USER, "cut"), stopping))
        done, _ = await asyncio.wait({appending}, timeout=0.5)
        assert not done
    finally:
        replica.send_signal(signal.SIGCONT)
    assert await asyncio.wait_for(appending, 30)  # the replica reconnected and acknowledged
    assert await replica_entries(replicated) == 3
    assert intake.replicas.unacknowledged == 0
    await client.aclose()


async def test_a_message_is_taken_when_the_replica_is_away_longer_than_the_wait(
    replicated: RedisCluster,
) -> None:
    """Counted, as safe as on the master alone, rather than refused."""
    client = connect(replicated.url, cluster=True)
    intake = Intake(client, "a")
    await intake.ensure_group()
    assert intake.replicas is not None
    stopping = asyncio.Event()
    replica = replicated.nodes[1].proc
    assert replica is not None
    intake.replicas.timeout_ms = 50
    replica.send_signal(signal.SIGSTOP)
    try:
        assert await asyncio.wait_for(intake.record(Inbound(USER, 3, USER, "3"), stopping), 30)
    finally:
        replica.send_signal(signal.SIGCONT)
    assert intake.replicas.unacknowledged == 1
    # ... and until the master's replicas are asked again, its writes wait no more
    waited = await waits_sent(replicated.ports)
    assert await asyncio.wait_for(intake.record(Inbound(USER, 4, USER, "4"), stopping), 30)
    assert await waits_sent(replicated.ports) == waited
    await client.aclose()


async def test_a_master_dying_before_its_replica_acknowledged_fails_the_write(
    tmp_path: Path,
) -> None:
    """Soak --cluster --lossy: the replica cut off, the master killed while a write
    waited for it. The WAIT's connection error was taken for a wait that timed out,
    so the write counted as done: it was on the dead master alone and was lost (a turn's
    end: the turn ran again and showed its answer twice). It fails instead, and the
    caller makes it again on the promoted replica."""
    async with own_cluster(tmp_path / "dying", masters=1, replicas=1) as (own, client):
        replicas = replica_ack(client)
        assert replicas is not None
        key = keys.turn_key(str(USER), 1)
        await guarded(replicas.write(key, lambda pipe: pipe.hset(key, "p", "1")))
        master, replica = (node.proc for node in own.nodes)
        assert master is not None and replica is not None
        replica.send_signal(signal.SIGSTOP)
        try:
            cut = connect(f"redis://127.0.0.1:{own.ports[0]}/0")
            await cut.execute_command("CLIENT", "KILL", "TYPE", "replica")  # type: ignore[no-untyped-call]
            await cut.aclose()
            writing = asyncio.create_task(
                guarded(replicas.write(key, lambda pipe: pipe.hset(key, "p", "1,2")))
            )
            done, _ = await asyncio.wait({writing}, timeout=0.3)
            assert not done  # waiting for the replica
            master.kill()
            with pytest.raises(StoreUnavailableError):
                await asyncio.wait_for(writing, 60)
        finally:
            replica.send_signal(signal.SIGCONT)
        assert replicas.unacknowledged == 0  # not taken for a write that counts


async def test_a_cluster_without_replicas_and_a_single_server_send_no_wait(
    cluster: RedisCluster, cluster_redis: Redis, redis: Redis
) -> None:
    intake = Intake(cluster_redis, "a", shards=4)
    await intake.ensure_group()
    for chat in range(6001, 6009):
        assert await intake.record(Inbound(chat, 1, chat, "hi"), asyncio.Event())
    assert await waits_sent(cluster.ports) == 0
    assert sum([int(await cluster_redis.xlen(stream)) for stream in intake.streams]) == 8
    assert Intake(redis, "a").replicas is None


def close_under_the_next_write(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The next command finds its connection closed by another task between redis-py's
    health check and its write (the stream writer is None): what a failing node does."""
    from redis.asyncio.connection import AbstractConnection  # noqa: PLC0415

    check_health = AbstractConnection.check_health
    armed = [1]

    async def closed_meanwhile(self: AbstractConnection) -> None:
        await check_health(self)  # type: ignore[no-untyped-call]
        if armed:
            armed.pop()
            await self.disconnect(nowait=True)  # as another task's disconnect does

    monkeypatch.setattr(AbstractConnection, "check_health", closed_meanwhile)
    return armed


async def test_a_connection_closed_under_the_intake_write_is_an_outage_not_a_loss(
    cluster_redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's cluster client raised AttributeError ('NoneType' object has no
    attribute 'writelines') when a node failed and another task had closed the
    connection: it escaped the update handler, polling confirmed the update, and the
    message was lost (soak --cluster --lossy, seed 1). It is a lost connection: the
    intake waits it out and the message enters once."""
    intake = Intake(cluster_redis, "a")
    await intake.ensure_group()
    assert intake.replicas is not None
    armed = close_under_the_next_write(monkeypatch)
    assert await intake.record(Inbound(USER, 1, USER, "hello"), asyncio.Event())
    assert not armed  # the first write did fail
    assert int(await cluster_redis.xlen(keys.INTAKE_STREAM)) == 1


async def test_a_connection_closed_under_the_heartbeat_is_a_missed_beat_not_a_crash(
    cluster_redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same closed connection under the heartbeat's renewal escaped it: at SIGTERM
    the drain re-raised it and the process exited 1 with a traceback (soak --cluster
    --lossy, seed 3902). It is Redis away for a moment; a bug of ours still is a bug."""
    intake = Intake(cluster_redis, "a")
    await intake.ensure_group()
    assert await intake.record(Inbound(USER, 1, USER, "hello"), asyncio.Event())
    [entry] = await intake.read_new(10, 0)
    armed = close_under_the_next_write(monkeypatch)
    with pytest.raises(StoreUnavailableError):
        await intake.keep([entry])
    assert not armed
    assert await intake.keep([entry]) == 1  # the next beat keeps it

    async def our_bug() -> None:
        raise AttributeError("'NoneType' object has no attribute 'text'")

    with pytest.raises(AttributeError):
        await guarded(our_bug())


async def test_a_connection_closed_under_a_store_read_is_an_outage_the_turn_waits_out(
    cluster_redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transcript store's reads met the same closed connection (the turn's check
    that Redis still holds the node it answers below, at a failover): the
    AttributeError escaped as an unexpected failure and the answer was sent again
    (soak --cluster --lossy, seed 4101). The store and the bot share one guard: it is
    an outage, and the next read finds the node."""
    store = TranscriptStore(cluster_redis)
    root = await store.start(str(USER), [ChatMessage("system", "s")])
    armed = close_under_the_next_write(monkeypatch)
    with pytest.raises(StoreUnavailableError):
        await store.verify(root.id)
    assert not armed
    await store.verify(root.id)  # held, as it was


async def cluster_state(port: int, state: str) -> None:
    """Wait until the node at ``port`` sees the cluster in ``state`` (ok or fail)."""
    node = connect(f"redis://127.0.0.1:{port}/0")
    try:
        async with asyncio.timeout(30):
            while (await node.cluster("INFO")).get("cluster_state") != state:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # the cluster's own view: nothing to wait on
    finally:
        await node.aclose()


async def test_a_cluster_that_is_down_is_an_outage_the_intake_and_the_store_wait_out(
    tmp_path: Path,
) -> None:
    """While a master fails and no replica takes over, every node answers CLUSTERDOWN
    (and a client that knows no live node cannot connect at all). That is Redis being
    away: the intake keeps the message and retries until the cluster serves again,
    the store says unavailable; before, the error escaped the update handler and the
    message was lost (soak seed 3, --cluster)."""
    async with own_cluster(tmp_path / "down", masters=3, node_timeout_ms=500) as (down, client):
        intake = Intake(client, "a")
        await intake.ensure_group()
        store = TranscriptStore(client)
        killed = down.nodes[1]  # not the intake's master (slot 3120 is node 0's)
        killed.kill()
        await cluster_state(down.ports[0], "fail")
        with pytest.raises(StoreUnavailableError):
            await store.resolve(str(USER), 1)
        appending = asyncio.create_task(
            intake.record(Inbound(USER, 1, USER, "hi"), asyncio.Event())
        )
        done, _ = await asyncio.wait({appending}, timeout=1.0)
        assert not done  # waiting the outage out, not failed
        stranger = connect(f"redis://127.0.0.1:{killed.port}/0", cluster=True)
        with pytest.raises(StoreUnavailableError):  # start-up while REDIS_URL's node is down
            await guarded(stranger.ping())
        await stranger.aclose()
        killed.start_same_port()
        await cluster_state(down.ports[0], "ok")
        assert await asyncio.wait_for(appending, 30)
        assert await client.xlen(keys.INTAKE_STREAM) == 1
