"""Long threads under CONTEXT_TOKEN_BUDGET: folds, verbatim tails, branches, restarts."""

from __future__ import annotations

import itertools
import logging
import re
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.turn.context import SUMMARY_PREFIX
from bot.turn.notices import TOO_LARGE as TOO_LARGE_NOTICE
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI, Request
from .fakes.telegram import FakeTelegram
from .harness import USER, answers_to, ask, running_bot, settings_for
from .redis_server import RedisServer

BUDGET = 600
SUMMARY_MARK = "You keep a running summary"


def responder(messages: list[dict[str, Any]]) -> str:
    if str(messages[0]["content"]).startswith(SUMMARY_MARK):
        numbers = re.findall(r"User: question number (\d+)", str(messages[-1]["content"]))
        return f"The user asked numbered questions up to {numbers[-1]}; all were answered."
    return f"echo: {messages[-1]['content']}"


def answer_requests(llm: FakeOpenAI) -> list[Request]:
    return [r for r in llm.requests if not str(r.messages[0]["content"]).startswith(SUMMARY_MARK)]


def summary_requests(llm: FakeOpenAI) -> list[Request]:
    return [r for r in llm.requests if str(r.messages[0]["content"]).startswith(SUMMARY_MARK)]


async def test_a_300_turn_chain_stays_under_budget_across_a_restart(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    llm.responder = responder
    settings = settings_for(tg, llm, redis_server.url, context_token_budget=BUDGET)
    reply_to: int | None = None
    first_answer = 0
    for half in range(2):  # the bot restarts after 150 turns
        async with running_bot(settings) as app:
            for i in range(150 * half, 150 * (half + 1)):
                message, text = await ask(
                    tg, app, USER, f"question number {i}: what comes next?", reply_to=reply_to
                )
                assert text == f"[depth:{2 * i + 2}] echo: question number {i}: what comes next?"
                reply_to = answers_to(tg, USER, message)[-1].message_id
                first_answer = first_answer or reply_to
    requests = answer_requests(llm)
    assert len(requests) == 300
    for request in llm.requests:
        assert request.usage is not None
        assert request.usage.prompt_tokens <= BUDGET, request.messages
    folds = summary_requests(llm)
    assert 10 <= len(folds) <= 80
    last = requests[-1].messages
    # the root prompt and the latest summary, joined into the one system message
    assert str(last[0]["content"]).endswith("; all were answered.")
    assert SUMMARY_PREFIX.strip() in str(last[0]["content"])
    assert last[-1] == {"role": "user", "content": "question number 299: what comes next?"}
    assert last[-2] == {
        "role": "assistant",
        "content": "echo: question number 298: what comes next?",
    }
    assert last[1]["role"] == "user"  # the verbatim tail starts with the user's message
    # between folds the request grows only at its end: byte-stable prefix
    stable = 0
    for before, after in itertools.pairwise(requests):
        if after.messages[0] == before.messages[0]:
            assert after.messages[: len(before.messages)] == before.messages
            stable += 1
    assert stable >= 200
    # the full history still has all 300 turns
    store = TranscriptStore(redis)
    assert reply_to is not None
    leaf = await store.resolve(str(USER), reply_to)
    assert leaf is not None
    history = await store.history(leaf)
    assert len(history.messages) == 601
    assert history.depth == 600
    # a branch above the first fold sees the early chain verbatim, no summary
    early = await ask_again(tg, llm, settings, first_answer, "early branch")
    assert SUMMARY_PREFIX.strip() not in str(early[0]["content"])
    assert early[1:] == [
        {"role": "user", "content": "question number 0: what comes next?"},
        {"role": "assistant", "content": "echo: question number 0: what comes next?"},
        {"role": "user", "content": "early branch"},
    ]
    # a branch below the last fold is served by that fold
    late = await ask_again(tg, llm, settings, reply_to, "late branch")
    assert late[0] == last[0]
    assert late[-1] == {"role": "user", "content": "late branch"}


async def ask_again(
    tg: FakeTelegram, llm: FakeOpenAI, settings: Any, reply_to: int, text: str
) -> list[dict[str, Any]]:
    async with running_bot(settings) as app:
        await ask(tg, app, USER, text, reply_to=reply_to)
    return answer_requests(llm)[-1].messages


async def test_a_message_larger_than_the_budget_gets_a_clear_answer(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    settings = settings_for(tg, llm, redis_server.url, context_token_budget=BUDGET)
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "x" * (BUDGET * 5))
    assert text == TOO_LARGE_NOTICE.format(budget=BUDGET)
    assert not llm.requests


async def test_failed_summaries_drop_the_oldest_nodes_instead(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")

    def no_summaries(messages: list[dict[str, Any]]) -> str:
        if str(messages[0]["content"]).startswith(SUMMARY_MARK):
            return ""  # an empty summary counts as a failure
        return f"echo: {messages[-1]['content']}"

    llm.responder = no_summaries
    settings = settings_for(tg, llm, redis_server.url, context_token_budget=BUDGET)
    reply_to = None
    async with running_bot(settings) as app:
        for i in range(40):
            message, text = await ask(tg, app, USER, f"q{i}: tell me more", reply_to=reply_to)
            assert text == f"[depth:{2 * i + 2}] echo: q{i}: tell me more"
            reply_to = answers_to(tg, USER, message)[-1].message_id
    for request in answer_requests(llm):
        assert request.usage is not None
        assert request.usage.prompt_tokens <= BUDGET
    last = answer_requests(llm)[-1].messages
    assert SUMMARY_PREFIX.strip() not in str(last[0]["content"])
    assert last[-1] == {"role": "user", "content": "q39: tell me more"}
    assert {"role": "user", "content": "q0: tell me more"} not in last
    assert any("summarising chat" in r.getMessage() for r in caplog.records)
    assert any("left the" in r.getMessage() for r in caplog.records)
