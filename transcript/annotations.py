"""What is recorded beside a tree's nodes, never in them: folds and choices.

A fold is a summary standing for the chain root → its node (every branch below it
shares it); a choice (a model, a persona) holds for every chain through its node.
Both are append-only entries in the tree's hash with an index field listing them,
written by one script each, so a tree's annotations are read with one ``HGET``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from . import codec, keys
from .cache import Choice, ChoiceIndex, FoldIndex, parse_choices
from .compact import StoreCold
from .errors import MissingNodeError, StoreUnavailableError
from .reads import DEFAULT_BLOB_CACHE_BYTES, DEFAULT_CACHE_BYTES
from .records import ChatMessage, Fold, NodeId, Transcript

#: Seconds a tree's cached fold index is trusted before it is read again.
FOLD_INDEX_TTL = 30.0


# Writes a fold once (first writer wins) and appends its node to the tree's
# fold index in the same step; -1 for a cold tree (warmed, then written again).
#   KEYS: tree hash, its cold key.  ARGV: fold field, record, ref.
_FOLD_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
local index = redis.call('HGET', KEYS[1], 'F')
redis.call('HSET', KEYS[1], 'F', index and (index .. ',' .. ARGV[3]) or ARGV[3])
redis.call('HSET', KEYS[1], 'w', redis.call('TIME')[1])
return 1
"""


