"""The real bot under load: many users at once, one user flooding, final-text latency, start-up.

Runs the bot in this process (``tests.harness.running_bot``: aiogram, the openai SDK,
redis-py) against the Bot API and OpenAI test servers on loopback and a real
redis-server. The model answers every message with a reply of ``REPLY_CHARS``
characters streamed in ``STREAM_CHUNKS`` chunks over ``MODEL_SECONDS``; the end of the
stream (finish chunk, usage, ``[DONE]``) follows the last token at once, and the time
the last token was written is recorded (:class:`TimedOpenAI`).

An answer counts as shown when Telegram first accepted a sendMessage/editMessageText whose
visible text ends with the whole reply. Beside the bot, in the same run, the baseline is a
minimal relay (:func:`relay`: poll, stream the answer, send it once; no Redis, no
limits) against the same test servers in the same process: what answering costs with
nothing but the HTTP work. All times are wall-clock seconds on this machine; the CPU
column is this process's (bot, test servers and relay together; redis-server apart).

1. N users each send one message at once: time until all are answered, p50/p99 per
   user; with ``MAX_CONCURRENT_TURNS`` at its default and at 64 (the old fixed cap).
2. Fairness: one user sends ``FAIRNESS_BACKLOG`` messages at once, then another user
   sends one: how long the second user waits, and how long the first user's backlog takes.
3. From the model's last token to the final text in Telegram, one answer per private chat.

Start-up is measured by ``bench/process_bench.py``, beside the floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bot.data.connection import connect
from bot.settings import Settings
from tests.fakes.model import FakeOpenAI, Request
from tests.fakes.telegram import FakeTelegram
from tests.harness import running_bot, settings_for

from .common import percentile, progress, redis_server, sized, table

#: Users sending one message each at once (quick: 50 and 200).
CONCURRENT_USERS: tuple[int, ...] = (200, 2000)
#: Messages the flooding user sends at once (quick: 60).
FAIRNESS_BACKLOG = 300
#: Answers measured from last token to final text, and how many run at once (each in its
#: own chat; the quick run takes twice as many at once).
LATENCY_SAMPLES = 20
LATENCY_BATCH = 5
#: The turn cap the runner had before MAX_CONCURRENT_TURNS.
OLD_CAP = 64
#: The model: a reply of REPLY_CHARS characters in STREAM_CHUNKS chunks over MODEL_SECONDS.
MODEL_SECONDS = 1.0
STREAM_CHUNKS = 10
REPLY_CHARS = 200
#: Seconds between the flooding user's messages and the second user's one.
FAIRNESS_GAP = 0.1

_TEXT_METHODS = frozenset({"sendMessage", "editMessageText"})
_FILLER = " lorem ipsum dolor sit amet consectetur" * 8


def reply_to(question: str) -> str:
    """The model's deterministic reply: REPLY_CHARS characters naming the question."""
    text = (f"Answer to {question}." + _FILLER)[:REPLY_CHARS]
    return text if not text.endswith(" ") else text[:-1] + "."


# --------------------------------------------------------------------------- test servers


@dataclass
class _Stream:
    reply: str
    content_events: int
    last_token: float | None = None


_STREAM: ContextVar[_Stream | None] = ContextVar("load_bench_stream", default=None)


class TimedOpenAI(FakeOpenAI):
    """FakeOpenAI answering :func:`reply_to` the last user message in MODEL_SECONDS.

    Only the content chunks are paced (the first one after ``chunk_delay``, like a model's
    time to first token); the finish chunk, usage and ``[DONE]`` follow the last token at
    once. ``last_token[reply]`` is when the reply's last content chunk was written.
    """

    def __init__(self) -> None:
        super().__init__()
        self.chunk_chars = math.ceil(REPLY_CHARS / STREAM_CHUNKS)
        self.chunk_delay = MODEL_SECONDS / STREAM_CHUNKS
        self.responder = self._load_reply
        self.last_token: dict[str, float] = {}

    @staticmethod
    def _load_reply(messages: list[dict[str, Any]]) -> str:
        for message in reversed(messages):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return reply_to(message["content"])
        return reply_to("nothing")

    async def _stream(  # noqa: PLR0917 - the signature it overrides
        self,
        request: web.Request,
        record: Request,
        body: dict[str, Any],
        reply: str,
        finish: str,
        fault: Any,
    ) -> web.StreamResponse:
        events = math.ceil(len(reply) / max(1, self.chunk_chars))
        token = _STREAM.set(_Stream(reply, events))
        try:
            return await super()._stream(request, record, body, reply, finish, fault)
        finally:
            _STREAM.reset(token)

    async def _pace(self, index: int, stop_at: int, fault: Any) -> bool:
        stream = _STREAM.get()
        if stream is None or fault is not None or index <= stream.content_events:
            return await super()._pace(index, stop_at, fault)
        if stream.last_token is None:  # the last content chunk has just been written
            stream.last_token = time.monotonic()
            self.last_token[stream.reply] = stream.last_token
        return True


