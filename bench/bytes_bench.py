"""Redis bytes per turn, split into the transcript and the bookkeeping around it.

Drives the engine (tests/stub_model.py's model, bench/bot_bench.py's Telegram) along one
growing reply chain on a fresh redis-server, then sums ``MEMORY USAGE`` of every
key by family and divides by the turns; AOF bytes per turn come from
``aof_current_size``. Families: *transcript* (the store's tree hashes, aliases and
tree counter), *turn state* (the turn journal, idempotency and the other
per-chat keys of the bot: the done sets of finished turns), *usage detail* (per turn
and per node: ``t:``, ``n:``, the pending ``p`` and the ``counted:`` markers of the
two-step record, and the baseline's ``call:`` markers), *audit* (``a:``,
kept MODEL_AUDIT_DAYS) and *usage aggregates* (per user, day, chat, tree; the zsets).

"before" is a copy of the usage script and key layout this repository used up to
commit d07732f (clearly the baseline, kept here only to compare); "after" is
:class:`bot.usage.accounting.Accounting` as it is. A second table runs the usage
script alone (one call per turn of a chain) for its Redis time per call
(``cmdstat_evalsha``, both steps of a record summed) and AOF bytes per call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.bus.inbound import Inbound
from bot.data.connection import Queued, connect, run_together
from bot.model import Usage
from bot.usage.accounting import Accounting
from bot.usage.calls import USER_DAY_TTL, CallRecord, day_of, utc_now
from tests.stub_model import StubModel
from transcript import NodeId
from transcript import keys as store_keys

from .bot_bench import ANSWER, QUESTION, InstantTelegram, _engine, turn
from .common import progress, redis_server, script_time, sized, table

#: Turns along one chain per scenario (None: quick 100, full 400).
TURNS: int | None = None
#: Direct usage records for the script's time per call (None: quick 2,000, full 10,000).
RECORDS: int | None = None

SHORT_QUESTION = "hi, how are you?"
SHORT_ANSWER = "Fine, thanks! What can I do for you?"


# ------------------------------------------------ baseline: the old usage script

#: The tag of the old layout: every usage key in one slot.
_OLD_TAG = f"{store_keys.NAMESPACE}:{{usage}}"


def _old_key(*parts: object) -> str:
    """A key of the old one-slot layout, e.g. ``_old_key("u", user, day)``."""
    return ":".join([_OLD_TAG, *map(str, parts)])


_OLD_CALL_MARKER_TTL = 90 * 24 * 3600
_OLD_RECORD_LUA = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local p, c, k = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local e, x = tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 2, #KEYS - 3 do
  redis.call('HINCRBY', KEYS[i], 'p', p)
  redis.call('HINCRBY', KEYS[i], 'c', c)
  redis.call('HINCRBY', KEYS[i], 'k', k)
  redis.call('HINCRBY', KEYS[i], 'n', 1)
  if e > 0 then redis.call('HINCRBY', KEYS[i], 'e', 1) end
  if x > 0 then redis.call('HINCRBY', KEYS[i], 'x', 1) end
end
redis.call('ZINCRBY', KEYS[#KEYS - 2], p + c, ARGV[7])
redis.call('ZINCRBY', KEYS[#KEYS - 1], p + c, ARGV[8])
local node = KEYS[#KEYS]
redis.call('HINCRBY', node, ARGV[9] .. ':p', p)
redis.call('HINCRBY', node, ARGV[9] .. ':c', c)
redis.call('HINCRBY', node, ARGV[9] .. ':k', k)
redis.call('HINCRBY', node, ARGV[9] .. ':n', 1)
redis.call('HSET', node, ARGV[9] .. ':v', ARGV[15])
redis.call('EXPIRE', ARGV[11], ARGV[10])
if ARGV[12] ~= '' then redis.call('SET', ARGV[12], ARGV[13], 'EX', ARGV[14]) end
return 1
"""


