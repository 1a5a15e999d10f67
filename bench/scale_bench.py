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
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.fake_openai import FakeOpenAI
from tests.fake_telegram import FakeTelegram
from tests.harness import BotProcess, answers_to, env_for
from tests.redis_server import RedisCluster, RedisServer, cluster_supported

from . import common

PROCESSES: Sequence[int] = (1, 2, 4)
MESSAGES = 400
CHATS = 100
TAKEOVER_MESSAGES = 16
FIRST_CHAT = 5000


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
    return out


def _flush(server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        sock.recv(64)
