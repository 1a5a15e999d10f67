"""Chaos soak: the real bot (``python -m bot``) under seeded, bounded chaos, then a check
that every message got exactly one answer on the right chain.

Run from the repository root::

    .venv/bin/python -m bench.soak --seed 1 --minutes 8          # the full run (22 chats)
    .venv/bin/python -m bench.soak --seed 2 --minutes 1 --chats 8 # a smoke run

Everything runs on loopback: the Bot API test server (``tests.fake_telegram``) and the
OpenAI test server (``tests.fake_openai``) in this process, a real redis-server
(``tests.redis_server``, ``appendfsync always``) and the bot as a subprocess
(``tests.harness.BotProcess``, environment from ``tests.harness.env_for``). The bot's
output and the soak's own events (every message sent, every fault, kill and restart, with
the same clock) go to ``<run dir>/bot.log``; the run dir (``--out``, default under /tmp)
also holds Redis's data and log.

What happens (all times and counts drawn from ``--seed``; choices that depend on the bot's
progress, such as which visible answer is replied to, follow the run)
-------------------------------------------------------------------------------------
* ``--chats`` chats (default 22): private chats, plus (from 4 chats on) a supergroup with
  three users and a forum with three users and two topics. In groups a new conversation
  @mentions the bot; continuing replies to the bot.
* Each chat sends at random times (mean gap ``--gap`` s): a new conversation; a reply to a
  random bot answer part of the chat (any part of a split answer, recent ones preferred,
  parts at least ~1 s old; the answer may still be streaming); a fan-out (2-5 replies to the
  same part at once); in private chats a reply to the user's own answered message. Every
  text carries a unique marker ``c<chat>m<n>``; the model's reply to it is
  ``echo c<chat>m<n> w..`` (deterministic; about one in 40 is long enough to be split).
* Model: per-chunk delay redrawn every 2-6 s so answers take 0-3 s, short gate closures
  (every request held 0.5-3 s), 500 and 429 bursts, streams cut after 0-3 chunks, streams
  stalled past the bot's 5 s timeout.
* Telegram: 429s with ``retry_after`` for one chat, flood windows (sendMessage and
  editMessageText 429 for 3-8 s), 502s, getUpdates failures, and redelivered updates (the
  same message pushed again, at once or up to 10 s later).
* The bot is SIGKILLed every 30-60 s and restarted 0.2-2.5 s later; Redis is restarted twice
  (once gracefully, once SIGKILLed), down 1-5 s each time.
* Then a quiet drain: no new messages, queued faults dropped, fast model; it ends when
  every message has a finished answer, no update is pending and Telegram has been quiet for
  3 s (checked again 5 s later), or after ``--drain`` seconds. The bot then gets SIGTERM.

What is checked (bench/soak_check.py)
-------------------------------------
* An *answer* to a user message is a bot message replying to it whose text starts with
  ``[depth:`` or with ``⚠️`` (a notice; a notice appended to streamed text stays part of
  its answer); the further parts of a split answer follow it. Exactly one answer: answered
  once (notices counted apart: acceptable, the user can retry); more: *duplicated*; none:
  *lost*. Bot replies of other shapes are counted as unexpected.
* *Wrong chain*: the expected chain of a message is known from what it replied to. A new
  message starts one (``[depth:2]``). A reply to a part of an answer continues that
  answer's message: +2 if that answer was a model answer, +1 if it was a notice (notices
  are aliased to the user's node; ``[depth:N] partial … ⚠️ …`` is a notice too). A reply to
  the user's own message continues from that message's node (+1). The ``[depth:N]`` of the
  answer must match. A chain through an answer that never finished is not checkable
  (counted apart, not a failure).
* *Wrong history*: every model request that ends with a soak message must hold exactly the
  expected chain: the user messages' markers in order, each answered one followed by its
  exact reply, nothing else (summaries are never triggered: the token budget is raised).
* *Wrong chat*: a bot message showing another chat's marker, or a model request holding
  another chat's messages. *Wrong content*: an answer that does not end with its own reply
  or shows other markers.
* Exit status 1 when any message was lost, duplicated or mixed (any wrong-* count).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tests.fake_openai import FakeOpenAI
from tests.fake_telegram import FakeTelegram, StoredMessage
from tests.harness import BotProcess, env_for
from tests.redis_server import RedisServer

from .soak_check import (
    Checker,
    Copy,
    Kind,
    Observed,
    Problem,
    Result,
    Sent,
    copies,
    observe,
    reply_text,
)

EXCEPTION_RE = re.compile(r"^\s*[\d.]+ g\d+ \w+(Error|Exception): ")
BOT_NAME = "replychain_bot"  # FakeTelegram's default username
PROGRESS_EVERY = 30.0
OUT_METHODS = frozenset({"sendMessage", "editMessageText"})
ACTIONS = ("new", "part", "fanout", "own")
WEIGHTS = (0.22, 0.56, 0.1, 0.12)
PHRASES = (
    "tell me more",
    "why is that",
    "and then what happened",
    "give me an example",
    "summarise this please",
    "what about the other case",
)


@dataclass(frozen=True)
class ChatSpec:
    idx: int
    chat_id: int
    kind: str  # private | group | forum
    users: tuple[int, ...]
    topics: tuple[int | None, ...] = (None,)


@dataclass(frozen=True)
class Event:
    at: float
    kind: str  # msg | model_fault | tg_fault | latency
    chat: int
    action: str
    roll: float


class LoggedBot(BotProcess):
    """``python -m bot`` whose output is copied line by line to a sink as it comes
    (the harness keeps it in a pipe until exit, which would stall a long run)."""

    def __init__(
        self, env: dict[str, str], cwd: Path, sink: Callable[[str], None], generation: int
    ) -> None:
        super().__init__(env, cwd)
        self.sink = sink
        self.generation = generation
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await super().start()
        assert self.proc is not None and self.proc.stdout is not None
        self._pump = asyncio.create_task(self._copy(self.proc.stdout))

    async def _copy(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than the reader's limit
                line = await stream.read(65536)
            if not line:
                return
            self.sink(f"g{self.generation} {line.decode(errors='replace').rstrip()}")

    async def wait(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        if self._pump is not None:
            await self._pump
        return code

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


def make_chats(count: int) -> list[ChatSpec]:
    specs: list[ChatSpec] = []
    groups = 2 if count >= 4 else 0
    for idx in range(count - groups):
        specs.append(ChatSpec(idx, 7001 + idx, "private", (7001 + idx,)))
    if groups:
        base = count - groups
        users = (8001, 8002, 8003)
        specs.append(ChatSpec(base, -1001000000001, "group", users))
        specs.append(ChatSpec(base + 1, -1001000000002, "forum", (8011, 8012, 8013)))
    return specs


def plan(rng: random.Random, specs: list[ChatSpec], chaos: float, gap: float) -> list[Event]:
    events: list[Event] = []
    for spec in specs:
        t = rng.uniform(0.5, gap)
        while t < chaos:
            action = rng.choices(ACTIONS, WEIGHTS)[0]
            events.append(Event(t, "msg", spec.idx, action, rng.random()))
            t += rng.expovariate(1 / gap)
    periodic = (("model_fault", 8.0, 20.0), ("tg_fault", 6.0, 15.0), ("latency", 2.0, 6.0))
    for kind, low, high in periodic:
        t = rng.uniform(low, high)
        while t < chaos:
            events.append(Event(t, kind, rng.randrange(len(specs)), "", rng.random()))
            t += rng.uniform(low, high)
    return sorted(events, key=lambda e: e.at)


class Soak:
    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.args = args
        self.seed: int = args.seed
        self.chaos = float(args.minutes) * 60
        self.run_dir = run_dir
        self.sched = random.Random(args.seed)
        self.rng = random.Random(args.seed * 7919 + 1)
        self.specs = make_chats(args.chats)
        self.events = plan(self.sched, self.specs, self.chaos, args.gap)
        self.kill_times: list[float] = []
        #: When each SIGKILL was actually sent (the soak's clock).
        self.killed_at: list[float] = []
        t = self.sched.uniform(30, 60)
        while t < self.chaos:
            self.kill_times.append(t)
            t += self.sched.uniform(30, 60)
        self.redis_plan = [
            (self.chaos * self.sched.uniform(0.25, 0.4), False),
            (self.chaos * self.sched.uniform(0.6, 0.75), True),
        ]
        self.log_path = run_dir / "bot.log"
        self.log: TextIO = self.log_path.open("w", encoding="utf-8", buffering=1)
        self.t0 = time.monotonic()
        self.tg = FakeTelegram()
        self.llm = FakeOpenAI()
        self.redis = RedisServer(run_dir / "redis")
        self.bot: LoggedBot | None = None
        self.generation = 0
        self.lifecycle = asyncio.Lock()  # one kill/restart of the bot at a time
        self.sent: list[Sent] = []
        self.by_id: dict[tuple[int, int], Sent] = {}
        self.counters = [0] * len(self.specs)
        self.observed: list[Observed] = []
        self.model_calls = 0
        self.tg_calls_dropped = 0
        #: (chat, bot message id) -> when Telegram accepted it (the soak's clock)
        self.accepted_at: dict[tuple[int, int], float] = {}
        self.kills = 0
        self.redis_restarts = 0
        self.self_exits = 0
        self.redeliveries = 0
        self.faults = {"model": 0, "telegram": 0, "gate": 0}
        self.sigterm_note = ""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.chaos_over = False

    # ------------------------------------------------------------------ plumbing

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        self.log.write(f"{self.now():9.3f} {text}\n")

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def until(self, at: float) -> None:
        delay = at - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    async def start_bot(self) -> None:
        self.generation += 1
        env = env_for(
            self.tg,
            self.llm,
            self.redis.url,
            BOT_INSTANCE="soak",
            CONTEXT_TOKEN_BUDGET="500000",
            LOG_LEVEL="INFO",
        )
        bot = LoggedBot(env, self.run_dir, self.note, self.generation)
        await bot.start()
        self.bot = bot
        self.note(
            f"SOAK bot generation {self.generation} started (pid {bot.proc and bot.proc.pid})"
        )

    # ------------------------------------------------------------------ users

    def bot_parts(self, spec: ChatSpec) -> list[StoredMessage]:
        now = time.time()
        return [
            m
            for m in self.tg.bot_messages(spec.chat_id)
            if not m.deleted
            and m.text
            and (spec.chat_id, m.reply_to or 0) in self.by_id
            and now - m.date >= 2
        ]

    def copy_of(self, part: StoredMessage) -> tuple[Sent, Copy] | None:
        owner = self.by_id.get((part.chat_id, part.reply_to or 0))
        if owner is None:
            return None
        replies = [m for m in self.tg.bot_messages(part.chat_id) if m.reply_to == owner.message_id]
        for copy in copies(replies)[0]:
            if any(p.message_id == part.message_id for p in copy.parts):
                return owner, copy
        return None

    def pick(self, items: list[Any]) -> Any:
        if self.rng.random() < 0.7:
            return self.rng.choice(items[-6:])
        return self.rng.choice(items)

    def act(self, spec: ChatSpec, action: str) -> None:
        if action == "new":
            self.send(spec, "new", None)
            return
        if action == "own" and spec.kind == "private":
            own = [
                s
                for s in self.sent[-400:]
                if s.chat_id == spec.chat_id and self.finished(s) is not None
            ]
            if own:
                self.send(spec, "own", self.pick(own).message_id)
                return
        self.fan_out(spec, self.rng.randint(2, 5) if action == "fanout" else 1)

    def fan_out(self, spec: ChatSpec, count: int) -> None:
        """``count`` replies at once to one bot answer part (a new message if none)."""
        parts = self.bot_parts(spec)
        if not parts:
            self.send(spec, "new", None)
            return
        part: StoredMessage = self.pick(parts)
        found = self.copy_of(part)
        live = found is None or not found[1].complete(reply_text(found[0].key, self.seed))
        for _ in range(count):
            self.send(spec, "part", part.message_id, live=live)

    def finished(self, s: Sent) -> Copy | None:
        replies = [m for m in self.tg.bot_messages(s.chat_id) if m.reply_to == s.message_id]
        found = copies(replies)[0]
        if found and found[-1].complete(reply_text(s.key, self.seed)):
            return found[-1]
        return None

    def send(self, spec: ChatSpec, kind: Kind, target: int | None, *, live: bool = False) -> None:
        n = self.counters[spec.idx]
        self.counters[spec.idx] += 1
        key = f"c{spec.idx}m{n}"
        user = self.rng.choice(spec.users)
        text = f"{key} {self.rng.choice(PHRASES)}"
        thread: int | None = None
        if kind == "new" and spec.kind != "private":
            text = f"@{BOT_NAME} {text}"
            if spec.kind == "forum":
                thread = self.rng.choice(spec.topics)
        raw = self.tg.send_user_message(spec.chat_id, user, text, reply_to=target, thread_id=thread)
        s = Sent(key, spec.idx, spec.chat_id, raw["message_id"], user, self.now(), kind, target)
        s.target_live = live
        self.sent.append(s)
        self.by_id[(spec.chat_id, s.message_id)] = s
        self.note(
            f"SOAK send {key} chat {spec.chat_id} msg {s.message_id} {kind}"
            + (f" reply_to {target}" if target else "")
            + (" (target still streaming)" if live else "")
        )
        roll = self.rng.random()
        if roll < 0.02:
            self.redeliver(s, raw, 0.0)
        elif roll < 0.08:
            self.spawn(self.redeliver_later(s, raw, self.rng.uniform(0.5, 10)))

    def redeliver(self, s: Sent, raw: dict[str, Any], delay: float) -> None:
        update_id = self.tg.push_update({"message": raw})
        s.redeliveries += 1
        self.redeliveries += 1
        self.note(
            f"SOAK redeliver {s.key} msg {s.message_id} as update {update_id} (+{delay:.1f}s)"
        )

    async def redeliver_later(self, s: Sent, raw: dict[str, Any], delay: float) -> None:
        await asyncio.sleep(delay)
        if not self.chaos_over:
            self.redeliver(s, raw, delay)

    # ------------------------------------------------------------------ faults

    def model_fault(self, roll: float) -> None:
        count = 1 + self.rng.randrange(3)
        if roll < 0.3:
            self.llm.fail_next(500, count=count)
            what = f"500 x{count}"
        elif roll < 0.55:
            wait = round(self.rng.uniform(0.5, 2), 1)
            self.llm.fail_next(429, count=count, retry_after=wait)
            what = f"429 x{count} retry-after {wait}"
        elif roll < 0.85:
            after = self.rng.randint(0, 3)
            self.llm.cut_stream_next(after_chunks=after)
            what = f"stream cut after {after} chunks"
        else:
            self.llm.stall_stream_next(after_chunks=1, seconds=8)
            what = "stream stalled 8s"
        self.faults["model"] += 1
        self.note(f"SOAK model fault: {what}")

    def tg_fault(self, spec: ChatSpec, roll: float) -> None:
        chat = spec.chat_id
        if roll < 0.12:  # issue 12 #2: several answers at once into a chat under flood control
            self.tg.fail_next("sendMessage", retry_after=1, count=6, chat_id=chat)
            self.note(f"SOAK telegram fault: sendMessage 429 x6 retry_after 1 in chat {chat}")
            self.faults["telegram"] += 1
            self.fan_out(spec, 6)
            return
        if roll < 0.35:
            wait, count = self.rng.randint(1, 3), self.rng.randint(1, 2)
            self.tg.fail_next("sendMessage", retry_after=wait, count=count, chat_id=chat)
            what = f"sendMessage 429 x{count} retry_after {wait} in chat {chat}"
        elif roll < 0.6:
            wait = self.rng.randint(3, 8)
            self.tg.fail_next("sendMessage", retry_after=wait, chat_id=chat)
            self.tg.fail_next("editMessageText", retry_after=wait, chat_id=chat)
            what = f"flood window {wait}s in chat {chat}"
        elif roll < 0.8:
            method = self.rng.choice(("sendMessage", "editMessageText"))
            self.tg.fail_next(method, status=502, chat_id=chat)
            what = f"{method} 502 in chat {chat}"
        else:
            status = self.rng.choice((429, 502))
            self.tg.fail_next("getUpdates", status=status, retry_after=1 if status == 429 else None)
            what = f"getUpdates {status}"
        self.faults["telegram"] += 1
        self.note(f"SOAK telegram fault: {what}")

    def latency(self, roll: float) -> None:
        self.llm.chunk_delay = round(self.rng.uniform(0, 0.35), 3)
        if roll < 0.15:
            self.spawn(self.close_gate(self.rng.uniform(0.5, 3)))

    async def close_gate(self, seconds: float) -> None:
        if self.llm.gate is not None or self.chaos_over:
            return
        gate = self.llm.gate = asyncio.Event()
        self.faults["gate"] += 1
        self.note(f"SOAK model gate closed for {seconds:.1f}s")
        try:
            await asyncio.sleep(seconds)
        finally:
            gate.set()
            if self.llm.gate is gate:
                self.llm.gate = None

    # ------------------------------------------------------------------ loops

    async def timeline(self) -> None:
        for event in self.events:
            await self.until(event.at)
            spec = self.specs[event.chat]
            if event.kind == "msg":
                self.act(spec, event.action)
            elif event.kind == "model_fault":
                self.model_fault(event.roll)
            elif event.kind == "tg_fault":
                self.tg_fault(spec, event.roll)
            else:
                self.latency(event.roll)
        await self.until(self.chaos)

    async def killer(self) -> None:
        for at in self.kill_times:
            await self.until(at)
            async with self.lifecycle:
                assert self.bot is not None
                self.killed_at.append(self.now())
                await self.bot.kill()
                self.kills += 1
                self.note(f"SOAK SIGKILL bot generation {self.generation}")
                await asyncio.sleep(self.sched.uniform(0.2, 1.0))
                # issue 12 #1: replies to one chain that wait while the bot is down
                self.fan_out(self.specs[self.rng.randrange(len(self.specs))], 4)
                await asyncio.sleep(self.sched.uniform(0.2, 1.5))
                await self.start_bot()

    async def redis_chaos(self) -> None:
        for at, crash in self.redis_plan:
            await self.until(at)
            down = self.sched.uniform(1, 5)
            self.note(f"SOAK redis {'SIGKILL' if crash else 'stop'}, down for {down:.1f}s")
            await asyncio.to_thread(self.redis.kill if crash else self.redis.stop)
            await asyncio.sleep(down)
            await asyncio.to_thread(self.redis.start_same_port)
            self.redis_restarts += 1
            self.note("SOAK redis started again")

    async def watchdog(self) -> None:
        """Progress lines; a bot that exited on its own is noted and started again."""
        next_line = PROGRESS_EVERY
        while True:
            await asyncio.sleep(1)
            self.absorb()
            if not self.lifecycle.locked() and self.bot is not None and not self.bot.alive:
                async with self.lifecycle:
                    code = await self.bot.wait()
                    self.self_exits += 1
                    self.note(f"SOAK bot generation {self.generation} exited by itself ({code})")
                    print(f"  bot exited by itself with status {code}; starting it again")
                    await self.start_bot()
            if self.now() >= next_line:
                next_line += PROGRESS_EVERY
                self.progress()

    def progress(self) -> None:
        replies = self.reply_index()
        answered = sum(
            1 for s in self.sent if copies(replies.get((s.chat_id, s.message_id), []))[0]
        )
        print(
            f"[{self.now():6.0f}s] sent {len(self.sent)}, answered {answered}, "
            f"pending {len(self.sent) - answered}, model calls {self.model_calls}, "
            f"kills {self.kills}, redis restarts {self.redis_restarts}",
            flush=True,
        )

    def reply_index(self) -> dict[tuple[int, int], list[StoredMessage]]:
        index: dict[tuple[int, int], list[StoredMessage]] = {}
        for spec in self.specs:
            for m in self.tg.bot_messages(spec.chat_id):
                if m.reply_to is not None:
                    index.setdefault((spec.chat_id, m.reply_to), []).append(m)
        return index

    def note_accepted(self) -> None:
        """When Telegram accepted each bot message (kept before old calls are dropped)."""
        for call in self.tg.calls:
            if call.method == "sendMessage" and call.status == 200:
                result = call.result
                if isinstance(result, dict) and "message_id" in result:
                    key = (int(call.params["chat_id"]), int(result["message_id"]))
                    self.accepted_at[key] = call.at - self.t0

    def absorb(self) -> None:
        """Reduce the model requests to what the checks need; bound the servers' logs."""
        requests = self.llm.requests
        count = len(requests)
        for request in requests[:count]:
            obs = observe(request.messages, self.seed)
            if obs is not None:
                self.observed.append(obs)
        del requests[:count]
        self.model_calls += count
        if len(self.tg.calls) > 4000:
            self.note_accepted()
            drop = len(self.tg.calls) - 500
            del self.tg.calls[:drop]
            self.tg_calls_dropped += drop

    # ------------------------------------------------------------------ drain

    def settled(self) -> bool:
        if self.tg.pending_updates:
            return False
        replies = self.reply_index()
        for s in self.sent:
            found = copies(replies.get((s.chat_id, s.message_id), []))[0]
            if not found or not found[-1].complete(reply_text(s.key, self.seed)):
                return False
        outs = [c.at for c in self.tg.calls[-200:] if c.method in OUT_METHODS]
        return not outs or time.monotonic() - outs[-1] >= 3

    async def drain(self) -> float:
        self.chaos_over = True
        self.llm.clear_faults()
        faults = getattr(self.tg, "_faults", None)  # no public way to drop queued faults
        if isinstance(faults, list):
            faults.clear()
        self.llm.chunk_delay = 0.01
        if self.llm.gate is not None:
            self.llm.gate.set()
            self.llm.gate = None
        started = self.now()
        self.note("SOAK chaos over: quiet drain")
        print(f"[{self.now():6.0f}s] chaos over; draining (at most {self.args.drain:.0f}s)")
        deadline = started + self.args.drain
        confirmations = 0
        while self.now() < deadline:
            await asyncio.sleep(1)
            confirmations = confirmations + 1 if self.settled() else 0
            if confirmations >= 5:
                break
        return self.now() - started

    async def stop_bot(self) -> None:
        async with self.lifecycle:
            if self.bot is None:
                return
            try:
                code = await self.bot.terminate(timeout=40)
                self.note(f"SOAK bot exited with {code} after SIGTERM")
                if code != 0:
                    self.sigterm_note = f"exit status {code} after SIGTERM"
            except TimeoutError:
                self.sigterm_note = "still running 40 s after SIGTERM (killed)"
                await self.bot.kill()

    # ------------------------------------------------------------------ the run

    async def run(self) -> int:
        async with self.tg, self.llm:
            await asyncio.to_thread(self.redis.start)
            try:
                return await self._run()
            finally:
                for task in list(self.tasks):
                    task.cancel()
                await asyncio.gather(*self.tasks, return_exceptions=True)
                if self.bot is not None and self.bot.alive:
                    await self.bot.kill()
                await asyncio.to_thread(self.redis.stop)
                self.log.close()

    async def _run(self) -> int:
        self.llm.responder = self.respond
        self.llm.chunk_chars = 64
        for spec in self.specs:
            if spec.kind == "private":
                self.tg.add_private_chat(spec.chat_id, f"User{spec.chat_id}")
            else:
                self.tg.add_group(spec.chat_id, f"Group{spec.idx}", forum=spec.kind == "forum")
        forum = next((s for s in self.specs if s.kind == "forum"), None)
        if forum is not None:
            topics = tuple(self.tg.add_topic(forum.chat_id, name) for name in ("Ideas", "Bugs"))
            self.specs[forum.idx] = ChatSpec(
                forum.idx, forum.chat_id, "forum", forum.users, (None, *topics)
            )
        print(
            f"soak seed {self.seed}: {len(self.specs)} chats, {self.chaos / 60:g} min of chaos, "
            f"{sum(e.kind == 'msg' for e in self.events)} planned sends, "
            f"{len(self.kill_times)} kills, 2 Redis restarts; log {self.log_path}",
            flush=True,
        )
        self.t0 = time.monotonic()
        await self.start_bot()
        self.spawn(self.watchdog())
        loops = [
            asyncio.create_task(c) for c in (self.timeline(), self.killer(), self.redis_chaos())
        ]
        await asyncio.gather(*loops)
        drained = await self.drain()
        await self.stop_bot()
        self.absorb()
        bot_messages = {s.chat_id: self.tg.bot_messages(s.chat_id) for s in self.specs}
        self.note_accepted()
        sent_at = self.accepted_at
        result = Checker(
            self.sent, bot_messages, self.observed, self.seed,
            sent_at=sent_at, kill_times=self.killed_at,
        ).run()  # fmt: skip
        self.report(result, drained)
        return 1 if result.failed else 0

    def respond(self, messages: list[dict[str, Any]]) -> str:
        obs = observe(messages, self.seed)
        return "ok" if obs is None else reply_text(obs.key, self.seed)

    # ------------------------------------------------------------------ report

    def report(self, result: Result, drained: float) -> None:
        rows: list[tuple[str, object]] = [
            ("messages sent that must be answered", result.sent),
            ("answered exactly once", result.once),
            ("  of which with a notice (model outage etc.)", result.once_notice),
            ("answered twice or more (duplicated)", result.duplicated),
            (
                "  twice, first copy accepted within 250 ms of a SIGKILL (README)",
                result.crash_window_duplicates,
            ),
            ("never answered (lost)", result.lost),
            ("answers on the wrong chain ([depth:N])", result.wrong_depth),
            ("model requests with the wrong history (messages)", result.wrong_history),
            ("answers with the wrong content", result.wrong_content),
            ("bot messages in the wrong chat", result.wrong_chat_messages),
            ("model requests holding other chats' messages", result.wrong_chat_requests),
            ("chains not checkable (an answer never finished)", result.unknown_chain),
            (
                "unexpected bot replies / bot messages replying to nothing",
                f"{result.unexpected_replies} / {result.stray_bot_messages}",
            ),
            ("deepest answer checked ([depth:N])", result.deepest),
            ("replies sent while the target was still streaming", result.live_targets),
            ("updates redelivered", result.redelivered),
            ("model calls (requests checked)", f"{self.model_calls} ({result.requests_checked})"),
            (
                "model faults / Telegram faults / gate closures",
                f"{self.faults['model']} / {self.faults['telegram']} / {self.faults['gate']}",
            ),
            ("Telegram calls inside a retry_after window", len(self.tg.violations)),
            ("bot SIGKILLs / exits by itself", f"{self.kills} / {self.self_exits}"),
            ("Redis restarts", self.redis_restarts),
            ("drain (s)", f"{drained:.0f}"),
            ("wall time (s)", f"{self.now():.0f}"),
        ]
        width = max(len(name) for name, _ in rows)
        print(f"\nsoak seed {self.seed}, {self.args.chats} chats, {self.args.minutes:g} min")
        print(f"{'what':<{width}}  value")
        print(f"{'-' * width}  -----")
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        for violation in self.tg.violations[:3]:
            print(f"Telegram violation (e.g.): {violation}")
        if self.sigterm_note:
            print(f"shutdown: {self.sigterm_note}")
        print(f"verdict: {'FAIL' if result.failed else 'ok'}; bot log {self.log_path}")
        self.print_problems(result.problems)

    def print_problems(self, problems: list[Problem]) -> None:
        if not problems:
            return
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        print(f"\nproblems ({len(problems)}; details of the first {self.args.details}):")
        for problem in problems[: self.args.details]:
            print(
                f"- {problem.key} chat {problem.chat_id} msg {problem.message_id} "
                f"sent at {problem.at:.1f}s: {problem.what}"
            )
            for line in self.excerpt(lines, problem):
                print(f"    {line[:200]}")
        for problem in problems[self.args.details :]:
            print(
                f"- {problem.key} chat {problem.chat_id} msg {problem.message_id}: {problem.what}"
            )

    @staticmethod
    def excerpt(lines: list[str], problem: Problem) -> list[str]:
        """Log lines about the problem's chat, kills and errors, from its send to 60 s
        later: errors and exceptions first (at most 6), then the rest."""
        needles = (f"chat {problem.chat_id} ", f"chat {problem.chat_id}:")
        errors: list[str] = []
        context: list[str] = []
        for line in lines:
            try:
                at = float(line[:9])
            except ValueError:
                continue
            if not problem.at - 1 <= at <= problem.at + 60:
                continue
            about = any(n in line for n in needles)
            if EXCEPTION_RE.search(line) or ("ERROR" in line and about):
                errors.append(line)
            elif about or "SOAK SIGKILL" in line or "SOAK redis" in line:
                context.append(line)
        return errors[:6] + context[: 16 - min(6, len(errors))]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description="Chaos soak of the real bot (see the module)."
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=8.0, help="chaos time (default 8)")
    parser.add_argument("--chats", type=int, default=22, help="chats, 2 of them groups (22)")
    parser.add_argument(
        "--gap", type=float, default=7.0, help="mean seconds between a chat's messages"
    )
    parser.add_argument("--drain", type=float, default=180.0, help="longest quiet drain, s")
    parser.add_argument("--details", type=int, default=12, help="problems shown with log lines")
    parser.add_argument("--out", type=Path, default=None, help="run dir (default under /tmp)")
    args = parser.parse_args(argv)
    if args.chats < 1 or args.minutes <= 0:
        parser.error("--chats must be >= 1 and --minutes > 0")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    run_dir: Path = args.out or Path(
        f"/tmp/replychain-soak-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    soak = Soak(args, run_dir)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(soak.run())
    return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
