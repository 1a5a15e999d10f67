"""The relay every process reads (bot/bus/relay.py): a flood window one process meets
holds the chat's calls in the others, against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiogram import Bot
from aiogram.methods import SendChatAction, TelegramMethod
from aiogram.methods.base import Response
from redis.asyncio import Redis

from bot.bus.relay import Relay
from bot.data import keys
from bot.retry import Outage
from bot.telegram.drafts import StopButtons
from bot.telegram.session import FloodControl

CHAT = 4242


async def test_a_flood_window_met_in_one_process_holds_the_chat_in_the_others(
    redis: Redis,
) -> None:
    outage = Outage("Redis", "")
    here, there = FloodControl(), FloodControl()
    telling = Relay(redis, StopButtons(), outage, here.hold)
    hearing = Relay(redis, StopButtons(), outage, there.hold)
    here.tell = telling.flood
    stopping = asyncio.Event()
    reading = asyncio.create_task(hearing.run(stopping))
    try:
        await asyncio.wait_for(hearing.listening.wait(), 10)
        assert there._wait_for(CHAT) <= 0
        # what FloodControl does on a 429 of 30 s in this chat
        here.hold(CHAT, 30)
        assert here.tell is not None
        here.tell(CHAT, 30)
        deadline = asyncio.get_running_loop().time() + 10
        while there._wait_for(CHAT) <= 0:
            assert asyncio.get_running_loop().time() < deadline, "the window never arrived"
            await asyncio.sleep(0.02)  # polling a condition, bounded above
        assert 29 < there._wait_for(CHAT) <= 31
        assert there._wait_for(CHAT + 1) <= 0  # other chats go on
    finally:
        stopping.set()
        await asyncio.wait_for(reading, 10)
    assert await redis.xlen(keys.RELAY_STREAM) == 1


async def test_a_flood_window_is_not_told_while_redis_is_away() -> None:
    """Telling is best effort: with Redis away the others meet the 429 themselves, and
    the call that met it is not held up by the failed write."""
    unreachable = Redis(port=1, socket_connect_timeout=0.2)
    relay = Relay(unreachable, StopButtons(), Outage("Redis", ""))
    relay.flood(CHAT, 5)
    tasks = list(relay._telling)
    assert tasks
    await asyncio.wait_for(asyncio.gather(*tasks), 10)  # ends without raising
    await unreachable.aclose()


async def test_a_process_started_during_a_flood_window_holds_the_chat_too(
    redis: Redis,
) -> None:
    """Soak: a process started (after a kill) while another process's flood window was
    open called the chat at once, inside the window. A starting process reads the
    windows told before it and holds what is left of those still open; a window long
    over holds nothing."""
    outage = Outage("Redis", "")
    telling = Relay(redis, StopButtons(), outage)
    await redis.xadd(keys.RELAY_STREAM, {"c": CHAT + 1, "w": "5"}, id="1000-0")  # in 1970
    telling.flood(CHAT, 30)
    await asyncio.wait_for(asyncio.gather(*telling._telling), 10)
    assert await redis.xlen(keys.RELAY_STREAM) == 2

    there = FloodControl()
    starting = Relay(redis, StopButtons(), outage, there.hold)
    stopping = asyncio.Event()
    reading = asyncio.create_task(starting.run(stopping))
    try:
        await asyncio.wait_for(starting.listening.wait(), 10)
        assert 25 < there._wait_for(CHAT) <= 31
        assert there._wait_for(CHAT + 1) <= 0
    finally:
        stopping.set()
        await asyncio.wait_for(reading, 10)


async def test_a_window_told_while_a_call_waits_extends_the_wait() -> None:
    """Soak (3 processes): two processes met the same 429 and waited it out; the first
    to call met the next 429 and told the other, which was asleep already and called
    inside the new window when it woke. A call asks again after each wait."""
    flood = FloodControl()
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    async def make_request(bot: Bot, method: TelegramMethod[Any]) -> Response[Any]:
        sent.append(loop.time())
        return Response[bool](ok=True, result=True)

    flood.hold(CHAT, 0.2)  # this process's own window
    method = SendChatAction(chat_id=CHAT, action="typing")
    calling = asyncio.create_task(flood(make_request, cast(Bot, None), method))
    for _ in range(1000):  # until the call is waiting (a yield each, bounded)
        lock = flood._chat_turns.get(CHAT)
        if lock is not None and lock.locked():
            break
        await asyncio.sleep(0)
    told = loop.time()
    flood.hold(CHAT, 1.0)  # the relay: another process met the next 429
    await asyncio.wait_for(calling, 10)
    assert sent and sent[0] - told >= 1.0  # not inside the window it was told of
