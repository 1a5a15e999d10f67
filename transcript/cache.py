"""A byte-bounded LRU of immutable records (cachetools), shared by one store.

Entries are keyed by scope: segment entries hold the loaded prefix of a
segment's nodes, alias entries a resolved message id. Nodes are immutable and a
segment only ever grows at its end, so a cached prefix can never be stale, even
when other processes write to the same Redis.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from cachetools import LRUCache

from .codec import SegmentRecord
from .errors import CorruptRecordError
from .records import ChatMessage, Fold, Node, NodeId, sizing_chars

#: Python heap cost of the objects around one message / node / alias (CPython 3.11,
#: measured with tracemalloc: tests/test_transcript_store.py keeps the count honest).
_MESSAGE_OVERHEAD = 120
_NODE_OVERHEAD = 270
_ALIAS_SIZE = 320
_ENTRY_OVERHEAD = 400


def message_size(message: ChatMessage) -> int:
    size = _MESSAGE_OVERHEAD
    if message.content is not None:
        size += sys.getsizeof(message.content)
    for call in message.tool_calls:
        size += _MESSAGE_OVERHEAD + len(call.arguments) + len(call.name) + len(call.id)
    size += _MESSAGE_OVERHEAD * len(message.images)
    return size


class SegmentEntry:
    """The loaded prefix ``nodes[0..n)`` of one segment, with its messages flattened.

    ``ends[i]`` is the number of messages in nodes ``0..i``, so the messages of
    the run ending at node ``i`` are ``messages[:ends[i]]`` (a C-speed slice).
    ``record`` (where the segment hangs) is known once node 0 is loaded.
    ``chars[i]`` is the content length of nodes ``0..i`` (sizes without a walk).
    """

    __slots__ = ("chars", "ends", "messages", "nodes", "record", "size")

    def __init__(self) -> None:
        self.record: SegmentRecord | None = None
        self.nodes: list[Node] = []
        self.messages: list[ChatMessage] = []
        self.ends: list[int] = []
        self.chars: list[int] = []
        self.size = _ENTRY_OVERHEAD

    def add(self, node: Node, record: SegmentRecord | None = None) -> None:
        """Append the next node of the segment; node 0 comes with the segment record."""
        if node.id.idx != len(self.nodes):
            raise ValueError("segment nodes must be added in order")
        if node.id.idx == 0:
            if record is None:
                raise ValueError("the first node of a segment needs its segment record")
            self.record = record
        self.nodes.append(node)
        self.messages.extend(node.messages)
        self.ends.append(len(self.messages))
        before = self.chars[-1] if self.chars else 0
        self.chars.append(before + sum(sizing_chars(m) for m in node.messages))
        self.size += _NODE_OVERHEAD + sum(message_size(m) for m in node.messages)


@dataclass(frozen=True, slots=True)
class FoldIndex:
    """The fold nodes of one tree as last read, and when (the index only grows)."""

    refs: frozenset[str]
    read_at: float


@dataclass(frozen=True, slots=True)
class Choice:
    """A choice recorded at a node: a model (``kind`` "m") or a persona ("p", whose
    system text is the blob ``digest`` of the scope) for every turn below it."""

    at: NodeId
    kind: str
    name: str
    digest: str = ""


@dataclass(frozen=True, slots=True)
class ChoiceIndex:
    """The choices of one tree as last read, oldest first (the index only grows).

    ``cold``: read from the tree's cold value, where a read of the tree hash finds no
    index (:meth:`transcript.TranscriptStore.learn_choices` keeps this one then)."""

    choices: tuple[Choice, ...]
    cold: bool = False


def parse_choices(scope: str, tree: int, raw: bytes | str | None) -> tuple[Choice, ...]:
    """A tree's choice index field as written (``None``: no choice yet)."""
    text = (raw.decode() if isinstance(raw, bytes) else raw) or ""
    found: list[Choice] = []
    for entry in filter(None, text.split(",")):
        ref, kind, *rest = entry.split(" ")
        seg, _, idx = ref.partition(".")
        if kind not in ("m", "p") or not rest or not (seg.isdigit() and idx.isdigit()):
            raise CorruptRecordError(f"{scope}/t:{tree} C", f"malformed choice {entry!r}")
        digest = rest[1] if len(rest) > 1 else ""
        found.append(Choice(NodeId(scope, tree, int(seg), int(idx)), kind, rest[0], digest))
    return tuple(found)


