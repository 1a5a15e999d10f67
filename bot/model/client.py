"""The model edge: one streamed chat completion from any OpenAI-compatible endpoint.

One retry owner for the edge: the SDK's own retries are off, and
:meth:`Endpoint.call` retries a call that failed before any text arrived (429 honouring
``retry-after``, 5xx, timeouts, refused connections, a stream that broke before its
first text) ``OPENAI_MAX_RETRIES`` times with :data:`MODEL_BACKOFF`, one attempts
counter per call (:func:`bot.retry.retrying`).
Every failure becomes a :class:`ModelError` whose ``kind`` the turn flow turns
into a clear message (bot/model/sdk.py classifies them).

The SDK itself is reached through bot/model/sdk.py, imported on the first model
call or, once the bot polls, by :func:`load_sdk` in a worker thread: importing it
takes about half a second of CPU, which start-up does without.

Request bodies are built here, not by the SDK: ``chat.completions.create`` walks
every message through its type-driven transform on every call (about 0.1 ms a
message, so a long chain cost more CPU than everything else in a turn). Each
stored message is immutable, so its JSON is encoded once and kept in a
byte-bounded :class:`WireCache`; a request body is those pieces joined. The body
goes to the SDK's ``post(..., content=bytes)``, which sends it as it is and still
does auth, error mapping and SSE parsing (a retry sends the same bytes). The bytes are
exactly what ``create()`` would have sent (same keys in the same order, the
same ``json.dumps`` settings as the SDK's ``openapi_dumps``), so the same chain
is the same request bytes every turn and prompt caches keep hitting.

Streamed chunks are read as the JSON objects they are (``AsyncStream[object]``): the
SDK's typed ``ChatCompletionChunk`` is built field by field for each of the dozens of
chunks of an answer, which cost a fifth of the bot's CPU per turn. The SDK still
decodes the SSE stream and turns an ``error`` event or a broken connection into its
typed errors.

Reasoning models think before they answer, either in ``reasoning_content`` /
``reasoning`` deltas or inside ``<think>…</think>`` at the start of the content
(DeepSeek-R1, QwQ, Qwen3 served by Ollama or vLLM). Both are kept apart from the
answer's text (:attr:`Answer.reasoning`): never shown as the answer, never
stored as history. Their tokens count as completion tokens (providers report
them so; an estimate counts their text).

A stream can be stopped (the user's stop button): the HTTP stream is closed at
once, so the provider stops generating and billing, and what arrived so far is
the answer (``stopped``), with an estimated usage.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from cachetools import LRUCache

from transcript import ChatMessage, ToolCall

from ..retry import Backoff, retrying

if TYPE_CHECKING:
    import openai

log = logging.getLogger("replychain.model")

T = TypeVar("T")

ErrorKind = Literal[
    "rate_limited", "unavailable", "timeout", "too_long", "rejected", "config", "no_images",
    "bad_image", "refused", "size",
]  # fmt: skip
#: ``refused`` (the endpoint refused the content: never retried) and ``size`` (it refused
#: a picture's or a request's size) come only from the speech and image calls
#: (bot/model/speech.py, bot/model/images.py).
#: Image bytes by digest, for the images of the messages sent; ``None``: the model
#: cannot see images, and each is sent as :data:`IMAGE_PLACEHOLDER` instead. An image
#: whose digest is left out (the model could not read it) is sent as
#: :data:`IMAGE_UNREADABLE`.
Media = Mapping[str, bytes] | None
IMAGE_PLACEHOLDER = "[an image the user sent; this model cannot see images]"
IMAGE_UNREADABLE = "[an image the user sent; the model could not read it]"
#: Per-message overhead of the chat format, in tokens.
MESSAGE_OVERHEAD = 4
#: Waits between tries of a model call (the SDK's own schedule: 0.5 s doubling to 8 s,
#: jittered); a ``retry-after`` the endpoint names wins.
MODEL_BACKOFF = Backoff(0.5, 8.0, 0.2)
#: Encoded bytes of messages the wire cache keeps (about twice that in memory,
#: counting the messages it keys on).
WIRE_CACHE_BYTES = 4 << 20
#: Encoded image parts (base64 data URLs) the wire cache keeps, apart from messages.
WIRE_IMAGE_BYTES = 24 << 20


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call; ``estimated`` when the provider reported none."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    usage: Usage
    latency: float
    #: Tools the model asked to run (only when it was offered tools).
    tool_calls: tuple[ToolCall, ...] = ()
    #: What a reasoning model thought before answering (never part of ``text``).
    reasoning: str = ""
    #: The user stopped the answer: ``text`` is what had arrived by then.
    stopped: bool = False


class ModelError(Exception):
    """A model call failed after retries; ``kind`` says how, ``partial`` what arrived.

    ``usage`` is an estimate of what the failed call may have cost (the prompt
    and any partial answer), ``latency`` how long it took.
    """

    def __init__(self, kind: ErrorKind, detail: str, partial: str = "") -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.partial = partial
        self.usage = Usage(0, 0, 0, estimated=True)
        self.latency = 0.0
        #: The failure came while reading a stream the endpoint had accepted.
        self.mid_stream = False
        #: ``bad_image``: the (message, part) index of the wire messages the error
        #: names, if it names one (its ``param``), and that image's digest.
        self.part: tuple[int, int] | None = None
        self.image: str | None = None
        #: A failure another try may not meet (429, 5xx, a timeout, a broken connection).
        self.transient = False
        #: The wait the endpoint asked for (``retry-after-ms`` / ``retry-after``), seconds.
        self.retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        """Transient, and no text arrived: worth another try (nothing was shown)."""
        return self.transient and not self.partial


class Model(Protocol):
    """What the turn flow needs from a model (:class:`ModelClient`)."""

    @property
    def name(self) -> str: ...

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        *,
        media: Media = None,
        stop: asyncio.Event | None = None,
        on_thoughts: Callable[[str], None] | None = None,
    ) -> Answer: ...

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer: ...


def estimate_text(text: str) -> int:
    """The one token estimate (~4 characters a token), for what no provider has counted."""
    return math.ceil(len(text) / 4)


def estimate_messages(messages: Sequence[ChatMessage]) -> int:
    """Estimated prompt tokens of ``messages``: text, the chat format's overhead, tool
    calls, and each image by the rule of :attr:`transcript.Image.tokens`.

    Runs over every message of a request: kept to plain loops (no nested generators).
    """
    total = 0
    for m in messages:
        total += -(-len(m.content or "") // 4) + MESSAGE_OVERHEAD  # ceil, as estimate_text
        if m.tool_calls:
            total += sum(estimate_text(c.name + c.arguments) for c in m.tool_calls)
        if m.images:
            total += sum(i.tokens for i in m.images)
    return total


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _chunk_usage(reported: dict[str, Any]) -> Usage:
    """A streamed chunk's ``usage`` object as a :class:`Usage` (missing counts are 0)."""
    details = reported.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        _count(reported.get("prompt_tokens")), _count(reported.get("completion_tokens")), cached
    )


