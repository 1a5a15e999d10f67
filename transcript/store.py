"""The reply-chain transcript store: immutable nodes in Redis behind an LRU.

Layout (see :mod:`transcript.keys`): a chain is a path of nodes. Nodes live in
*segments*: node ``(seg, i)`` has parent ``(seg, i - 1)``; node ``(seg, 0)``
is either a root or hangs below the node named first in its segment record.
Appending below the last node of a segment continues the segment (claimed with
``SET NX``); appending anywhere else, or losing that race, opens a new segment
whose record lists the ancestor runs. A chain therefore loads with one
pipelined round trip for its own segment plus one ``MGET`` for all ancestor
runs, and each node stores only its depth and its own messages.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from . import codec, keys
from .cache import RecordCache, SegmentEntry
from .codec import SegmentRecord
from .errors import CorruptRecordError, MissingNodeError, StoreUnavailableError
from .model import ChatMessage, Node, NodeId, Transcript, count_depth

T = TypeVar("T")

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Ancestor runs listed inline in a segment record before it defers to an
#: ancestor's record (bounds per-segment metadata on pathological trees).
DEFAULT_INLINE_ANCESTORS = 32

# Places a node atomically: returns an earlier result for a repeated
# idempotency key, else continues the parent's segment when the slot after the
# parent is free, else opens a new segment. Then records the idempotency key
# and the aliases (first writer wins, also on a repeat). All keys share the
# scope's hash tag.
#   KEYS: idem hash, alias hash, seq counter, continuation node key
#   ARGV: idem field or '', node record, segment record, node key prefix,
#         segment key prefix, continuation ref or '' (root), alias fields...
_APPEND_LUA = """
if ARGV[1] ~= '' then
  local found = redis.call('HGET', KEYS[1], ARGV[1])
  if found then
    for i = 7, #ARGV do redis.call('HSETNX', KEYS[2], ARGV[i], found) end
    return {0, found}
  end
end
local ref
if ARGV[6] ~= '' and redis.call('SET', KEYS[4], ARGV[2], 'NX') then
  ref = ARGV[6]
else
  local seg = redis.call('INCR', KEYS[3])
  ref = seg .. '.0'
  redis.call('SET', ARGV[5] .. seg, ARGV[3])
  redis.call('SET', ARGV[4] .. ref, ARGV[2])
