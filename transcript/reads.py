"""Reading transcripts: nodes and chains from Redis behind a byte-bounded LRU.

The base of :class:`transcript.TranscriptStore` (see transcript/store.py for the
layout): a chain loads with one ``HMGET`` for its own segment plus one for all ancestor
runs (:meth:`StoreReads._path`); every Redis round trip goes through :meth:`StoreReads._io`,
which counts it and turns a connection failure into :class:`StoreUnavailableError`.
Media bytes (blobs) are content-addressed, so they are cached without ever going stale.

A cold tree (transcript/cold.py) is read from its one value: a load that finds no tree
hash reads it (one round trip more) and caches all of it (every node, fold, index and
alias), without warming it (a write does: transcript/compact.py).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import TypeVar

from cachetools import LRUCache
from redis.asyncio import Redis

from . import codec, keys
from . import cold as cold_codec
from .cache import ChoiceIndex, FoldIndex, RecordCache, SegmentEntry, parse_choices
from .codec import ROOT_SEGMENT, SegmentRecord
from .errors import CorruptRecordError, MissingNodeError, StaleCacheError
from .outage import guarded
from .records import ChatMessage, Fold, Node, NodeId, Transcript, count_depth

log = logging.getLogger("replychain.transcript")

T = TypeVar("T")

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Image bytes kept in memory (immutable, content-addressed: never stale).
DEFAULT_BLOB_CACHE_BYTES = 32 * 1024 * 1024
#: Compressed cold trees kept after a read, for the write that warms them.
COLD_CACHE_BYTES = 8 * 1024 * 1024
_NODE_FIELD = re.compile(r"^(\d+)\.(\d+)$")


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
        #: Cold trees' values as read (scope, tree), for a write that warms them.
        self._cold: LRUCache[tuple[str, int], bytes] = LRUCache(
            maxsize=COLD_CACHE_BYTES, getsizeof=len
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
        [data] = await self._tree_fields(nid.scope, nid.tree, [keys.node_field(nid.seg, nid.idx)])
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
        if all(value is None for value in values):  # no tree hash: a cold tree, or none
            cold = await self._read_cold(scope, tree)
            if cold is not None:
                return self._cold_entries(scope, tree, runs, cold)
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

    def _cold_entries(
        self, scope: str, tree: int, runs: Sequence[tuple[int, int]], cold: cold_codec.ColdTree
    ) -> list[SegmentEntry]:
        """:meth:`_load`'s entries from a cold value just read (and cached)."""
        found: list[SegmentEntry] = []
        for seg, cut in runs:
            entry = self._cache.segment(scope, tree, seg) or SegmentEntry()
            if len(entry.nodes) <= cut:
                while len(entry.nodes) <= cut:
                    nid = NodeId(scope, tree, seg, len(entry.nodes))
                    self._add_loaded(entry, nid, cold.fields.get(keys.node_field(seg, nid.idx)))
                self._cache.put_segment(scope, tree, seg, entry)
            found.append(entry)
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

    # ------------------------------------------------------------- cold trees

    async def _tree_fields(
        self, scope: str, tree: int, fields: Sequence[str]
    ) -> list[bytes | None]:
        """Fields of a tree hash, or of its cold value when the tree is cold (one round
        trip; one more for a cold tree): a field a hot tree lacks is ``None``."""
        key = keys.tree_key(scope, tree)
        pipe = self._redis.pipeline(transaction=False)
        pipe.hmget(key, list(fields))
        pipe.exists(key)
        values, hot = await self._io(pipe.execute())
        if hot:
            return list(values)
        cold = await self._read_cold(scope, tree)
        return [None if cold is None else cold.fields.get(name) for name in fields]

    async def _read_cold(self, scope: str, tree: int) -> cold_codec.ColdTree | None:
        """The tree's cold value (``None``: the tree is not cold), cached whole."""
        data = await self._io(self._redis.get(keys.cold_key(scope, tree)))
        if not isinstance(data, bytes):
            return None
        return self._learn_cold(scope, tree, data)

    def _learn_cold(self, scope: str, tree: int, data: bytes) -> cold_codec.ColdTree:
        """Decode a cold value and cache everything it holds."""
        found = cold_codec.decode(f"{scope}/z:{tree}", data)
        if len(data) <= self._cold.maxsize:
            self._cold[(scope, tree)] = data
        by_segment: dict[int, dict[int, bytes]] = {}
        for name, value in found.fields.items():
            match = _NODE_FIELD.match(name)
            if match is not None:
                by_segment.setdefault(int(match[1]), {})[int(match[2])] = value
        for seg, nodes in by_segment.items():
            entry = self._cache.segment(scope, tree, seg) or SegmentEntry()
            while len(entry.nodes) in nodes:
                at = len(entry.nodes)
                self._add_loaded(entry, NodeId(scope, tree, seg, at), nodes[at])
            self._cache.put_segment(scope, tree, seg, entry)
        index = (found.fields.get(keys.FOLD_INDEX_FIELD) or b"").decode()
        refs = frozenset(r for r in index.split(",") if r)
        for ref in refs:
            seg_text, _, idx_text = ref.partition(".")
            fold_at = NodeId(scope, tree, int(seg_text), int(idx_text))
            record = found.fields.get(keys.fold_field(fold_at.seg, fold_at.idx))
            if record is not None:
                depth, fold = codec.decode_fold(f"fold at {fold_at}", record)
                self._cache.put_fold(Fold(fold_at, depth, fold))
        self._cache.put_fold_index(scope, tree, FoldIndex(refs, time.monotonic()))
        choices = parse_choices(scope, tree, found.fields.get(keys.CHOICE_INDEX_FIELD))
        self._cache.put_choice_index(scope, tree, ChoiceIndex(choices, cold=True))
        for message_id, (in_seg, at_idx) in found.aliases.items():
            self._cache.put_alias(scope, str(message_id), NodeId(scope, tree, in_seg, at_idx))
        return found

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
