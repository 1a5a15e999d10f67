"""Token accounting and budgets against the test servers and a real Redis."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgpack
from redis.asyncio import Redis

from bot.model import Usage
from bot.turn.notices import DAILY_LIMIT as DAILY_LIMIT_NOTICE
from bot.turn.notices import TURN_GUARD as TURN_GUARD_NOTICE
from bot.usage.accounting import Accounting, CallRecord, Totals, utc_now
from bot.usage.reports import OWNER_ONLY_TEXT
from transcript import NodeId

from .fake_openai import FakeOpenAI
from .fake_telegram import FakeTelegram
from .harness import (
    OTHER_USER,
    USER,
    BotFactory,
    BotProcess,
    answers_to,
    ask,
    env_for,
    running_bot,
    settings_for,
)
from .redis_server import RedisServer


class Clock:
    """An injectable UTC clock a test can move forward."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def reported(llm: FakeOpenAI) -> Totals:
    """What the model server told the client, summed."""
    total = Totals()
    for u in llm.usages:
        total = total + Totals(u.prompt_tokens, u.completion_tokens, u.cached_tokens, 1)
    return total


async def usage_text(tg: FakeTelegram, chat: int, user: int, **kw: object) -> str:
    message = tg.send_user_message(chat, user, "/usage", **kw)  # type: ignore[arg-type]
    await tg.wait_for(lambda: bool(answers_to(tg, chat, message["message_id"])))
    return answers_to(tg, chat, message["message_id"])[0].text or ""