# Appends one choice to the tree's choice index; answers the whole index (-1 for a cold
# tree: warmed, then written again).  KEYS: tree hash, its cold key.  ARGV: the entry.
_CHOOSE_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local index = redis.call('HGET', KEYS[1], 'C')
index = index and (index .. ',' .. ARGV[1]) or ARGV[1]
redis.call('HSET', KEYS[1], 'C', index)
redis.call('HSET', KEYS[1], 'w', redis.call('TIME')[1])
return index
"""

#: Tries of a write that finds its tree cold (each warms it first).
_COLD_TRIES = 3


class StoreAnnotations(StoreCold):
    """Folds and choices of the store's trees (a base of :class:`transcript.TranscriptStore`)."""

    def __init__(
        self,
        redis: Redis,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        blob_cache_bytes: int = DEFAULT_BLOB_CACHE_BYTES,
    ) -> None:
        super().__init__(redis, cache_bytes=cache_bytes, blob_cache_bytes=blob_cache_bytes)
        self._fold_script = redis.register_script(_FOLD_LUA)
        self._choose_script = redis.register_script(_CHOOSE_LUA)

    async def active(self, leaf: NodeId, fold: Fold | None = None) -> Transcript:
        """The view the model gets for ``leaf``.

        Without ``fold`` this is the full history; with a fold on the path it
        is the root's messages, the fold's summary, then every message after
        the folded node, verbatim. The depth is the whole chain's either way.
        """
        if fold is None:
            return await self.history(leaf)
        nodes = await self.path(leaf)
        cut = next((i for i, n in enumerate(nodes) if n.id == fold.at), None)
        if cut is None:
            raise ValueError(f"fold at {fold.at} is not on the path to {leaf}")
        messages = [*nodes[0].messages, *fold.messages]
        for node in nodes[cut + 1 :]:
            messages.extend(node.messages)
        return Transcript(leaf, nodes[-1].depth, tuple(messages), fold)

    async def put_fold(self, at: NodeId, messages: Sequence[ChatMessage]) -> Fold:
        """Record a summary standing for root → ``at``; an existing fold there wins."""
        node = await self.node(at)
        record = codec.encode_fold(node.depth, messages)
        field = keys.fold_field(at.seg, at.idx)
        created = -1
        for _ in range(_COLD_TRIES):
            created = await self._io(
                self._fold_script(
                    keys=[keys.tree_key(at.scope, at.tree), keys.cold_key(at.scope, at.tree)],
                    args=[field, record, keys.node_field(at.seg, at.idx)],
                )
            )
            if created != -1:
                break
            await self.warm(at.scope, at.tree)
        if created == -1:
            raise StoreUnavailableError(f"{at.scope}/t:{at.tree} went cold again while warmed")
        fold = Fold(at, node.depth, tuple(messages))
        if not created:
            self._cache.put_fold_index(at.scope, at.tree, FoldIndex(frozenset(), 0.0))  # stale
            fold = (await self._folds(at.scope, at.tree, [at]))[0]
        self._cache.put_fold(fold)
        index = self._cache.fold_index(at.scope, at.tree)
        if index is not None and created:
            refs = index.refs | {keys.node_field(at.seg, at.idx)}
            self._cache.put_fold_index(at.scope, at.tree, FoldIndex(refs, index.read_at))
        return fold

    async def fold_on_path(self, leaf: NodeId) -> Fold | None:
        """The deepest fold on the chain root → ``leaf`` (it serves every branch below it).

        The tree's fold index is cached for ``FOLD_INDEX_TTL`` seconds: a fold
        another process made meanwhile is seen after that (until then this
        process would fold on its own, which is wasteful but never wrong).
        """
        refs = await self._fold_refs(leaf.scope, leaf.tree)
        if not refs:
            return None
        runs, _ = await self._path(leaf)  # (segment, last index on the path), leaf first
        folds: dict[int, list[int]] = {}
        for ref in refs:
            seg, _, idx = ref.partition(".")
            folds.setdefault(int(seg), []).append(int(idx))
        deepest = next(
            (
                NodeId(leaf.scope, leaf.tree, seg, max(on_path))
                for seg, cut in runs
                if (on_path := [i for i in folds.get(seg, ()) if i <= cut])
            ),
            None,
        )
        if deepest is None:
            return None
        cached = self._cache.fold(deepest)
        return cached or (await self._folds(leaf.scope, leaf.tree, [deepest]))[0]

    async def fold_refs(self, scope: str, tree: int) -> frozenset[str]:
        """The nodes (``seg.i``) of a tree that a fold was made at, read now."""
        self._cache.put_fold_index(scope, tree, FoldIndex(frozenset(), 0.0))  # read again
        return await self._fold_refs(scope, tree)

    async def fold(self, at: NodeId) -> Fold | None:
        """The fold made at node ``at``, if one was (also an older one than the deepest
        on a path, which :meth:`fold_on_path` gives)."""
        cached = self._cache.fold(at)
        if cached is not None:
            return cached
        if keys.node_field(at.seg, at.idx) not in await self._fold_refs(at.scope, at.tree):
            return None
        return (await self._folds(at.scope, at.tree, [at]))[0]

    async def _fold_refs(self, scope: str, tree: int) -> frozenset[str]:
        index = self._cache.fold_index(scope, tree)
        now = time.monotonic()
        if index is not None and now - index.read_at < FOLD_INDEX_TTL:
            return index.refs
        [raw] = await self._tree_fields(scope, tree, [keys.FOLD_INDEX_FIELD])
        text = (raw.decode() if isinstance(raw, bytes) else raw) or ""
        refs = frozenset(r for r in text.split(",") if r)
        self._cache.put_fold_index(scope, tree, FoldIndex(refs, now))
        return refs

    async def _folds(self, scope: str, tree: int, at: Sequence[NodeId]) -> list[Fold]:
        fields = [keys.fold_field(n.seg, n.idx) for n in at]
        values = await self._tree_fields(scope, tree, fields)
        folds = []
        for node_id, data in zip(at, values, strict=True):
            ref = f"fold at {node_id}"
            if data is None:
                raise MissingNodeError(ref, "fold record not found")
            depth, messages = codec.decode_fold(ref, data)
            fold = Fold(node_id, depth, messages)
            self._cache.put_fold(fold)
            folds.append(fold)
        return folds

    async def choose(self, at: NodeId, kind: str, name: str, digest: str = "") -> None:
        """Record a choice at node ``at`` for every chain through it: ``kind`` "m" (a
        model) or "p" (a persona whose text is the scope's blob ``digest``). Choices are
        only ever appended; a later one of the same kind at the same node wins."""
        if not name or any(c in name for c in " ,") or any(c in digest for c in " ,"):
            raise ValueError("a choice's name and digest hold no spaces or commas")
        entry = " ".join(
            part for part in (keys.node_field(at.seg, at.idx), kind, name, digest) if part
        )
        tree = [keys.tree_key(at.scope, at.tree), keys.cold_key(at.scope, at.tree)]
        for _ in range(_COLD_TRIES):
            raw = await self._io(self._choose_script(keys=tree, args=[entry]))
            if raw != -1:
                self.learn_choices(at.scope, at.tree, raw)
                return
            await self.warm(at.scope, at.tree)
        raise StoreUnavailableError(f"{at.scope}/t:{at.tree} went cold again while warmed")

    @staticmethod
    def queue_choices(pipe: Pipeline, node: NodeId) -> None:
        """Queue the read of the choices of ``node``'s tree on a caller's round trip
        (give the reply to :meth:`learn_choices`): a choice made through another
        process is known from that round trip on."""
        pipe.hget(keys.tree_key(node.scope, node.tree), keys.CHOICE_INDEX_FIELD)

    def learn_choices(self, scope: str, tree: int, raw: bytes | str | None) -> None:
        """Cache the choice index of a tree as read (:meth:`queue_choices`).

        A tree read from its cold value (:mod:`transcript.cold`) has no index in a
        hash: a read finding none keeps the index its cold value held."""
        if raw is None:
            cached = self._cache.choice_index(scope, tree)
            if cached is not None and cached.cold:
                return
        self._cache.put_choice_index(scope, tree, ChoiceIndex(parse_choices(scope, tree, raw)))

    async def choices_on_path(self, leaf: NodeId) -> list[Choice]:
        """The choices at the nodes of the chain root → ``leaf``, root first, the latest
        of each kind per node. The tree's index is read once, then comes from the cache
        (a turn refreshes it on its claim's round trip: :meth:`queue_choices`)."""
        index = self._cache.choice_index(leaf.scope, leaf.tree)
        if index is None:
            [raw] = await self._tree_fields(leaf.scope, leaf.tree, [keys.CHOICE_INDEX_FIELD])
            if self._cache.choice_index(leaf.scope, leaf.tree) is None:  # (a cold read caches it)
                self.learn_choices(leaf.scope, leaf.tree, raw)
            index = self._cache.choice_index(leaf.scope, leaf.tree)
        if index is None or not index.choices:
            return []
        runs, _ = await self._path(leaf)  # (segment, last index on the path), leaf first
        order = {seg: (len(runs) - i, cut) for i, (seg, cut) in enumerate(runs)}
        latest: dict[tuple[int, int, str], Choice] = {}
        for choice in index.choices:
            on = order.get(choice.at.seg)
            if on is not None and choice.at.idx <= on[1]:
                latest[(choice.at.seg, choice.at.idx, choice.kind)] = choice
        return sorted(latest.values(), key=lambda c: (order[c.at.seg][0], c.at.idx))
