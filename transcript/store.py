"""The reply-chain transcript store: immutable nodes in Redis behind an LRU.

Layout (see :mod:`transcript.keys`): each conversation is a *tree* stored as
one Redis hash. Its nodes live in *segments*: node ``(seg, i)`` has parent
``(seg, i - 1)``; the first node of a segment records where the segment hangs
(the ancestor runs), except in segment 0, whose first node is the root.
Appending below the last node of a segment continues the segment (claimed with
``HSETNX``); appending anywhere else, or losing that race, opens a new segment.
A chain therefore loads with one ``HMGET`` for its own segment plus one for all
ancestor runs, and a node stores only its depth and its own messages.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cachetools import LRUCache
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ClusterDownError, ConnectionError, TimeoutError, TryAgainError

from . import codec, keys
from .cache import Choice, ChoiceIndex, FoldIndex, RecordCache, SegmentEntry
from .codec import ROOT_SEGMENT, SegmentRecord
from .errors import CorruptRecordError, MissingNodeError, StaleCacheError, StoreUnavailableError
from .records import ChatMessage, Fold, Node, NodeId, Transcript, count_depth

log = logging.getLogger("replychain.transcript")

T = TypeVar("T")
#: A hash field (key, field) of the node's scope where an append records its node.
RecordField = tuple[str, str]
#: What redis-py raises when Redis cannot be reached or does not answer in time, or
#: a Redis Cluster cannot serve a slot for now (CLUSTERDOWN while a replica is promoted;
#: TRYAGAIN while a slot migrates).
_UNAVAILABLE = (ConnectionError, TimeoutError, OSError, ClusterDownError, TryAgainError)

#: The alias of a message id that belongs to no conversation (:meth:`TranscriptStore.unthreaded`).
_NO_NODE = b""

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Image bytes kept in memory (immutable, content-addressed: never stale).
DEFAULT_BLOB_CACHE_BYTES = 32 * 1024 * 1024
#: Ancestor runs listed in a segment's first node before it defers to the
#: first node of an older segment (bounds metadata on pathological trees).
DEFAULT_INLINE_ANCESTORS = 32
#: Seconds a tree's cached fold index is trusted before it is read again.
FOLD_INDEX_TTL = 30.0

# Places a node atomically, and only while the guard key holds its value when
# one is given (a caller's claim): else nothing is written ({2, ''}). When the
# caller's record field already holds a node, that node is the result (a
# retry). Otherwise: a root opens a new tree;
# a child continues its parent's segment when the next slot is free, else
# opens a new segment. Then writes the node's ref into the record field and
# the aliases (first writer wins, also on a retry). All keys share the
# scope's hash tag, so this runs on Redis Cluster too.
#   KEYS: record hash (any key of the scope; unused without a field), alias
#         hash, tree hash (child) or tree counter (root), guard key (only
#         with a guard value)
#   ARGV: record field or '', record continuing the segment, record opening a
#         segment, continuation field or '' for a root, tree id or tree key
#         prefix for a root, guard value or '', the parent's field and the SHA-1
#         of its record as the caller knows it ('': not checked), alias fields...
# A parent whose record is not the one the caller knows is not placed below
# ({3, ''}): Redis lost writes and handed the parent's id out again (the
# caller's cache holds the lost node).
_APPEND_LUA = """
if ARGV[6] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[6] then return {2, ''} end
if ARGV[1] ~= '' then
  local found = redis.call('HGET', KEYS[1], ARGV[1])
  if found then
    for i = 9, #ARGV do redis.call('HSETNX', KEYS[2], ARGV[i], found) end
    return {0, found}
  end
end
if ARGV[8] ~= '' then
  local above = redis.call('HGET', KEYS[3], ARGV[7])
  if not above or redis.sha1hex(above) ~= ARGV[8] then return {3, ''} end
end
local ref
if ARGV[4] == '' then
  local tree = redis.call('INCR', KEYS[3])
  redis.call('HSET', ARGV[5] .. tree, '0.0', ARGV[3])
  ref = tree .. ':0.0'
elseif redis.call('HSETNX', KEYS[3], ARGV[4], ARGV[2]) == 1 then
  ref = ARGV[5] .. ':' .. ARGV[4]
else
  local seg = redis.call('HINCRBY', KEYS[3], '#', 1)
  redis.call('HSET', KEYS[3], seg .. '.0', ARGV[3])
  ref = ARGV[5] .. ':' .. seg .. '.0'