async def test_usage_sums_equal_what_the_provider_reported(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        # two chats at once, several turns each, one continuing chain per chat
        async def converse(chat: int) -> None:
            reply_to = None
            for i in range(4):
                message, _ = await ask(tg, app, chat, f"turn {i} " * (i + 1), user=chat,
                                       reply_to=reply_to)  # fmt: skip
                reply_to = answers_to(tg, chat, message)[-1].message_id

        await asyncio.gather(converse(USER), converse(OTHER_USER))
        accounting = app.accounting
        mine, theirs = (
            await accounting.user_all_time(USER),
            await accounting.user_all_time(OTHER_USER),
        )
    total = reported(llm)
    assert total.calls == 8
    assert (mine + theirs).tokens == total.tokens
    assert mine.prompt + theirs.prompt == total.prompt
    assert mine.completion + theirs.completion == total.completion
    assert mine.calls == theirs.calls == 4
    assert mine.estimated == 0


async def test_totals_survive_a_restart_and_are_never_counted_twice(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    settings = settings_for(tg, llm, redis_server.url)
    async with running_bot(settings) as app:
        first, _ = await ask(tg, app, USER, "before restart")
    async with running_bot(settings) as app:
        _, _ = await ask(tg, app, USER, "after", reply_to=answers_to(tg, USER, first)[0].message_id)
        totals = await app.accounting.user_all_time(USER)
        # a repeated record of one call (same call id) is not counted again
        call = CallRecord(USER, USER, 99, NodeId(str(USER), 1, 0, 1), "m", Usage(10, 5), 0.1)
        await app.accounting.record(call)
        await app.accounting.record(call)
        again = await app.accounting.user_all_time(USER)
    assert totals.tokens == reported(llm).tokens
    assert totals.calls == 2
    assert again.tokens == totals.tokens + 15
    assert again.calls == 3


async def test_provider_without_usage_is_estimated_and_marked(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.report_usage = False
    async with start_bot() as app:
        await ask(tg, app, USER, "no usage here")
        totals = await app.accounting.user_all_time(USER)
        text = await usage_text(tg, USER, USER)
    assert totals.calls == 1
    assert totals.estimated == 1
    assert totals.prompt > 0 and totals.completion > 0
    assert "estimated" in text


async def test_daily_limit_refuses_without_a_model_call_and_resets_at_midnight(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    clock = Clock(datetime(2026, 3, 1, 22, 30, tzinfo=UTC))
    async with start_bot(clock=clock, user_daily_token_limit=20) as app:
        _, text = await ask(tg, app, USER, "a first question that costs tokens")
        assert text.startswith("[depth:2] ")
        assert (await app.accounting.user_today(USER)).tokens >= 20
        refused, text = await ask(tg, app, USER, "one more please")
        assert text == DAILY_LIMIT_NOTICE.format(limit=20, reset="00:00 UTC", wait="1h 30m")
        assert len(llm.requests) == 1
        # the other user is not limited by this user's spending
        _, text = await ask(tg, app, OTHER_USER, "my own budget", user=OTHER_USER)
        assert text.startswith("[depth:2] ")
        clock.now += timedelta(hours=2)  # 00:30 the next day: the limit has reset
        _, text = await ask(tg, app, USER, "new day", reply_to=refused)
        assert text == "[depth:3] echo: new day"  # the refused message was kept
        assert len(llm.requests) == 3


async def test_usage_in_a_branch_shows_that_branch(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(price_input_per_mtok=1.0, price_output_per_mtok=2.0) as app:
        root, _ = await ask(tg, app, USER, "root")
        root_answer = answers_to(tg, USER, root)[0].message_id
        left, _ = await ask(tg, app, USER, "left " * 50, reply_to=root_answer)
        right, _ = await ask(tg, app, USER, "right", reply_to=root_answer)
        left_answer = answers_to(tg, USER, left)[0].message_id
        right_answer = answers_to(tg, USER, right)[0].message_id
        usages = list(llm.usages)
        left_text = await usage_text(tg, USER, USER, reply_to=left_answer)
        right_text = await usage_text(tg, USER, USER, reply_to=right_answer)
        plain_text = await usage_text(tg, USER, USER)
    left_tokens = sum(u.prompt_tokens + u.completion_tokens for u in (usages[0], usages[1]))
    right_tokens = sum(u.prompt_tokens + u.completion_tokens for u in (usages[0], usages[2]))
    all_tokens = sum(u.prompt_tokens + u.completion_tokens for u in usages)
    assert f"This conversation (this branch): {left_tokens:,} tokens in 2 model calls" in left_text
    assert (
        f"This conversation (this branch): {right_tokens:,} tokens in 2 model calls" in right_text
    )
    assert left_tokens != right_tokens
    assert "This conversation" not in plain_text
    assert f"Today (UTC): {all_tokens:,} tokens in 3 model calls" in plain_text
    assert "about $" in plain_text
    assert not any(r.messages[-1]["content"] == "/usage" for r in llm.requests)


async def test_stats_is_for_owners_only(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(owner_user_ids=frozenset({USER})) as app:
        await ask(tg, app, OTHER_USER, "spend a little", user=OTHER_USER)
        denied = tg.send_user_message(OTHER_USER, OTHER_USER, "/stats")["message_id"]
        allowed = tg.send_user_message(USER, USER, "/stats")["message_id"]
        await tg.wait_for(
            lambda: bool(answers_to(tg, OTHER_USER, denied)) and bool(answers_to(tg, USER, allowed))
        )
    assert answers_to(tg, OTHER_USER, denied)[0].text == OWNER_ONLY_TEXT
    stats = answers_to(tg, USER, allowed)[0].text or ""
    total = reported(llm).tokens
    assert f"{OTHER_USER}: {total:,} / {total:,}" in stats
    today = utc_now().strftime("%Y-%m-%d")
    assert f"{today}: {total:,} (1 calls)" in stats


async def test_turn_guard_stops_a_loop_of_model_calls(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """A message whose turn dies mid-call again and again may not call the model again."""
    env = env_for(tg, llm, redis_server.url, TURN_MAX_MODEL_CALLS="1")
    llm.gate = asyncio.Event()
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "expensive")["message_id"]
    await llm.wait_for(lambda: len(llm.requests) == 1, timeout=30)
    await first.kill()  # the call was made; the turn never finished
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=30)
    assert await second.terminate() == 0
    assert [m.text for m in answers_to(tg, USER, message)] == [TURN_GUARD_NOTICE]
    assert len(llm.requests) == 1


async def test_audit_records_reference_nodes_and_hold_no_text(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        message, _ = await ask(tg, app, USER, "a private thought")
    keys = [k async for k in redis.scan_iter(match="rc:{usage}:a:*")]
    assert len(keys) == 1
    assert 0 < await redis.ttl(keys[0]) <= 7 * 24 * 3600
    raw = await redis.get(keys[0])
    assert raw is not None
    assert b"private thought" not in raw
    record = msgpack.unpackb(raw)
    assert record["message"] == message
    assert record["sent"].startswith(f"{USER}/")
    assert record["prompt"] == llm.usages[0].prompt_tokens
    assert record["error"] is None


async def test_accounting_counts_concurrent_records_exactly(redis: Redis) -> None:
    accounting = Accounting(redis, clock=utc_now)
    node = NodeId("5", 1, 0, 1)
    calls = [CallRecord(5, 7, i, node, "m", Usage(100 + i, 10, 3), 0.01) for i in range(200)]
    await asyncio.gather(*(accounting.record(c) for c in calls))
    totals = await accounting.user_all_time(7)
    assert totals.calls == 200
    assert totals.prompt == sum(100 + i for i in range(200))
    assert totals.completion == 2000
    assert totals.cached == 600
    assert (await accounting.chain(5, [node])).calls == 200
