"""Chaos soak: the real bot (``python -m bot``) under seeded, bounded chaos, then a check
that every message got exactly one answer on the right chain.

Run from the repository root (``make soak SEEDS="1 2 3" MINUTES=5 SOAK_ARGS="--processes 3"``
runs one soak per seed with those options)::

    .venv/bin/python -m bench.soak --seed 1 --minutes 8              # one process, one Redis
    .venv/bin/python -m bench.soak --seed 1 --processes 3            # 3 pollers, one Redis
    .venv/bin/python -m bench.soak --seed 1 --processes 3 --webhook  # 3 behind a proxy
    .venv/bin/python -m bench.soak --seed 1 --cluster                # on a failing cluster
    .venv/bin/python -m bench.soak --seed 1 --cluster --lossy        # failovers lose writes
    .venv/bin/python -m bench.soak --seed 2 --minutes 1 --chats 8    # a smoke run
    .venv/bin/python -m bench.soak --seed 1 --no-payments            # no Stars payments

Everything runs on loopback: the Bot API test server (``tests.fakes.telegram``) and the
OpenAI test server (``tests.fakes.model``) in this process, real redis-servers
(``tests.redis_server``, ``appendfsync always``) and the bot as subprocesses
(``tests.harness.BotProcess``, environment from ``tests.harness.env_for``). The bots'
output (each line prefixed ``p<process>g<generation>``) and the soak's own events (every
message sent, every fault, kill and restart, with the same clock) go to
``<run dir>/bot.log``; the run dir (``--out``, default under /tmp) also holds Redis's data
and logs, and every bot message as the run left it (``messages.jsonl``).

Deployments (bench/soak_deploy.py)
----------------------------------
* ``--processes N`` (default 1): N bot processes on one Redis, each with its own
  ``BOT_INSTANCE`` (``soak-<i>``) and ``TAKEOVER_SECONDS`` = ``--takeover`` (default 8).
  Polling by default: one process polls at a time (the poller lease). ``--webhook``: every
  process serves the webhook (``WEBHOOK_URL``/``WEBHOOK_SECRET``/``WEBHOOK_LISTEN``, a
  port each) behind a round-robin proxy on loopback, the fake Telegram's
  ``webhook_target``; a POST to a dead process gets 502 and Telegram delivers it again.
* ``--cluster``: a Redis Cluster of 3 masters with a replica each
  (``cluster-node-timeout`` 1500 ms) and the bot with ``REDIS_CLUSTER=true``. Instead of
  whole-Redis restarts, a master is SIGKILLed every 30-60 s (once the cluster has
  healed from the last one: every master has a replica in sync); its replica is
  promoted, and the killed node is started again 3-10 s later and rejoins as a replica.
  What a failover can lose is measured at each kill (the module docstring of
  ``bench/soak_deploy.py``). ``--lossy`` makes every failover lose writes: the replica
  is stopped and cut off 0.2-0.8 s before its master is killed.

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
* Replies to answers still being written: whenever Telegram accepts a new part of an
  answer (``sendMessage``; in groups the part then grows by edits, in private chats the
  next part is drafted), the user replies to it at once with probability 0.25, from the
  fake Telegram's ``after_call`` hook: the reply is queued and handed to the bot (taken by
  getUpdates or answered 200 by a webhook, waited for up to 1 s) before the bot gets
  Telegram's answer naming the part; and with probability 0.3 it replies 0.1-3 s later,
  whatever the answer is doing (flood windows included). These replies are chaos too:
  they stop when the chaos does.
* Model: per-chunk delay redrawn every 2-6 s so answers take 0-3 s, short gate closures
  (every request held 0.5-3 s), 500 and 429 bursts, streams cut after 0-3 chunks, streams
  stalled past the bot's 5 s timeout.
* Telegram: 429s with ``retry_after`` for one chat, flood windows (sendMessage and
  editMessageText 429 for 3-8 s), 502s, getUpdates failures, and redelivered updates (the
  same message pushed again, at once or up to 10 s later).
* A bot process is SIGKILLed every 30-60 s (one at random) and restarted 0.2-2.5 s later;
  with several processes, every other kill (at random) leaves the process down for
  ``--takeover`` + 3-12 s, so the others take its turns over. Redis is restarted twice
  (once gracefully, once SIGKILLed), down 1-5 s each time, or (``--cluster``) fails over.
* Payments (bench/soak_pay.py; ``--no-payments`` leaves them out): the bots run with
  Telegram Stars on (``STARS_USD``, a small ``FREE_DAILY_USD``, token prices), every user
  has a private chat with the bot and pays at once, then at random; an accepted
  payment's ``successful_payment`` update is sometimes delivered again, a payment with
  another user's invoice must be refused, and the owner refunds a few payments with
  ``python -m bot refund`` (some twice).
* Then a quiet drain: no new messages, queued faults dropped, fast model; it ends when
  every message has a finished answer and every payment its confirmation, no update is
  pending and Telegram has been quiet for 3 s (checked again 5 s later), or after
  ``--drain`` seconds. The bots then get SIGTERM.

What is checked (bench/soak_check.py)
-------------------------------------
* An *answer* to a user message is a bot message replying to it whose text starts with
  ``[depth:`` or with ``⚠️`` (a notice; a notice appended to streamed text stays part of
  its answer); the further parts of a split answer follow it. Exactly one answer: answered
  once (notices counted apart: acceptable, the user can retry); more: *duplicated*; none:
  *lost*. Bot replies of other shapes are counted as unexpected. The one tolerated
  duplicate is the window the README names: the bot got Telegram's answer naming its
  first copy less than 250 ms before a SIGKILL of a bot process, or never (killed while
  that answer was on its way: the soak may hold it, see the replies above); counted on
  its own line.
* *Wrong chain*: the expected chain of a message is known from what it replied to. A new
  message starts one (``[depth:2]``). A reply to a part of an answer continues that
  answer's message: +2 if that answer was a model answer, +1 if it was a notice (notices
  are aliased to the user's node; ``[depth:N] partial … ⚠️ …`` is a notice too). A reply to
  the user's own message continues from that message's node (+1). A message answered with
  the lost-track notice (a reply to a bot message no conversation knows) is stored as a
  new conversation: replies below it count from there. The ``[depth:N]`` of the answer
  must match. A chain through an answer that never finished is not checkable (counted
  apart, not a failure).
* *Lost track*: a reply answered with the lost-track notice is a failure, unless the chat's
  master failed over within 2 s of the replied-to answer's parts being accepted (the
  failover lost the write recording them: counted apart). Likewise a second answer whose
  first copy was recorded just before such a failover is a re-answer after a lost write
  (counted apart), not a duplicate.
* *Wrong history*: every model request that ends with a soak message must hold exactly the
  expected chain: the user messages' markers in order, each answered one followed by its
  exact reply, nothing else (summaries are never triggered: the token budget is raised).
* *Wrong chat*: a bot message showing another chat's marker, or a model request holding
  another chat's messages. *Wrong content*: an answer that does not end with its own reply
  or shows other markers.
* *Takeover*: at each kill the soak reads the intake entries the killed process held
  (XPENDING for its consumer name) and times how long each of those turns, unfinished at
  the kill, takes to show its finished answer: by another process when the killed one
  stays down past ``TAKEOVER_SECONDS``, else by the restarted process. A takeover is
  judged by its claim, the one thing it promises: the entry delivered again (XPENDING's
  delivery count) later than ``TAKEOVER_SECONDS`` + 10 s after the kill, or a turn never
  finished, fails the run. From the claim on, a taken-over turn is an ordinary turn: it
  meets the same injected faults as any other and is judged as one (answered exactly
  once, on its chain); its finish time is printed, not bounded.
* *Payments*: every payment Telegram charged is credited once, to its payer (credited
  twice: must be 0) and confirmed once; every refund called refundStarPayment once and
  took back what the payment added; and per user, to the nano-dollar, credit = payments
  - refunds - spend (the ledger's readers, each user's spend settled first), the spend
  drawn being the day's spend over the free allowance as the usage totals hold it.
* Exit status 1 when any message was lost, duplicated or mixed (any wrong-* count), a
  reply lost track outside a failover, a takeover was late, or a payment check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from redis.asyncio import Redis

from bot.data import keys
from tests.fakes.model import FakeOpenAI
from tests.fakes.telegram import Call, FakeTelegram, StoredMessage
from tests.harness import env_for

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
from .soak_deploy import (
    ClusterRedis,
    Fleet,
    Held,
    SingleRedis,
    Worker,
    pending_turns,
    redelivered,
)
from .soak_pay import SETTINGS as PAYMENT_SETTINGS
from .soak_pay import Payments, PayResult

EXCEPTION_RE = re.compile(r"^\s*[\d.]+ p\d+g\d+ \w+(Error|Exception): ")
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
#: Chances that a new answer part is replied to the moment Telegram accepts it, and
#: 0.1-3 s later (:meth:`Soak.on_call`).
REPLY_AT_ONCE = 0.25
REPLY_SOON = 0.3
#: Longest a reply sent at once waits to be handed to the bot before Telegram's
#: answer naming the part is released.
HANDOVER_WAIT = 1.0
#: A dead process's turns must be claimed by another within TAKEOVER_SECONDS + this: a
#: claim tick (TAKEOVER_SECONDS / 4), plus a Redis outage (at most 5 s) and the bots'
#: reconnect backoff overlapping the takeover.
CLAIM_MARGIN = 10.0


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


@dataclass
class Orphans:
    """The turns a killed process left unfinished, and when each showed its answer."""

    killed_at: float
    worker: str
    #: The process stayed down past TAKEOVER_SECONDS: another one had to take them over.
    taken_over: bool
    #: The unfinished turns' intake entries, as read right before the kill.
    held: dict[tuple[int, int], Held]
    waiting: set[tuple[int, int]]
    finished: dict[tuple[int, int], float] = field(default_factory=dict)
    #: Seconds from the kill until each entry was delivered again (claimed) or acknowledged.
    claimed: dict[tuple[int, int], float] = field(default_factory=dict)


class Soak:
    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.args = args
        self.seed: int = args.seed
        self.chaos = float(args.minutes) * 60
        self.run_dir = run_dir
        self.sched = random.Random(args.seed)
        self.rng = random.Random(args.seed * 7919 + 1)
        #: Replies to new answer parts (their timing follows the bot's progress).
        self.live_rng = random.Random(args.seed * 104729 + 3)
        self.specs = make_chats(args.chats)
        self.by_chat = {spec.chat_id: spec for spec in self.specs}
        self.events = plan(self.sched, self.specs, self.chaos, args.gap)
        self.kill_times: list[float] = []
        #: When each SIGKILL of a bot process was actually sent (the soak's clock).
        self.killed_at: list[float] = []
        t = self.sched.uniform(30, 60)
        while t < self.chaos:
            self.kill_times.append(t)
            t += self.sched.uniform(30, 60)
        self.store: SingleRedis | ClusterRedis = (
            ClusterRedis(run_dir, self.sched, self.chaos, lossy=args.lossy)
            if args.cluster
            else SingleRedis(run_dir, self.sched, self.chaos)
        )
        self.log_path = run_dir / "bot.log"
        self.log: TextIO = self.log_path.open("w", encoding="utf-8", buffering=1)
        self.t0 = time.monotonic()
        self.tg = FakeTelegram()
        self.llm = FakeOpenAI()
        self.fleet = Fleet(
            args.processes, webhook=args.webhook, env=self.bot_env, cwd=run_dir, sink=self.note
        )
        self.client: Redis | None = None  # the soak's own Redis client (takeover checks)
        self.sent: list[Sent] = []
        self.by_id: dict[tuple[int, int], Sent] = {}
        self.counters = [0] * len(self.specs)
        self.observed: list[Observed] = []
        self.model_calls = 0
        self.tg_calls_dropped = 0
        #: (chat, bot message id) -> when the bot's request to send it arrived, and when
        #: Telegram's answer naming it went back to the bot (the soak's clock)
        self.requested_at: dict[tuple[int, int], float] = {}
        self.accepted_at: dict[tuple[int, int], float] = {}
        #: The highest update_id handed out by getUpdates.
        self.polled_through = 0
        #: When each getUpdates call arrived (the soak's clock), and poller kills.
        self.polls: list[float] = []
        self.poller_kills: list[float] = []
        self.orphans: list[Orphans] = []
        self.kills = 0
        self.self_exits = 0
        self.redeliveries = 0
        self.faults = {"model": 0, "telegram": 0, "gate": 0}
        self.sigterm_notes: list[str] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.chaos_over = False
        #: Every user of every chat (each has a private chat with the bot: payments).
        self.users = sorted({user for spec in self.specs for user in spec.users})
        self.payments = (
            Payments(
                self.tg, self.users, seed=args.seed, note=self.note, spawn=self.spawn,
                chaos_over=lambda: self.chaos_over, env=self.bot_env, cwd=run_dir,
                redis=lambda: self.client,
            )
            if args.payments
            else None
        )  # fmt: skip

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

    def bot_env(self) -> dict[str, str]:
        extra = {"REDIS_CLUSTER": "true"} if self.store.cluster else {}
        if self.payments is not None:
            extra |= PAYMENT_SETTINGS
        return env_for(
            self.tg,
            self.llm,
            self.store.url,
            CONTEXT_TOKEN_BUDGET="500000",
            LOG_LEVEL="INFO",
            TAKEOVER_SECONDS=f"{self.args.takeover:g}",
            **extra,
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

    def send(
        self,
        spec: ChatSpec,
        kind: Kind,
        target: int | None,
        *,
        live: bool = False,
        unrecorded: bool = False,
    ) -> Sent:
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
        s.target_live = live or unrecorded
        s.target_unrecorded = unrecorded
        s.in_flood = kind == "part" and self.tg.flood_remaining(spec.chat_id) > 0
        self.sent.append(s)
        self.by_id[(spec.chat_id, s.message_id)] = s
        how = " (before the bot knew the part)" if unrecorded else ""
        self.note(
            f"SOAK send {key} chat {spec.chat_id} msg {s.message_id} {kind}"
            + (f" reply_to {target}" if target else "")
            + (" (target still streaming)" if live else "")
            + how
            + (" (flood window)" if s.in_flood else "")
        )
        roll = self.rng.random()
        if roll < 0.02:
            self.redeliver(s, raw, 0.0)
        elif roll < 0.08:
            self.spawn(self.redeliver_later(s, raw, self.rng.uniform(0.5, 10)))
        return s

    # ------------------------------------------------------------------ replies to live answers

    async def on_call(self, call: Call) -> None:
        """The fake Telegram's ``after_call``: a call was applied, its answer not sent yet."""
        try:
            if call.method == "getUpdates":
                self.polls.append(call.at - self.t0)
                ids = [u.get("update_id", 0) for u in call.result or () if isinstance(u, dict)]
                self.polled_through = max([self.polled_through, *ids])
            elif call.method == "sendMessage" and isinstance(call.result, dict):
                await self.new_part(call.result, call.at - self.t0)
            elif call.method == "refundStarPayment" and self.payments is not None:
                self.payments.on_refund_call(call.params, call.status == 200)
        except Exception as exc:  # a bug of the soak: noted, never a 500 to the bot
            self.note(f"SOAK after_call failed: {exc!r}")

    async def new_part(self, message: dict[str, Any], at: float) -> None:
        chat, part = int(message["chat"]["id"]), int(message["message_id"])
        self.requested_at[(chat, part)] = at
        try:
            spec = self.by_chat.get(chat)
            replied = (message.get("reply_to_message") or {}).get("message_id")
            if self.chaos_over or spec is None or (chat, replied) not in self.by_id:
                return
            roll = self.live_rng.random()
            if roll < REPLY_AT_ONCE:
                s = self.send(spec, "part", part, unrecorded=True)
                await self.handed_over(s)
            elif roll < REPLY_AT_ONCE + REPLY_SOON:
                self.spawn(self.reply_soon(spec, part, self.live_rng.uniform(0.1, 3.0)))
        finally:
            # the bot learns the part's id now (a held answer is a slow network's)
            self.accepted_at[(chat, part)] = self.now()

    async def handed_over(self, s: Sent) -> None:
        """Wait (bounded) until the update carrying ``s`` reached a bot process, and a
        few ms more: the bot hears the reply before it learns the part's id."""
        update_id = self.tg.last_update_id
        deadline = time.monotonic() + HANDOVER_WAIT
        while time.monotonic() < deadline:
            if self.polled_through >= update_id or any(
                u == update_id and 200 <= status < 300
                for u, status in self.tg.webhook_deliveries[-50:]
            ):
                await asyncio.sleep(self.live_rng.uniform(0, 0.03))
                return
            await asyncio.sleep(0.002)

    async def reply_soon(self, spec: ChatSpec, part: int, delay: float) -> None:
        await asyncio.sleep(delay)
        message = self.tg.message(spec.chat_id, part)
        if self.chaos_over or message.deleted:
            return
        found = self.copy_of(message)
        live = found is None or not found[1].complete(reply_text(found[0].key, self.seed))
        self.send(spec, "part", part, live=live)

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
        """SIGKILL one bot process at a time; restart it soon, or (with several
        processes, every other kill at random) only after the others took over."""
        for at in self.kill_times:
            await self.until(at)
            async with self.fleet.lock:
                alive = self.fleet.alive()
                if not alive:
                    continue
                worker = self.sched.choice(alive)
                taken_over = len(self.fleet.workers) > 1 and self.sched.random() < 0.5
                poller = await self.poller()
                held = await self.held(worker)
                self.killed_at.append(self.now())
                await self.fleet.kill(worker)
                self.kills += 1
                if poller == worker.name:
                    self.poller_kills.append(self.killed_at[-1])
                self.orphaned(worker, held, taken_over)
            if taken_over:
                down = self.args.takeover + self.sched.uniform(3, 12)
                self.note(f"SOAK {worker.name} stays down {down:.1f}s (takeover)")
                await asyncio.sleep(down)
            else:
                await asyncio.sleep(self.sched.uniform(0.2, 1.0))
                # issue 12 #1: replies to one chain that wait while the bot is down
                self.fan_out(self.specs[self.rng.randrange(len(self.specs))], 4)
                await asyncio.sleep(self.sched.uniform(0.2, 1.5))
            async with self.fleet.lock:
                await self.fleet.start(worker)

    async def poller(self) -> str | None:
        """The BOT_INSTANCE holding the poller lease (None: unknown or webhook mode)."""
        if self.fleet.webhook or self.client is None:
            return None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                holder = await self.client.get(keys.POLLER_LEASE)
                return holder.decode() if isinstance(holder, bytes) else None
        return None

    async def held(self, worker: Worker) -> list[Held] | None:
        """The turns a process holds (read right before it is killed; None: unknown)."""
        if self.client is None:
            return None
        try:
            async with asyncio.timeout(2):
                return await pending_turns(self.client, worker.name)
        except Exception as exc:  # Redis restarting or failing over: not measured
            self.note(f"SOAK could not read {worker.name}'s pending turns: {exc!r}")
            return None

    def orphaned(self, worker: Worker, held: list[Held] | None, taken_over: bool) -> None:
        """Note the turns the killed process held and had not finished showing."""
        if held is None:
            return
        entries = {h.key: h for h in held if h.key in self.by_id and not self.answered(h.key)}
        waiting = set(entries)
        self.note(f"SOAK {worker.name} left {len(waiting)} turns unfinished: {sorted(waiting)}")
        if waiting:
            self.orphans.append(
                Orphans(self.killed_at[-1], worker.name, taken_over, entries, waiting)
            )

    def answered(self, key: tuple[int, int]) -> bool:
        return self.finished(self.by_id[key]) is not None

    async def takeovers(self) -> None:
        """Time each orphaned turn until it is claimed again and until its answer is
        finished on screen."""
        while True:
            await asyncio.sleep(0.2)
            for orphans in self.orphans:
                unclaimed = [k for k in orphans.held if k not in orphans.claimed]
                for key in unclaimed if orphans.taken_over else ():
                    if await self.claimed(orphans.held[key]):
                        orphans.claimed[key] = self.now() - orphans.killed_at
                for key in [k for k in orphans.waiting if self.answered(k)]:
                    orphans.waiting.discard(key)
                    orphans.finished[key] = self.now() - orphans.killed_at

    async def claimed(self, held: Held) -> bool:
        """Whether a process took ``held`` again (False while Redis cannot say)."""
        if self.client is None:
            return False
        try:
            async with asyncio.timeout(1):
                return await redelivered(self.client, held)
        except Exception:  # Redis restarting or failing over: asked again next tick
            return False

    async def redis_chaos(self) -> None:
        await self.store.chaos(self.now, self.until, self.note)

    async def watchdog(self) -> None:
        """Progress lines; a bot that exited on its own is noted and started again."""
        next_line = PROGRESS_EVERY
        while True:
            await asyncio.sleep(1)
            self.absorb()
            for worker in self.fleet.workers:
                bot = worker.bot
                if self.fleet.lock.locked() or worker.down or bot is None or bot.alive:
                    continue
                async with self.fleet.lock:
                    code = await bot.wait()
                    self.self_exits += 1
                    self.note(f"{worker.label} SOAK bot {worker.name} exited by itself ({code})")
                    print(f"  {worker.name} exited by itself with status {code}; starting it again")
                    await self.fleet.start(worker)
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
            f"kills {self.kills}, redis {'failovers' if self.store.cluster else 'restarts'} "
            f"{self.store.restarts}"
            + (f", payments {len(self.tg.stars.charges)}" if self.payments else ""),
            flush=True,
        )

    def reply_index(self) -> dict[tuple[int, int], list[StoredMessage]]:
        index: dict[tuple[int, int], list[StoredMessage]] = {}
        for spec in self.specs:
            for m in self.tg.bot_messages(spec.chat_id):
                if m.reply_to is not None:
                    index.setdefault((spec.chat_id, m.reply_to), []).append(m)
        return index

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
        if self.payments is not None and not self.payments.settled():
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

    # ------------------------------------------------------------------ the run

    async def run(self) -> int:
        async with self.tg, self.llm:
            await asyncio.to_thread(self.store.start)
            try:
                return await self._run()
            finally:
                for task in list(self.tasks):
                    task.cancel()
                await asyncio.gather(*self.tasks, return_exceptions=True)
                await self.fleet.reap()
                if self.client is not None:
                    await self.client.aclose()
                await asyncio.to_thread(self.store.stop)
                self.log.close()

    async def _run(self) -> int:
        self.llm.responder = self.respond
        self.llm.chunk_chars = 64
        self.tg.after_call = self.on_call
        for spec in self.specs:
            if spec.kind == "private":
                self.tg.add_private_chat(spec.chat_id, f"User{spec.chat_id}")
            else:
                self.tg.add_group(spec.chat_id, f"Group{spec.idx}", forum=spec.kind == "forum")
        for user in self.users:  # a group's users have started the bot too (payments)
            if user not in self.by_chat:
                self.tg.add_private_chat(user, f"User{user}")
        forum = next((s for s in self.specs if s.kind == "forum"), None)
        if forum is not None:
            topics = tuple(self.tg.add_topic(forum.chat_id, name) for name in ("Ideas", "Bugs"))
            self.specs[forum.idx] = ChatSpec(
                forum.idx, forum.chat_id, "forum", forum.users, (None, *topics)
            )
            self.by_chat[forum.chat_id] = self.specs[forum.idx]
        redis_chaos = (
            f"{len(self.store.plan)} master failovers" if self.store.cluster else "2 Redis restarts"
        )
        print(
            f"soak seed {self.seed} ({self.mode}): {len(self.specs)} chats, "
            f"{self.chaos / 60:g} min of chaos, "
            f"{sum(e.kind == 'msg' for e in self.events)} planned sends, "
            f"{len(self.kill_times)} kills, {redis_chaos}"
            f"{', payments on' if self.payments else ''}; log {self.log_path}",
            flush=True,
        )
        self.client = self.store.client()
        async with self.fleet.proxy() as target:
            self.tg.webhook_target = target
            self.t0 = time.monotonic()
            for worker in self.fleet.workers:
                await self.fleet.start(worker)
            self.spawn(self.watchdog())
            self.spawn(self.takeovers())
            runs = [self.timeline(), self.killer(), self.redis_chaos()]
            if self.payments is not None:
                runs.append(self.payments.run(self.chaos))
            loops = [asyncio.create_task(c) for c in runs]
            await asyncio.gather(*loops)
            drained = await self.drain()
            async with self.fleet.lock:
                self.sigterm_notes = await self.fleet.stop(timeout=40)
        self.absorb()
        bot_messages = {s.chat_id: self.tg.bot_messages(s.chat_id) for s in self.specs}
        self.dump(bot_messages)
        paid: PayResult | None = None
        if self.payments is not None:
            assert self.client is not None
            paid = await self.payments.check(
                self.client, accepted_at=self.accepted_at, requested_at=self.requested_at,
                kill_times=self.killed_at,
            )  # fmt: skip
            # a payment's confirmation answers no soak message: not for the message checks
            bot_messages = {
                chat: [m for m in messages if not self.payments.is_confirmation(m)]
                for chat, messages in bot_messages.items()
            }
        result = Checker(
            self.sent, bot_messages, self.observed, self.seed,
            sent_at=self.accepted_at, requested_at=self.requested_at,
            kill_times=self.killed_at,
            failovers=self.store.failovers,
            store_outages=getattr(self.store, "outages", ()),
        ).run()  # fmt: skip
        late = self.report(result, drained, paid)
        return 1 if result.failed or late or (paid is not None and paid.failed) else 0

    def dump(self, bot_messages: dict[int, list[StoredMessage]]) -> None:
        """Every bot message as the run left it (``<run dir>/messages.jsonl``), for the
        post-mortem of a problem."""
        with (self.run_dir / "messages.jsonl").open("w", encoding="utf-8") as out:
            for chat, messages in bot_messages.items():
                for m in messages:
                    row: dict[str, object] = {"chat": chat, "id": m.message_id}
                    row |= {"reply_to": m.reply_to, "deleted": m.deleted, "text": m.text}
                    out.write(json.dumps(row) + "\n")

    @property
    def mode(self) -> str:
        processes = self.args.processes
        how = "webhook" if self.args.webhook else "polling"
        redis = "Redis Cluster" if self.args.cluster else "one Redis"
        return f"{processes} process{'es' if processes > 1 else ''} {how}, {redis}"

    def respond(self, messages: list[dict[str, Any]]) -> str:
        obs = observe(messages, self.seed)
        return "ok" if obs is None else reply_text(obs.key, self.seed)

    # ------------------------------------------------------------------ report

    def report(self, result: Result, drained: float, paid: PayResult | None = None) -> int:
        """Print the table; returns how many takeovers were late."""
        bound = self.args.takeover + CLAIM_MARGIN
        taken = [t for o in self.orphans if o.taken_over for t in o.finished.values()]
        claims = [t for o in self.orphans if o.taken_over for t in o.claimed.values()]
        unclaimed = sum(len(o.held) - len(o.claimed) for o in self.orphans if o.taken_over)
        restarted = [t for o in self.orphans if not o.taken_over for t in o.finished.values()]
        late: int = (
            sum(t > bound for t in claims) + unclaimed + sum(len(o.waiting) for o in self.orphans)
        )
        share = result.live_targets / result.part_replies if result.part_replies else 0.0
        rows: list[tuple[str, object]] = [
            ("messages sent that must be answered", result.sent),
            ("answered exactly once", result.once),
            ("  of which with a notice", f"{result.once_notice} {self.notice_kinds(result)}"),
            ("answered twice or more (duplicated)", result.duplicated),
            (
                "  twice, first copy accepted within 250 ms of a SIGKILL (README)",
                result.crash_window_duplicates,
            ),
            ("  a later part shown twice, the same window", result.crash_window_parts),
            ("never answered (lost)", result.lost),
            ("answers on the wrong chain ([depth:N])", result.wrong_depth),
            (
                "  of which first mistakes (replied to a message on its chain)",
                result.wrong_depth_first,
            ),
            ("lost-track notices outside a failover (failures)", result.lost_track),
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
            ("replies to bot answer parts", result.part_replies),
            (
                "  replies to live answers (still being written)",
                f"{result.live_targets} ({share:.0%})",
            ),
            ("    sent before the bot knew the part's id", result.unrecorded_targets),
            ("  replies sent under flood control", result.flood_replies),
            ("updates redelivered", result.redelivered),
            ("model calls (requests checked)", f"{self.model_calls} ({result.requests_checked})"),
            (
                "model faults / Telegram faults / gate closures",
                f"{self.faults['model']} / {self.faults['telegram']} / {self.faults['gate']}",
            ),
            ("Telegram calls inside a retry_after window", len(self.retry_violations())),
            ("bot SIGKILLs / exits by itself", f"{self.kills} / {self.self_exits}"),
            (
                f"turns taken over (process down > {self.args.takeover:g} s): claimed n, p50, max",
                spread(claims),
            ),
            ("  finished on screen: n, p50, max", spread(taken)),
            ("turns finished by the restarted process: n, p50, max", spread(restarted)),
            (f"takeovers claimed later than {bound:g} s, or never finished", late),
            ("poller replaced after a poller kill: n, p50, max", spread(self.poller_gaps())),
            *self.redis_rows(result),
            *(Payments.rows(paid) if paid is not None else ()),
            ("drain (s)", f"{drained:.0f}"),
            ("wall time (s)", f"{self.now():.0f}"),
        ]
        width = max(len(name) for name, _ in rows)
        print(
            f"\nsoak seed {self.seed}, {self.mode}, {self.args.chats} chats, "
            f"{self.args.minutes:g} min"
        )
        print(f"{'what':<{width}}  value")
        print(f"{'-' * width}  -----")
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        for violation in self.retry_violations()[:3]:
            print(f"Telegram violation (e.g.): {violation}")
        for line in self.sigterm_notes:
            print(f"shutdown: {line}")
        failed = result.failed or late or (paid is not None and paid.failed)
        print(f"verdict: {'FAIL' if failed else 'ok'}; bot log {self.log_path}")
        if paid is not None:
            print(Payments.verdict(paid))
        for orphans in self.orphans:
            if not orphans.taken_over:
                slow: dict[tuple[int, int], float | None] = {}
            else:
                slow = {k: orphans.claimed.get(k) for k in orphans.held}
                slow = {k: t for k, t in slow.items() if t is None or t > bound}
            if slow or orphans.waiting:
                print(
                    f"late takeover: {orphans.worker} killed at {orphans.killed_at:.1f}s: "
                    f"claimed late (None: never) {slow}, never finished "
                    f"{sorted(orphans.waiting)}"
                )
            elif orphans.taken_over:
                times = {
                    k: f"{orphans.claimed[k]:.1f}/{orphans.finished.get(k, -1):.1f}"
                    for k in sorted(orphans.held)
                }
                print(
                    f"takeover: {orphans.worker} killed at {orphans.killed_at:.1f}s: "
                    f"seconds to claim/finish {times}"
                )
        self.print_problems(result.problems)
        if paid is not None and paid.problems:
            print(f"\npayment problems ({len(paid.problems)}):")
            for line in paid.problems[:40]:
                print(f"- {line}")
        return late

    def retry_violations(self) -> list[str]:
        """The test server's violations but late pre-checkout answers (counted with the
        payments: the bot was down when the query came)."""
        return [v for v in self.tg.violations if not v.startswith("answerPreCheckoutQuery")]

    @staticmethod
    def notice_kinds(result: Result) -> str:
        if not result.notices:
            return ""
        return "(" + ", ".join(f"{k} {n}" for k, n in sorted(result.notices.items())) + ")"

    def redis_rows(self, result: Result) -> list[tuple[str, object]]:
        store = self.store
        if not isinstance(store, ClusterRedis):
            return [("Redis restarts", store.restarts)]
        failovers = store.failovers
        promoted = [f.promoted_after for f in failovers if f.promoted_after is not None]
        lossy = [f for f in failovers if f.lost_bytes]
        return [
            (
                "master failovers (skipped: cluster not healed)",
                f"{len(failovers)} ({store.skipped})",
            ),
            ("  replica promoted after (s): n, p50, max", spread(promoted)),
            (
                "  failovers that lost acknowledged writes (bytes)",
                f"{len(lossy)} ({', '.join(str(f.lost_bytes) for f in lossy) or '-'})",
            ),
            ("  visible: lost-track notices after a failover", result.lost_track_failover),
            ("  visible: answers or parts repeated after a lost write", result.failover_duplicates),
        ]

    def poller_gaps(self) -> list[float]:
        """Seconds from each kill of the polling process to the next getUpdates."""
        gaps = []
        for killed in self.poller_kills:
            later = [t for t in self.polls if t > killed]
            if later:
                gaps.append(later[0] - killed)
        return gaps

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


