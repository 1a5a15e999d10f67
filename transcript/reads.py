"""Reading transcripts: nodes and chains from Redis behind a byte-bounded LRU.

The base of :class:`transcript.TranscriptStore` (see transcript/store.py for the
layout): a chain loads with one ``HMGET`` for its own segment plus one for all ancestor
runs (:meth:`StoreReads._path`); every Redis round trip goes through :meth:`StoreReads._io`,
which counts it and turns a connection failure into :class:`StoreUnavailableError`.
Media bytes (blobs) are content-addressed, so they are cached without ever going stale.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import TypeVar

from cachetools import LRUCache
from redis.asyncio import Redis

from . import codec, keys
from .cache import RecordCache, SegmentEntry
from .codec import ROOT_SEGMENT, SegmentRecord
from .errors import CorruptRecordError, MissingNodeError, StaleCacheError
from .outage import guarded
from .records import ChatMessage, Node, NodeId, Transcript, count_depth

log = logging.getLogger("replychain.transcript")

T = TypeVar("T")

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Image bytes kept in memory (immutable, content-addressed: never stale).
DEFAULT_BLOB_CACHE_BYTES = 32 * 1024 * 1024


class StoreReads:
    """Nodes, chains and blobs as read (the store's base; every write is the store's).

    ``round_trips`` counts Redis round trips (for benchmarks and tests);
    ``cache_hits`` and ``cache_misses`` count reads answered from the LRU alone and
    reads that needed Redis (alias lookups and node loads; for metrics).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        blob_cache_bytes: int = DEFAULT_BLOB_CACHE_BYTES,
    ) -> None:
        self._redis = redis
        self._cache = RecordCache(cache_bytes)
        self._blobs: LRUCache[tuple[str, str], bytes] = LRUCache(
            maxsize=max(1, blob_cache_bytes), getsizeof=len
        )
        self.round_trips = 0
        self.cache_hits = 0
        self.cache_misses = 0

    @property
    def cache(self) -> RecordCache:
        return self._cache

    async def put_blob(self, scope: str, data: bytes) -> str:
        """Store ``data`` once in ``scope`` (content-addressed); returns its digest."""
        digest = hashlib.sha256(data).hexdigest()
        if (scope, digest) not in self._blobs:
            await self._io(self._redis.set(keys.blob_key(scope, digest), data, nx=True))
            self._remember_blob(scope, digest, data)
        return digest

    async def blobs(self, scope: str, digests: Iterable[str]) -> dict[str, bytes]:
        """The bytes of each digest (one ``MGET`` for those not cached).

        A blob that is missing or does not match its digest raises
        :class:`CorruptRecordError`: a picture is never silently left out.
        """
        wanted = list(dict.fromkeys(digests))
        found: dict[str, bytes] = {}
        missing: list[str] = []
        for digest in wanted:
            data = self._blobs.get((scope, digest))
            if data is None:
                missing.append(digest)
            else:
                found[digest] = data
        if missing:
            keys_ = [keys.blob_key(scope, d) for d in missing]
            values = await self._io(self._redis.mget(keys_))
            for digest, value in zip(missing, values, strict=True):
                if not isinstance(value, bytes) or hashlib.sha256(value).hexdigest() != digest:
                    raise CorruptRecordError(f"{scope}/b:{digest[:12]}", "image is missing")
                self._remember_blob(scope, digest, value)
                found[digest] = value
        return found

    def _remember_blob(self, scope: str, digest: str, data: bytes) -> None:
        if len(data) <= self._blobs.maxsize:
            self._blobs[(scope, digest)] = data

    async def node(self, node_id: NodeId) -> Node:
        """One node (from the cache when its segment prefix is loaded)."""
        entry = self._cache.segment(node_id.scope, node_id.tree, node_id.seg)
        if entry is None or node_id.idx >= len(entry.nodes):
            entry = (await self._load(node_id.scope, node_id.tree, [(node_id.seg, node_id.idx)]))[0]
        else:
            self.cache_hits += 1  # (_load counts its own)
        return entry.nodes[node_id.idx]

    async def verify(self, node_id: NodeId) -> None:
        """Raise :class:`StaleCacheError` (and drop the tree from the cache) unless Redis
        holds the node's record as this cache knows it: one read, for a write that
        refers to a node placed before Redis may have lost writes."""
        try:
            held = await self._holds(await self.node(node_id))
        except MissingNodeError:  # not cached, and not in Redis either
            held = False
        if not held:
            self._drop_stale(node_id.scope, node_id.tree, f"{node_id} is lost or another node")
            raise StaleCacheError(f"{node_id} changed in Redis")

    async def _holds(self, node: Node) -> bool:
        """Whether Redis holds ``node``'s record as read or written (its digest)."""
        nid = node.id
        field = keys.node_field(nid.seg, nid.idx)
        data = await self._io(self._redis.hget(keys.tree_key(nid.scope, nid.tree), field))
        return isinstance(data, bytes) and _digest(data) == node.digest

    async def current(self, node_id: NodeId) -> Node:
        """:meth:`node`, checked against Redis (one more read): the cached node when Redis
        still holds its record; else Redis lost writes and handed the id out again, and
        the tree is dropped from the cache and the node read afresh. For a node acted
        on without an append below it (an answer stored by an earlier run, shown again)."""
        cached = await self.node(node_id)
        if await self._holds(cached):
            return cached
        self._drop_stale(node_id.scope, node_id.tree, f"{node_id} is another node")
        return await self.node(node_id)

    async def history(self, leaf: NodeId) -> Transcript:
        """Everything ever appended on the chain root → ``leaf``, in order."""
        loaded_before = self.round_trips
        runs, entries = await self._path(leaf)
        messages: list[ChatMessage] = []
        for (_, cut), entry in zip(reversed(runs), reversed(entries), strict=True):
            messages.extend(entry.messages[: entry.ends[cut]])
        depth = entries[0].nodes[leaf.idx].depth
        if self.round_trips != loaded_before and count_depth(messages) != depth:
            raise CorruptRecordError(str(leaf), "chain does not add up to the leaf's depth")
        return Transcript(leaf, depth, tuple(messages))

    async def path(self, leaf: NodeId) -> list[Node]:
        """The nodes of the chain root → ``leaf``, in order."""
        runs, entries = await self._path(leaf)
        nodes: list[Node] = []
        for (_, cut), entry in zip(reversed(runs), reversed(entries), strict=True):
            nodes.extend(entry.nodes[: cut + 1])
        return nodes

    async def size(self, leaf: NodeId) -> tuple[int, int]:
        """Messages and characters of the chain root → ``leaf``, without walking it."""
        runs, entries = await self._path(leaf)
        messages = chars = 0
        for (_, cut), entry in zip(runs, entries, strict=True):
            messages += entry.ends[cut]
            chars += entry.chars[cut]
        return messages, chars

    async def _path(self, leaf: NodeId) -> tuple[list[tuple[int, int]], list[SegmentEntry]]:
        """The runs ``(seg, last index)`` leaf → root, with their loaded entries."""
        scope, tree = leaf.scope, leaf.tree
        runs: list[tuple[int, int]] = [(leaf.seg, leaf.idx)]
        entries = await self._load(scope, tree, runs)
        record = entries[0].record
        while record is not None and record.ancestors:
            runs += record.ancestors
            _check_runs(leaf, runs)
            entries += await self._load(scope, tree, record.ancestors)
            # a capped list (``more``) goes on in the last run's own first node
            record = entries[-1].record if record.more else None
        return runs, entries

    def _drop_stale(self, scope: str, tree: int, seen: str) -> None:
        """Redis holds another node where this process cached one (it lost writes it had
        acknowledged): the tree is dropped from the cache, to be read again from Redis."""
        dropped = self._cache.forget_tree(scope, tree)
        log.warning(
            "%s where this process had cached another: Redis lost writes it had "
            "acknowledged; %d cached entries of that tree dropped", seen, dropped,
        )  # fmt: skip

    async def _load(
        self, scope: str, tree: int, runs: Sequence[tuple[int, int]]
    ) -> list[SegmentEntry]:
        """Entries holding nodes ``0..cut`` of each run: one ``HMGET`` for what is missing."""
        found: list[SegmentEntry] = []
        wanted: list[tuple[SegmentEntry, int, int]] = []  # entry, seg, first missing index
        fields: list[str] = []
        for seg, cut in runs:
            entry = self._cache.segment(scope, tree, seg) or SegmentEntry()
            found.append(entry)
            if len(entry.nodes) <= cut:
                wanted.append((entry, seg, len(entry.nodes)))
                fields.extend(keys.node_field(seg, i) for i in range(len(entry.nodes), cut + 1))
        if not fields:
            self.cache_hits += 1
            return found
        self.cache_misses += 1
        values = await self._io(self._redis.hmget(keys.tree_key(scope, tree), fields))
        offset = 0
        for (entry, seg, start), (_, cut) in zip(wanted, _runs_of(wanted, runs), strict=True):
            count = cut + 1 - start
            for i, data in enumerate(values[offset : offset + count], start):
                # Another load may have extended this shared entry while the HMGET
                # was in flight; nodes are immutable, so what it added is the same.
                if i == len(entry.nodes):
                    self._add_loaded(entry, NodeId(scope, tree, seg, i), data)
            offset += count
            self._cache.put_segment(scope, tree, seg, entry)
        return found

    @staticmethod
    def _add_loaded(entry: SegmentEntry, node_id: NodeId, data: bytes | str | None) -> None:
        ref = str(node_id)
        if data is None:
            raise MissingNodeError(ref, "node not found")
        record = codec.decode_node(ref, data)
        segment = record.segment
        if node_id.idx == 0:
            if node_id.seg == 0:
                segment = ROOT_SEGMENT
            elif segment is None:
                raise CorruptRecordError(ref, "first node of a branch lacks its ancestors")
        digest = _digest(data) if isinstance(data, bytes) else b""
        entry.add(Node(node_id, record.depth, record.messages, digest), segment)

    async def _segment_record(self, node_id: NodeId) -> SegmentRecord:
        entry = self._cache.segment(node_id.scope, node_id.tree, node_id.seg)
        if entry is None or entry.record is None:
            [entry] = await self._load(node_id.scope, node_id.tree, [(node_id.seg, 0)])
        assert entry.record is not None
        return entry.record

    async def _io(self, awaitable: Awaitable[T]) -> T:
        """One counted Redis round trip (failures become :class:`StoreUnavailableError`)."""
        self.round_trips += 1
        return await guarded(awaitable)


def _digest(record: bytes) -> bytes:
    """A record's SHA-1, as Lua's ``redis.sha1hex`` computes it (an identity, not a secret)."""
    return hashlib.sha1(record, usedforsecurity=False).digest()


def _runs_of(
    wanted: Sequence[tuple[SegmentEntry, int, int]], runs: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    cuts = dict(runs)
    return [(seg, cuts[seg]) for _, seg, _ in wanted]


def _parse_ref(scope: str, ref: bytes | str, what: str) -> NodeId:
    try:
        return NodeId.parse(scope, ref)
    except ValueError as exc:
        raise CorruptRecordError(what, "malformed node reference") from exc


def _check_runs(leaf: NodeId, runs: Sequence[tuple[int, int]]) -> None:
    """Segments are numbered in creation order, so ancestors strictly decrease."""
    for (seg, _), (older, cut) in itertools.pairwise(runs):
        if older >= seg or cut < 0:
            raise CorruptRecordError(str(leaf), f"segment {seg} lists a bad ancestor {older}")
