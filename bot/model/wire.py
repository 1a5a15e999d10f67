"""Request bodies, built here rather than by the SDK: each stored message encoded once.

``chat.completions.create`` walks every message through its type-driven transform on
every call, so a long chain cost more CPU than the rest of a turn (``python -m bench
process`` measures it). Each stored message is immutable, so its JSON is
encoded once and kept in a byte-bounded :class:`WireCache`; a request body is those
pieces joined, exactly the bytes ``create()`` would have sent (same keys in the same
order, the same ``json.dumps`` settings as the SDK's ``openapi_dumps``), so the same
chain is the same request bytes every turn and prompt caches keep hitting.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cachetools import LRUCache

from transcript import ChatMessage, Image

from .types import (
    IMAGE_PLACEHOLDER,
    IMAGE_UNREADABLE,
    MADE_PICTURES,
    PICTURE_PLACEHOLDER,
    Media,
)

#: Encoded bytes of messages the wire cache keeps (about twice that in memory,
#: counting the messages it keys on).
WIRE_CACHE_BYTES = 4 << 20
#: Encoded image parts (base64 data URLs) the wire cache keeps, apart from messages.
WIRE_IMAGE_BYTES = 24 << 20


def _lead(messages: Sequence[ChatMessage]) -> int:
    """How many leading system messages :func:`wire_messages` joins into one."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system" and not messages[lead].name:
        lead += 1
    return lead


def _joined_system(messages: Sequence[ChatMessage], lead: int) -> ChatMessage:
    return ChatMessage("system", "\n\n".join(m.content or "" for m in messages[:lead]))


def carried(messages: Sequence[ChatMessage], media: Media) -> Sequence[ChatMessage]:
    """``messages`` as the wire has them: the images of a message that is not the user's
    (pictures the bot made) moved into a user message of their own right after it, after
    the tool results of its round (they answer the call before them, and nothing may come
    between). A model that sees no images (``media`` None) keeps placeholders in place."""
    if media is None or all(not m.images or m.role == "user" for m in messages):
        return messages
    out: list[ChatMessage] = []
    pictures: list[Image] = []
    for message in messages:
        if pictures and message.role != "tool":
            out.append(ChatMessage("user", MADE_PICTURES, images=tuple(pictures)))
            pictures = []
        if message.images and message.role != "user":
            pictures += message.images
            out.append(replace(message, images=()))
        else:
            out.append(message)
    if pictures:
        out.append(ChatMessage("user", MADE_PICTURES, images=tuple(pictures)))
    return out


def wire_messages(messages: Sequence[ChatMessage], media: Media = None) -> list[dict[str, Any]]:
    """The request's messages: leading system messages (the root prompt and a fold's
    summary) joined into one, since some chat templates accept only one, first."""
    messages = carried(messages, media)
    lead = _lead(messages)
    payload = [to_openai(m, media) for m in messages[lead:]]
    if lead:
        payload.insert(0, to_openai(_joined_system(messages, lead)))
    return payload