def spread(values: Sequence[float]) -> str:
    """n, median and max of some seconds (``0`` when there are none)."""
    if not values:
        return "0"
    return f"{len(values)}, {statistics.median(values):.1f} s, {max(values):.1f} s"


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
    parser.add_argument("--processes", type=int, default=1, help="bot processes (1)")
    parser.add_argument(
        "--webhook", action="store_true", help="webhook mode behind a round-robin proxy"
    )
    parser.add_argument(
        "--cluster", action="store_true", help="a Redis Cluster with replicas, failing over"
    )
    parser.add_argument(
        "--lossy",
        action="store_true",
        help="with --cluster: cut each killed master's replica off first (writes lost)",
    )
    parser.add_argument(
        "--takeover", type=float, default=8.0, help="TAKEOVER_SECONDS of the bots (8)"
    )
    parser.add_argument(
        "--no-payments",
        dest="payments",
        action="store_false",
        help="no Telegram Stars payments (on by default: bench/soak_pay.py)",
    )
    parser.add_argument("--drain", type=float, default=180.0, help="longest quiet drain, s")
    parser.add_argument("--details", type=int, default=12, help="problems shown with log lines")
    parser.add_argument("--out", type=Path, default=None, help="run dir (default under /tmp)")
    args = parser.parse_args(argv)
    if args.chats < 1 or args.minutes <= 0:
        parser.error("--chats must be >= 1 and --minutes > 0")
    if args.processes < 1:
        parser.error("--processes must be >= 1")
    if args.lossy and not args.cluster:
        parser.error("--lossy needs --cluster")
    if args.takeover < 2:
        parser.error("--takeover must be >= 2 (TAKEOVER_SECONDS's least value)")
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