end
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], ARGV[1], ref) end
for i = 9, #ARGV do redis.call('HSETNX', KEYS[2], ARGV[i], ref) end
return {1, ref}
"""


# Writes a fold once (first writer wins) and appends its node to the tree's
# fold index in the same step.  KEYS: tree hash.  ARGV: fold field, record, ref.
_FOLD_LUA = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
local index = redis.call('HGET', KEYS[1], 'F')
redis.call('HSET', KEYS[1], 'F', index and (index .. ',' .. ARGV[3]) or ARGV[3])
return 1
"""


# Appends one choice to the tree's choice index; answers the whole index.
#   KEYS: tree hash.  ARGV: the entry.
_CHOOSE_LUA = """
local index = redis.call('HGET', KEYS[1], 'C')
index = index and (index .. ',' .. ARGV[1]) or ARGV[1]
redis.call('HSET', KEYS[1], 'C', index)
return index
"""


@dataclass(frozen=True, slots=True)
class Placement:
    """One node to place, as the append script takes it (see ``_APPEND_LUA``)."""

    scope: str
    #: The tree hash for a child, the scope's tree counter for a root.
    target_key: str
    #: The tree id for a child, the tree key prefix for a root.
    tree: str
    #: The field continuing the parent's segment ('' for a root).
    continuation: str
    #: The node record when it continues the segment, and when it opens one.
    continuing: bytes
    opening: bytes
    depth: int
    messages: tuple[ChatMessage, ...]
    branch: SegmentRecord | None
    record_in: RecordField | None
    aliases: tuple[str, ...]
    #: A key of the scope and the value it must hold for the node to be placed (a
    #: caller's claim, checked in the same atomic step), or ``None``.
    only_while: tuple[str, str] | None = None
    #: The parent's field and the SHA-1 (hex) of its record as the cache holds it
    #: ('': a root, or not known): checked in the same atomic step.
    parent: tuple[str, str] = ("", "")


