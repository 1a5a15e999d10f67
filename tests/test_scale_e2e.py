"""Several real ``python -m bot`` processes on one Redis: polling, takeover, exactly once.

Each process has its own ``BOT_INSTANCE``; ``TAKEOVER_SECONDS`` is short so a
killed process's turns are taken over quickly. Processes are killed with
SIGKILL, as a machine loss would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from redis.asyncio import Redis

from bot.data import keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import BotProcess, answers_to, env_for
from .redis_server import RedisServer

TAKEOVER = "3"
#: Users (each with a private chat) beyond the fixture's two.
FIRST_USER = 2001


def add_users(tg: FakeTelegram, count: int) -> list[int]:
    users = [FIRST_USER + i for i in range(count)]
    for user in users:
        tg.add_private_chat(user, f"User{user}")
    return users


@asynccontextmanager
async def processes(
    env: dict[str, str], cwd: Path, names: Iterable[str]
) -> AsyncIterator[dict[str, BotProcess]]:
    """Started bot processes by ``BOT_INSTANCE``; stopped (or reaped) at the end."""
    started: dict[str, BotProcess] = {}
    try:
        for name in names:
            process = BotProcess({**env, "BOT_INSTANCE": name}, cwd)
            await process.start()
            started[name] = process
        yield started
    finally:
        for process in started.values():
            assert process.proc is not None
            if process.proc.returncode is None:
                await process.terminate()


def answered_once(tg: FakeTelegram, asked: dict[int, int]) -> bool:
    """Every (chat -> message) asked has exactly one answer."""
    return all(len(answers_to(tg, chat, message)) == 1 for chat, message in asked.items())


def conflicts(tg: FakeTelegram) -> int:
    return sum(1 for call in tg.calls if call.method == "getUpdates" and call.status == 409)


async def test_two_polling_processes_poll_one_at_a_time_and_take_over(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    users = add_users(tg, 8)
    env = env_for(tg, llm, redis_server.url, TAKEOVER_SECONDS=TAKEOVER)
    async with processes(env, tmp_path, ["a"]) as bots:
        await tg.wait_for(lambda: tg.polling, 30, what="the first process polls")
        async with processes(env, tmp_path, ["b"]) as more:
            bots.update(more)
            await tg.wait_for(
                lambda: sum(call.method == "getMe" for call in tg.calls) >= 2, 30
            )  # both have started
            asked = {u: tg.send_user_message(u, u, f"hi {u}")["message_id"] for u in users}
            await tg.wait_for(lambda: answered_once(tg, asked), 30, what="answers")
            assert await redis.get(keys.POLLER_LEASE) == b"a"

            await bots["a"].kill()  # the poller dies
            later = {u: tg.send_user_message(u, u, f"again {u}")["message_id"] for u in users}
            await tg.wait_for(lambda: answered_once(tg, later), 30, what="answers after")
            assert await redis.get(keys.POLLER_LEASE) == b"b"
            assert answered_once(tg, asked)
    # a dead poller's long poll may be answered 409 once; never a storm, never two at once
    assert conflicts(tg) <= 1
    assert not [v for v in tg.violations if "getUpdates" in v]
    assert "Traceback" not in bots["b"].text
    assert "another process polls Telegram" in bots["b"].text
