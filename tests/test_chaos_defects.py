"""Regression tests for what the chaos runs found (issue 12), each where it is deterministic.

(The store race is pinned in test_transcript_store.py.) The bot runs in
process or as ``python -m bot`` against the test servers and real Redis.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from pathlib import Path

from redis.asyncio import Redis

from bot.data.connection import connect
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import (
    USER,
    BotFactory,
    BotProcess,
    answered_while_held,
    answers_to,
    ask,
    env_for,
    turns_done,
)
from .redis_server import RedisServer


async def test_a_flood_window_delays_answers_but_drops_none(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """Eight replies at once into a chat allowed one send per second: eight answers."""
    tg.flood_sends_per_second = 1.0
    async with start_bot() as app:
        _, _ = await ask(tg, app, USER, "start")
        [answer] = tg.bot_messages(USER)
        replies = [
            tg.send_user_message(USER, USER, f"branch {i}", reply_to=answer.message_id)
            for i in range(8)
        ]
        await turns_done(tg, app, 9, timeout=90)
    for i, reply in enumerate(replies):
        texts = [m.text for m in answers_to(tg, USER, reply["message_id"])]
        assert texts == [f"[depth:4] echo: branch {i}"]

    # calls already on the wire when a 429 came back arrive within a moment of it,
    # i.e. nearly the whole 1 s window early; a call the bot made after it would not
    def on_the_wire(violation: str) -> bool:
        early = re.search(r"(\d+\.\d+)s before an earlier retry_after", violation)
        return early is not None and float(early.group(1)) > 0.9

    assert not [v for v in tg.violations if not on_the_wire(v)]
    store = TranscriptStore(redis)
    for reply in replies:
        [part] = answers_to(tg, USER, reply["message_id"])
        assert await store.resolve(str(USER), part.message_id) is not None


async def test_a_typing_action_in_flight_never_holds_up_recording_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """Soak seed 1: a chat action sat out an 8 s flood window; the answer waited for it.

    The part was on screen but not yet recorded for those seconds, so a kill
    then sent it twice. Ending the typing must not wait for an action in flight.
    """
    tg.unsupported_methods.add("sendMessageDraft")  # typing (test_drafts.py: a held draft)
    await answered_while_held(tg, llm, start_bot, redis, "sendChatAction")


async def test_nothing_is_sent_while_redis_is_away_so_a_kill_leaves_one_answer(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    """Redis down, answer ready, bot killed: after restart one answer, and it continues."""
    env = env_for(tg, llm, private_redis.url)
    llm.gate = asyncio.Event()
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "during the outage")["message_id"]
    await llm.wait_for(lambda: len(llm.requests) == 1, timeout=30)
    private_redis.stop()
    llm.gate.set()
    await llm.wait_for(lambda: llm.requests[0].completed, timeout=30)
    assert not answers_to(tg, USER, message)  # held: no part could be journaled
    await first.kill()
    private_redis.start_same_port()
    llm.gate = None
    second = await _restart_answers_once(tg, env, tmp_path, message, "during the outage")
    assert second.text.count("resuming 1 turn(s) left unfinished") == 1  # started once


async def test_a_send_held_by_flood_control_waits_for_redis_so_a_kill_leaves_one_answer(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    """The soak's last duplicate: a part noted, held 4 s by a 429, Redis gone meanwhile.

    The held send must not leave while Redis is away (it could not be recorded,
    and a kill then would send it again): after the flood wait it is noted anew,
    which waits for Redis. Killed in that state, the restart sends one answer.
    """
    env = env_for(tg, llm, private_redis.url)
    tg.fail_next("sendMessage", status=429, retry_after=4, chat_id=USER)
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "held by the flood")["message_id"]

    def throttled() -> list[float]:
        return [c.at for c in tg.calls if c.method == "sendMessage" and c.status == 429]

    await tg.wait_for(lambda: bool(throttled()), timeout=30)
    private_redis.stop()
    window_end = throttled()[0] + 4 + 1.5  # when the held send would have gone out
    # absence over the window in which the old code sent the part
    await tg.wait_for(
        lambda: bool(answers_to(tg, USER, message)) or time.monotonic() > window_end, timeout=30
    )
    assert not answers_to(tg, USER, message)
    await first.kill()
    private_redis.start_same_port()
    await _restart_answers_once(tg, env, tmp_path, message, "held by the flood")


async def _restart_answers_once(
    tg: FakeTelegram, env: dict[str, str], cwd: Path, message: int, text: str
) -> BotProcess:
    """Start the bot again: ``message`` gets one answer, and a reply to it continues."""
    second = BotProcess(env, cwd)
    await second.start()
    try:
        await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=60)
        [answer] = answers_to(tg, USER, message)
        assert answer.text == f"[depth:2] echo: {text}"
        follow = tg.send_user_message(USER, USER, "go on", reply_to=answer.message_id)
        await tg.wait_for(
            lambda: (
                [m.text for m in answers_to(tg, USER, follow["message_id"])]
                == ["[depth:4] echo: go on"]
            ),
            timeout=30,
        )
    finally:
        assert await second.terminate() == 0
    assert len(answers_to(tg, USER, message)) == 1
    return second


async def test_sigterm_at_random_points_always_exits_within_the_bound(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    """SIGTERM during start-up, idle polling, a hung model call or a Redis outage."""
    bound = 3.0
    env = env_for(tg, llm, private_redis.url, SHUTDOWN_TIMEOUT=str(bound))
    rng = random.Random(20261123)
    for attempt in range(6):
        process = BotProcess(env, tmp_path)
        await process.start()
        await asyncio.sleep(rng.uniform(0.0, 1.5))  # the random point is the test's input
        if attempt % 3 == 1:
            llm.hang_next()
            tg.send_user_message(USER, USER, f"hang {attempt}")
            await llm.wait_for(lambda: llm.pending_faults == 0, timeout=30)
        if attempt % 3 == 2:
            private_redis.stop()
            tg.send_user_message(USER, USER, f"no redis {attempt}")
        started = time.monotonic()
        code = await process.terminate(timeout=bound + 20)
        took = time.monotonic() - started
        if private_redis.proc is None:
            private_redis.start_same_port()
        # a SIGTERM while the interpreter itself starts kills it before any of our code
        assert code == 0 or (code == -signal.SIGTERM and not process.text), process.text
        assert took <= bound + 8, f"attempt {attempt}: exit took {took:.1f}s"
    llm.clear_faults()
    client = connect(private_redis.url)
    try:  # nothing accepted was lost: the next run answers what was left
        final = BotProcess(env, tmp_path)
        await final.start()
        await tg.wait_for(
            lambda: all(
                answers_to(tg, USER, m.message_id) for m in tg.messages(USER) if not m.is_bot
            ),
            timeout=60,
        )
        assert await final.terminate() == 0
    finally:
        await client.aclose()
