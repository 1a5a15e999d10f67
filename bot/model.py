"""The model edge: one streamed chat completion from any OpenAI-compatible endpoint.

The SDK retries 429, 5xx, timeouts and refused connections itself (honouring
``retry-after``) before the first byte of the answer; a stream that breaks
before any text arrived is retried here too. Every failure becomes a
:class:`ModelError` whose ``kind`` the turn flow turns into a clear message.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from transcript import ChatMessage

log = logging.getLogger("replychain.model")

ErrorKind = Literal["rate_limited", "unavailable", "timeout", "too_long", "rejected", "config"]


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
    model: str
    latency: float
    finish_reason: str | None


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


def estimate_tokens(text: str) -> int:
    """A provider-agnostic estimate (~4 characters a token) for calls without usage."""
    return max(1, math.ceil(len(text) / 4))


def _estimate_prompt(payload: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(str(m.get("content") or "")) + 4 for m in payload)


def wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The request's messages: leading system messages (the root prompt and a fold's
    summary) joined into one, since some chat templates accept only one, first."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system" and not messages[lead].name:
        lead += 1
    payload = [to_openai(m) for m in messages[lead:]]
    if lead:
        system = "\n\n".join(m.content or "" for m in messages[:lead])
        payload.insert(0, {"role": "system", "content": system})
    return payload


def to_openai(message: ChatMessage) -> dict[str, Any]:
    """The wire form of a stored message (byte-stable: same message, same dict)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
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


def _classify(exc: Exception) -> ModelError:
    if isinstance(exc, openai.APITimeoutError):
        return ModelError("timeout", "the model did not answer in time")
    if isinstance(exc, openai.RateLimitError):
        return ModelError("rate_limited", "the model endpoint is rate limiting")
    if isinstance(exc, openai.APIConnectionError):
        return ModelError("unavailable", "cannot reach the model endpoint")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        code = str(getattr(exc, "code", "") or "")
        if status == 400 and "context_length" in code:
            return ModelError("too_long", "the conversation is too long for the model")
        if status in (401, 403, 404):
            return ModelError("config", f"the model endpoint refused the request ({status})")
        if status >= 500:
            return ModelError("unavailable", f"the model endpoint failed ({status})")
        return ModelError("rejected", f"the model endpoint rejected the request ({status})")
    return ModelError("unavailable", f"unexpected failure ({type(exc).__name__})")


class _ReaderFailedError(Exception):
    """Carries an exception of the ``on_text`` callback past the stream's handlers."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class ModelClient:
    """Streams answers from an OpenAI-compatible endpoint with explicit timeouts."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
    ) -> None:
        self.model = model
        self.name = model
        self.max_retries = max_retries
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
            max_retries=max_retries,
        )

    async def close(self) -> None:
        await self._client.close()

    async def stream(
        self, messages: Sequence[ChatMessage], on_text: Callable[[str], None]
    ) -> Answer:
        """Stream one answer, calling ``on_text`` with the whole text so far."""
        payload = wire_messages(messages)
        started = time.monotonic()
        try:
            return await self._stream_retrying(payload, on_text, started)
        except ModelError as exc:
            # a failed call may still be billed for what it streamed: estimate it
            exc.latency = time.monotonic() - started
            if exc.partial:
                exc.usage = Usage(_estimate_prompt(payload), estimate_tokens(exc.partial), 0, True)
            raise

    async def _stream_retrying(
        self, payload: list[dict[str, Any]], on_text: Callable[[str], None], started: float
    ) -> Answer:
        attempt = 0
        while True:
            try:
                return await self._stream_once(payload, on_text, started)
            except ModelError as exc:
                # The SDK retried the request itself (429, 5xx, timeouts); only a
                # stream that broke before any text arrived is retried here.
                retry = not exc.partial and exc.kind in ("unavailable", "timeout")
                if not retry or attempt >= self.max_retries:
                    raise
            except openai.OpenAIError as exc:
                raise _classify(exc) from exc
            attempt += 1
            log.info("model stream broke before any text; retrying")
            await asyncio.sleep(min(8.0, 0.5 * 2**attempt) * random.uniform(0.8, 1.2))

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer:
        """One answer without streaming (used for summaries); errors as :class:`ModelError`."""
        payload = wire_messages(messages)
        started = time.monotonic()
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", payload),
                max_tokens=max_tokens,
            )
        except openai.OpenAIError as exc:
            error = _classify(exc)
            error.latency = time.monotonic() - started
            raise error from exc
        text = (response.choices[0].message.content or "") if response.choices else ""
        reported = response.usage
        if reported is not None:
            details = reported.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details else 0
            usage = Usage(reported.prompt_tokens, reported.completion_tokens, cached)
        else:
            usage = Usage(_estimate_prompt(payload), estimate_tokens(text), 0, estimated=True)
        finish = response.choices[0].finish_reason if response.choices else None
        return Answer(text, usage, self.model, time.monotonic() - started, finish)

    async def _stream_once(
        self, payload: list[dict[str, Any]], on_text: Callable[[str], None], started: float
    ) -> Answer:
        stream = await self._client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", payload),
            stream=True,
            stream_options={"include_usage": True},
        )
        text = ""
        usage: Usage | None = None
        finish: str | None = None
        try:
            async for chunk in stream:
                if chunk.usage is not None:
                    details = chunk.usage.prompt_tokens_details
                    usage = Usage(
                        chunk.usage.prompt_tokens,
                        chunk.usage.completion_tokens,
                        (details.cached_tokens or 0) if details else 0,
                    )
                for choice in chunk.choices:
                    if choice.delta.content:
                        text += choice.delta.content
                        try:
                            on_text(text)
                        except Exception as exc:
                            raise _ReaderFailedError(exc) from exc
                    finish = choice.finish_reason or finish
        except _ReaderFailedError as wrapped:
            raise wrapped.error from None  # the reader's own failure, not the model's
        except openai.OpenAIError as exc:
            error = _classify(exc)
            raise ModelError(error.kind, error.detail, text) from exc
        except Exception as exc:
            # some SDK versions let transport errors of a broken stream through unwrapped
            raise ModelError(
                "unavailable", f"the stream broke ({type(exc).__name__})", text
            ) from exc
        finally:
            await stream.close()
        if usage is None:
            usage = Usage(_estimate_prompt(payload), estimate_tokens(text), 0, estimated=True)
        return Answer(text, usage, self.model, time.monotonic() - started, finish)