def _estimated(messages: Sequence[ChatMessage], text: str) -> Usage:
    """``text``: everything generated, thoughts included (they are completion tokens)."""
    return Usage(estimate_messages(messages), estimate_text(text), 0, estimated=True)


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event | None) -> T | None:
    """``work``'s result, or None when ``stop`` was set first (``work`` is then cancelled,
    which closes its HTTP stream)."""
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
    await asyncio.wait({task})
    return None if task.cancelled() else task.result()


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_think(content: str) -> tuple[str, str] | None:
    """(thoughts, answer) of content that may start with ``<think>…</think>``.

    None while that cannot be told yet (the content so far could still become
    the opening tag). Until the closing tag arrives everything is thought.
    """
    head = content.lstrip()
    if not head.startswith(THINK_OPEN):
        return None if THINK_OPEN.startswith(head) else ("", content)
    end = head.find(THINK_CLOSE, len(THINK_OPEN))
    if end == -1:
        return head[len(THINK_OPEN) :], ""
    return head[len(THINK_OPEN) : end].strip(), head[end + len(THINK_CLOSE) :].lstrip()


class _Progress:
    """One stream's answer and thoughts so far."""

    def __init__(self) -> None:
        self.content = ""  # the content deltas, as they came
        self.text = ""
        self.think = ""  # the content's <think> part
        self.thought = ""  # the reasoning deltas
        self._settled = False  # the content's answer has begun: deltas just append

    @property
    def reasoning(self) -> str:
        return "\n\n".join(part for part in (self.thought.strip(), self.think.strip()) if part)

    @property
    def thought_size(self) -> int:
        """How much of the thoughts has arrived (it grows with each of their deltas)."""
        return len(self.thought) + len(self.think)

    @property
    def generated(self) -> str:
        """Everything the model generated (thoughts count as completion tokens)."""
        return self.content + self.thought

    def add(self, piece: str) -> bool:
        """One content delta; True when the answer's text grew."""
        self.content += piece
        if self._settled:
            self.text += piece
            return True
        split = split_think(self.content)
        if split is None:
            return False
        before = self.text
        self.think, self.text = split
        self._settled = bool(self.text)
        return self.text != before

    def finish(self) -> None:
        """The stream ended: content still undecided is answer, not thought."""
        if split_think(self.content) is None:
            self.text = self.content


