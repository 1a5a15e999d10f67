"""The tool loop's own cost: overhead per tool round, and prompt bytes with result stubs.

Drives :class:`bot.turn.engine.Engine` with its :class:`bot.turn.tools.ToolLoop`
against a real redis-server, an instant model (it asks for one instant tool
call per round, then answers) and an instant Telegram, so what is measured is
the bot's time: noting the round in the turn state, noting the result,
appending the step node, assembling the next request, accounting the call.
Baseline in the same run: the same turn with no tool round.

The second table sends a 20-turn conversation in which every turn runs one tool
returning ``RESULT_CHARS`` characters, once with the stubs of earlier results
(what the bot does) and once with every result whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.data.connection import connect
from bot.model import Answer, Media, Usage, WireCache
from bot.tools.box import Toolbox, ToolResult
from bot.tools.hub import Tool, ToolHub
from bot.tools.retention import stub_old_results
from bot.turn.engine import Engine
from bot.turn.tools import ToolLoop
from tests.fakes.stub_model import StubModel
from transcript import ChatMessage, ToolCall

from .bot_bench import InstantTelegram, _engine
from .common import median, percentile, redis_server, table

TURNS = 60
ROUNDS = (0, 1, 4, 8)
CONVERSATION = 20
RESULT_CHARS = 2000
ANSWER = "Here is what the tool found: it is sunny."


class InstantTools(ToolHub):
    """One tool that answers at once with ``RESULT_CHARS`` characters."""

    def __init__(self) -> None:
        super().__init__([])
        tool = Tool("bench__lookup", "bench", "lookup", "Looks a thing up.", {}, True)
        self.tools = {tool.name: tool}

    async def call(self, name: str, arguments: str) -> ToolResult:
        return ToolResult(("result " * (RESULT_CHARS // 7 + 1))[:RESULT_CHARS])


class ToolModel(StubModel):
    """Asks for ``rounds`` tool calls, one a round, then answers; counts request bytes."""

    def __init__(self) -> None:
        super().__init__(ANSWER)
        self.rounds = 0
        self.wire = WireCache()
        self.sent_bytes: list[int] = []

    def reply(
        self, messages: Sequence[ChatMessage], *, tools: bytes | None, media: Media
    ) -> Answer:
        self.sent_bytes.append(len(self.wire.stream_body(self.name, messages, tools, media)))
        done = 0
        for m in reversed(messages):
            if m.role == "user":
                break
            done += m.role == "assistant"
        usage = Usage(sum(len(m.content or "") for m in messages) // 4, 20)
        if done < self.rounds:
            call = ToolCall(f"call_{len(self.sent_bytes)}", "bench__lookup", '{"q": "x"}')
            return Answer("", usage, 0.0, (call,))
        return Answer(ANSWER, usage, 0.0)


def _tool_engine(redis: Redis, telegram: InstantTelegram) -> tuple[Engine, ToolModel]:
    engine = _engine(redis, telegram)
    model = ToolModel()
    engine.model = model
    engine.context.model = model
    box = Toolbox(InstantTools())
    box.spec_bytes = b'[{"type":"function","function":{"name":"bench__lookup"}}]'
    loop = ToolLoop(box, model, engine.store, engine.states, max_rounds=10)
    engine.asking.tools, engine.limits.tool_rounds = loop, loop.max_rounds
    engine.context.shape = stub_old_results
    return engine, model


async def _per_round(redis: Redis) -> list[list[object]]:
    """Turns with 0, 1, 4, 8 rounds, interleaved so a busy machine slows each alike."""
    telegram = InstantTelegram()
    engine, model = _tool_engine(redis, telegram)
    times: dict[int, list[float]] = {rounds: [] for rounds in ROUNDS}
    for i in range(TURNS):
        for rounds in ROUNDS:
            model.rounds = rounds
            chat = 9000 + rounds * 1000 + i
            inbound = Inbound(chat, telegram.next_id(chat), chat, "What is the weather?")
            started = time.perf_counter()
            await engine.run(inbound)
            times[rounds].append((time.perf_counter() - started) * 1000)
    base = median(times[0])
    rows: list[list[object]] = []
    for rounds in ROUNDS:
        turn = median(times[rounds])
        per_round = (turn - base) / rounds if rounds else 0.0
        rows.append([rounds, turn, percentile(times[rounds], 99), per_round])
    return rows


async def _conversation(redis: Redis, *, stubs: bool) -> list[object]:
    telegram = InstantTelegram()
    engine, model = _tool_engine(redis, telegram)
    if not stubs:
        engine.context.shape = None
    model.rounds = 1
    chat = 7000 if stubs else 7001
    reply_to: int | None = None
    for _ in range(CONVERSATION):
        inbound = Inbound(chat, telegram.next_id(chat), chat, "And now?", reply_to=reply_to)
        await engine.run(inbound)
        reply_to = telegram.last[chat][0]
    sent = model.sent_bytes
    return ["stubs" if stubs else "whole results", len(sent), sum(sent), sent[-1]]


async def run() -> str:
    with redis_server() as server:
        redis = connect(server.url)
        try:
            per_round = await _per_round(redis)
            with_stubs = await _conversation(redis, stubs=True)
            without = await _conversation(redis, stubs=False)
        finally:
            await redis.aclose()
    first = table(
        f"tool loop: bot time per turn (ms) by tool rounds, instant model, tool and Telegram; "
        f"{TURNS} turns each; 0 rounds = the baseline turn",
        ["rounds", "median", "p99", "per round"],
        per_round,
    )
    second = table(
        f"{CONVERSATION}-turn conversation, one tool round per turn, {RESULT_CHARS}-character "
        "results: request bytes sent",
        ["view", "model calls", "bytes in all", "last request"],
        [with_stubs, without],
    )
    return first + "\n" + second
