"""A cold tree as one value: the codec of ``rc:{S}:z:<tree>`` and of the cold alias index.

A cold tree is its hash compacted in place (transcript/compact.py writes and reads it):
every field of the tree hash byte for byte (node records keep their SHA-1, so an
append below a node read from a cold tree is checked as before), the tree's aliases,
and its companion hashes (a caller's per-tree records in the scope, e.g. usage detail),
each with the time it expires. The value is msgpack, compressed with zstd::

    [1, "z", [field, value, ...], [message id, seg, i, ...],
     [[name, expires ms, [field, value, ...]], ...]]

The aliases of cold trees are kept in the scope's cold alias index
(:func:`transcript.keys.cold_alias_key`): one hash field per 256 message ids, five
bytes an alias (the id's low byte, then the tree id, big-endian). A lookup reads one
field and finds the tree; the node is in the tree's value.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from . import keys
from .errors import CorruptRecordError, UnknownSchemaError

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the backport of Python 3.14's compression.zstd (PEP 784)
    from backports import zstd

SCHEMA_VERSION = 1
#: zstd's level for cold trees: its default. Level 19 makes the values of short and 1 KB
#: turns 5-6 % smaller, at a 27th of the speed (150 trees of 1 KB answers a second on one
#: core, against 4,000): the sweep runs in one process, and must keep up with the trees
#: a whole deployment lets rest (docs/scaling.md).
LEVEL = 3
#: Bytes of one entry of the cold alias index: the message id's low byte, the tree id.
ALIAS_ENTRY = 5
_MAX_TREE = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Companion:
    """A hash kept beside a tree (named by its key without the scope's prefix)."""

    #: Unix milliseconds it expires at (0: never).
    expires_ms: int
    fields: dict[bytes, bytes]


@dataclass(frozen=True, slots=True)
class ColdTree:
    """Everything a tree is, hot or cold: its hash, its aliases, its companions."""

    #: The tree hash's fields (node records, folds, indexes), byte for byte.
    fields: dict[str, bytes]
    #: Message id -> ``(seg, i)``.
    aliases: dict[int, tuple[int, int]] = field(default_factory=dict)
    companions: dict[str, Companion] = field(default_factory=dict)


def encode(tree: ColdTree, *, level: int = LEVEL) -> bytes:
    """The compressed value of a cold tree."""
    flat_fields: list[Any] = []
    for name, value in tree.fields.items():
        flat_fields += [name, value]
    flat_aliases: list[int] = []
    for message_id, (seg, idx) in sorted(tree.aliases.items()):
        flat_aliases += [message_id, seg, idx]
    companions: list[Any] = []
    for name, companion in tree.companions.items():
        flat: list[bytes] = []
        for key, value in companion.fields.items():
            flat += [key, value]
        companions.append([name, companion.expires_ms, flat])
    record = [SCHEMA_VERSION, "z", flat_fields, flat_aliases, companions]
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    compressed: bytes = zstd.compress(packed, level=level)
    return compressed


def decode(ref: str, data: bytes | str) -> ColdTree:
    """A cold tree's value; typed errors name ``ref``."""
    if not isinstance(data, bytes):
        raise CorruptRecordError(ref, "cold tree is text, not zstd (decode_responses on?)")
    try:
        obj = msgpack.unpackb(zstd.decompress(data), raw=False)
    except Exception as exc:  # zstd and msgpack raise several unrelated types
        raise CorruptRecordError(ref, f"cold tree does not decode: {type(exc).__name__}") from exc
    if not isinstance(obj, list) or not obj:
        raise CorruptRecordError(ref, "cold tree is not a versioned array")
    if obj[0] != SCHEMA_VERSION:
        raise UnknownSchemaError(ref, obj[0])
    try:
        if len(obj) != 5 or obj[1] != "z":
            raise TypeError("layout")
        return ColdTree(_fields(obj[2]), _aliases(obj[3]), _companions(obj[4]))
    except (TypeError, ValueError) as exc:
        raise CorruptRecordError(ref, f"malformed cold tree ({exc})") from exc


def _pairs(flat: object) -> list[tuple[Any, Any]]:
    if not isinstance(flat, list) or len(flat) % 2:
        raise TypeError("pairs")
    return list(zip(flat[::2], flat[1::2], strict=True))


def _fields(flat: object) -> dict[str, bytes]:
    found = {}
    for name, value in _pairs(flat):
        if not isinstance(name, str) or not isinstance(value, bytes):
            raise TypeError("field")
        found[name] = value
    return found


def _aliases(flat: object) -> dict[int, tuple[int, int]]:
    if not isinstance(flat, list) or len(flat) % 3 or not all(isinstance(n, int) for n in flat):
        raise TypeError("aliases")
    return {flat[i]: (flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)}


def _companions(raw: object) -> dict[str, Companion]:
    if not isinstance(raw, list):
        raise TypeError("companions")
    found = {}
    for item in raw:
        if not isinstance(item, list) or len(item) != 3:
            raise TypeError("companion")
        name, expires, flat = item
        if not isinstance(name, str) or not isinstance(expires, int):
            raise TypeError("companion")
        pairs = _pairs(flat)
        if not all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in pairs):
            raise TypeError("companion field")
        found[name] = Companion(expires, dict(pairs))
    return found


# ------------------------------------------------------------ the cold alias index


def alias_slot(message_id: int) -> tuple[str, int]:
    """The index field holding ``message_id`` and the id's byte within it."""
    bucket, low = divmod(message_id, keys.COLD_ALIAS_SPAN)
    return str(bucket), low


def pack_aliases(tree: int, message_ids: Iterable[int]) -> dict[str, bytes]:
    """The index entries of a tree's aliases, by index field."""
    if not 0 < tree <= _MAX_TREE:
        raise ValueError(f"tree id {tree} does not fit the cold alias index")
    packed: dict[str, bytearray] = {}
    suffix = tree.to_bytes(4, "big")
    for message_id in sorted(set(message_ids)):
        bucket, low = alias_slot(message_id)
        packed.setdefault(bucket, bytearray()).extend(bytes([low]) + suffix)
    return {bucket: bytes(entries) for bucket, entries in packed.items()}


def find_alias(packed: bytes, message_id: int) -> int | None:
    """The tree of ``message_id`` in one index field (``None``: not there)."""
    _, low = alias_slot(message_id)
    for at in range(0, len(packed) - ALIAS_ENTRY + 1, ALIAS_ENTRY):
        if packed[at] == low:
            return int.from_bytes(packed[at + 1 : at + ALIAS_ENTRY], "big")
    return None


def unpack_aliases(bucket: str, packed: bytes) -> list[tuple[int, int]]:
    """Every ``(message id, tree)`` of one index field."""
    base = int(bucket) * keys.COLD_ALIAS_SPAN
    return [
        (base + packed[at], int.from_bytes(packed[at + 1 : at + ALIAS_ENTRY], "big"))
        for at in range(0, len(packed) - ALIAS_ENTRY + 1, ALIAS_ENTRY)
    ]


def integer_aliases(aliases: Mapping[str, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The aliases whose message ids are integers (the others stay in the alias hash)."""
    found = {}
    for name, node in aliases.items():
        try:
            number = int(name)
        except ValueError:
            continue
        if str(number) == name:
            found[number] = node
    return found
