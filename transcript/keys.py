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
    rc:{S}:a          hash: message id -> "tree:seg.i"   (aliases, HSETNX); "" for a
                        message known to belong to no conversation (a reply to
                        it starts a new one)
    rc:{S}:b:<sha256> string: the bytes of one image (SET NX, content-addressed: a
                        node references it by digest; a photo sent again, or
                        twenty branches below it, share the one copy; erasure
                        finds a scope's blobs by this prefix or by the nodes)

A tree is one hash so that a branch costs one hash field (no new key) and a
whole path loads with HMGET on one key.
"""

from __future__ import annotations

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


def fold_field(seg: int, idx: int) -> str:
    return f"f{seg}.{idx}"


def alias_key(scope: str) -> str:
    return scope_prefix(scope) + "a"


def blob_key(scope: str, digest: str) -> str:
    return f"{scope_prefix(scope)}b:{digest}"
