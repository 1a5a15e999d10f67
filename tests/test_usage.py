"""Token accounting and budgets against the test servers and a real Redis."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack
import pytest
from babel.dates import format_date
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from bot.data import keys
from bot.model import Usage
from bot.ops.conversations import audit_records
from bot.turn.notices import DAILY_LIMIT as DAILY_LIMIT_NOTICE
from bot.turn.notices import TURN_GUARD as TURN_GUARD_NOTICE
from bot.usage import accounting as accounting_module
from bot.usage.accounting import Accounting
from bot.usage.calls import AUDIT_FIELDS, CallRecord, Totals, utc_now
from bot.usage.reports import OWNER_ONLY_TEXT
from transcript import NodeId

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
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
    # each turn's final write removed its calls' pending entries
    assert not [k async for k in redis.scan_iter(match="rc:*:u:p")]
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
        assert text == DAILY_LIMIT_NOTICE.format(limit=20, reset="12:00\u202fAM", wait="1h 30m")
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
    today = format_date(utc_now().date(), "medium", locale="en")  # Nov 26, 2026
    assert f"{today}: {total:,} (1 call)" in stats


async def test_turn_guard_stops_a_loop_of_model_calls(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """A message whose turn dies mid-call again and again may not call the model again."""
    # a short takeover: the dead first run's lease is not waited out for 30 s
    env = env_for(tg, llm, redis_server.url, TURN_MAX_MODEL_CALLS="1", TAKEOVER_SECONDS="4")
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
    names = [k async for k in redis.scan_iter(match=f"rc:{{{USER}}}:u:a:*")]
    assert len(names) == 1  # the chat's audit hash of the day, one field per call
    assert 6 * 24 * 3600 < await redis.ttl(names[0]) <= 8 * 24 * 3600
    [raw] = (await redis.hgetall(names[0])).values()
    assert b"private thought" not in raw
    record = dict(zip(AUDIT_FIELDS, msgpack.unpackb(raw), strict=True))
    assert record["message"] == message
    # what the key tells is left out: the chat (a private chat's user is the chat)
    assert record["user"] is None and "/" not in record["sent"]
    assert record["prompt"] == llm.usages[0].prompt_tokens
    assert record["error"] is None
    [read] = await audit_records(redis, USER)
    assert (read.user, read.message) == (USER, message)
    assert read.sent.startswith(f"{USER}/") and read.sent.endswith(record["sent"])


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


NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = "20260301"


def node(idx: int, tree: int = 1, seg: int = 0) -> NodeId:
    return NodeId("5", tree, seg, idx)


async def test_a_repeated_record_is_counted_once_everywhere(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    call = CallRecord(5, 7, 11, node(1), "m", Usage(100, 20, 30), 0.1)
    for _ in range(3):
        await accounting.record(call)
    once = Totals(100, 20, 30, 1)
    await accounting.settled(5)
    assert not await redis.exists(keys.chat_usage_key(5, "p"))  # nothing left pending
    assert await accounting.user_all_time(7) == once
    assert await accounting.user_today(7) == once
    assert await accounting.turn(5, 11) == once
    assert await accounting.chain(5, [node(1)]) == once
    _, per_day = await accounting.stats(days=1)
    assert per_day == [("20260301", once)]
    # another call on the same node and turn is counted
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(1, 2), 0.1))
    assert await accounting.turn(5, 11) == once + Totals(1, 2, 0, 1)
    assert await accounting.chain(5, [node(1)]) == once + Totals(1, 2, 0, 1)


async def test_stats_rank_users_by_tokens_all_time_and_today(redis: Redis) -> None:
    yesterday = Accounting(redis, clock=Clock(NOON - timedelta(days=1)))
    await yesterday.record(CallRecord(5, 7, 11, node(1), "m", Usage(1000, 100), 0.1))
    accounting = Accounting(redis, clock=Clock(NOON))
    await accounting.record(CallRecord(5, 7, 13, node(3), "m", Usage(10, 1), 0.1))
    await accounting.record(CallRecord(6, 9, 11, NodeId("6", 1, 0, 1), "m", Usage(500, 50), 0.1))
    per_user, per_day = await accounting.stats(days=2)
    assert per_user == [
        (7, Totals(1010, 101, 0, 2), Totals(10, 1, 0, 1)),
        (9, Totals(500, 50, 0, 1), Totals(500, 50, 0, 1)),
    ]
    assert per_day == [(DAY, Totals(510, 51, 0, 2)), ("20260228", Totals(1000, 100, 0, 1))]
    top, _ = await accounting.stats(days=1, users=1)
    assert [user for user, _, _ in top] == [7]


async def test_zero_counts_are_not_written(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    bucket = keys.usage_bucket(7)
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    for key in (keys.usage_total_key(bucket, "u", 7), keys.usage_total_key(bucket, "u", 7, DAY)):
        assert await redis.hgetall(key) == {b"p": b"100", b"c": b"20", b"n": b"1"}
    await accounting.record(
        CallRecord(5, 7, 12, node(3), "m", Usage(5, 0, 0, estimated=True), 0.1, error="timeout")
    )
    assert await redis.hgetall(keys.usage_total_key(bucket, "d", DAY)) == {
        b"p": b"105",
        b"c": b"20",
        b"n": b"2",
        b"e": b"1",
        b"x": b"1",
    }
    assert await accounting.user_all_time(7) == Totals(105, 20, 0, 2, 1, 1)
    await accounting.settled(5)
    # no aggregate nobody reads: per chat, per tree, the days zset, per-call marker keys
    names = {k.decode() async for k in redis.scan_iter()}
    assert names == {
        *(keys.usage_total_key(bucket, *parts) for parts in (
            ("u", 7), ("u", 7, DAY), ("d", DAY), ("users",), ("counted", DAY),
        )),
        *(keys.chat_usage_key(5, *parts) for parts in (("t", DAY), ("n", 1), ("a", DAY))),
    }  # fmt: skip
    assert await redis.hlen(keys.chat_usage_key(5, "a", DAY)) == 2  # one audit field a call


async def test_detail_keys_expire_after_the_setting(redis: Redis) -> None:
    clock = Clock(NOON)
    accounting = Accounting(redis, clock=clock, detail_days=30, audit_days=0)
    bucket = keys.usage_bucket(7)
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    turns, tree = keys.chat_usage_key(5, "t", DAY), keys.chat_usage_key(5, "n", 1)
    for key in (turns, tree):
        assert 29 * 86400 < await redis.ttl(key) <= 30 * 86400
    assert 0 < await redis.ttl(keys.usage_total_key(bucket, "u", 7, DAY)) <= 400 * 86400
    assert 0 < await redis.ttl(keys.usage_total_key(bucket, "counted", DAY)) <= 2 * 86400
    assert await redis.ttl(keys.usage_total_key(bucket, "u", 7)) == -1  # all time: kept
    # a write refreshes the tree's TTL once it is more than a day old
    await redis.expire(tree, 20 * 86400)
    await accounting.record(CallRecord(5, 7, 13, node(3), "m", Usage(1, 1), 0.1))
    assert await redis.ttl(tree) > 29 * 86400
    assert not [k async for k in redis.scan_iter(match="rc:*:u:a:*")]  # audit off


async def test_turn_totals_span_midnight(redis: Redis) -> None:
    clock = Clock(datetime(2026, 3, 1, 23, 59, tzinfo=UTC))
    accounting = Accounting(redis, clock=clock)
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    clock.now += timedelta(minutes=2)
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(10, 2), 0.1))
    assert await accounting.turn(5, 11) == Totals(110, 22, 0, 2)
    assert await accounting.turn(5, 12) == Totals()
    assert (await accounting.user_today(7)).tokens == 12


async def test_last_call_and_chain_across_branches(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    # tree 1: root 0.0, a 0.1 (user) / 0.2 (answer), then two branches off 0.2:
    # left 0.3 / 0.4 and right 1.0 (a new segment) / 1.1; tree 2 is another conversation
    a, left, right, other = node(1), node(3), node(0, seg=1), node(1, tree=2)
    await accounting.record(CallRecord(5, 7, 11, a, "m", Usage(100, 10), 0.1))
    await accounting.record(CallRecord(5, 7, 13, left, "m", Usage(200, 20, 50), 0.1, view="1:0.1"))
    await accounting.record(CallRecord(5, 7, 15, right, "m", Usage(300, 30), 0.1))
    await accounting.record(CallRecord(5, 7, 17, other, "m", Usage(1, 1), 0.1))
    assert await accounting.last_call(5, a) == (100, 10, "")
    assert await accounting.last_call(5, left) == (200, 20, "1:0.1")
    assert await accounting.last_call(5, right) == (300, 30, "")
    assert await accounting.last_call(5, node(2)) is None  # no call sent up to an answer
    assert await accounting.last_call(6, a) is None  # another chat
    root = node(0)
    assert await accounting.chain(5, [root, a, node(2), left, node(4)]) == Totals(300, 30, 50, 2)
    assert await accounting.chain(5, [root, a, node(2), right, node(1, seg=1)]) == Totals(
        400, 40, 0, 2
    )
    assert await accounting.chain(5, [node(0, tree=2), other]) == Totals(1, 1, 0, 1)
    assert await accounting.chain(5, []) == Totals()
    # a second call sent up to the same node: the sizes of one request are no longer known
    await accounting.record(CallRecord(5, 7, 13, left, "m", Usage(5, 5), 0.1, view="summary"))
    assert await accounting.last_call(5, left) is None
    assert await accounting.chain(5, [a, left]) == Totals(305, 35, 50, 3)


def break_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The totals step fails in Redis from now on, as if the process died between the
    two steps (the record's own step; finishing a stale entry is another)."""
    monkeypatch.setattr(accounting_module, "_TOTALS_LUA", "return redis.error_reply('died')")


