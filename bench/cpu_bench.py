"""The bot's CPU per model call against chain length, on the real request path.

:class:`bot.model.ModelClient.stream` talks to the strict test server
(``tests/fakes/model.py``) over loopback; the server runs in a child process so
``time.process_time`` of this process is the bot's CPU alone: building the
request, the SDK (auth, httpx, SSE parsing), the streamed chunks. Each call
sends a chain of the given length that ends in a new user message (the rest is
what earlier turns sent), like a turn of a conversation that deep.

Two paths in the same run: ``sdk`` is the old path (``chat.completions.create``
with plain message dicts, which the SDK transforms on every call), ``prebuilt``
the body built from cached per-message JSON and sent with ``post(content=)``.
``same objects`` re-sends the message objects the transcript cache hands out;
``decoded afresh`` sends equal but new objects each call (a cold transcript
cache), which the wire cache finds by value. Target (issue 14): CPU per call at
1,000 messages within 1.5x of the CPU at 10.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

from bot.model import ModelClient
from tests.fakes.model import FakeOpenAI
from transcript import ChatMessage

from .common import median, progress, table

DEPTHS = (10, 100, 1000)
#: Measured calls per depth and path (after WARMUP unmeasured ones).
CALLS = 60
WARMUP = 5
ANSWER = "Sure. Here is the answer with some code and a list: one, two. " + "text " * 60
MODEL = "bench-model"


def _chain(depth: int) -> list[ChatMessage]:
    """``depth`` messages: the root prompt, then user/assistant exchanges of chat length."""
    messages = [ChatMessage("system", "You are a helpful assistant. Answer briefly. " * 8)]
    for i in range(depth - 1):
        if i % 2 == 0:
            messages.append(ChatMessage("user", f"Question {i}: what about the next step? " * 2))
        else:
            messages.append(ChatMessage("assistant", f"Answer {i}: do this, then that. " * 5))
    return messages


def _fresh(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [
        ChatMessage(m.role, "".join(m.content or ""), m.tool_calls, m.tool_call_id, m.name)
        for m in messages
    ]


@contextlib.asynccontextmanager
async def _server() -> AsyncIterator[str]:
    """The test server in a child process; yields its base URL."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.cpu_bench",
        "--serve",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        if not line:
            raise RuntimeError("the test server did not start")
        yield line.decode().strip()
    finally:
        child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            child.kill()
            await child.wait()


async def _serve() -> None:
    async with FakeOpenAI(model=MODEL) as server:
        server.responder = lambda _messages: ANSWER
        print(server.base_url, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


async def _measure(model: ModelClient, depth: int, *, fresh: bool) -> float:
    """Median CPU seconds of one ``stream`` call at ``depth`` messages."""
    base = _chain(depth)[:-1]
    samples: list[float] = []
    texts: list[str] = []
    for i in range(WARMUP + CALLS):
        prefix = _fresh(base) if fresh else base
        messages = [*prefix, ChatMessage("user", f"A new question, number {i}?")]
        started = time.process_time()
        answer = await model.stream(messages, texts.append)
        spent = time.process_time() - started
        if answer.text != ANSWER:
            raise RuntimeError(f"unexpected answer {answer.text[:40]!r}")
        texts.clear()
        if i >= WARMUP:
            samples.append(spent)
    return median(samples)


async def run() -> str:
    rows: list[list[object]] = []
    async with _server() as base_url:
        paths = (
            ("sdk create() (before)", True, False),
            ("prebuilt, same objects", False, False),
            ("prebuilt, decoded afresh", False, True),
        )
        for label, sdk_bodies, fresh in paths:
            model = ModelClient(
                api_key="sk-test",
                base_url=base_url,
                model=MODEL,
                timeout=30.0,
                max_retries=0,
                sdk_bodies=sdk_bodies,
            )
            try:
                cpu: list[float] = []
                for depth in DEPTHS:
                    progress(f"cpu: {label}, {depth} messages")
                    cpu.append(await _measure(model, depth, fresh=fresh))
            finally:
                await model.close()
            ratio = cpu[-1] / cpu[0]
            rows.append([label, *(c * 1000 for c in cpu), f"{ratio:.2f}x"])
    header = ["request path", *(f"ms CPU @{d}" for d in DEPTHS), f"{DEPTHS[-1]}/{DEPTHS[0]}"]
    return table(
        f"Bot CPU per streamed model call (median of {CALLS}; target {DEPTHS[-1]}/{DEPTHS[0]}"
        " <= 1.5x)",
        header,
        rows,
    )


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    asyncio.run(_serve())
