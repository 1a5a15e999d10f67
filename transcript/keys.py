"""Every Redis key shape of the transcript store, in one place.

(The bot's own keys, message bus, turn state and usage, are in
:mod:`bot.data.keys`.) All keys of one chat scope share the hash tag
``{scope}`` so they live in one Redis Cluster slot (the append script touches
several of them atomically, and may record its node in a caller's hash of the
same scope).

    rc:{S}:seq        INCR counter allocating conversation trees
    rc:{S}:t:<tree>   hash of one conversation tree (a root and all its branches):
                        "<seg>.<i>"  node record (immutable, HSETNX)
                        "#"          HINCRBY counter allocating segments
                        "f<seg>.<i>" fold record standing for root → that node (HSETNX)
                        "F"          comma-separated list of the tree's fold nodes
                                     (only ever appended to)
                        "C"          comma-separated choices, oldest first (only ever
                                     appended to): "<seg>.<i> m <model>" or
                                     "<seg>.<i> p <persona> <sha256 of its text>"
                        "w"          unix seconds of the tree's last write (every
                                     script writing the hash stamps it with TIME)
                        "R"          comma-separated record hashes (keys of the scope,
                                     without its prefix) an append wrote a node's ref
                                     into: a caller's unfinished unit of work (a turn
                                     while its record exists) blocks compaction
    rc:{S}:a          hash: message id -> "tree:seg.i"   (aliases, HSETNX); "" for a
                        message known to belong to no conversation (a reply to
                        it starts a new one)
    rc:{S}:z:<tree>   string: a cold tree (transcript/cold.py), the tree hash compacted
                        in place: zstd of msgpack [1, "z", {field: value} (every
                        field but "w" and "R"), {message id: "seg.i"} (its
                        aliases, taken out of "a"), {name: [expires at ms or 0,
                        {field: value}]} (companion hashes of the tree, e.g. its
                        usage detail)]. A tree is hot (its hash) or cold (this
                        key), never both: the scripts of transcript/compact.py
                        turn one into the other in one atomic step
    rc:{S}:za         hash: the cold trees' aliases, compact: field str(m // 256),
                        value 5 bytes per message id m: m % 256, then its tree
                        (4 bytes, big-endian); the node is in the tree's blob
    rc:{trees:<k>}    sorted set (k = crc32(scope) % IDLE_BUCKETS): "<scope>:<tree>"
                        -> unix seconds of the last append the store made to
                        that hot tree (sent on the append's own round trip; the
                        cold sweep reads the oldest first, a few keys on any
                        Redis Cluster)
    rc:trees:cold     hash: "n" cold trees, "b" bytes of their values, as counted by
                        the sweeps and the warms (for metrics; approximate: a
                        crash between a swap and its count leaves one out)
    rc:trees:backfilled  set once the trees written before the index existed are
                        indexed (a scan of the tree keys)
    rc:{S}:b:<sha256> string: the bytes of one image (SET NX, content-addressed: a
                        node references it by digest; a photo sent again, or
                        twenty branches below it, share the one copy; erasure
                        finds a scope's blobs by this prefix or by the nodes)

A tree is one hash so that a branch costs one hash field (no new key) and a
whole path loads with HMGET on one key.
"""

from __future__ import annotations

import zlib

NAMESPACE = "rc"
#: Field of a tree hash that allocates segment numbers.
SEGMENT_COUNTER_FIELD = "#"


def scope_prefix(scope: str) -> str:
    """Prefix shared by every key of a scope, hash tag included."""
    if "{" in scope or "}" in scope:
        raise ValueError("a scope may not contain braces")
    return f"{NAMESPACE}:{{{scope}}}:"


def seq_key(scope: str) -> str:
    return scope_prefix(scope) + "seq"


def tree_key_prefix(scope: str) -> str:
    return scope_prefix(scope) + "t:"


def tree_key(scope: str, tree: int) -> str:
    return f"{tree_key_prefix(scope)}{tree}"


def node_field(seg: int, idx: int) -> str:
    return f"{seg}.{idx}"


FOLD_INDEX_FIELD = "F"
CHOICE_INDEX_FIELD = "C"
#: Field of a tree hash: unix seconds of its last write.
WRITTEN_FIELD = "w"
#: Field of a tree hash: the record hashes of unfinished work that wrote into it.
RUNNING_FIELD = "R"
#: Buckets of the index of hot trees by last append (fixed: a tree's bucket follows
#: from its scope).
IDLE_BUCKETS = 16
#: Cold trees and their values' bytes (approximate; for metrics).
COLD_STATS = f"{NAMESPACE}:trees:cold"
#: Set once every tree written before the index of hot trees existed is indexed.
IDLE_BACKFILLED = f"{NAMESPACE}:trees:backfilled"
#: Message ids per field of the cold alias index.
COLD_ALIAS_SPAN = 256


def fold_field(seg: int, idx: int) -> str:
    return f"f{seg}.{idx}"


def alias_key(scope: str) -> str:
    return scope_prefix(scope) + "a"


def blob_key(scope: str, digest: str) -> str:
    return f"{scope_prefix(scope)}b:{digest}"


def cold_key(scope: str, tree: int) -> str:
    return f"{scope_prefix(scope)}z:{tree}"


def cold_key_prefix(scope: str) -> str:
    return scope_prefix(scope) + "z:"


def cold_alias_key(scope: str) -> str:
    return scope_prefix(scope) + "za"


def idle_bucket(scope: str) -> int:
    """The index bucket of a scope's hot trees."""
    return zlib.crc32(scope.encode()) % IDLE_BUCKETS


def idle_key(bucket: int) -> str:
    """One bucket of the index of hot trees by last append."""
    return f"{NAMESPACE}:{{trees:{bucket}}}"


def idle_member(scope: str, tree: int) -> str:
    return f"{scope}:{tree}"


def parse_idle_member(member: bytes | str) -> tuple[str, int]:
    """``(scope, tree)`` of an index member; ``ValueError`` when malformed."""
    text = member.decode() if isinstance(member, bytes) else member
    scope, sep, tree = text.rpartition(":")
    if not sep or not scope:
        raise ValueError(f"malformed tree index member {text!r}")
    return scope, int(tree)
