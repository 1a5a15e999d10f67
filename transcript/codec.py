"""msgpack encoding of stored records, with a schema version in each.

Records are compact arrays, the first element being the schema version and the
second the record kind, so a reader can always tell what it holds:

    node     [1, "n", depth, [message, ...]]
             first node of a branch segment: [1, "n", depth, [message, ...], [seg, cut, ...], more]
             (the ancestor runs nearest first; ``more``: the last run's own first node goes on)
    fold     [1, "f", depth, [message, ...]]              summary standing for a prefix
    message  [role, content] or [role, content, {extras}]
             role: 0 system, 1 user, 2 assistant, 3 tool
             extras: "tc": [[id, name, arguments], ...], "tid": tool_call_id, "nm": name,
                     "im": [[sha256 (32 bytes), mime, width, height], ...] (images,
                     by reference to their blob)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import CorruptRecordError, UnknownSchemaError
from .records import ChatMessage, Image, Role, ToolCall

SCHEMA_VERSION = 1

_ROLE_CODES: dict[str, int] = {"system": 0, "user": 1, "assistant": 2, "tool": 3}
_ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """Where a segment hangs: ancestor runs ``(seg, last index)``, nearest first.

    Stored in the segment's first node. ``more`` is true when the list was
    capped and the last listed segment's first node continues it.
    """

    ancestors: tuple[tuple[int, int], ...]
    more: bool


ROOT_SEGMENT = SegmentRecord((), False)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    depth: int
    messages: tuple[ChatMessage, ...]
    segment: SegmentRecord | None  # only on a segment's first node


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def encode_message(message: ChatMessage) -> list[Any]:
    out: list[Any] = [_ROLE_CODES[message.role], message.content]
    extras: dict[str, Any] = {}
    if message.tool_calls:
        extras["tc"] = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    if message.tool_call_id is not None:
        extras["tid"] = message.tool_call_id
    if message.name is not None:
        extras["nm"] = message.name
    if message.images:
        extras["im"] = [
            [bytes.fromhex(i.digest), i.mime, i.width, i.height] for i in message.images
        ]
    if extras:
        out.append(extras)
    return out


def encode_node(
    depth: int, messages: Sequence[ChatMessage], segment: SegmentRecord | None = None
) -> bytes:
    """A node record; ``segment`` is given for the first node of a branch segment."""
    record: list[Any] = [SCHEMA_VERSION, "n", depth, [encode_message(m) for m in messages]]
    if segment is not None and segment.ancestors:
        record += [[n for pair in segment.ancestors for n in pair], segment.more]
    return _pack(record)


def encode_fold(depth: int, messages: Sequence[ChatMessage]) -> bytes:
    return _pack([SCHEMA_VERSION, "f", depth, [encode_message(m) for m in messages]])


def _unpack(ref: str, data: bytes | str, kind: str) -> list[Any]:
    if not isinstance(data, bytes):
        raise CorruptRecordError(ref, "record is text, not msgpack (decode_responses on?)")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise CorruptRecordError(ref, f"record does not decode: {type(exc).__name__}") from exc
    if not isinstance(obj, list) or not obj:
        raise CorruptRecordError(ref, "record is not a versioned array")
    if obj[0] != SCHEMA_VERSION:
        raise UnknownSchemaError(ref, obj[0])
    if len(obj) < 2 or obj[1] != kind:
        raise CorruptRecordError(ref, f"expected a {kind!r} record")
    return obj


def _decode_tool_calls(raw: object) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        raise TypeError("tool calls")
    calls = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 3:
            raise TypeError("tool call")
        if not all(isinstance(x, str) for x in item):
            raise TypeError("tool call")
        calls.append(ToolCall(item[0], item[1], item[2]))
    return tuple(calls)


def _decode_images(raw: object) -> tuple[Image, ...]:
    if not isinstance(raw, list):
        raise TypeError("images")
    images = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 4:
            raise TypeError("image")
        digest, mime, width, height = item
        if not isinstance(digest, bytes) or not isinstance(mime, str):
            raise TypeError("image")
        if not isinstance(width, int) or not isinstance(height, int):
            raise TypeError("image")
        images.append(Image(digest.hex(), mime, width, height))
    return tuple(images)


def _decode_message(raw: object) -> ChatMessage:
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise TypeError("message")
    code, content = raw[0], raw[1]
    if not isinstance(code, int) or not 0 <= code < len(_ROLES):
        raise TypeError("role")
    if content is not None and not isinstance(content, str):
        raise TypeError("content")
    extras = raw[2] if len(raw) == 3 else {}
    if not isinstance(extras, dict):
        raise TypeError("extras")
    tool_call_id = extras.get("tid")
    name = extras.get("nm")
    if not isinstance(tool_call_id, str | None) or not isinstance(name, str | None):
        raise TypeError("extras")
    calls = _decode_tool_calls(extras["tc"]) if "tc" in extras else ()
    images = _decode_images(extras["im"]) if "im" in extras else ()
    return ChatMessage(_ROLES[code], content, calls, tool_call_id, name, images)


def decode_message(ref: str, raw: object) -> ChatMessage:
    """One message as :func:`encode_message` wrote it (kept outside a node, e.g. a
    turn's pending tool step); typed errors name ``ref``."""
    try:
        return _decode_message(raw)
    except TypeError as exc:
        raise CorruptRecordError(ref, f"malformed message ({exc})") from exc


def _decode_segment(raw: list[Any]) -> SegmentRecord:
    flat, more = raw
    if not isinstance(flat, list) or not flat or len(flat) % 2 or not isinstance(more, bool):
        raise TypeError("segment")
    if not all(isinstance(n, int) and n >= 0 for n in flat):
        raise TypeError("segment")
    return SegmentRecord(tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2)), more)


def decode_node(ref: str, data: bytes | str) -> NodeRecord:
    """Decode a node record; typed errors name ``ref``."""
    obj = _unpack(ref, data, "n")
    try:
        if len(obj) not in (4, 6) or not isinstance(obj[2], int) or not isinstance(obj[3], list):
            raise TypeError("layout")
        messages = tuple(_decode_message(m) for m in obj[3])
        segment = _decode_segment(obj[4:]) if len(obj) == 6 else None
    except TypeError as exc:
        raise CorruptRecordError(ref, f"malformed node record ({exc})") from exc
    return NodeRecord(obj[2], messages, segment)


def decode_fold(ref: str, data: bytes | str) -> tuple[int, tuple[ChatMessage, ...]]:
    obj = _unpack(ref, data, "f")
    try:
        if len(obj) != 4 or not isinstance(obj[2], int) or not isinstance(obj[3], list):
            raise TypeError("layout")
        return obj[2], tuple(_decode_message(m) for m in obj[3])
    except TypeError as exc:
        raise CorruptRecordError(ref, f"malformed fold record ({exc})") from exc
