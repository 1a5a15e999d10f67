"""Scale-out: turns per second of 1, 2 and 4 real bot processes, one Redis vs a cluster.

Each configuration starts N ``python -m bot`` processes (own ``BOT_INSTANCE``;
long polling, so one of them polls and all run turns from the shared intake)
against the fake Bot API and an instant fake model, sends ``MESSAGES`` at once
over ``CHATS`` chats, and times until every one is answered. Same run, same
machine: a single redis-server, and a 3-master Redis Cluster started the same
way as the tests' (``INTAKE_SHARDS=8`` there). The machine's cores bound what
more processes can add; the bench prints how many it has.

Takeover: two processes, the model holding every call, one SIGKILLed; the time
from the kill until the other one has answered all of the dead one's messages,
with the default ``TAKEOVER_SECONDS`` (30) - DESIGN.md's target is 60 s.

Intake appends: what one message's entry into the intake (``Intake.record``, awaited by
the update handler before Telegram hears back) costs on one redis-server, on the
3-master cluster, and on a cluster with a replica per master, where it waits for the
replica (``WAIT``, bot/data/connection.ReplicaAck) - beside the same appends on that
cluster without the wait. Every server there with ``appendfsync everysec``, as
config/redis.conf ships (with ``always`` a replica acknowledges only after its fsync:
a few ms more per append on this machine's disk).
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from bot.bus.inbound import Inbound
from bot.bus.intake import Intake
from bot.data.connection import connect
from tests.fakes.model import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import BotProcess, answers_to, env_for
from tests.redis_server import RedisCluster, RedisServer, cluster_supported

from . import common

PROCESSES: Sequence[int] = (1, 2, 4)
MESSAGES = 400
CHATS = 100
TAKEOVER_MESSAGES = 16
FIRST_CHAT = 5000
APPENDS = 1000


def _chats(tg: FakeTelegram) -> list[int]:
    chats = [FIRST_CHAT + i for i in range(CHATS)]
    for chat in chats:
        tg.add_private_chat(chat, f"U{chat}")
    return chats


async def _start(env: dict[str, str], cwd: Path, count: int) -> list[BotProcess]:
    started = []
    for index in range(count):
        process = BotProcess({**env, "BOT_INSTANCE": f"p{index}"}, cwd)
        await process.start()
        started.append(process)
    return started


async def _stop(processes: list[BotProcess]) -> None:
    for process in processes:
        assert process.proc is not None
        if process.proc.returncode is None:
            await process.terminate(60)


async def _throughput(redis_url: str, count: int, cluster: bool, cwd: Path) -> float:
    """Turns per second of ``count`` processes answering MESSAGES at once."""
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        chats = _chats(tg)
        extra = {"REDIS_CLUSTER": "true", "INTAKE_SHARDS": "8"} if cluster else {}
        env = env_for(tg, llm, redis_url, LOG_LEVEL="WARNING", **extra)
        processes = await _start(env, cwd, count)
        try:
            # warm up: every process up, one round answered
            await tg.wait_for(lambda: sum(c.method == "getMe" for c in tg.calls) >= count, 120)
            warm = {c: tg.send_user_message(c, c, "warm up")["message_id"] for c in chats[:8]}
            await tg.wait_for(lambda: all(answers_to(tg, c, m) for c, m in warm.items()), 120)
            asked: list[tuple[int, int]] = []
            started = time.perf_counter()
            for index in range(MESSAGES):
                chat = chats[index % len(chats)]
                asked.append((chat, tg.send_user_message(chat, chat, f"q{index}")["message_id"]))
            await tg.wait_for(lambda: all(answers_to(tg, c, m) for c, m in asked), 600)
            elapsed = time.perf_counter() - started
        finally:
            await _stop(processes)
    return MESSAGES / elapsed


async def _takeover(redis_url: str, cwd: Path) -> tuple[float, int]:
    """Seconds from SIGKILL of one of two processes until all held turns are answered."""
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        chats = _chats(tg)[:TAKEOVER_MESSAGES]
        env = env_for(tg, llm, redis_url, LOG_LEVEL="WARNING", OPENAI_TIMEOUT="120")
        processes = await _start(env, cwd, 2)
        try:
            await tg.wait_for(lambda: sum(c.method == "getMe" for c in tg.calls) >= 2, 120)
            warm = {c: tg.send_user_message(c, c, "warm up")["message_id"] for c in chats}
            await tg.wait_for(lambda: all(answers_to(tg, c, m) for c, m in warm.items()), 120)
            llm.gate = asyncio.Event()
            before = len(llm.requests)
            asked = {c: tg.send_user_message(c, c, "held")["message_id"] for c in chats}
            await tg.wait_for(lambda: len(llm.requests) >= before + len(asked), 120)
            processes[0].proc.kill()  # type: ignore[union-attr]
            killed = time.perf_counter()
            llm.gate.set()
            await tg.wait_for(lambda: all(answers_to(tg, c, m) for c, m in asked.items()), 300)
            took = time.perf_counter() - killed
            once = sum(1 for c, m in asked.items() if len(answers_to(tg, c, m)) == 1)
        finally:
            await _stop(processes)
    return took, once


async def run() -> str:
    rows: list[list[object]] = []
    reason = cluster_supported()
    with tempfile.TemporaryDirectory(prefix="replychain-scale-") as tmp:
        cwd = Path(tmp)
        single = RedisServer(cwd / "redis", fsync="everysec")
        single.start()
        cluster = None if reason else RedisCluster(cwd / "cluster")
        if cluster is not None:
            cluster.start()
        try:
            for count in PROCESSES:
                common.progress(f"scale: {count} process(es) on one Redis")
                one = await _throughput(single.url, count, False, cwd)
                many: object = f"skipped: {reason}"
                if cluster is not None:
                    for node in cluster.nodes:  # same start for every configuration
                        _flush(node)
                    common.progress(f"scale: {count} process(es) on the cluster")
                    many = await _throughput(cluster.url, count, True, cwd)
                _flush(single)
                rows.append([count, one, many])
            common.progress("scale: takeover after SIGKILL (TAKEOVER_SECONDS=30)")
            took, once = await _takeover(single.url, cwd)
            common.progress("scale: intake appends")
            appends = await _append_rows(single, cluster, cwd)
        finally:
            single.stop()
            if cluster is not None:
                cluster.stop()
    cores = os.cpu_count()
    out = common.table(
        f"turns/s, instant model, {MESSAGES} messages over {CHATS} chats at once "
        f"({cores} cores; every process and the fakes share them)",
        ["processes", "one redis-server", "3-master cluster"],
        rows,
    )
    out += "\n" + common.table(
        "takeover of a SIGKILLed process's held turns (target <= 60 s)",
        ["turns held", "answered once", "seconds from SIGKILL to the last answer"],
        [[TAKEOVER_MESSAGES, once, took]],
    )
    return out + "\n" + appends


async def _appends(url: str, *, cluster: bool, wait: bool = True) -> list[float]:
    """p50 and p99 (ms) of APPENDS intake appends, one at a time as the handler makes them."""
    client = connect(url, cluster=cluster)
    intake = Intake(client, "bench")
    if not wait:
        intake.replicas = None
    await intake.ensure_group()
    stopping = asyncio.Event()
    took = []
    for index in range(APPENDS):
        started = time.perf_counter()
        await intake.record(Inbound(FIRST_CHAT + index % CHATS, index, 1, "hello"), stopping)
        took.append(time.perf_counter() - started)
    await client.aclose()
    return [common.percentile(took, 50) * 1000, common.percentile(took, 99) * 1000]


async def _append_rows(single: RedisServer, cluster: RedisCluster | None, cwd: Path) -> str:
    rows: list[list[object]] = [["one redis-server", *await _appends(single.url, cluster=False)]]
    if cluster is not None:
        for node in cluster.nodes:
            _config_set(node, "appendfsync", "everysec")
        rows.append(["3 masters", *await _appends(cluster.url, cluster=True)])
        replicated = RedisCluster(cwd / "replicated", masters=3, replicas=1)
        replicated.start()
        try:
            for node in replicated.nodes:  # as config/redis.conf ships (the suite's: always)
                _config_set(node, "appendfsync", "everysec")
            url = replicated.url
            rows.append(
                ["3 masters + replicas, no WAIT", *await _appends(url, cluster=True, wait=False)]
            )
            rows.append(["3 masters + replicas, WAIT", *await _appends(url, cluster=True)])
        finally:
            replicated.stop()
    return common.table(
        f"intake append (Intake.record), {APPENDS} one at a time, ms",
        ["Redis", "p50", "p99"],
        rows,
    )


def _config_set(server: RedisServer, name: str, value: str) -> None:
    with redis.Redis(port=server.port, socket_timeout=5) as client:
        client.config_set(name, value)


def _flush(server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        sock.recv(64)
