"""Every Redis key shape of replychain, in one place.

All keys of one chat scope share the hash tag ``{scope}`` so they live in one
Redis Cluster slot (the append script touches several of them atomically).

    rc:{S}:seq        INCR counter allocating conversation trees
    rc:{S}:t:<tree>   hash of one conversation tree (a root and all its branches):
                        "<seg>.<i>"  node record (immutable, HSETNX)
                        "#"          HINCRBY counter allocating segments
                        "f<seg>.<i>" fold record standing for root → that node (HSETNX)
                        "F"          comma-separated list of the tree's fold nodes
                                     (only ever appended to)
    rc:{S}:a          hash: message id -> "tree:seg.i"   (aliases, HSETNX)
    rc:{S}:i          hash: idempotency key -> "tree:seg.i" (one write per key)

The bot's message bus and turn journal (scoped the same way where per chat):

    rc:intake         stream of accepted user messages, consumer group "turns"
    rc:{S}:turn:<m>   hash: progress of the turn answering message m (resume after a crash)
    rc:{S}:lease:<m>  the worker currently running that turn (SET NX PX)
    rc:{S}:part       hash: sent answer part -> message m whose turn is still running

Token accounting (bot/accounting.py), all in the one slot of the tag {usage}:

    rc:{usage}:call:<id>          marker: this model call is counted (SET NX)
    rc:{usage}:u:<user>           hash p/c/k/n/e/x (prompt, completion, cached,
    rc:{usage}:u:<user>:<day>       calls, estimated, errors): per user, per user and
    rc:{usage}:c:<chat>             UTC day (YYYYMMDD), per chat, per conversation
    rc:{usage}:r:<chat>:<tree>      tree, per turn (the user's message id), per day
    rc:{usage}:t:<chat>:<m>
    rc:{usage}:d:<day>
    rc:{usage}:n:<chat>           hash "<node ref>:p|c|k|n": usage of the turn answering that
                                    user node (sums along one branch)
    rc:{usage}:users, :days       zsets of tokens per user / per day (for /stats)
    rc:{usage}:a:<chat>:<id>      audit record of one call (TTL MODEL_AUDIT_DAYS)

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


def fold_field(seg: int, idx: int) -> str:
    return f"f{seg}.{idx}"


def alias_key(scope: str) -> str:
    return scope_prefix(scope) + "a"


def idem_key(scope: str) -> str:
    return scope_prefix(scope) + "i"


INTAKE_STREAM = f"{NAMESPACE}:intake"
INTAKE_GROUP = "turns"


def turn_key(scope: str, message_id: int) -> str:
    return f"{scope_prefix(scope)}turn:{message_id}"


def lease_key(scope: str, message_id: int) -> str:
    return f"{scope_prefix(scope)}lease:{message_id}"


def pending_parts_key(scope: str) -> str:
    return scope_prefix(scope) + "part"


USAGE_TAG = f"{NAMESPACE}:{{usage}}"


def usage_key(*parts: object) -> str:
    """A token-accounting key, e.g. ``usage_key("u", user, day)``."""
    return ":".join([USAGE_TAG, *map(str, parts)])
