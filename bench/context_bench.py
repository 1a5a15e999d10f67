"""A 1,000-turn chain under CONTEXT_TOKEN_BUDGET: prompt tokens, cache hits, memory.

The real turn flow (engine, context window with summary folds, real openai SDK)
talks to the OpenAI-compatible test server, which counts tokens and emulates a
provider prompt cache (whole leading messages, 64-token blocks, from 1,024
tokens). Telegram is instant. Baseline in the same run: sending the whole
history every turn, counted by the same rules.
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc
from typing import Any

from bot.bus.inbound import Inbound
from bot.bus.runner import InFlight
from bot.data.connection import connect
from bot.model import ModelClient
from bot.retry import Outage
from bot.turn.context import ContextWindow
from bot.turn.engine import Engine
from bot.turn.state import TurnStates
from bot.turn.values import Rules
from bot.usage.accounting import Accounting
from bot.usage.calls import utc_now
from tests.fakes.model import FakeOpenAI
from transcript import TranscriptStore

from .bot_bench import InstantTelegram, turn
from .common import redis_server, table

TURNS = 1000
BUDGET = 32000
CHECKPOINTS = (100, 250, 500, 750, 1000)
QUESTION = "Please continue the story, adding one new event and one new character. " * 3
ANSWER = "And then something else happened in the story, as it always does. " * 9


def _responder(messages: list[dict[str, Any]]) -> str:
    if str(messages[0]["content"]).startswith("You keep a running summary"):
        return "So far: a long story with many events and characters. " * 5
    return ANSWER


def _bot_heap_mb() -> float:
    """Python heap held by everything but the test server and this benchmark's baseline."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(False, "*/tests/*"),
            tracemalloc.Filter(False, __file__),
        ]
    )
    return sum(stat.size for stat in snapshot.statistics("filename")) / 1e6


def _tokens(messages: list[dict[str, Any]]) -> int:
    """The test server's count: 4 + ceil(len/4) per message, plus 2."""
    return sum(4 + math.ceil(len(str(m["content"])) / 4) for m in messages) + 2


class Baseline:
    """Sends the whole history each turn; the cache holds the previous request."""

    def __init__(self, system: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.previous = 0
        self.prompt = self.cached = 0
        self.last = 0

    def turn(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        tokens = _tokens(self.messages)
        cached = (self.previous // 64) * 64 if self.previous >= 1024 else 0
        self.prompt += tokens
        self.cached += cached
        self.last = tokens
        self.messages.append({"role": "assistant", "content": ANSWER})
        self.previous = tokens


async def run() -> str:
    tracemalloc.start()
    with redis_server() as server:
        redis = connect(server.url)
        async with FakeOpenAI() as llm:
            llm.responder = _responder
            llm.chunk_chars = 200
            model = ModelClient(
                api_key="sk-test",
                base_url=llm.base_url,
                model="test-model",
                timeout=30,
                max_retries=0,
            )
            store = TranscriptStore(redis, cache_bytes=1024 * 1024)
            accounting = Accounting(redis, clock=utc_now, audit_days=0)
            telegram = InstantTelegram()
            engine = Engine(
                store=store,
                model=model,
                out=telegram,
                states=TurnStates(redis, store, "bench"),
                accounting=accounting,
                context=ContextWindow.for_budget(store, model, accounting, budget=BUDGET),
                in_flight=InFlight(),
                redis_outage=Outage("Redis", ""),
                rules=Rules(system_prompt="You are a storyteller.", max_calls_per_turn=10),
            )
            baseline = Baseline("You are a storyteller.")
            rows = []
            reply_to: int | None = None
            started = time.perf_counter()
            answers: list[tuple[int, int]] = []  # (prompt, cached) of each answer call
            summaries = all_prompt = 0
            for number in range(1, TURNS + 1):
                inbound = Inbound(1, telegram.next_id(1), 1, QUESTION, reply_to=reply_to)
                reply_to, _ = await turn(engine, telegram, inbound)
                baseline.turn(QUESTION)
                for request in llm.requests:  # keep numbers, not the test server's copies
                    assert request.usage is not None
                    all_prompt += request.usage.prompt_tokens
                    if str(request.messages[0]["content"]).startswith("You keep"):
                        summaries += 1
                    else:
                        answers.append((request.usage.prompt_tokens, request.usage.cached_tokens))
                llm.requests.clear()
                llm.usages.clear()
                if number in CHECKPOINTS:
                    prompt = sum(p for p, _ in answers)
                    rows.append(
                        (
                            number,
                            answers[-1][0],
                            max(p for p, _ in answers),
                            100 * sum(c for _, c in answers) / prompt,
                            baseline.last,
                            100 * baseline.cached / baseline.prompt,
                            _bot_heap_mb(),
                            store.cache.bytes_used / 1e6,
                        )
                    )
            elapsed = time.perf_counter() - started
            totals = (all_prompt, baseline.prompt)
            await model.close()
        await redis.aclose()
    tracemalloc.stop()
    return table(
        f"A {TURNS}-turn chain, CONTEXT_TOKEN_BUDGET={BUDGET} (answer calls; baseline "
        "sends the whole history)",
        [
            "turn",
            "prompt tokens",
            "max so far",
            "cached %",
            "baseline tokens",
            "baseline cached %",
            "bot heap MB",
            "LRU MB",
        ],
        rows,
    ) + (
        f"\n{summaries} summary calls; prompt tokens over all calls: {totals[0]:,} "
        f"(baseline {totals[1]:,}, {100 * totals[0] / totals[1]:.1f} %); "
        f"{elapsed:.1f}s for {TURNS} turns\n"
    )
