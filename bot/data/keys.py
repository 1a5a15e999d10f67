"""Every Redis key shape of the bot itself, in one place.

The transcript store's keys (trees, aliases) are in :mod:`transcript.keys`;
these are the bot's message bus, turn state and token accounting. Keys of one
chat carry the store's hash tag ``{chat}`` (:func:`transcript.keys.scope_prefix`),
so a turn's state lives in the same Redis Cluster slot as its transcript.

The message bus:

    rc:intake          stream of accepted user messages, consumer group "turns"
    rc:deadletter      stream of turns given up after TURN_MAX_ATTEMPTS unexpected
                         failures (the entry, the error's type; for the operator)

The turn (bot/turn/state.py):

    rc:{S}:turn:<m>    hash: the state of the turn answering message m
                         r, u, a  root, user and answer node refs (each written by
                                  the store's append in the same atomic step)
                         s        the number of the answer part about to be sent
                         p        answer parts Telegram accepted, comma-separated
                         c        model calls started
                         x        unexpected failures
                         d        "1" once the turn finished (then the hash expires)
    rc:{S}:lease:<m>   the worker running that turn (SET NX PX)
    rc:{S}:part        hash: sent answer part -> message m whose turn still runs
    rc:{S}:orphans     hash: message m -> "low:high:node ref": a part of m's answer may
                         be on screen under an id in (low, high) that was never
                         recorded (a crash between sending and recording it); a reply
                         to such a bot message is adopted into m's thread

Token accounting (bot/usage/accounting.py), all in the one slot of the tag {usage}:

    rc:{usage}:call:<id>          marker: this model call is counted (SET NX)
    rc:{usage}:u:<user>           hash p/c/k/n/e/x (prompt, completion, cached,
    rc:{usage}:u:<user>:<day>       calls, estimated, errors): per user, per user and
    rc:{usage}:c:<chat>             UTC day (YYYYMMDD), per chat, per conversation
    rc:{usage}:r:<chat>:<tree>      tree, per turn (the user's message id), per day
    rc:{usage}:t:<chat>:<m>
    rc:{usage}:d:<day>
    rc:{usage}:n:<chat>           hash "<node ref>:p|c|k|n|v": usage of the turn answering
                                    that user node (sums along one branch) and its view
    rc:{usage}:users, :days       zsets of tokens per user / per day (for /stats)
    rc:{usage}:a:<chat>:<id>      audit record of one call (TTL MODEL_AUDIT_DAYS)
"""

from __future__ import annotations

from transcript.keys import NAMESPACE, scope_prefix

INTAKE_STREAM = f"{NAMESPACE}:intake"
INTAKE_GROUP = "turns"
DEAD_LETTER_STREAM = f"{NAMESPACE}:deadletter"


def turn_key(scope: str, message_id: int) -> str:
    return f"{scope_prefix(scope)}turn:{message_id}"


def lease_key(scope: str, message_id: int) -> str:
    return f"{scope_prefix(scope)}lease:{message_id}"


def pending_parts_key(scope: str) -> str:
    return scope_prefix(scope) + "part"


def orphans_key(scope: str) -> str:
    return scope_prefix(scope) + "orphans"


USAGE_TAG = f"{NAMESPACE}:{{usage}}"


def usage_key(*parts: object) -> str:
    """A token-accounting key, e.g. ``usage_key("u", user, day)``."""
    return ":".join([USAGE_TAG, *map(str, parts)])
