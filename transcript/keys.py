"""Every Redis key shape of replychain, in one place.

All keys of one chat scope share the hash tag ``{scope}`` so they live in one
Redis Cluster slot (the append script touches several of them atomically).

    rc:{S}:seq          INCR counter allocating segment numbers
    rc:{S}:s:<seg>      segment record: parent link and ancestor segments
    rc:{S}:n:<seg>.<i>  node record (immutable, SET NX)
    rc:{S}:a            hash: message id -> "seg.i"   (aliases, HSETNX)
    rc:{S}:i            hash: idempotency key -> "seg.i" (one write per key)
    rc:{S}:f:<seg>.<i>  fold record standing for the chain up to that node (future use)
"""

from __future__ import annotations

NAMESPACE = "rc"


def scope_prefix(scope: str) -> str:
    """Prefix shared by every key of a scope, hash tag included."""
    if "{" in scope or "}" in scope:
        raise ValueError("a scope may not contain braces")
    return f"{NAMESPACE}:{{{scope}}}:"


def seq_key(scope: str) -> str:
    return scope_prefix(scope) + "seq"


def segment_key_prefix(scope: str) -> str:
    return scope_prefix(scope) + "s:"


def segment_key(scope: str, seg: int) -> str:
    return f"{segment_key_prefix(scope)}{seg}"


def node_key_prefix(scope: str) -> str:
    return scope_prefix(scope) + "n:"


def node_key(scope: str, seg: int, idx: int) -> str:
    return f"{node_key_prefix(scope)}{seg}.{idx}"


def alias_key(scope: str) -> str:
    return scope_prefix(scope) + "a"


def idem_key(scope: str) -> str:
    return scope_prefix(scope) + "i"


def fold_key(scope: str, seg: int, idx: int) -> str:
    return f"{scope_prefix(scope)}f:{seg}.{idx}"
