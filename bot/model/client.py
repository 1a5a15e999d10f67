"""The model edge: one streamed chat completion from any OpenAI-compatible endpoint.

One retry owner for the edge: the SDK's own retries are off, and
:meth:`Endpoint.call` retries a call that failed before any text arrived (429 honouring
``retry-after``, 5xx, timeouts, refused connections, a stream that broke before its
first text) ``OPENAI_MAX_RETRIES`` times with :data:`MODEL_BACKOFF`, one attempts
counter per call (:func:`bot.retry.retrying`).
Every failure becomes a :class:`ModelError` whose ``kind`` the turn flow turns
into a clear message (bot/model/sdk.py classifies them).

The SDK itself is reached through bot/model/sdk.py, imported on the first model
call or, once the bot polls, by :func:`load_sdk` in a worker thread: importing it is
costly, and start-up does without it.

Request bodies are built by bot/model/wire.py (each stored message encoded once) and
go to the SDK's ``post(..., content=bytes)``, which sends them as they are and still
does auth, error mapping and SSE parsing (a retry sends the same bytes). Streamed
chunks are read as the JSON objects they are (``AsyncStream[object]``) rather than as
the SDK's typed ``ChatCompletionChunk``, built field by field for each of the dozens
of chunks of an answer; the SDK still decodes the SSE stream and turns an ``error``
event or a broken connection into its typed errors.

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
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from transcript import ChatMessage, ToolCall

from ..retry import Backoff, retrying
from .types import (
    Answer,
    Media,
    ModelError,
    Usage,
    estimate_messages,
    estimate_text,
)
from .wire import WIRE_CACHE_BYTES, WireCache, named_image, wire_messages

if TYPE_CHECKING:
    import openai

log = logging.getLogger("replychain.model")

T = TypeVar("T")

#: Waits between tries of a model call (the SDK's own schedule: 0.5 s doubling to 8 s,
#: jittered); a ``retry-after`` the endpoint names wins.
MODEL_BACKOFF = Backoff(0.5, 8.0, 0.2)


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
