"""Redis bytes per turn: conversation trees hot and cold, and the bookkeeping around them.

Drives the engine (tests/fakes/stub_model.py's model, bench/bot_bench.py's Telegram) through
``CHATS`` chats of ``TREES`` conversations of ``TURNS`` turns each on a fresh redis-server
(config/redis.conf's encodings), then sums ``MEMORY USAGE`` of every key by family and
divides by the turns:

* *trees*: the store's keys (tree hashes, aliases, tree counters, the index of hot
  trees; cold: their values and the cold alias index) and each tree's usage per node
  (``u:n:<tree>``, compacted with it);
* *bookkeeping*: everything else the turns left (done sets, the per-turn usage and the
  audit, the usage totals); "kept" is the part with no expiry, what stays once every
  retention window (done marks 3 days, audit MODEL_AUDIT_DAYS, usage detail
  USAGE_DETAIL_DAYS) has passed.

"hot" is every tree as the bot keeps it while it is used (and as every tree was kept
before cold trees); "cold" the same trees after the cold sweep compacted them
(transcript/compact.py). The text of a turn is its question and its answer. The
1 KB answers are words drawn from a 300-word vocabulary (English-like entropy; zstd
finds no long repeats in them).

A second table counts the Redis round trips of one turn replying to an answer of a
hot tree (this process's cache holding it, or a new process), and of a cold one (a
new process: its cache cannot hold a tree no process touched for COLD_AFTER_DAYS), and
the sweep's throughput.
"""

from __future__ import annotations

import importlib
import inspect
import random
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.data.connection import connect
from bot.data.sweep import ColdSweep
from tests.fakes.stub_model import StubModel
from transcript import keys as store_keys

from .bot_bench import InstantTelegram, RoundTrips, _engine, turn
from .common import progress, redis_server, sized, table

#: Chats, conversations per chat, turns per conversation (None: quick or full sizes).
CHATS: int | None = None
TREES: int | None = None
TURNS: int | None = None

#: Modules whose docstrings make the bench's English text (deterministic for a Python).
_CORPUS_MODULES = (
    "argparse", "asyncio", "collections", "datetime", "email", "functools", "http.client",
    "inspect", "itertools", "json", "logging", "os", "pathlib", "re", "sqlite3",
    "subprocess", "threading", "typing", "urllib.parse", "zipfile",
)  # fmt: skip


def _corpus() -> str:
    """English prose: the docstrings of some standard modules and their members."""
    parts: list[str] = []
    for name in _CORPUS_MODULES:
        module = importlib.import_module(name)
        for item in (module, *(getattr(module, n) for n in sorted(dir(module)))):
            doc = inspect.getdoc(item) if callable(item) or item is module else None
            if doc:
                parts.append(" ".join(doc.split()))
    return " ".join(dict.fromkeys(parts))


CORPUS = _corpus()


class Texts(StubModel):
    """Answers ``size`` characters of the corpus, each call another window of it (real
    conversations do not repeat themselves: zstd would find the repeats)."""

    def __init__(self, size: int, seed: int) -> None:
        super().__init__("")
        self.size, self._rng = size, random.Random(seed)

    def text(self) -> str:
        at = self._rng.randrange(0, len(CORPUS) - self.size)
        return CORPUS[at : at + self.size]

    def reply(self, messages: Any, *, tools: bytes | None, media: Any) -> Any:
        self.answer = self.text()
        return super().reply(messages, tools=tools, media=media)


#: Question and answer sizes of a scenario, in characters.
SCENARIOS = {"short turn": (16, 36), "1 KB answer": (16, 1024)}
SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "config" / "redis.conf"


async def _shipped_encodings(redis: Redis) -> None:
    """The encoding lines of config/redis.conf (the bench's server has none)."""
    for line in SHIPPED_CONFIG.read_text().splitlines():
        if line.startswith(("hash-max-listpack-", "set-max-intset-")):
            name, value = line.split()
            await redis.config_set(name, value)


def _is_tree(key: str) -> bool:
    if key.startswith(f"{store_keys.NAMESPACE}:{{trees:"):  # the index of hot trees
        return True
    scope = key.partition("{")[2].partition("}")[0]
    if not scope or key.startswith(f"{store_keys.NAMESPACE}:{{usage:"):
        return False
    rest = key[len(store_keys.scope_prefix(scope)) :]
    return rest in ("a", "za", "seq") or rest.startswith(("t:", "z:", "u:n:"))


async def _bytes(redis: Redis) -> tuple[int, int, int]:
    """MEMORY USAGE of the trees, of the bookkeeping, of the bookkeeping never expiring."""
    trees = bookkeeping = kept = 0
    async for raw in redis.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        if key.startswith(f"{store_keys.NAMESPACE}:{{bench}}"):
            continue
        size = int(await redis.memory_usage(key, samples=0) or 0)
        if _is_tree(key):
            trees += size
        else:
            bookkeeping += size
            if await redis.ttl(key) == -1 and key not in ("rc:intake", "rc:trees:cold"):
                kept += size
    return trees, bookkeeping, kept