async def test_a_crash_between_the_two_steps_counts_the_call_once(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(NOON)
    accounting = Accounting(redis, clock=clock)
    once = Totals(100, 20, 0, 1)
    # the totals step fails: the call is pending in its chat, not in the totals
    call = CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1)
    with monkeypatch.context() as patch:
        break_totals(patch)
        with pytest.raises(ResponseError):
            await accounting.record(call)
    assert await accounting.chain(5, [node(1)]) == once
    assert await accounting.user_all_time(7) == Totals()
    assert await redis.hlen(keys.chat_usage_key(5, "p")) == 1
    # the record is retried (same call): counted once, nothing left pending
    await accounting.record(call)
    await accounting.settled(5)
    assert await accounting.user_all_time(7) == once
    assert await accounting.user_today(7) == once
    assert await accounting.chain(5, [node(1)]) == once
    assert not await redis.exists(keys.chat_usage_key(5, "p"))

    # the process dies after both steps, before its pending entry is removed
    await accounting.record(CallRecord(5, 7, 13, node(3), "m", Usage(1, 2), 0.1))
    assert await redis.hlen(keys.chat_usage_key(5, "p")) == 1
    twice = once + Totals(1, 2, 0, 1)
    assert await accounting.user_all_time(7) == twice
    # another process: the chat's next call, a minute later, finishes it (a no-op)
    clock.now += timedelta(minutes=2)
    restarted = Accounting(redis, clock=clock)
    await restarted.record(CallRecord(5, 8, 15, node(5), "m", Usage(1000, 1), 0.1))
    await restarted.settled(5)
    assert not await redis.exists(keys.chat_usage_key(5, "p"))
    assert await accounting.user_all_time(7) == twice
    assert await accounting.user_all_time(8) == Totals(1000, 1, 0, 1)
    _, [(_, day)] = await restarted.stats(days=1)
    assert day == twice + Totals(1000, 1, 0, 1)


