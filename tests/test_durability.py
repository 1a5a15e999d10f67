"""Never lose a message: kill -9 at every stage of a turn, duplicates, Redis outages.

The bot runs as ``python -m bot`` (killed with SIGKILL and started again) or
in-process against a redis-server of the test's own that is stopped and started.
Every test asserts the exact outcome: one answer per accepted message, the
chain intact in Redis, the number of model calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.data.connection import connect
from transcript import TranscriptStore, keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram
from .harness import USER, BotProcess, answers_to, env_for, running_bot, settings_for, turns_done
from .redis_server import RedisServer


async def stored(redis: Redis, chat: int, message_id: int, timeout: float = 20.0) -> int:  # noqa: ASYNC109
    """Wait until a message id is aliased in Redis; returns the chain depth there."""
    store = TranscriptStore(redis)
    deadline = time.monotonic() + timeout
    while (node := await store.resolve(str(chat), message_id)) is None:
        assert time.monotonic() < deadline, f"message {message_id} was never stored"
        await asyncio.sleep(0.05)
    return (await store.history(node)).depth


async def part_journaled(redis: Redis, chat: int, part_id: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until the turn journal knows a sent part."""
    deadline = time.monotonic() + timeout
    while not await redis.hexists(f"rc:{{{chat}}}:part", str(part_id)):
        assert time.monotonic() < deadline, f"part {part_id} was never journaled"
        await asyncio.sleep(0.02)


async def continue_chain(
    tg: FakeTelegram, llm: FakeOpenAI, answer_id: int, expected_depth: int
) -> list[str]:
    """Reply to an answer; returns the contents the model was sent for it."""
    follow = tg.send_user_message(USER, USER, "and then?", reply_to=answer_id)["message_id"]
    await tg.wait_for(
        lambda: (
            [m.text for m in answers_to(tg, USER, follow)]
            == [f"[depth:{expected_depth}] echo: and then?"]
        ),
        timeout=30,
    )
    return [m["content"] for m in llm.requests[-1].messages]


async def test_kill_while_waiting_for_the_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    env = env_for(tg, llm, redis_server.url)
    llm.gate = asyncio.Event()
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "question one")["message_id"]
    await llm.wait_for(lambda: len(llm.requests) == 1, timeout=30)
    await first.kill()
    llm.gate = None
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=30)
    [answer] = answers_to(tg, USER, message)
    assert await stored(redis, USER, answer.message_id) == 2
    assert answer.text == "[depth:2] echo: question one"
    assert len(llm.requests) == 2
    contents = await continue_chain(tg, llm, answer.message_id, 4)
    assert contents[1:] == ["question one", "echo: question one", "and then?"]
    await second.terminate()
    assert len(answers_to(tg, USER, message)) == 1


async def test_kill_mid_stream_finishes_by_editing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    words = " ".join(f"w{i}" for i in range(300))
    llm.responder = lambda m: (
        words if m[-1]["content"] == "long one" else f"echo: {m[-1]['content']}"
    )
    llm.chunk_chars = 10
    llm.chunk_delay = 0.03  # ~5 s of streaming
    tg.unsupported_methods.add("sendMessageDraft")  # edits (test_drafts.py: kill mid-draft)
    env = env_for(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "long one")["message_id"]
    await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=30)
    [partial] = answers_to(tg, USER, message)
    await part_journaled(redis, USER, partial.message_id)
    await first.kill()
    assert partial.text != f"[depth:2] {words}"  # killed mid-stream
    llm.chunk_delay = 0.0
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(
        lambda: [m.text for m in answers_to(tg, USER, message)] == [f"[depth:2] {words}"],
        timeout=30,
    )
    [answer] = answers_to(tg, USER, message)
    assert answer.message_id == partial.message_id  # edited, not sent again
    assert await stored(redis, USER, answer.message_id) == 2
    assert len(llm.requests) == 2
    await continue_chain(tg, llm, answer.message_id, 4)
    await second.terminate()


