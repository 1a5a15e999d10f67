"""What usage accounting answers: a user's day and all time, a turn, a branch, the
last call up to a node, the owner's stats. The base of :class:`~bot.usage.accounting.Accounting`,
which records the calls these read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, cast

from cachetools import LRUCache
from redis.asyncio import Redis

from transcript import NodeId
from transcript.outage import guarded

from ..data import keys
from .calls import NANO, Clock, Prices, Totals, _text, day_of

#: Calls whose size :meth:`Accounting.last_call` answers from memory.
LAST_CALLS_KEPT = 4096
_UNKNOWN = object()


def _entry(value: Any) -> tuple[int, int, int, int, str]:
    """A per-node entry "p c k n markers view": tokens, calls and the last call's view."""
    p, c, k, n, _, view = _text(value).split(" ", 5)
    return int(p), int(c), int(k), int(n), view


class UsageReads:
    """Reads of the usage totals and details (prices to value them by)."""

    def __init__(
        self,
        redis: Redis,
        *,
        clock: Clock,
        prices: Prices | None = None,
        model_prices: Mapping[str, Prices] | None = None,
    ) -> None:
        self._redis = redis
        self.clock = clock
        self.prices = prices or Prices()
        self.model_prices: Mapping[str, Prices] = model_prices or {}
        #: The size of calls this process made, by the node they were sent up to (what
        #: :meth:`last_call` reads first: the next turn of a long chain asks for it);
        #: None where this process made several.
        self._sizes: LRUCache[tuple[str, NodeId], tuple[int, int, str] | None] = LRUCache(
            maxsize=LAST_CALLS_KEPT
        )

    def prices_of(self, model: str) -> Prices:
        """The prices of the catalogue model ``model``."""
        return self.model_prices.get(model, self.prices)

    @property
    def priced(self) -> bool:
        """Whether any model has prices (reports then show costs)."""
        return self.prices.configured or any(p.configured for p in self.model_prices.values())

    @property
    def uniform_prices(self) -> Prices | None:
        """The prices every model shares, if they all have the same (else ``None``)."""
        found = set(self.model_prices.values()) or {self.prices}
        return next(iter(found)) if len(found) == 1 else None

    async def _totals(self, name: str) -> Totals:
        """The totals hash ``name``."""
        return Totals.from_hash(await guarded(self._redis.hgetall(name)))

    def _user_key(self, user_id: int, *day: str) -> str:
        """A user's totals hash: all time, or of one day."""
        return keys.usage_total_key(keys.usage_bucket(user_id), "u", user_id, *day)

    async def user_today(self, user_id: int) -> Totals:
        return await self._totals(self._user_key(user_id, day_of(self.clock())))

    async def user_all_time(self, user_id: int) -> Totals:
        return await self._totals(self._user_key(user_id))

    async def turn(self, chat: int | str, message_id: int) -> Totals:
        """The calls of the turn answering ``message_id`` (those of today and yesterday);
        ``chat``: its id, or its scope (a guest chat's "g<chat>")."""
        now = self.clock()
        pipe = self._redis.pipeline(transaction=False)
        for day in (day_of(now), day_of(now - timedelta(days=1))):
            pipe.hget(keys.chat_usage_key(chat, "t", day), str(message_id))
        total = Totals()
        for value in await guarded(pipe.execute()):
            if value is not None:
                p, c, k, n, *ex = map(int, _text(value).split(" "))  # "p c k n [e x]"
                e, x = [*ex, 0, 0][:2]
                total = total + Totals(p, c, k, n, e, x)
        return total

    async def _nodes(self, chat: int | str, nodes: Sequence[NodeId]) -> dict[NodeId, Any]:
        """Each node's entry "p c k n markers view", or None: one HMGET per tree hash."""
        by_tree: dict[int, list[NodeId]] = {}
        for node in nodes:
            by_tree.setdefault(node.tree, []).append(node)
        pipe = self._redis.pipeline(transaction=False)
        for tree, group in by_tree.items():
            pipe.hmget(keys.chat_usage_key(chat, "n", tree), [n.ref for n in group])
        found: dict[NodeId, Any] = {}
        for group, values in zip(by_tree.values(), await guarded(pipe.execute()), strict=True):
            found.update(zip(group, values, strict=True))
        return found

    async def chain(self, chat: int | str, path: Sequence[NodeId]) -> Totals:
        """Usage of the turns along one root → leaf path (a branch's own chain); its cost
        only while every model has the same prices (:attr:`uniform_prices`)."""
        if not path:
            return Totals()
        sums = [0, 0, 0, 0]
        for value in (await self._nodes(chat, path)).values():
            if value is not None:
                sums = [a + b for a, b in zip(sums, _entry(value)[:4], strict=True)]
        totals = Totals(prompt=sums[0], completion=sums[1], cached=sums[2], calls=sums[3])
        # a node's entry does not say which model answered: priced only when all cost alike
        uniform = self.uniform_prices
        return replace(totals, cost=round(uniform.cost(totals) * NANO)) if uniform else totals

    async def last_call(self, chat: int | str, sent: NodeId) -> tuple[int, int, str] | None:
        """Prompt and completion tokens of the one call sent up to ``sent``, and its view.

        A call this process recorded is answered from memory (none where it made
        several, as the stored entry, which sums them, says).
        """
        known = self._sizes.get((str(chat), sent), _UNKNOWN)
        if known is not _UNKNOWN:
            return known if known is None else cast(tuple[int, int, str], known)
        value = (await self._nodes(chat, [sent])).get(sent)
        if value is None:
            return None
        prompt, completion, _, calls, view = _entry(value)
        if calls != 1:
            return None  # several calls summed: not one request's size
        return prompt, completion, view

    async def stats(
        self, *, days: int = 14, users: int = 20
    ) -> tuple[list[tuple[int, Totals, Totals]], list[tuple[str, Totals]]]:
        """Top users (all time and today) and the last ``days`` days, for owners.

        Sums the buckets: one pipelined read for the top users, one for the days
        and those users' totals.
        """
        buckets = [partial(keys.usage_total_key, b) for b in range(keys.USAGE_BUCKETS)]
        pipe = self._redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrevrange(bucket("users"), 0, users - 1, withscores=True)
        scores: dict[int, float] = {}
        for found in await guarded(pipe.execute()):
            for raw, score in found:
                user = int(_text(raw))
                scores[user] = scores.get(user, 0.0) + float(score)
        top = sorted(scores, key=lambda u: (-scores[u], u))[:users]
        today = self.clock()
        day_names = [day_of(today - timedelta(days=back)) for back in range(days)]
        pipe = self._redis.pipeline(transaction=False)
        # whole hashes: a day's and a user's hold a few fields per model besides the sums
        for day in day_names:
            for bucket in buckets:
                pipe.hgetall(bucket("d", day))
        for user in top:
            pipe.hgetall(self._user_key(user))
            pipe.hgetall(self._user_key(user, day_of(today)))
        values = iter(await guarded(pipe.execute()))

        def summed(count: int) -> Totals:
            total = Totals()
            for _ in range(count):
                total = total + Totals.from_hash(next(values))
            return total

        per_day = [(day, summed(len(buckets))) for day in day_names]
        per_user = [(user, summed(1), summed(1)) for user in top]
        return per_user, per_day