end
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], ARGV[1], ref) end
for i = 7, #ARGV do redis.call('HSETNX', KEYS[2], ARGV[i], ref) end
return {1, ref}
"""

_UNAVAILABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


class TranscriptStore:
    """Reply-chain transcripts of many chat scopes in one Redis.

    Every write is idempotent and never changes an existing record. Reads go
    through a byte-bounded LRU that is filled lazily and written through.
    ``round_trips`` counts Redis round trips (for benchmarks and tests).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        inline_ancestors: int = DEFAULT_INLINE_ANCESTORS,
    ) -> None:
        if inline_ancestors < 1:
            raise ValueError("inline_ancestors must be at least 1")
        self._redis = redis
        self._cache = RecordCache(cache_bytes)
        self._inline = inline_ancestors
        self._append_script = redis.register_script(_APPEND_LUA)
        self.round_trips = 0

    @property
    def cache(self) -> RecordCache:
        return self._cache

    # ---------------------------------------------------------------- writes

    async def start(
        self,
        scope: str,
        messages: Sequence[ChatMessage],
        *,
        idem: str | None = None,
        aliases: Iterable[int | str] = (),
    ) -> Node:
        """Write a new root node (normally holding the system prompt)."""
        return await self._place(scope, None, 0, SegmentRecord((), False), messages, idem, aliases)

    async def append(
        self,
        parent: NodeId,
        messages: Sequence[ChatMessage],
        *,
        idem: str | None = None,
        aliases: Iterable[int | str] = (),
    ) -> Node:
        """Write a child of ``parent`` holding ``messages``.

        With ``idem``, a repeated call with the same key returns the node the
        first call wrote instead of writing a second one. ``aliases`` are
        message ids mapped to the new node in the same atomic step.
        """
        parent_node = await self.node(parent)
        parent_record = await self._segment_record(parent.scope, parent.seg)
        ancestors = ((parent.seg, parent.idx), *parent_record.ancestors)
        more = parent_record.more
        if len(ancestors) > self._inline:
            ancestors, more = ancestors[: self._inline], True
        branch = SegmentRecord(ancestors, more)
        return await self._place(
            parent.scope, parent, parent_node.depth, branch, messages, idem, aliases
        )

    async def _place(
        self,
        scope: str,
        parent: NodeId | None,
        parent_depth: int,
        branch: SegmentRecord,
        messages: Sequence[ChatMessage],
        idem: str | None,
        aliases: Iterable[int | str],
    ) -> Node:
        messages = tuple(messages)
        depth = parent_depth + count_depth(messages)
        if parent is None:
            cont_key, cont_ref = keys.seq_key(scope), ""
        else:
            cont_key = keys.node_key(scope, parent.seg, parent.idx + 1)
            cont_ref = f"{parent.seg}.{parent.idx + 1}"
        alias_fields = [str(a) for a in aliases]
        result = await self._io(
            self._append_script(
                keys=[keys.idem_key(scope), keys.alias_key(scope), keys.seq_key(scope), cont_key],
                args=[
                    idem or "",
                    codec.encode_node(depth, messages),
                    codec.encode_segment(branch),
                    keys.node_key_prefix(scope),
                    keys.segment_key_prefix(scope),
                    cont_ref,
                    *alias_fields,
                ],
            )
        )
        created, ref = int(result[0]), result[1]
        node_id = NodeId.parse(scope, ref)
        if not created:
            return await self.node(node_id)
        node = Node(node_id, depth, messages)
        self._remember(node, branch if node_id.idx == 0 else None)
        for field in alias_fields:
            self._cache.put_alias(scope, field, node_id)
        return node

    def _remember(self, node: Node, record: SegmentRecord | None) -> None:
        """Write-through: extend the cached segment prefix when it is contiguous."""
        scope, seg = node.id.scope, node.id.seg
        entry = self._cache.segment(scope, seg)
        if entry is None:
            if node.id.idx != 0:
                return
            entry = SegmentEntry(record)
        if len(entry.nodes) == node.id.idx:
            entry.add(node)
            self._cache.put_segment(scope, seg, entry)

    async def alias(self, scope: str, message_ids: Iterable[int | str], node: NodeId) -> None:
        """Map message ids to ``node``; an id already mapped keeps its first node."""
        if node.scope != scope:
            raise ValueError("an alias must point into its own scope")
        fields = [str(m) for m in message_ids]
        if not fields:
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            for field in fields:
                pipe.hsetnx(keys.alias_key(scope), field, node.ref)
            await self._io(pipe.execute())
        for field in fields:
            self._cache.put_alias(scope, field, node)

    # ----------------------------------------------------------------- reads

    async def resolve(self, scope: str, message_id: int | str) -> NodeId | None:
        """The node a message id of this scope is aliased to, or ``None`` if unknown."""
        field = str(message_id)
        cached = self._cache.alias(scope, field)
        if cached is not None:
            return cached
        ref = await self._io(self._redis.hget(keys.alias_key(scope), field))
        if ref is None:
            return None
        try:
            node = NodeId.parse(scope, ref)
        except ValueError as exc:
            raise CorruptRecordError(f"alias {scope}/{field}", "malformed alias") from exc
        self._cache.put_alias(scope, field, node)
        return node

    async def lookup_idem(self, scope: str, key: str) -> NodeId | None:
        """The node written under an idempotency key, if any."""
        ref = await self._io(self._redis.hget(keys.idem_key(scope), key))
        return None if ref is None else NodeId.parse(scope, ref)

    async def node(self, node_id: NodeId) -> Node:
        """One node (from the cache when its segment prefix is loaded)."""
        entry = self._cache.segment(node_id.scope, node_id.seg)
        if entry is not None and node_id.idx < len(entry.nodes):
            return entry.nodes[node_id.idx]
        key = keys.node_key(node_id.scope, node_id.seg, node_id.idx)
        data = await self._io(self._redis.get(key))
        if data is None:
            raise MissingNodeError(str(node_id), "node not found")
        depth, messages = codec.decode_node(str(node_id), data)
        return Node(node_id, depth, messages)

    async def history(self, leaf: NodeId) -> Transcript:
        """Everything ever appended on the chain root → ``leaf``, in order."""
        scope = leaf.scope
        loaded_any = False
        entry = self._cache.segment(scope, leaf.seg)
        if entry is None or entry.record is None or len(entry.nodes) <= leaf.idx:
            entry = await self._load_leaf_segment(leaf, entry)
            loaded_any = True
        assert entry.record is not None
        runs = [(leaf.seg, leaf.idx), *entry.record.ancestors]
        more = entry.record.more
        while more:
            record = await self._segment_record(scope, runs[-1][0])
            runs.extend(record.ancestors)
            more = record.more
        _check_runs(leaf, runs)
        entries = await self._load_runs(scope, runs[1:])
        loaded_any = loaded_any or bool(entries.loaded)
        messages: list[ChatMessage] = []
        for seg, cut in reversed(runs[1:]):
            seg_entry = entries.by_seg[seg]
            messages.extend(seg_entry.messages[: seg_entry.ends[cut]])
        messages.extend(entry.messages[: entry.ends[leaf.idx]])
        depth = entry.nodes[leaf.idx].depth
        if loaded_any and count_depth(messages) != depth:
            raise CorruptRecordError(str(leaf), "chain does not add up to the leaf's depth")
        return Transcript(leaf, depth, tuple(messages))

    async def active(self, leaf: NodeId) -> Transcript:
        """The view the model gets for ``leaf``.

        Today this is the full history. Summary folds will make it the latest
        fold's summary followed by the messages after the folded node; the
        originals stay in :meth:`history`.
        """
        return await self.history(leaf)

    # -------------------------------------------------------------- loading

    async def _load_leaf_segment(self, leaf: NodeId, entry: SegmentEntry | None) -> SegmentEntry:
        """One round trip: the segment record (if needed) and the missing nodes."""
        scope = leaf.scope
        start = len(entry.nodes) if entry is not None else 0
        need_record = entry is None or entry.record is None
        node_keys = [keys.node_key(scope, leaf.seg, i) for i in range(start, leaf.idx + 1)]
        async with self._redis.pipeline(transaction=False) as pipe:
            if need_record:
                pipe.get(keys.segment_key(scope, leaf.seg))
            if node_keys:
                pipe.mget(node_keys)
            results: list[Any] = await self._io(pipe.execute())
        if entry is None:
            entry = SegmentEntry()
        if need_record:
            entry.record = self._decode_segment(scope, leaf.seg, results.pop(0))
        if node_keys:
            self._fill(entry, scope, leaf.seg, start, results[0])
        self._cache.put_segment(scope, leaf.seg, entry)
        return entry

    async def _load_runs(self, scope: str, runs: Sequence[tuple[int, int]]) -> _Loaded:
        """One ``MGET`` for every node of the ancestor runs not yet cached."""
        loaded = _Loaded()
        wanted: list[tuple[SegmentEntry, int, int, int]] = []  # entry, seg, start, count
        node_keys: list[str] = []
        for seg, cut in runs:
            entry = self._cache.segment(scope, seg) or SegmentEntry()
            loaded.by_seg[seg] = entry
            start = len(entry.nodes)
            if start <= cut:
                wanted.append((entry, seg, start, cut + 1 - start))
                node_keys.extend(keys.node_key(scope, seg, i) for i in range(start, cut + 1))
        if not node_keys:
            return loaded
        values: list[bytes | str | None] = await self._io(self._redis.mget(node_keys))
        offset = 0
        for entry, seg, start, count in wanted:
            self._fill(entry, scope, seg, start, values[offset : offset + count])
            offset += count
            self._cache.put_segment(scope, seg, entry)
            loaded.loaded.append(seg)
        return loaded

    def _fill(
        self,
        entry: SegmentEntry,
        scope: str,
        seg: int,
        start: int,
        values: Sequence[bytes | str | None],
    ) -> None:
        for i, data in enumerate(values, start):
            node_id = NodeId(scope, seg, i)
            if data is None:
                raise MissingNodeError(str(node_id), "ancestor node not found")
            depth, messages = codec.decode_node(str(node_id), data)
            entry.add(Node(node_id, depth, messages))

    async def _segment_record(self, scope: str, seg: int) -> SegmentRecord:
        entry = self._cache.segment(scope, seg)
        if entry is not None and entry.record is not None:
            return entry.record
        data = await self._io(self._redis.get(keys.segment_key(scope, seg)))
        record = self._decode_segment(scope, seg, data)
        if entry is not None:
            entry.record = record
        else:
            entry = SegmentEntry(record)
        self._cache.put_segment(scope, seg, entry)
        return record

    @staticmethod
    def _decode_segment(scope: str, seg: int, data: bytes | str | None) -> SegmentRecord:
        ref = f"{scope}/segment {seg}"
        if data is None:
            raise MissingNodeError(ref, "segment record not found")
        return codec.decode_segment(ref, data)

    async def _io(self, awaitable: Awaitable[T]) -> T:
        """Await one Redis round trip, turning connection failures into a typed error."""
        self.round_trips += 1
        started = time.monotonic()
        try:
            return await awaitable
        except _UNAVAILABLE as exc:
            waited = time.monotonic() - started
            raise StoreUnavailableError(
                f"Redis is unreachable ({type(exc).__name__} after {waited:.1f}s)"
            ) from exc


class _Loaded:
    __slots__ = ("by_seg", "loaded")

    def __init__(self) -> None:
        self.by_seg: dict[int, SegmentEntry] = {}
        self.loaded: list[int] = []


def _check_runs(leaf: NodeId, runs: Sequence[tuple[int, int]]) -> None:
    """Segments are numbered in creation order, so ancestors strictly decrease."""
    for (seg, _), (older, cut) in itertools.pairwise(runs):
        if older >= seg or cut < 0:
            raise CorruptRecordError(str(leaf), f"segment {seg} lists a bad ancestor {older}")