class BaselineAccounting(Accounting):
    """BASELINE ONLY: records with the usage script of commit d07732f (before issue 14).

    ``last_call()`` reads the old per-chat node hash this script writes, so the
    context window sizes requests as the bot's does; the other reads are the current
    ones (``turn()`` would not find its totals; the bench sets no per-turn token
    limit, so the engine never asks).
    """

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, clock=utc_now)

    async def _save(self, call: CallRecord, also: Queued | None) -> list[Any]:
        now = self.clock()
        day = day_of(now)
        chat, user = call.chat_id, call.user_id
        user_day = _old_key("u", user, day)
        counters = [
            _old_key("u", user),
            user_day,
            _old_key("c", chat),
            _old_key("r", chat, call.sent.tree),
            _old_key("t", chat, call.message_id),
            _old_key("d", day),
        ]
        audit_key = _old_key("a", chat, call.call_id)
        audit_value = msgpack.packb(
            {
                "at": now.timestamp(),
                "model": call.model,
                "user": user,
                "message": call.message_id,
                "sent": str(call.sent),
                "prompt": call.usage.prompt_tokens,
                "completion": call.usage.completion_tokens,
                "cached": call.usage.cached_tokens,
                "estimated": call.usage.estimated,
                "latency": round(call.latency, 3),
                "error": call.error,
                "view": call.view,
            }
        )
        usage = call.usage
        old_keys = [
            _old_key("call", call.call_id),
            *counters,
            _old_key("users"),
            _old_key("days"),
            _old_key("n", chat),
        ]
        args = [
            _OLD_CALL_MARKER_TTL, usage.prompt_tokens, usage.completion_tokens,
            usage.cached_tokens, int(usage.estimated), int(call.error is not None), user, day,
            call.sent.ref, USER_DAY_TTL, user_day, audit_key, audit_value,
            self.audit_days * 24 * 3600, call.view,
        ]  # fmt: skip

        def step(pipe: Pipeline) -> None:
            pipe.eval(_OLD_RECORD_LUA, len(old_keys), *old_keys, *args)

        replies = await run_together(self._redis, step, *([also] if also else []))
        return replies[1] if also else []

    async def last_call(self, chat: int | str, sent: NodeId) -> tuple[int, int, str] | None:
        fields = [f"{sent.ref}:{name}" for name in ("p", "c", "n", "v")]
        values: list[Any] = await self._redis.hmget(_old_key("n", chat), fields)
        p, c, n, view = values
        if n is None or int(n) != 1:
            return None
        return int(p), int(c), view.decode() if view else ""


VARIANTS: dict[str, Callable[[Redis], Accounting]] = {
    "before": BaselineAccounting,
    "after": lambda redis: Accounting(redis, clock=utc_now),
}

# ------------------------------------------------------------------- measuring

FAMILIES = ("transcript", "turn state", "usage detail", "audit", "usage aggregates")


def _family(key: str) -> str:
    if key.startswith(_OLD_TAG + ":"):  # the old one-slot layout
        kind = key[len(_OLD_TAG) + 1 :].partition(":")[0]
        if kind in ("t", "n", "call"):  # per turn, per node, old call markers
            return "usage detail"
        return "audit" if kind == "a" else "usage aggregates"
    if key.startswith(f"{store_keys.NAMESPACE}:{{usage:"):  # a totals bucket
        kind = key.partition("}:")[2].partition(":")[0]
        return "usage detail" if kind == "counted" else "usage aggregates"  # per call
    scope = key.partition("{")[2].partition("}")[0]
    if scope and key.startswith(store_keys.scope_prefix(scope) + "u:"):  # chat's usage
        kind = key[len(store_keys.scope_prefix(scope)) + 2 :].partition(":")[0]
        return "audit" if kind == "a" else "usage detail"
    if scope and (
        key.startswith(store_keys.tree_key_prefix(scope))
        or key in (store_keys.alias_key(scope), store_keys.seq_key(scope))
    ):
        return "transcript"
    return "turn state"


SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "config" / "redis.conf"


async def _shipped_encodings(redis: Redis) -> None:
    """The encoding lines of config/redis.conf (the bench's server has none)."""
    for line in SHIPPED_CONFIG.read_text().splitlines():
        if line.startswith(("hash-max-listpack-", "set-max-intset-")):
            name, value = line.split()
            await redis.config_set(name, value)


async def _aof_size(redis: Redis) -> int:
    return int((await redis.info("persistence"))["aof_current_size"])