def _lead(messages: Sequence[ChatMessage]) -> int:
    """How many leading system messages :func:`wire_messages` joins into one."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system" and not messages[lead].name:
        lead += 1
    return lead


def _joined_system(messages: Sequence[ChatMessage], lead: int) -> ChatMessage:
    return ChatMessage("system", "\n\n".join(m.content or "" for m in messages[:lead]))


def wire_messages(messages: Sequence[ChatMessage], media: Media = None) -> list[dict[str, Any]]:
    """The request's messages: leading system messages (the root prompt and a fold's
    summary) joined into one, since some chat templates accept only one, first."""
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


def _add_call_deltas(calls: dict[int, list[str]], deltas: object) -> None:
    """Add streamed tool-call pieces to ``calls`` (index -> [id, name, arguments]).

    Some OpenAI-compatible servers send each call whole in one delta, or leave out
    ``index``: a delta with a new id then starts the next call.
    """
    if not isinstance(deltas, list):
        return
    for delta in deltas:
        if not isinstance(delta, dict):
            continue
        index = delta.get("index")
        call_id = delta.get("id") if isinstance(delta.get("id"), str) else ""
        if not isinstance(index, int):
            known = calls.get(len(calls) - 1)
            fresh = known is None or bool(call_id and call_id != known[0])
            index = len(calls) if fresh else len(calls) - 1
        call = calls.setdefault(index, ["", "", ""])
        call[0] = call_id or call[0]
        function = delta.get("function")
        if isinstance(function, dict):
            call[1] += _text(function.get("name"))
            call[2] += _text(function.get("arguments"))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _read_chunk(
    chunk: dict[str, Any], progress: _Progress, calls: dict[int, list[str]], usage: Usage | None
) -> tuple[Usage | None, bool]:
    """Take one streamed chunk in: (the usage reported so far, whether the text grew)."""
    reported = chunk.get("usage")
    if isinstance(reported, dict):
        usage = _chunk_usage(reported)
    grew = False
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        _add_call_deltas(calls, delta.get("tool_calls"))
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str):
            progress.thought += thought
        content = delta.get("content")
        if isinstance(content, str) and content and progress.add(content):
            grew = True
    return usage, grew


def load_sdk() -> None:
    """Import the openai SDK now. The bot calls this in a worker thread once it polls,
    so start-up does not wait for the SDK's import (about half a second of CPU) and the
    first model call finds it loaded (a call made meanwhile waits for the import)."""
    from . import sdk  # noqa: F401, PLC0415


class ModelClient:
    """Streams answers from an OpenAI-compatible endpoint with explicit timeouts.

    The SDK's client is made on the first call (:meth:`_client`): the SDK is imported
    only then, or by :func:`load_sdk`.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        wire_cache_bytes: int = WIRE_CACHE_BYTES,
        sdk_bodies: bool = False,
        wire: WireCache | None = None,
        name: str | None = None,
    ) -> None:
        """``sdk_bodies``: let the SDK build each request body from message dicts
        (the slow path: the bench's baseline, and what an SDK without
        ``post(content=...)`` gets). ``wire``: a wire cache shared with other clients.
        ``name``: the catalogue's name of the model (default: its id)."""
        self.model = model
        self.name = name or model
        self.max_retries = max_retries
        self._endpoint = Endpoint(api_key, base_url, timeout, max_retries)
        self._sdk_client: openai.AsyncOpenAI | None = None
        self.wire = wire if wire is not None else WireCache(wire_cache_bytes)
        #: Request bodies are built here (see the module docstring); settled with the client.
        self._post_bytes = not sdk_bodies

    @property
    def _client(self) -> openai.AsyncOpenAI:
        if self._sdk_client is None:
            from . import sdk  # noqa: PLC0415 - imported on the first call (load_sdk)

            self._sdk_client = self._endpoint.client()
            self._post_bytes = self._post_bytes and sdk.can_post_bytes(self._sdk_client)
        return self._sdk_client

    async def close(self) -> None:
        if self._sdk_client is not None:
            await self._sdk_client.close()

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        *,
        tools: bytes | None = None,
        media: Media = None,
        stop: asyncio.Event | None = None,
        on_thoughts: Callable[[str], None] | None = None,
    ) -> Answer:
        """Stream one answer, calling ``on_text`` with the whole text so far.

        ``tools`` (the encoded ``tools`` array) offers tools; the answer's
        ``tool_calls`` are what the model asked to run. Without it the request
        is exactly what it was before tools existed. ``media`` holds the bytes
        of the messages' images (see :data:`Media`). Setting ``stop`` ends the
        call at once: the stream is closed and what arrived so far is returned
        as a ``stopped`` answer. ``on_thoughts`` gets a reasoning model's thoughts
        so far as they grow, until its answer's text begins (for a live view only).
        """
        client = self._client
        body: bytes | list[dict[str, Any]] = (
            self.wire.stream_body(self.model, messages, tools, media)
            if self._post_bytes
            else wire_messages(messages, media)
        )
        started = time.monotonic()
        progress = _Progress()
        if stop is not None and stop.is_set():  # stopped while the request was prepared
            return Answer("", Usage(0, 0, 0, estimated=True), 0.0, stopped=True)

        def attempt() -> Awaitable[Answer]:
            nonlocal progress
            progress = _Progress()  # a retried stream starts over
            return self._stream_once(
                client, messages, body=body, on_text=on_text, started=started,
                progress=progress, tools=tools, on_thoughts=on_thoughts,
            )  # fmt: skip

        try:
            answer = await _unless_stopped(self._endpoint.call(attempt), stop)
        except ModelError as exc:
            # a failed call may still be billed for what it streamed: estimate it
            exc.latency = time.monotonic() - started
            if exc.part is not None:
                exc.image = named_image(messages, media, exc.part)
            if progress.generated:
                exc.usage = _estimated(messages, progress.generated)
            raise
        if answer is not None:
            return answer
        log.info("the answer was stopped by the user; the model stream is closed")
        progress.finish()
        return Answer(
            progress.text,
            _estimated(messages, progress.generated),
            time.monotonic() - started,
            reasoning=progress.reasoning,
            stopped=True,
        )

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer:
        """One answer without streaming (used for summaries); errors as :class:`ModelError`."""
        from . import sdk  # noqa: PLC0415 - loaded by self._client

        client = self._client
        started = time.monotonic()
        body = (
            self.wire.complete_body(self.model, messages, max_tokens)
            if self._post_bytes
            else wire_messages(messages)
        )
        try:
            text, reported = await self._endpoint.call(
                lambda: sdk.complete(client, model=self.model, body=body, max_tokens=max_tokens)
            )
        except ModelError as error:
            error.latency = time.monotonic() - started
            raise
        split = split_think(text)  # a summary never carries the model's thoughts
        text = split[1] if split is not None else text
        usage = reported if reported is not None else _estimated(messages, text)
        return Answer(text, usage, time.monotonic() - started)

    async def _stream_once(
        self,
        client: openai.AsyncOpenAI,
        messages: Sequence[ChatMessage],
        *,
        body: bytes | list[dict[str, Any]],
        on_text: Callable[[str], None],
        started: float,
        progress: _Progress,
        tools: bytes | None = None,
        on_thoughts: Callable[[str], None] | None = None,
    ) -> Answer:
        from . import sdk  # noqa: PLC0415 - loaded by self._client

        usage: Usage | None = None
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        chunks = sdk.stream_chunks(client, model=self.model, body=body, tools=tools)
        try:
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    thought = progress.thought_size
                    usage, grew = _read_chunk(chunk, progress, calls, usage)
                    if grew:
                        on_text(progress.text)  # its failure is its own, not the model's
                    elif on_thoughts and not progress.text and progress.thought_size > thought:
                        on_thoughts(progress.reasoning)
        except ModelError as error:
            error.partial = progress.text
            raise
        progress.finish()
        tool_calls = tuple(
            ToolCall(calls[i][0] or f"call_{uuid.uuid4().hex[:24]}", calls[i][1], calls[i][2])
            for i in sorted(calls)
        )  # a server that sends no id still gets its call paired with its result
        if usage is None:
            generated = progress.generated + "".join(c.arguments for c in tool_calls)
            usage = _estimated(messages, generated)
        return Answer(
            progress.text,
            usage,
            time.monotonic() - started,
            tool_calls=tool_calls,
            reasoning=progress.reasoning,
        )


@dataclass(frozen=True, slots=True)
class Endpoint:
    """How to reach the model endpoint; :meth:`client` makes the SDK client (and
    imports the SDK, on the first call)."""

    api_key: str = field(repr=False)
    base_url: str | None
    timeout: float
    max_retries: int

    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, its own retries off: :meth:`call` is the edge's one retry."""
        from . import sdk  # noqa: PLC0415 - the SDK is imported on the first call

        return sdk.openai_client(api_key=self.api_key, base_url=self.base_url, timeout=self.timeout)

    async def call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, tried again while it fails :attr:`ModelError.retryable`, at most
        ``max_retries`` more times, waiting :data:`MODEL_BACKOFF` or the ``retry-after``
        the endpoint named."""

        def retried(exc: BaseException) -> None:
            log.info("model call failed (%s); trying again", getattr(exc, "kind", "?"))

        return await retrying(
            attempt,
            on=(ModelError,),
            when=lambda exc: isinstance(exc, ModelError) and exc.retryable,
            attempts=self.max_retries + 1,
            backoff=MODEL_BACKOFF,
            wait_hint=lambda exc: exc.retry_after if isinstance(exc, ModelError) else None,
            on_retry=retried,
        )
