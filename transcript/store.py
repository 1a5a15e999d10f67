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

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from . import codec, keys
from .annotations import StoreAnnotations
from .cache import ChoiceIndex, SegmentEntry
from .codec import ROOT_SEGMENT, SegmentRecord
from .errors import StaleCacheError
from .reads import DEFAULT_BLOB_CACHE_BYTES, DEFAULT_CACHE_BYTES, _digest
from .records import ChatMessage, Node, NodeId, count_depth

log = logging.getLogger("replychain.transcript")

#: A hash field (key, field) of the node's scope where an append records its node.
RecordField = tuple[str, str]

#: The alias of a message id that belongs to no conversation (:meth:`TranscriptStore.unthreaded`).
_NO_NODE = b""

#: Ancestor runs listed in a segment's first node before it defers to the
#: first node of an older segment (bounds metadata on pathological trees).
DEFAULT_INLINE_ANCESTORS = 32

# Places a node atomically, and only while the guard key holds its value when
# one is given (a caller's claim): else nothing is written ({2, ''}). When the
# caller's record field already holds a node, that node is the result (a
# retry). A child of a cold tree is not placed ({4, ''}: the caller warms the tree
# and places it again). Otherwise: a root opens a new tree;
# a child continues its parent's segment when the next slot is free, else
# opens a new segment. Then writes the node's ref into the record field and
# the aliases (first writer wins, also on a retry), stamps the tree's last write,
# and notes the record hash in the tree's running work (those whose hash is gone
# are dropped from it): while it exists the tree is not compacted. All keys share
# the scope's hash tag, so this runs on Redis Cluster too.
#   KEYS: record hash (any key of the scope; unused without a field), alias
#         hash, tree hash (child) or tree counter (root), guard key (only
#         with a guard value), the tree's cold key (child; any key of the scope
#         for a root)
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
if ARGV[4] ~= '' and redis.call('EXISTS', KEYS[5]) == 1 then return {4, ''} end
if ARGV[8] ~= '' then
  local above = redis.call('HGET', KEYS[3], ARGV[7])
  if not above or redis.sha1hex(above) ~= ARGV[8] then return {3, ''} end
end
local ref
local tree = KEYS[3]
if ARGV[4] == '' then
  local id = redis.call('INCR', KEYS[3])
  tree = ARGV[5] .. id
  redis.call('HSET', tree, '0.0', ARGV[3])
  ref = id .. ':0.0'
elseif redis.call('HSETNX', KEYS[3], ARGV[4], ARGV[2]) == 1 then
  ref = ARGV[5] .. ':' .. ARGV[4]
else
  local seg = redis.call('HINCRBY', KEYS[3], '#', 1)
  redis.call('HSET', KEYS[3], seg .. '.0', ARGV[3])
  ref = ARGV[5] .. ':' .. seg .. '.0'
end
redis.call('HSET', tree, 'w', redis.call('TIME')[1])
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ref)
  local cut = string.find(KEYS[1], '}:', 1, true)
  local mine = string.sub(KEYS[1], cut + 2)
  local running = redis.call('HGET', tree, 'R')
  if running ~= mine then
    local kept = {mine}
    for other in string.gmatch(running or '', '[^,]+') do
      if other ~= mine and redis.call('EXISTS', string.sub(KEYS[1], 1, cut + 1) .. other) == 1 then
        kept[#kept + 1] = other
      end
    end
    redis.call('HSET', tree, 'R', table.concat(kept, ','))
  end
end
for i = 9, #ARGV do redis.call('HSETNX', KEYS[2], ARGV[i], ref) end
return {1, ref}
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


class TranscriptStore(StoreAnnotations):
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
        super().__init__(redis, cache_bytes=cache_bytes, blob_cache_bytes=blob_cache_bytes)
        self._inline = inline_ancestors

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
        if (scope, parent.tree) in self._cold:  # read cold: a write warms it first
            await self.warm(scope, parent.tree)
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
        """Queue the append script for ``placement`` on ``pipe``, sent with the script's
        text (EVAL: a pipeline cannot count on the script cache); its reply is the first
        of those queued (give it to :meth:`placed`). A child also notes its tree in the
        index of hot trees by last append (another command, maybe of another slot)."""
        found, args = self._script_call(placement)
        pipe.eval(_APPEND_LUA, len(found), *found, *args)
        if placement.continuation:
            self.queue_touch(pipe, placement.scope, int(placement.tree))

    async def _place(self, placement: Placement) -> Node:
        """Run the append script for one node; the node it placed (or found placed)."""
        pipe = self._redis.pipeline(transaction=False)
        self.queue_place(pipe, placement)
        [reply, *_] = await self._io(pipe.execute())
        return await self.placed(placement, reply)

    def _script_call(self, placement: Placement) -> tuple[list[str], list[str | bytes]]:
        """The append script's keys and arguments for ``placement``."""
        scope = placement.scope
        record_key, record_field = placement.record_in or (keys.alias_key(scope), "")
        guard_key, guard = placement.only_while or (keys.alias_key(scope), "")
        prefix = keys.scope_prefix(scope)
        if not (record_key.startswith(prefix) and guard_key.startswith(prefix)):
            raise ValueError("a record field and a guard must be keys of the node's own scope")
        cold = keys.alias_key(scope)
        if placement.continuation:
            cold = keys.cold_key(scope, int(placement.tree))
        found = [record_key, keys.alias_key(scope), placement.target_key, guard_key, cold]
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
        if int(created) == 4:  # the tree went cold after the append was prepared
            await self.warm(placement.scope, int(placement.tree))
            return await self._place(placement)
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