async def _bytes_by_family(redis: Redis) -> tuple[dict[str, int], int]:
    """MEMORY USAGE summed per family, and the bookkeeping bytes of keys without a TTL."""
    sums = dict.fromkeys(FAMILIES, 0)
    forever = 0
    async for raw in redis.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        size = int(await redis.memory_usage(key, samples=0) or 0)
        family = _family(key)
        sums[family] += size
        if family != "transcript" and await redis.ttl(key) == -1:
            forever += size
    return sums, forever


async def _chain(
    redis: Redis, make: Callable[[Redis], Accounting], *, question: str, answer: str, turns: int
) -> list[object]:
    await redis.flushall()
    telegram = InstantTelegram()
    engine = _engine(redis, telegram)
    accounting, model = make(redis), StubModel(answer)
    engine.accounting = engine.context.accounting = accounting
    engine.model = engine.context.model = model
    chat = 40_000
    aof = await _aof_size(redis)
    reply_to: int | None = None
    for _ in range(turns):
        inbound = Inbound(chat, telegram.next_id(chat), chat, question, reply_to=reply_to)
        reply_to, _ = await turn(engine, telegram, inbound)
    aof = await _aof_size(redis) - aof
    sums, forever = await _bytes_by_family(redis)
    per = [sums[f] / turns for f in FAMILIES]
    bookkeeping = sum(per[1:])
    return [*per, bookkeeping, forever / turns, aof / turns]


async def _records(redis: Redis, make: Callable[[Redis], Accounting], count: int) -> list[object]:
    """The usage script alone: one call per turn of one chain, as the engine records them."""
    await redis.flushall()
    accounting = make(redis)
    await accounting.record(  # loads the script, so EVAL/NOSCRIPT is not measured
        CallRecord(1, 1, 1, NodeId("1", 1, 0, 1), "m", Usage(1, 1), 0.0)
    )
    await redis.flushall()
    await redis.config_resetstat()
    aof = await _aof_size(redis)
    chat = 50_000
    for i in range(count):
        sent = NodeId(str(chat), 1, 0, 2 * i + 1)
        usage = Usage(50 * (2 * i + 1), 40)
        await accounting.record(CallRecord(chat, chat, 2 * i + 1, sent, "m", usage, 0.2))
    aof = await _aof_size(redis) - aof
    calls, usec = await script_time(redis)
    assert calls in (count, 2 * count), (calls, count)  # one script a record, or two steps
    sums, _ = await _bytes_by_family(redis)
    detail = (sums["usage detail"] + sums["audit"]) / count
    return [usec / count, calls / count, aof / count, sums["usage detail"] / count, detail]


async def run() -> str:
    turns = TURNS or sized(100, 400)
    records = RECORDS or sized(2000, 10_000)
    scenarios = {"short": (SHORT_QUESTION, SHORT_ANSWER), "bot bench": (QUESTION, ANSWER)}
    rows: list[list[object]] = []
    script_rows: list[list[object]] = []
    with redis_server() as server:
        redis = connect(server.url)
        await _shipped_encodings(redis)
        try:
            for (label, (question, answer)), variant in itertools.product(
                scenarios.items(), VARIANTS
            ):
                progress(f"bytes: {label} messages, {variant}, {turns} turns")
                measured = await _chain(
                    redis, VARIANTS[variant], question=question, answer=answer, turns=turns
                )
                rows.append([label, variant, *measured])
            for variant, make in VARIANTS.items():
                progress(f"bytes: usage script alone, {variant}, {records} records")
                script_rows.append([variant, *await _records(redis, make, records)])
        finally:
            await redis.aclose()
    return table(
        f"Redis bytes per turn by family, one chain of {turns} turns (MEMORY USAGE; "
        "target: bookkeeping <= transcript for short messages)",
        ["messages", "usage", *FAMILIES, "bookkeeping", "never expires", "AOF B/turn"],
        rows,
    ) + "\n" + table(
        f"The usage script alone, {records} calls along one chain (before: old script)",
        ["usage", "script us/call", "scripts/call", "AOF B/call", "detail B/call",
         "detail+audit B/call"],
        script_rows,
    )  # fmt: skip