class TimedTelegram(FakeTelegram):
    """FakeTelegram that notes when each getUpdates arrives (a Call is kept only at its end)."""

    def __init__(self) -> None:
        super().__init__()
        self.polls_at: list[float] = []

    async def _get_updates(self, params: dict[str, Any], request: web.Request) -> list[Any]:
        self.polls_at.append(time.monotonic())
        return await super()._get_updates(params, request)


class Shown:
    """When each expected reply was first visible whole, read incrementally from tg.calls.

    A reply is shown by an accepted sendMessage/editMessageText whose visible text, less
    the bot's ``[depth:N] `` prefix, is the reply.
    """

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.expected: dict[tuple[int, str], float] = {}  # (chat, reply) -> sent at
        self.at: dict[tuple[int, str], float] = {}
        self.text_calls: dict[int, int] = {}  # by chat
        self._read = len(tg.calls)

    def expect(self, chat: int, reply: str, sent_at: float) -> None:
        self.expected[(chat, reply)] = sent_at

    def update(self) -> bool:
        """Read the new calls; True once every expected reply was shown."""
        calls = self.tg.calls
        while self._read < len(calls):
            call = calls[self._read]
            self._read += 1
            if call.method not in _TEXT_METHODS or call.status != 200:
                continue
            result = call.result if isinstance(call.result, dict) else {}
            chat = result.get("chat", {}).get("id")
            text = result.get("text") or ""
            if text.startswith("[depth:"):
                text = text.partition("] ")[2]
            if not isinstance(chat, int):
                continue
            self.text_calls[chat] = self.text_calls.get(chat, 0) + 1
            key = (chat, text)
            if key in self.expected and key not in self.at:
                self.at[key] = call.at
        return len(self.at) == len(self.expected)

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until every expected reply was shown; False when the timeout came first."""
        try:
            await self.tg.wait_for(self.update, timeout, what="every answer shown")
        except AssertionError:
            return False
        return True

    def waits(self, keys: Sequence[tuple[int, str]] | None = None) -> list[float]:
        """Seconds from sending to the reply shown, for the shown ones of ``keys``."""
        chosen = self.expected if keys is None else keys
        return [self.at[k] - self.expected[k] for k in chosen if k in self.at]


# --------------------------------------------------------------------------- the bot, the relay


class _Problems(logging.Handler):
    """Keeps every WARNING or worse logged in this process (instead of printing it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Odd:
    """What looked wrong during one setup's run."""

    what: str
    notes: list[str] = field(default_factory=list)

    def check(
        self, tg: FakeTelegram, llm: FakeOpenAI, problems: Sequence[logging.LogRecord]
    ) -> None:
        if tg.violations:
            self.notes.append(f"{len(tg.violations)} Telegram violations, e.g. {tg.violations[0]}")
        if tg.server_errors:
            self.notes.append(f"{len(tg.server_errors)} FakeTelegram bugs")
        failed = [c for c in tg.calls if c.status != 200]
        if failed:
            self.notes.append(
                f"{len(failed)} failed Bot API calls, e.g. {failed[0].method} {failed[0].status} "
                f"{failed[0].description}"
            )
        bad = [r for r in llm.requests if r.status != 200]
        if bad:
            self.notes.append(f"{len(bad)} model requests not answered 200")
        if problems:
            first = problems[0]
            self.notes.append(
                f"{len(problems)} log lines >= WARNING, e.g. {first.levelname} {first.name}: "
                f"{first.getMessage()[:160]}"
            )


@dataclass
class Context:
    redis_url: str
    problems: _Problems
    odd: list[Odd] = field(default_factory=list)


@contextlib.asynccontextmanager
async def servers() -> AsyncIterator[tuple[TimedTelegram, TimedOpenAI]]:
    tg, llm = TimedTelegram(), TimedOpenAI()
    async with tg, llm:
        yield tg, llm


@contextlib.asynccontextmanager
async def the_bot(
    ctx: Context, tg: TimedTelegram, llm: TimedOpenAI, what: str, **settings: Any
) -> AsyncIterator[Any]:
    """The real bot on a flushed Redis, polling; afterwards its oddities are noted."""
    redis = connect(ctx.redis_url)
    try:
        await redis.flushall()
    finally:
        await redis.aclose()
    start = len(ctx.problems.records)
    async with running_bot(settings_for(tg, llm, ctx.redis_url, **settings)) as app:
        await tg.wait_for(lambda: bool(tg.polls_at), 30, what="the bot's first poll")
        yield app
    odd = Odd(what)
    odd.check(tg, llm, ctx.problems.records[start:])
    ctx.odd.append(odd)


async def _relay_answer(
    http: aiohttp.ClientSession, api: str, llm: FakeOpenAI, message: dict[str, Any]
) -> None:
    body = {
        "model": llm.model,
        "stream": True,
        "messages": [{"role": "user", "content": message["text"]}],
    }
    parts: list[str] = []
    headers = {"Authorization": f"Bearer {llm.api_key}"}
    async with http.post(f"{llm.base_url}/chat/completions", json=body, headers=headers) as r:
        async for line in r.content:
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    parts.append(choice["delta"].get("content") or "")
    text = {"chat_id": message["chat"]["id"], "text": "".join(parts)}
    async with http.post(f"{api}/sendMessage", json=text) as r:
        await r.read()


@contextlib.asynccontextmanager
async def relay(tg: FakeTelegram, llm: FakeOpenAI) -> AsyncIterator[None]:
    """Baseline: the least a bot does (poll; per message stream the answer, send it once)."""
    api = f"{tg.url}/bot{tg.token}"
    stop = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    async def poll(http: aiohttp.ClientSession) -> None:
        offset = 0
        while not stop.is_set():
            params = {"offset": offset, "timeout": 1}
            async with http.post(f"{api}/getUpdates", json=params) as r:
                updates = (await r.json())["result"]
            for update in updates:
                offset = update["update_id"] + 1
                if "message" in update:
                    task = asyncio.create_task(_relay_answer(http, api, llm, update["message"]))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        poller = asyncio.create_task(poll(http))
        await tg.wait_for(lambda: tg.polling, 10, what="the relay's first poll")
        try:
            yield
        finally:
            stop.set()
            await poller
            await asyncio.gather(*tasks, return_exceptions=True)


# --------------------------------------------------------------------------- scenarios


@dataclass
class Load:
    """One run of a scenario: the waits and what it cost."""

    waits: list[float]
    expected: int
    cpu: float
    text_calls: int

    @property
    def answered(self) -> str:
        return f"{len(self.waits)}/{self.expected}"


def _timeout(answers: int) -> float:
    """A bound for a run: generous for a bot that is slow, but bounded."""
    return 30.0 + answers * 0.08


async def _one_each(ctx: Context, users: int, what: str, **settings: Any) -> Load:
    """``users`` private chats each send one message at once; wait for every answer."""
    async with servers() as (tg, llm):
        chats = [100_000 + n for n in range(users)]
        for chat in chats:
            tg.add_private_chat(chat)
        async with contextlib.AsyncExitStack() as stack:
            if what == "relay":
                await stack.enter_async_context(relay(tg, llm))
            else:
                await stack.enter_async_context(the_bot(ctx, tg, llm, what, **settings))
            shown = Shown(tg)
            cpu = time.process_time()
            for chat in chats:
                question = f"question from {chat}"
                shown.expect(chat, reply_to(question), time.monotonic())
                tg.send_user_message(chat, chat, question)
            await shown.wait(_timeout(users))
            cpu = time.process_time() - cpu
        return Load(shown.waits(), users, cpu, sum(shown.text_calls.values()))


def _cap_row(users: int, setup: str, load: Load) -> tuple[object, ...]:
    waits = load.waits
    return (
        users,
        setup,
        max(waits, default=float("nan")),
        percentile(waits, 50),
        percentile(waits, 99),
        load.answered,
        load.cpu,
        MODEL_SECONDS + load.cpu,
        load.text_calls / max(1, len(waits)),
    )


async def concurrent_answers(ctx: Context) -> str:
    default = Settings.model_fields["max_concurrent_turns"].default
    rows = []
    for users in CONCURRENT_USERS:
        setups: list[tuple[str, dict[str, Any]]] = [
            (f"bot, MAX_CONCURRENT_TURNS={default} (default)", {}),
            (f"bot, MAX_CONCURRENT_TURNS={OLD_CAP} (old cap)", {"max_concurrent_turns": OLD_CAP}),
            ("relay", {}),
        ]
        for setup, settings in setups:
            progress(f"load: {users} users at once, {setup}")
            load = await _one_each(ctx, users, setup, **settings)
            rows.append(
                _cap_row(users, "baseline relay (ideal)" if setup == "relay" else setup, load)
            )
    return table(
        f"Users each sending one message at once; the model streams every answer in "
        f"{MODEL_SECONDS:.0f} s; seconds from sending to the whole answer shown; CPU: this "
        f"process (bot and test servers); ideal: {MODEL_SECONDS:.0f} s + that CPU",
        [
            "users",
            "setup",
            "all done s",
            "p50 s",
            "p99 s",
            "answered",
            "CPU s",
            "ideal s",
            "calls/answer",
        ],
        rows,
    )


async def _flood(ctx: Context, what: str, **settings: Any) -> tuple[Load, Load]:
    """One user sends FAIRNESS_BACKLOG messages, then another one: (second's, first's) loads."""
    first, second = 200_001, 200_002
    async with servers() as (tg, llm):
        tg.add_private_chat(first)
        tg.add_private_chat(second)
        async with contextlib.AsyncExitStack() as stack:
            if what == "relay":
                await stack.enter_async_context(relay(tg, llm))
            else:
                await stack.enter_async_context(the_bot(ctx, tg, llm, what, **settings))
            shown = Shown(tg)
            cpu = time.process_time()
            started = time.monotonic()
            backlog = []
            for n in range(FAIRNESS_BACKLOG):
                question = f"flood {n}"
                backlog.append((first, reply_to(question)))
                shown.expect(first, reply_to(question), started)
                tg.send_user_message(first, first, question)
            await asyncio.sleep(FAIRNESS_GAP)
            other = (second, reply_to("the other user's question"))
            shown.expect(*other, time.monotonic())
            tg.send_user_message(second, second, "the other user's question")
            # with a per-user limit of 2 the backlog takes FAIRNESS_BACKLOG / 2 answers' time
            await shown.wait(30.0 + FAIRNESS_BACKLOG * MODEL_SECONDS)
            cpu = time.process_time() - cpu
        calls = sum(shown.text_calls.values())
        return (
            Load(shown.waits([other]), 1, cpu, calls),
            Load(shown.waits(backlog), FAIRNESS_BACKLOG, cpu, calls),
        )


async def fairness(ctx: Context) -> str:
    setups: list[tuple[str, dict[str, Any]]] = [("bot, default settings", {})]
    if "user_max_concurrent_turns" in Settings.model_fields:
        default = Settings.model_fields["user_max_concurrent_turns"].default
        setups[0] = (f"bot, USER_MAX_CONCURRENT_TURNS={default} (default)", {})
        setups.append(
            ("bot, USER_MAX_CONCURRENT_TURNS=10000", {"user_max_concurrent_turns": 10_000})
        )
    setups.append(("relay", {}))
    rows = []
    for setup, settings in setups:
        progress(f"load: one user sends {FAIRNESS_BACKLOG} messages, {setup}")
        other, backlog = await _flood(ctx, setup, **settings)
        rows.append(
            (
                "baseline relay (ideal)" if setup == "relay" else setup,
                max(other.waits, default=float("nan")),
                max(backlog.waits, default=float("nan")),
                percentile(backlog.waits, 50),
                backlog.answered,
                other.cpu,
            )
        )
    return table(
        f"Fairness: one user sends {FAIRNESS_BACKLOG} messages at once, {FAIRNESS_GAP} s later "
        f"another user sends one; model {MODEL_SECONDS:.0f} s per answer (ideal wait: "
        f"{MODEL_SECONDS:.0f} s)",
        [
            "setup",
            "2nd user waits s",
            "backlog done s",
            "backlog p50 s",
            "backlog answered",
            "CPU s",
        ],
        rows,
    )


def _latency_batch() -> int:
    return sized(2 * LATENCY_BATCH, LATENCY_BATCH)


async def _last_token(ctx: Context, what: str) -> tuple[list[float], list[float], float]:
    """(last token -> final text, send -> first text shown, text calls per answer)."""
    batch_size = _latency_batch()
    async with servers() as (tg, llm):
        async with contextlib.AsyncExitStack() as stack:
            if what == "relay":
                await stack.enter_async_context(relay(tg, llm))
            else:
                await stack.enter_async_context(the_bot(ctx, tg, llm, what))
            shown = Shown(tg)
            for batch in range(0, LATENCY_SAMPLES, batch_size):
                for chat in range(
                    300_000 + batch, 300_000 + min(LATENCY_SAMPLES, batch + batch_size)
                ):
                    tg.add_private_chat(chat)
                    question = f"latency sample {chat}"
                    shown.expect(chat, reply_to(question), time.monotonic())
                    tg.send_user_message(chat, chat, question)
                await shown.wait(_timeout(batch_size))
        lags = [at - llm.last_token[reply] for (_, reply), at in shown.at.items()]
        firsts = []
        first_by_chat: dict[int, float] = {}
        for call in tg.calls:
            if (
                call.method == "sendMessage"
                and call.status == 200
                and isinstance(call.result, dict)
            ):
                chat = call.result.get("chat", {}).get("id")
                if isinstance(chat, int):
                    first_by_chat.setdefault(chat, call.at)
        for (chat, _), sent in shown.expected.items():
            if chat in first_by_chat:
                firsts.append(first_by_chat[chat] - sent)
        calls = sum(shown.text_calls.values()) / max(1, len(shown.at))
        return lags, firsts, calls


async def final_text(ctx: Context) -> str:
    rows = []
    for setup in ("bot, private chat", "relay"):
        progress(f"load: last token to final text, {setup}")
        lags, firsts, calls = await _last_token(ctx, setup)
        rows.append(
            (
                "baseline relay (ideal)" if setup == "relay" else setup,
                f"{len(lags)}/{LATENCY_SAMPLES}",
                percentile(lags, 50) * 1e3,
                percentile(lags, 99) * 1e3,
                percentile(firsts, 50),
                calls,
            )
        )
    return table(
        f"From the model's last token to the whole answer visible in Telegram "
        f"({MODEL_SECONDS:.0f} s streamed answer, {_latency_batch()} chats at a time; target "
        "<= 100 ms when not rate limited)",
        ["setup", "samples", "p50 ms", "p99 ms", "first text shown p50 s", "calls/answer"],
        rows,
    )


@contextlib.contextmanager
def _collecting() -> Iterator[_Problems]:
    """Every WARNING+ log record of this process is kept, not printed."""
    problems = _Problems()
    root = logging.getLogger()
    root.addHandler(problems)
    try:
        yield problems
    finally:
        root.removeHandler(problems)


async def run() -> str:
    with redis_server() as server, _collecting() as problems:
        ctx = Context(server.url, problems)
        parts = []
        for scenario in (concurrent_answers, fairness, final_text):
            try:
                parts.append(await scenario(ctx))
            except Exception as exc:  # one broken scenario must not lose the others' tables
                parts.append(f"{scenario.__name__} failed: {exc!r}\n")
                progress(f"load: {scenario.__name__} failed: {exc!r}")
    odd = [f"- {o.what}: " + "; ".join(o.notes) for o in ctx.odd if o.notes]
    parts.append(
        "Oddities seen (Telegram violations, failed calls, log lines >= WARNING):\n"
        + ("\n".join(odd) if odd else "- none")
        + "\n"
    )
    return "\n".join(parts)