def data_url(mime: str, data: bytes) -> str:
    """An image as the ``data:`` URL of an ``image_url`` part."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _content(message: ChatMessage, media: Media) -> str | list[dict[str, Any]] | None:
    """Text alone, or the text part then one ``image_url`` part per image (a text part
    for an image left out of ``media``); placeholders alone are text."""
    if not message.images:
        return message.content
    if media is None or not any(i.digest in media for i in message.images):
        placeholder = IMAGE_PLACEHOLDER if media is None else IMAGE_UNREADABLE
        if message.role != "user":
            placeholder = PICTURE_PLACEHOLDER
        placeholders = [placeholder] * len(message.images)
        return "\n".join([*placeholders, *([message.content] if message.content else [])])
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    for image in message.images:
        data = media.get(image.digest)
        if data is None:
            parts.append({"type": "text", "text": IMAGE_UNREADABLE})
        else:
            parts.append({"type": "image_url", "image_url": {"url": data_url(image.mime, data)}})
    return parts


def named_image(messages: Sequence[ChatMessage], media: Media, part: tuple[int, int]) -> str | None:
    """The digest of the image at ``part`` ((message, part) index of the wire messages
    :func:`wire_messages` makes of ``messages``), if an image is sent there."""
    if not media:
        return None
    messages = carried(messages, media)
    lead = _lead(messages)
    index = part[0] - 1 + lead if lead else part[0]
    if (lead and part[0] == 0) or not 0 <= index < len(messages):
        return None
    message = messages[index]
    if not any(i.digest in media for i in message.images):
        return None  # sent as text
    sent: list[str | None] = [None] if message.content else []
    sent += [i.digest if i.digest in media else None for i in message.images]
    return sent[part[1]] if 0 <= part[1] < len(sent) else None


def to_openai(message: ChatMessage, media: Media = None) -> dict[str, Any]:
    """The wire form of a stored message (byte-stable: same message, same dict)."""
    out: dict[str, Any] = {"role": message.role, "content": _content(message, media)}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


#: The SDK's ``openapi_dumps`` settings (openai/_utils/_json.py), so a body built here
#: is byte for byte the one ``create()`` would send.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _dumps(value: object) -> bytes:
    return _ENCODER.encode(value).encode()


def _encode(message: ChatMessage) -> bytes:
    """``_dumps(to_openai(message))``, with a short cut for a plain text message."""
    if (
        message.content is None
        or message.tool_calls
        or message.tool_call_id is not None
        or message.name is not None
    ):
        return _dumps(to_openai(message))
    return b"".join(
        (
            b'{"role":',
            _dumps(message.role),
            b',"content":',
            _dumps(message.content),
            b"}",
        )
    )


#: What one cache entry costs beyond its encoded bytes and the message's text: the
#: message object, the bytes and str headers, the dict slot (CPython 3.11, 64-bit).
_ENTRY_OVERHEAD = 200


class WireCache:
    """The JSON of stored messages, each encoded once, within a memory budget.

    Two generations: a lookup is one dict lookup in the young one (a message the
    transcript cache handed out before is found by identity, without comparing
    contents; an equal message decoded afresh is found by value); a hit in the old
    one is moved to the young one. When the young generation has taken half the
    budget it becomes the old one and the previous old one is dropped, so what the
    recent requests used stays. Each entry is charged its encoded bytes, the text of
    the message it keeps alive and a fixed overhead, so ``max_bytes`` bounds the
    memory the cache holds (a message larger than half the budget still passes
    through, alone in its generation).
    """

    def __init__(
        self, max_bytes: int = WIRE_CACHE_BYTES, image_bytes: int = WIRE_IMAGE_BYTES
    ) -> None:
        self.max_bytes = max_bytes
        #: The JSON of each image part by digest: an image is base64-encoded once.
        self._images: LRUCache[str, bytes] = LRUCache(maxsize=max(1, image_bytes), getsizeof=len)
        self._young: dict[ChatMessage, bytes] = {}
        self._old: dict[ChatMessage, bytes] = {}
        self._young_bytes = 0
        self._old_bytes = 0

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    @property
    def nbytes(self) -> int:
        """Memory charged for the entries held (both generations)."""
        return self._young_bytes + self._old_bytes

    def encode(self, message: ChatMessage) -> bytes:
        """``message`` as the JSON object the request carries."""
        data = self._young.get(message)
        if data is not None:
            return data
        data = self._old.pop(message, None)
        if data is None:
            data = _encode(message)
            cost = 2 * len(data) + _ENTRY_OVERHEAD
        else:
            cost = 2 * len(data) + _ENTRY_OVERHEAD
            self._old_bytes -= cost
        if self._young_bytes + cost > self.max_bytes // 2:
            self._old, self._young = self._young, {}
            self._old_bytes, self._young_bytes = self._young_bytes, 0
        self._young[message] = data
        self._young_bytes += cost
        return data

    def messages(self, messages: Sequence[ChatMessage], media: Media = None) -> bytes:
        """The JSON array of :func:`wire_messages` (same values, same bytes)."""
        return b"".join(self._pieces(messages, media))

    def _pieces(self, messages: Sequence[ChatMessage], media: Media) -> list[bytes]:
        """:meth:`messages` in pieces, for the body to copy only once.

        A message with images is not kept whole (a few pictures would push every
        text out of the cache): its image parts are kept apart, by digest.
        """
        messages = carried(messages, media)
        lead = _lead(messages)
        encode = self.encode
        pieces = [b"["]
        if lead:
            pieces += (encode(_joined_system(messages, lead)), b",")
        for message in messages[lead:]:
            if message.images:
                pieces += self._with_images(message, media)
            else:
                pieces.append(encode(message))
            pieces.append(b",")
        if len(pieces) > 1:
            pieces[-1] = b"]"
        else:
            pieces.append(b"]")
        return pieces

    def _with_images(self, message: ChatMessage, media: Media) -> list[bytes]:
        """``_dumps(to_openai(message, media))`` in pieces, each image part encoded once."""
        if (
            media is None
            or message.tool_calls
            or message.name is not None
            or any(i.digest not in media for i in message.images)
        ):
            return [_dumps(to_openai(message, media))]
        pieces = [b'{"role":', _dumps(message.role), b',"content":[']
        if message.content:
            pieces += (_dumps({"type": "text", "text": message.content}), b",")
        for image in message.images:
            part = self._images.get(image.digest)
            if part is None:
                # base64 needs no JSON escaping: the part is its pieces joined
                part = b"".join(
                    (
                        b'{"type":"image_url","image_url":{"url":',
                        _dumps(f"data:{image.mime};base64,")[:-1],
                        base64.b64encode(media[image.digest]),
                        b'"}}',
                    )
                )
                if len(part) <= self._images.maxsize:
                    self._images[image.digest] = part
            pieces += (part, b",")
        pieces[-1] = b"]}"
        return pieces

    def stream_body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: bytes | None = None,
        media: Media = None,
    ) -> bytes:
        """The body ``create(model, messages, stream=True, stream_options=include_usage)``
        sends, keys in its order; ``tools``: the encoded ``tools`` array, if any."""
        return b"".join(
            (
                b'{"model":',
                _dumps(model),
                b',"stream":true,"messages":',
                *self._pieces(messages, media),
                b',"tools":' + tools if tools else b"",
                b',"stream_options":{"include_usage":true}}',
            )
        )

    def complete_body(self, model: str, messages: Sequence[ChatMessage], max_tokens: int) -> bytes:
        """The body ``create(model, messages, max_tokens)`` sends, keys in its order."""
        return b"".join(
            (
                b'{"model":',
                _dumps(model),
                b',"messages":',
                self.messages(messages),
                b',"max_tokens":',
                _dumps(max_tokens),
                b"}",
            )
        )