class _Run:
    """One scenario: the chats grown, the trees measured hot, swept, measured cold."""

    def __init__(self, redis: Redis, question: int, answer: int) -> None:
        self.redis, self.answer = redis, answer
        self.questions = Texts(question, seed=1)
        self.telegram = InstantTelegram()
        self.engine = self._engine()
        self.last: dict[tuple[int, int], int] = {}  # (chat, conversation) -> last answer id

    def _engine(self) -> Any:
        engine = _engine(self.redis, self.telegram)
        engine.model = engine.context.model = Texts(self.answer, seed=2)
        return engine

    async def grow(self, chats: int, trees: int, turns: int) -> None:
        for chat in range(chats):
            for tree in range(trees):
                reply_to: int | None = None
                for _ in range(turns):
                    message = self.telegram.next_id(_chat(chat))
                    question = self.questions.text()
                    inbound = Inbound(
                        _chat(chat), message, _chat(chat), question, reply_to=reply_to
                    )
                    reply_to, _ = await turn(self.engine, self.telegram, inbound)
                assert reply_to is not None
                self.last[(chat, tree)] = reply_to

    async def reply(self, chat: int, tree: int, *, new_process: bool) -> int:
        """Round trips of one turn replying to a conversation's last answer."""
        engine = self._engine() if new_process else self.engine
        meter = RoundTrips()
        inbound = Inbound(
            _chat(chat), self.telegram.next_id(_chat(chat)), _chat(chat),
            self.questions.text(), reply_to=self.last[(chat, tree)],
        )  # fmt: skip
        with meter.counting():
            self.last[(chat, tree)], _ = await turn(engine, self.telegram, inbound)
        return meter.count


def _chat(index: int) -> int:
    return 60_000 + index


async def _scenario(redis: Redis, label: str, question: int, answer: int) -> tuple[list[Any], Any]:
    chats, trees, turns = CHATS or sized(8, 40), TREES or sized(4, 10), TURNS or 5
    await redis.flushall()
    run = _Run(redis, question, answer)
    progress(f"bytes: {label}, {chats} chats x {trees} conversations x {turns} turns")
    commands, cpu = await _redis_work(redis)
    await run.grow(chats, trees, turns)
    count = chats * trees * turns
    after = await _redis_work(redis)
    commands, cpu = after[0] - commands, after[1] - cpu
    await run.reply(1, 0, new_process=True)  # the scripts loaded, as in a running bot
    trips = [
        await run.reply(0, 0, new_process=False),
        await run.reply(0, 1, new_process=True),
    ]
    count += 3
    hot, bookkeeping, kept = await _bytes(redis)
    sweep = ColdSweep(redis, run.engine.store, "bench", cold_after_days=0, every=1)
    started = time.perf_counter()
    compacted = await sweep.sweep()
    seconds = time.perf_counter() - started
    assert compacted == chats * trees, (compacted, chats * trees)
    cold, bookkeeping_cold, kept_cold = await _bytes(redis)
    trips.append(await run.reply(0, 2, new_process=True))
    text = question + answer
    row = [
        label, count, text, round(hot / count), round(cold / count), f"{cold / hot:.2f}",
        round(bookkeeping / count), round(kept_cold / count),
        round((cold + kept_cold) / count - text),
    ]  # fmt: skip
    del bookkeeping_cold, kept
    per_turn = chats * trees * turns
    return row, [
        label, *trips, f"{commands / per_turn:.1f}", f"{cpu * 1e6 / per_turn:.0f}",
        f"{compacted / seconds:,.0f}",
    ]  # fmt: skip


async def _redis_work(redis: Redis) -> tuple[float, float]:
    """Commands Redis ran (those of scripts too) and its CPU seconds, so far."""
    stats, cpu = await redis.info("stats"), await redis.info("cpu")
    return (
        float(stats["total_commands_processed"]),
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
    )


async def run() -> str:
    rows: list[list[Any]] = []
    trip_rows: list[list[Any]] = []
    with redis_server() as server:
        redis = connect(server.url)
        await _shipped_encodings(redis)
        try:
            for label, (question, answer) in SCENARIOS.items():
                row, trips = await _scenario(redis, label, question, answer)
                rows.append(row)
                trip_rows.append(trips)
        finally:
            await redis.aclose()
    return table(
        "Redis bytes per turn (MEMORY USAGE), trees hot (before: every tree, always) and "
        "cold (after the sweep), bookkeeping now and kept past its retention windows "
        "(targets: cold <= 0.5x hot; kept bookkeeping + cold trees beyond the text "
        "<= 200 B a turn)",
        ["turns of", "turns", "text B", "hot trees B", "cold trees B", "cold/hot",
         "bookkeeping B", "kept B", "beyond text B (cold)"],
        rows,
    ) + "\n" + table(
        "Redis round trips of one turn replying to a conversation's last answer (target: "
        "cold <= hot + 2); Redis commands (scripts' own counted) and Redis CPU per turn "
        "(the engine's, no intake); the cold sweep's throughput (one process)",
        ["turns of", "hot, cached", "hot, new process", "cold, new process", "commands/turn",
         "Redis CPU us/turn", "sweep trees/s"],
        trip_rows,
    )  # fmt: skip