async def test_a_call_left_pending_by_a_dead_process_is_finished_by_the_next_one(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = Accounting(redis, clock=Clock(NOON))
    with monkeypatch.context() as patch:
        break_totals(patch)
        with pytest.raises(ResponseError):
            await dead.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    alive = Accounting(redis, clock=Clock(NOON + timedelta(hours=13)))  # the next day
    await alive.record(CallRecord(5, 7, 13, node(3), "m", Usage(1, 1), 0.1))
    assert await alive.user_all_time(7) == Totals(101, 21, 0, 2)
    assert await alive.user_today(7) == Totals(1, 1, 0, 1)  # the pending call's own day
    _, per_day = await alive.stats(days=2)
    assert per_day == [("20260302", Totals(1, 1, 0, 1)), (DAY, Totals(100, 20, 0, 1))]
    # one left for days is dropped: its bucket may no longer know it was counted
    with monkeypatch.context() as patch:
        break_totals(patch)
        with pytest.raises(ResponseError):
            await dead.record(CallRecord(5, 7, 15, node(5), "m", Usage(50, 5), 0.1))
    late = Accounting(redis, clock=Clock(NOON + timedelta(days=3)))
    await late.record(CallRecord(5, 7, 17, node(7), "m", Usage(2, 2), 0.1))
    await late.settled(5)
    assert not await redis.exists(keys.chat_usage_key(5, "p"))
    assert await late.user_all_time(7) == Totals(103, 23, 0, 3)


async def test_a_record_carries_other_writes_in_its_round_trip_even_without_scripts(
    redis: Redis,
) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    await redis.script_flush()  # as after a restart of Redis: its script cache is empty

    def with_writes(pipe: Any) -> int:
        pipe.incr("rc:{5}:probe")
        pipe.incr("rc:{5}:probe")
        return 2

    replies = await accounting.record(
        CallRecord(5, 7, 13, node(3), "m", Usage(1, 2), 0.1), with_writes=with_writes
    )
    assert replies == [1, 2]  # the ride-along's own replies
    assert await accounting.user_all_time(7) == Totals(101, 22, 0, 2)


async def test_last_call_of_this_process_is_answered_from_memory(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    a, b = node(1), node(3)
    await accounting.record(CallRecord(5, 7, 11, a, "m", Usage(100, 10), 0.1, view="v"))
    await redis.delete(keys.chat_usage_key(5, "n", a.tree))  # memory answers without it
    assert await accounting.last_call(5, a) == (100, 10, "v")
    # two calls sent up to one node: no one request's size, as the stored entry says
    await accounting.record(CallRecord(5, 7, 13, b, "m", Usage(1, 1), 0.1))
    await accounting.record(CallRecord(5, 7, 15, b, "m", Usage(2, 2), 0.1))
    assert await accounting.last_call(5, b) is None
    # another process reads the stored entry
    assert await Accounting(redis, clock=Clock(NOON)).last_call(5, b) is None


async def test_turn_entries_leave_zero_tails_out(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    turns = keys.chat_usage_key(5, "t", DAY)
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(100, 20), 0.1))
    assert await redis.hget(turns, "11") == b"100 20 0 1"
    await accounting.record(CallRecord(5, 7, 11, node(1), "m", Usage(1, 0), 0.1, error="x"))
    assert await redis.hget(turns, "11") == b"101 20 0 2 0 1"
    assert await accounting.turn(5, 11) == Totals(101, 20, 0, 2, 0, 1)


async def test_audit_records_leave_out_what_their_key_tells(redis: Redis) -> None:
    accounting = Accounting(redis, clock=Clock(NOON))
    await accounting.record(CallRecord(5, 5, 11, node(1), "m", Usage(10, 1), 0.1))  # private
    await accounting.record(CallRecord(5, 7, 13, node(3), "m", Usage(20, 2), 0.1))  # a group
    raw = (await redis.hgetall(keys.chat_usage_key(5, "a", DAY))).values()
    stored = {(r[2], r[4]) for r in map(msgpack.unpackb, raw)}  # user, sent
    assert stored == {(None, "1:0.1"), (7, "1:0.3")}  # a private chat's user is the chat
    records = await audit_records(redis, 5)
    assert {(r.user, r.message, r.sent) for r in records} == {
        (5, 11, "5/1:0.1"),
        (7, 13, "5/1:0.3"),
    }