async def test_kill_after_sending_before_storing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    words = " ".join(f"w{i}" for i in range(150))
    final = f"[depth:2] {words}"
    llm.responder = lambda m: words if m[-1]["content"] == "kill me late" else "echo: and then?"
    llm.chunk_chars = 10
    llm.chunk_delay = 0.02  # streams, so the final text arrives as an edit
    tg.unsupported_methods.add("sendMessageDraft")  # (drafts send the final text anew)
    env = env_for(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)

    async def kill_on_final_edit(call: Call) -> None:
        if call.method == "editMessageText" and call.params.get("text", "").endswith(words):
            tg.after_call = None
            await first.kill()  # Telegram shows the whole answer; the bot stored no alias

    tg.after_call = kill_on_final_edit
    await first.start()
    message = tg.send_user_message(USER, USER, "kill me late")["message_id"]
    assert first.proc is not None
    await asyncio.wait_for(first.proc.wait(), timeout=30)
    [shown] = answers_to(tg, USER, message)
    assert shown.text == final
    # the part was aliased with the stored answer, before its final edit was shown
    assert await TranscriptStore(redis).resolve(str(USER), shown.message_id) is not None
    second = BotProcess(env, tmp_path)
    await second.start()
    assert await stored(redis, USER, shown.message_id) == 2
    assert [m.text for m in answers_to(tg, USER, message)] == [final]
    assert len(llm.requests) == 1  # the stored answer is shown again, not asked for again
    await continue_chain(tg, llm, shown.message_id, 4)
    await second.terminate()


async def test_a_message_seen_twice_is_answered_and_stored_once(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    async with running_bot(settings_for(tg, llm, redis_server.url)) as app:
        message = tg.send_user_message(USER, USER, "only once")
        for _ in range(3):  # the same message again, in updates with new ids
            tg.push_update({"message": message})
        await turns_done(tg, app, 4)
        depth = await stored(redis, USER, message["message_id"])
        tg.push_update({"message": message})  # and once more after it was answered
        await turns_done(tg, app, 5)
    assert [m.text for m in answers_to(tg, USER, message["message_id"])] == [
        "[depth:2] echo: only once"
    ]
    assert len(llm.requests) == 1
    assert depth == 1
    trees = [k async for k in redis.scan_iter(match=f"rc:{{{USER}}}:t:*")]
    assert len(trees) == 1
    bookkeeping = {b"#", keys.WRITTEN_FIELD.encode(), keys.RUNNING_FIELD.encode()}
    fields = [f for f in await redis.hkeys(trees[0]) if f not in bookkeeping]
    assert len(fields) == 3  # root, user message, answer: stored once


async def test_redis_outage_loses_nothing_and_logs_one_line(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    private_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")
    async with running_bot(settings_for(tg, llm, private_redis.url)) as app:
        first = tg.send_user_message(USER, USER, "before")["message_id"]
        await turns_done(tg, app, 1)
        private_redis.stop()
        during = [tg.send_user_message(USER, USER, f"during {i}")["message_id"] for i in range(3)]
        await tg.wait_for(
            lambda: any("Redis is unreachable" in r.getMessage() for r in caplog.records),
            timeout=30,
        )
        assert all(not answers_to(tg, USER, m) for m in during)
        private_redis.start_same_port()
        back = time.monotonic()
        await turns_done(tg, app, 4, timeout=60)
        recovery = time.monotonic() - back
        for i, message in enumerate(during):
            assert [m.text for m in answers_to(tg, USER, message)] == [
                f"[depth:2] echo: during {i}"
            ]
    outage_lines = [r for r in caplog.records if "Redis is unreachable" in r.getMessage()]
    assert len(outage_lines) == 1
    assert not any(r.exc_info for r in caplog.records)
    assert answers_to(tg, USER, first)
    assert recovery < 30
    print(f"Redis outage recovery: answered {recovery:.2f}s after Redis came back")


async def test_redis_lost_mid_turn_is_finished_once_it_returns(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    private_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")
    llm.gate = asyncio.Event()
    async with running_bot(settings_for(tg, llm, private_redis.url)) as app:
        message = tg.send_user_message(USER, USER, "mid-turn")["message_id"]
        await llm.wait_for(lambda: len(llm.requests) == 1)
        private_redis.stop()
        llm.gate.set()  # the answer comes back while Redis is away
        # the turn holds its answer and waits for Redis
        await tg.wait_for(
            lambda: any("Redis is unreachable" in r.getMessage() for r in caplog.records),
            timeout=30,
        )
        assert not answers_to(tg, USER, message)  # nothing is sent that cannot be recorded
        private_redis.start_same_port()
        await turns_done(tg, app, 1, timeout=60)
    assert [m.text for m in answers_to(tg, USER, message)] == ["[depth:2] echo: mid-turn"]
    assert len(llm.requests) == 1  # the answer waited in memory for Redis: no second call
    client = connect(private_redis.url)
    try:
        [answer] = answers_to(tg, USER, message)
        assert await stored(client, USER, answer.message_id) == 2
    finally:
        await client.aclose()