class TranscriptStore:
    """Reply-chain transcripts of many chat scopes in one Redis.

    Every write is idempotent and never changes an existing record. Reads go
    through a byte-bounded LRU that is filled lazily and written through.
    ``round_trips`` counts Redis round trips (for benchmarks and tests);
    ``cache_hits`` and ``cache_misses`` count reads answered from the LRU alone and
    reads that needed Redis (alias lookups and node loads; for metrics).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        inline_ancestors: int = DEFAULT_INLINE_ANCESTORS,
        blob_cache_bytes: int = DEFAULT_BLOB_CACHE_BYTES,
    ) -> None:
        if inline_ancestors < 1:
            raise ValueError("inline_ancestors must be at least 1")
        self._redis = redis
        self._cache = RecordCache(cache_bytes)
        self._blobs: LRUCache[tuple[str, str], bytes] = LRUCache(
            maxsize=max(1, blob_cache_bytes), getsizeof=len
        )
        self._inline = inline_ancestors
        self._append_script = redis.register_script(_APPEND_LUA)
        self._fold_script = redis.register_script(_FOLD_LUA)
        self._choose_script = redis.register_script(_CHOOSE_LUA)
        self.round_trips = 0
        self.cache_hits = 0
        self.cache_misses = 0

    @property
    def cache(self) -> RecordCache:
        return self._cache

    # ---------------------------------------------------------------- writes

    async def start(
        self,
        scope: str,
        messages: Sequence[ChatMessage],
        *,
        record_in: RecordField | None = None,
        aliases: Iterable[int | str] = (),
    ) -> Node:
        """Write the root node of a new conversation (normally the system prompt)."""
        return await self._place(self.root(scope, messages, record_in=record_in, aliases=aliases))

    def root(
        self,
        scope: str,
        messages: Sequence[ChatMessage],
        *,
        record_in: RecordField | None = None,
        aliases: Iterable[int | str] = (),
    ) -> Placement:
        """:meth:`start`'s write, prepared to go on a caller's pipeline (:meth:`queue_place`,
        then :meth:`placed` with its reply)."""
        messages = tuple(messages)
        depth = count_depth(messages)
        record = codec.encode_node(depth, messages)
        return Placement(
            scope=scope,
            target_key=keys.seq_key(scope),
            tree=keys.tree_key_prefix(scope),
            continuation="",
            continuing=record,
            opening=record,
            depth=depth,
            messages=messages,
            branch=None,
            record_in=record_in,
            aliases=tuple(str(a) for a in aliases),
        )

    async def append(
        self,
        parent: NodeId | Node,
        messages: Sequence[ChatMessage],
        *,
        record_in: RecordField | None = None,
        aliases: Iterable[int | str] = (),
    ) -> Node:
        """Write a child of ``parent`` holding ``messages``.

        With ``record_in``, the new node's ref is written into that hash field
        in the same atomic step, and a call finding the field already set
        returns the node it names instead of writing a second one (so a
        caller's retry is idempotent). ``aliases`` are message ids mapped to
        the new node in the same step.
        """
        placement = await self.child(parent, messages, record_in=record_in, aliases=aliases)
        return await self._place(placement)

    async def child(
        self,
        parent: NodeId | Node,
        messages: Sequence[ChatMessage],
        *,
        record_in: RecordField | None = None,
        aliases: Iterable[int | str] = (),
        only_while: tuple[str, str] | None = None,
    ) -> Placement:
        """:meth:`append`'s write, prepared to go on a caller's pipeline with other
        writes (:meth:`queue_place`, then :meth:`placed` with its reply).

        ``parent``: its id, or the node as the caller read it (what its transcript
        was built from): the append script places nothing unless Redis still holds that
        very record (:attr:`Node.digest`), even if this cache has let it go since.

        ``only_while`` (a key of the scope, a value): the node is placed only while
        that key holds that value, e.g. a claim taken earlier in the same pipeline.
        """
        parent_node = parent if isinstance(parent, Node) else await self.node(parent)
        parent = parent_node.id
        scope, messages = parent.scope, tuple(messages)
        parent_record = await self._segment_record(parent)
        ancestors = ((parent.seg, parent.idx), *parent_record.ancestors)
        more = parent_record.more
        if len(ancestors) > self._inline:
            ancestors, more = ancestors[: self._inline], True
        branch = SegmentRecord(ancestors, more)
        depth = parent_node.depth + count_depth(messages)
        placement = Placement(
            scope=scope,
            target_key=keys.tree_key(scope, parent.tree),
            tree=str(parent.tree),
            continuation=keys.node_field(parent.seg, parent.idx + 1),
            continuing=codec.encode_node(depth, messages),
            opening=codec.encode_node(depth, messages, branch),
            depth=depth,
            messages=messages,
            branch=branch,
            record_in=record_in,
            aliases=tuple(str(a) for a in aliases),
            only_while=only_while,
            parent=(keys.node_field(parent.seg, parent.idx), parent_node.digest.hex()),
        )
        return placement

    def queue_place(self, pipe: Pipeline, placement: Placement) -> None:
        """Queue the append script for ``placement`` on ``pipe``: one command, sent
        with the script's text (EVAL: a pipeline cannot count on the script cache)."""
        found, args = self._script_call(placement)
        pipe.eval(_APPEND_LUA, len(found), *found, *args)

    async def _place(self, placement: Placement) -> Node:
        """Run the append script for one node; the node it placed (or found placed)."""
        found, args = self._script_call(placement)
        return await self.placed(placement, await self._io(self._append_script(found, args)))

    def _script_call(self, placement: Placement) -> tuple[list[str], list[str | bytes]]:
        """The append script's keys and arguments for ``placement``."""
        scope = placement.scope
        record_key, record_field = placement.record_in or (keys.alias_key(scope), "")
        guard_key, guard = placement.only_while or (keys.alias_key(scope), "")
        prefix = keys.scope_prefix(scope)
        if not (record_key.startswith(prefix) and guard_key.startswith(prefix)):
            raise ValueError("a record field and a guard must be keys of the node's own scope")
        found = [record_key, keys.alias_key(scope), placement.target_key, guard_key]
        args: list[str | bytes] = [
            record_field,
            placement.continuing,
            placement.opening,
            placement.continuation,
            placement.tree,
            guard,
            *placement.parent,
            *placement.aliases,
        ]
        return found, args

    async def placed(self, placement: Placement, reply: Any) -> Node:
        """The node the append script placed (or found placed), from its reply.

        A guarded placement (``only_while``) whose guard did not hold raises
        :class:`RuntimeError`: ask for the node only where the guard held.
        """
        created, ref = reply
        if int(created) == 2:
            raise RuntimeError("the node was not placed: its guard did not hold")
        if int(created) == 3:
            above = f"{placement.scope}/{placement.tree}:{placement.parent[0]}"
            self._drop_stale(placement.scope, int(placement.tree), f"{above} is another node")
            raise StaleCacheError(f"{above} changed in Redis")
        node_id = NodeId.parse(placement.scope, ref)
        if not int(created):
            return await self.node(node_id)
        stored = placement.opening if node_id.idx == 0 else placement.continuing
        node = Node(node_id, placement.depth, placement.messages, _digest(stored))
        self._forget_lost(node_id)
        self._remember(node, placement.branch if node_id.seg else ROOT_SEGMENT)
        if not placement.continuation:  # a new tree: no choices yet (nothing to read)
            self._cache.put_choice_index(node_id.scope, node_id.tree, ChoiceIndex(()))
        for field in placement.aliases:
            self._cache.put_alias(placement.scope, field, node_id)
        return node

    def _forget_lost(self, nid: NodeId) -> None:
        """Redis just placed a new node at ``nid``; if the cache holds a node there, or a
        fold, Redis has lost writes it once acknowledged (a Redis Cluster failover, a
        restart from an AOF missing its last second) and handed the id out again. What
        the cache holds of that tree is then another thread's: keeping it would mix the
        two. The tree is dropped from the cache and read again from Redis."""
        entry = self._cache.segment(nid.scope, nid.tree, nid.seg)
        if (entry is not None and len(entry.nodes) > nid.idx) or self._cache.fold(nid):
            self._drop_stale(nid.scope, nid.tree, f"{nid} was placed anew")

    def _drop_stale(self, scope: str, tree: int, seen: str) -> None:
        """Redis holds another node where this process cached one (it lost writes it had
        acknowledged): the tree is dropped from the cache, to be read again from Redis."""
        dropped = self._cache.forget_tree(scope, tree)
        log.warning(
            "%s where this process had cached another: Redis lost writes it had "
            "acknowledged; %d cached entries of that tree dropped", seen, dropped,
        )  # fmt: skip

    def _remember(self, node: Node, record: SegmentRecord | None) -> None:
        """Write-through: extend the cached segment prefix when it is contiguous."""
        nid = node.id
        entry = self._cache.segment(nid.scope, nid.tree, nid.seg)
        if entry is None:
            if nid.idx != 0:
                return
            entry = SegmentEntry()
        if len(entry.nodes) == nid.idx:
            entry.add(node, record)
            self._cache.put_segment(nid.scope, nid.tree, nid.seg, entry)

    async def alias(self, scope: str, message_ids: Iterable[int | str], node: NodeId) -> None:
        """Map message ids to ``node``; an id already mapped keeps its first node."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if self.queue_alias(pipe, scope, message_ids, node):
                await self._io(pipe.execute())

    def queue_alias(
        self, pipe: Pipeline, scope: str, message_ids: Iterable[int | str], node: NodeId
    ) -> bool:
        """:meth:`alias`, queued on a caller's pipeline (one round trip with its writes).

        The caller executes the pipeline, and retries it until it succeeds: the
        cache already knows the aliases. Returns whether anything was queued.
        """
        if node.scope != scope:
            raise ValueError("an alias must point into its own scope")
        fields = [str(m) for m in message_ids]
        for field in fields:
            pipe.hsetnx(keys.alias_key(scope), field, node.ref)
            self._cache.put_alias(scope, field, node)
        return bool(fields)

    def queue_unthreaded(
        self, pipe: Pipeline, scope: str, message_ids: Iterable[int | str]
    ) -> bool:
        """Note message ids of the scope that belong to no conversation, on a caller's
        pipeline: a reply to one starts a new conversation (:meth:`resolve` gives
        ``None``) but is known (:meth:`known`). An id already aliased keeps its node."""
        fields = [str(m) for m in message_ids]
        for field in fields:
            pipe.hsetnx(keys.alias_key(scope), field, _NO_NODE)
        return bool(fields)

    async def unthreaded(self, scope: str, message_ids: Iterable[int | str]) -> None:
        """:meth:`queue_unthreaded` in a round trip of its own."""
        async with self._redis.pipeline(transaction=False) as pipe:
            if self.queue_unthreaded(pipe, scope, message_ids):
                await self._io(pipe.execute())

    async def known(self, scope: str, message_id: int | str) -> bool:
        """Whether the message id is aliased, to a node or to none (:meth:`unthreaded`)."""
        field = str(message_id)
        if self._cache.alias(scope, field) is not None:
            return True
        return bool(await self._io(self._redis.hexists(keys.alias_key(scope), field)))

    # ----------------------------------------------------------------- reads

    async def resolve(self, scope: str, message_id: int | str) -> NodeId | None:
        """The node a message id of this scope is aliased to, or ``None`` if unknown."""
        field = str(message_id)
        cached = self._cache.alias(scope, field)
        if cached is not None:
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        ref = await self._io(self._redis.hget(keys.alias_key(scope), field))
        if not ref:  # unknown, or a message of no conversation (_NO_NODE)
            return None
        node = _parse_ref(scope, ref, f"alias {scope}/{field}")
        self._cache.put_alias(scope, field, node)
        return node

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
        created = await self._io(
            self._fold_script(
                keys=[keys.tree_key(at.scope, at.tree)],
                args=[field, record, keys.node_field(at.seg, at.idx)],
            )
        )
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

    async def _fold_refs(self, scope: str, tree: int) -> frozenset[str]:
        index = self._cache.fold_index(scope, tree)
        now = time.monotonic()
        if index is not None and now - index.read_at < FOLD_INDEX_TTL:
            return index.refs
        raw = await self._io(self._redis.hget(keys.tree_key(scope, tree), keys.FOLD_INDEX_FIELD))
        text = (raw.decode() if isinstance(raw, bytes) else raw) or ""
        refs = frozenset(r for r in text.split(",") if r)
        self._cache.put_fold_index(scope, tree, FoldIndex(refs, now))
        return refs

    async def _folds(self, scope: str, tree: int, at: Sequence[NodeId]) -> list[Fold]:
        fields = [keys.fold_field(n.seg, n.idx) for n in at]
        values = await self._io(self._redis.hmget(keys.tree_key(scope, tree), fields))
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

    # -------------------------------------------------------------- choices

    async def choose(self, at: NodeId, kind: str, name: str, digest: str = "") -> None:
        """Record a choice at node ``at`` for every chain through it: ``kind`` "m" (a
        model) or "p" (a persona whose text is the scope's blob ``digest``). Choices are
        only ever appended; a later one of the same kind at the same node wins."""
        if not name or any(c in name for c in " ,") or any(c in digest for c in " ,"):
            raise ValueError("a choice's name and digest hold no spaces or commas")
        entry = " ".join(
            part for part in (keys.node_field(at.seg, at.idx), kind, name, digest) if part
        )
        raw = await self._io(
            self._choose_script(keys=[keys.tree_key(at.scope, at.tree)], args=[entry])
        )
        self.learn_choices(at.scope, at.tree, raw)

    @staticmethod
    def queue_choices(pipe: Pipeline, node: NodeId) -> None:
        """Queue the read of the choices of ``node``'s tree on a caller's round trip
        (give the reply to :meth:`learn_choices`): a choice made through another
        process is known from that round trip on."""
        pipe.hget(keys.tree_key(node.scope, node.tree), keys.CHOICE_INDEX_FIELD)

    def learn_choices(self, scope: str, tree: int, raw: bytes | str | None) -> None:
        """Cache the choice index of a tree as read (:meth:`queue_choices`)."""
        text = (raw.decode() if isinstance(raw, bytes) else raw) or ""
        found: list[Choice] = []
        for entry in filter(None, text.split(",")):
            ref, kind, *rest = entry.split(" ")
            seg, _, idx = ref.partition(".")
            if kind not in ("m", "p") or not rest or not (seg.isdigit() and idx.isdigit()):
                raise CorruptRecordError(f"{scope}/t:{tree} C", f"malformed choice {entry!r}")
            digest = rest[1] if len(rest) > 1 else ""
            found.append(Choice(NodeId(scope, tree, int(seg), int(idx)), kind, rest[0], digest))
        self._cache.put_choice_index(scope, tree, ChoiceIndex(tuple(found)))

    async def choices_on_path(self, leaf: NodeId) -> list[Choice]:
        """The choices at the nodes of the chain root → ``leaf``, root first, the latest
        of each kind per node. The tree's index is read once, then comes from the cache
        (a turn refreshes it on its claim's round trip: :meth:`queue_choices`)."""
        index = self._cache.choice_index(leaf.scope, leaf.tree)
        if index is None:
            raw = await self._io(
                self._redis.hget(keys.tree_key(leaf.scope, leaf.tree), keys.CHOICE_INDEX_FIELD)
            )
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

    # -------------------------------------------------------------- loading

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
        started = time.monotonic()
        try:
            return await awaitable
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(
                f"Redis is unreachable ({type(exc).__name__} after "
                f"{time.monotonic() - started:.1f}s)"
            ) from exc


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