CacheKey = (
    tuple[str, str, int, int]
    | tuple[str, str, str]
    | tuple[str, str, int]
    | tuple[str, str, int, int, int]
)
CacheValue = SegmentEntry | NodeId | Fold | FoldIndex | ChoiceIndex


def _sizeof(value: CacheValue) -> int:
    if isinstance(value, SegmentEntry):
        return value.size
    if isinstance(value, Fold):
        return _NODE_OVERHEAD + sum(message_size(m) for m in value.messages)
    if isinstance(value, FoldIndex):
        return _ALIAS_SIZE + 16 * len(value.refs)
    if isinstance(value, ChoiceIndex):
        return _ALIAS_SIZE + _ALIAS_SIZE * len(value.choices)
    return _ALIAS_SIZE


class RecordCache:
    """LRU of segment entries and aliases, bounded by an estimate of their bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._lru: LRUCache[CacheKey, CacheValue] = LRUCache(max_bytes, getsizeof=_sizeof)

    @property
    def bytes_used(self) -> int:
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)

    def segment(self, scope: str, tree: int, seg: int) -> SegmentEntry | None:
        value = self._lru.get(("s", scope, tree, seg))
        return value if isinstance(value, SegmentEntry) else None

    def put_segment(self, scope: str, tree: int, seg: int, entry: SegmentEntry) -> None:
        """Insert or re-account an entry (call again after it grew)."""
        self._put(("s", scope, tree, seg), entry)

    def alias(self, scope: str, message_id: str) -> NodeId | None:
        value = self._lru.get(("a", scope, message_id))
        return value if isinstance(value, NodeId) else None

    def put_alias(self, scope: str, message_id: str, node: NodeId) -> None:
        self._put(("a", scope, message_id), node)

    def fold(self, node: NodeId) -> Fold | None:
        value = self._lru.get(("f", node.scope, node.tree, node.seg, node.idx))
        return value if isinstance(value, Fold) else None

    def put_fold(self, fold: Fold) -> None:
        at = fold.at
        self._put(("f", at.scope, at.tree, at.seg, at.idx), fold)

    def fold_index(self, scope: str, tree: int) -> FoldIndex | None:
        value = self._lru.get(("F", scope, tree))
        return value if isinstance(value, FoldIndex) else None

    def put_fold_index(self, scope: str, tree: int, index: FoldIndex) -> None:
        self._put(("F", scope, tree), index)

    def choice_index(self, scope: str, tree: int) -> ChoiceIndex | None:
        value = self._lru.get(("C", scope, tree))
        return value if isinstance(value, ChoiceIndex) else None

    def put_choice_index(self, scope: str, tree: int, index: ChoiceIndex) -> None:
        self._put(("C", scope, tree), index)

    def forget_scope(self, scope: str) -> int:
        """Drop every cached record of one scope (its data was erased); returns how many."""
        gone = [key for key in list(self._lru.keys()) if key[1] == scope]
        for key in gone:
            self._lru.pop(key, None)
        return len(gone)

    def forget_tree(self, scope: str, tree: int) -> int:
        """Drop everything cached of one conversation tree, the aliases into it too;
        returns how many entries. (A scan of the whole cache: for the rare case that
        Redis lost the tree's latest writes, see ``TranscriptStore.placed``.)"""

        def of_tree(key: CacheKey, value: CacheValue) -> bool:
            if key[1] != scope:
                return False
            if key[0] == "a":  # an alias: into the tree when its node is
                return isinstance(value, NodeId) and value.tree == tree
            return key[2] == tree

        gone = [key for key, value in list(self._lru.items()) if of_tree(key, value)]
        for key in gone:
            self._lru.pop(key, None)
        return len(gone)

    def _put(self, key: CacheKey, value: CacheValue) -> None:
        try:
            self._lru[key] = value
        except ValueError:
            # Larger than the whole cache: serve it uncached rather than fail.
            self._lru.pop(key, None)
