"""The fake model server's core: its state, lifecycle, faults, the models it lists, and
chat completions (streamed or not). The speech and image endpoints are added on top of it
(``model_media``) through ``_routes``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from aiohttp import web

from .model_rules import _format_seconds, _limit_reply, _validate_messages, _validate_params
from .model_types import (
    _DEFAULT_MESSAGES,
    _ERROR_TYPES,
    ImageRequest,
    Request,
    SpeechRequest,
    ToolCalls,
    Usage,
    _ApiError,
    _invalid,
    _invalid_type,
    _tool_call_text,
    completion_tokens,
    default_responder,
    message_tokens,
    prompt_tokens,
)

T = TypeVar("T")

CACHE_MIN_TOKENS = 1024

CACHE_GRANULARITY = 64

_POLL_INTERVAL = 0.02


@dataclass(frozen=True)
class _Fault:
    kind: Literal["fail", "hang", "cut", "stall"]
    status: int = 0
    message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    after_chunks: int = 0
    seconds: float = 0.0
    once: asyncio.Event | None = None


def _hook(name: str, hook: Callable[[list[dict[str, Any]]], T], body: dict[str, Any]) -> T:
    """A test's hook on the request's messages (a copy); its failure is a 500."""
    try:
        return hook(copy.deepcopy(body["messages"]))
    except Exception as exc:
        raise _ApiError(500, f"FakeOpenAI {name} raised {exc!r}", type_="server_error") from exc


class ModelCore:
    def __init__(
        self,
        *,
        api_key: str | None = "sk-test",
        model: str = "test-model",
        context_limit: int = 1_000_000,
    ) -> None:
        self.api_key = api_key
        self.model = model
        #: More models this endpoint serves besides ``model`` (one server, several models).
        self.extra_models: set[str] = set()
        self.context_limit = context_limit
        self.responder: Callable[[list[dict[str, Any]]], str | ToolCalls] = default_responder
        #: Thoughts before each reply (None: the model does not reason); see the docstring.
        self.reasoner: Callable[[list[dict[str, Any]]], str | None] = lambda _messages: None
        self.reasoning_style: Literal["reasoning_content", "reasoning", "think"] = (
            "reasoning_content"
        )
        self.chunk_chars = 8
        self.chunk_delay = 0.0
        self.report_usage = True
        #: Sloppy like some OpenAI-compatible servers: each tool call streamed whole in one
        #: delta without ``index``.
        self.whole_tool_calls = False
        self.gate: asyncio.Event | None = None
        self.allowed_extra_params: frozenset[str] = frozenset()
        self.requests: list[Request] = []
        self.usages: list[Usage] = []
        self.text_only = False
        #: sha256 of image bytes -> (reason, name_part): see ``reject_image``.
        self.rejected_images: dict[str, tuple[Literal["format", "policy"], bool]] = {}
        self.transcribe_model = "whisper-1"
        self.transcriber: Callable[[bytes, str], str] = lambda data, _name: data.decode(
            errors="replace"
        )
        #: (model, filename, content type, bytes) of each transcription request answered.
        self.transcriptions: list[tuple[str, str, str, bytes]] = []
        self._transcription_faults: deque[int] = deque()
        self.speech_model = "tts-test"
        #: What speech requests are answered with (None: :func:`ogg_opus_sample`).
        self.speech_audio: bytes | None = None
        self.speeches: list[SpeechRequest] = []
        #: Speech requests that arrived (answered or not); a closed ``speech_gate`` holds
        #: each one before it is answered, as ``gate`` holds chat requests.
        self.speech_posts = 0
        self.speech_gate: asyncio.Event | None = None
        self._speech_faults: deque[int] = deque()
        self.image_model = "gpt-image-1"
        #: Prompts holding this are refused as the safety system refuses.
        self.refuse_marker = "[refuse]"
        self.picture_side = 32
        #: The largest source picture an edit takes (OpenAI: 50 MB for GPT image models).
        self.edit_max_bytes = 50 * 1024 * 1024
        #: Whether the image model refuses ``response_format`` and always answers base64
        #: (None: as OpenAI's do, when its name starts with ``gpt-image``).
        self.refuses_response_format: bool | None = None
        self.image_requests: list[ImageRequest] = []
        #: Image requests that arrived (valid or not, answered or refused).
        self.image_posts = 0
        self._image_faults: deque[int] = deque()
        self._image_files: dict[str, bytes] = {}
        self._faults: deque[_Fault] = deque()
        self._prefixes: dict[tuple[str, str], set[str]] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``; valid after start()."""
        if self._base_url is None:
            raise RuntimeError("FakeOpenAI.base_url is only known after start()")
        return self._base_url

    def _routes(self, app: web.Application) -> None:
        """Routes besides chat completions and the model list (the media endpoints')."""

    async def start(self) -> None:
        if self._runner is not None or self._stopping.is_set():
            raise RuntimeError("FakeOpenAI can be started once")
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._routes(app)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/v1/models/{model}", self._get_model)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}/v1"

    async def stop(self) -> None:
        """Drop held/hung/stalled requests and close every connection. Idempotent."""
        self._stopping.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._notify()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def fail_next(
        self,
        status: int,
        *,
        count: int = 1,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        should_retry: bool | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` chat requests with ``status`` and OpenAI error JSON.

        ``retry_after`` -> ``retry-after`` header (seconds; the SDK honours 0 < value <= 120,
        floats allowed), ``retry_after_ms`` -> ``retry-after-ms`` (the SDK prefers it),
        ``should_retry`` -> ``x-should-retry: true|false`` (overrides the SDK's status rules).
        """
        if not 400 <= status <= 599:
            raise ValueError(f"fail_next needs a 4xx/5xx status, got {status}")
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = _format_seconds(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = _format_seconds(retry_after_ms)
        if should_retry is not None:
            headers["x-should-retry"] = "true" if should_retry else "false"
        self._queue(count, _Fault("fail", status=status, message=message, headers=headers))

    def reject_image(
        self, data: bytes, reason: Literal["format", "policy"] = "format", *,
        name_part: bool = False,
    ) -> None:  # fmt: skip
        """Answer 400 to every request carrying an image of exactly these bytes."""
        self.rejected_images[hashlib.sha256(data).hexdigest()] = (reason, name_part)

    def fail_transcription_next(self, status: int = 500, *, count: int = 1) -> None:
        """Answer the next ``count`` transcription requests with ``status``."""
        self._transcription_faults.extend([status] * count)

    def fail_speech_next(self, status: int = 500, *, count: int = 1) -> None:
        """Answer the next ``count`` valid speech requests with ``status``."""
        self._speech_faults.extend([status] * count)

    def fail_images_next(self, status: int = 500, *, count: int = 1) -> None:
        """Answer the next ``count`` valid image requests (either kind) with ``status``."""
        self._image_faults.extend([status] * count)

    def hang_next(self, *, count: int = 1, seconds: float = 3600) -> None:
        """Accept the next requests and send nothing for ``seconds``, then answer normally
        (a slow first byte); stop() drops them instead."""
        self._queue(count, _Fault("hang", seconds=seconds))

    def cut_stream_next(
        self, *, after_chunks: int = 2, count: int = 1, once: asyncio.Event | None = None
    ) -> None:
        """Stream the role chunk and ``after_chunks`` content chunks, then close the connection
        without finish chunk, usage or ``[DONE]`` (``once`` given: after it is set, the
        connection held open meanwhile). A non-streaming request gets its connection closed
        before any response."""
        self._queue(count, _Fault("cut", after_chunks=after_chunks, once=once))

    def stall_stream_next(
        self, *, after_chunks: int = 2, seconds: float = 3600, count: int = 1
    ) -> None:
        """Stream the role chunk and ``after_chunks`` content chunks, then send nothing for
        ``seconds`` (connection open), then resume; stop() drops the connection. A
        non-streaming request behaves as with hang_next."""
        self._queue(count, _Fault("stall", after_chunks=after_chunks, seconds=seconds))

    def clear_faults(self) -> None:
        self._faults.clear()

    def clear_cache(self) -> None:
        """Forget every remembered prompt prefix (emulated cache eviction)."""
        self._prefixes.clear()

    @property
    def pending_faults(self) -> int:
        return len(self._faults)

    def _queue(self, count: int, fault: _Fault) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self._faults.extend([fault] * count)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until ``predicate()`` is true; re-checked on every server event and every
        20 ms (for predicates on outside state). AssertionError on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._changed
            if predicate():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                name = getattr(predicate, "__qualname__", repr(predicate))
                statuses = [r.status for r in self.requests]
                raise AssertionError(
                    f"FakeOpenAI.wait_for: {name} still false after {timeout}s; "
                    f"{len(self.requests)} chat request(s) with statuses {statuses}, "
                    f"{len(self.usages)} usage(s) reported, {len(self._faults)} fault(s) queued"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, _POLL_INTERVAL))

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _response_headers(self) -> dict[str, str]:
        return {"x-request-id": f"req_fake_{next(self._ids)}"}

    def _error(self, err: _ApiError, record: Request | None = None) -> web.Response:
        if record is not None:
            record.status = err.status
        return web.json_response(
            err.payload(), status=err.status, headers={**self._response_headers(), **err.headers}
        )

    def _check_auth(self, request: web.Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("Authorization")
        if header is None:
            raise _ApiError(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                code="invalid_api_key",
            )
        if header != f"Bearer {self.api_key}":
            raise _ApiError(
                401,
                "Incorrect API key provided. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )

    def _model_not_found(self, model: str) -> _ApiError:
        return _ApiError(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )

    async def _sleep_or_stop(self, seconds: float) -> bool:
        """Sleep; True when the time passed, False when stop() came first."""
        if self._stopping.is_set():
            return False
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def _pass_gate(self, gate: asyncio.Event | None = None) -> bool:
        """Wait for ``gate`` (the server's unless given); False when stop() came first."""
        gate = gate or self.gate
        if gate is None or gate.is_set():
            return not self._stopping.is_set()
        waiters = [
            asyncio.ensure_future(gate.wait()),
            asyncio.ensure_future(self._stopping.wait()),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return not self._stopping.is_set()

    async def _pace(self, index: int, stop_at: int, fault: _Fault | None) -> bool:
        """Before streaming event ``index``: apply a cut/stall and chunk_delay.
        False means: drop the connection now."""
        if index == stop_at and fault is not None:
            if fault.kind == "cut":
                if fault.once is not None:
                    await self._pass_gate(fault.once)
                return False
            if not await self._sleep_or_stop(fault.seconds):
                return False
        if index and self.chunk_delay > 0:
            return await self._sleep_or_stop(self.chunk_delay)
        return True

    @staticmethod
    def _drop(
        request: web.Request, response: web.StreamResponse | None = None
    ) -> web.StreamResponse:
        """Close the connection abruptly; aiohttp then fails (quietly) to finish ``response``."""
        transport = request.transport
        if transport is not None:
            transport.close()
        return response if response is not None else web.Response(status=500)

    def _prompt_cache(self, body: dict[str, Any]) -> tuple[tuple[str, str], list[str], int]:
        """(cache key, digests of every whole-message prefix, cached tokens)."""
        tools = body.get("tools")
        key = (str(body["model"]), json.dumps(tools, sort_keys=True) if tools else "")
        seen = self._prefixes.get(key, set())
        digest = hashlib.sha256()
        digests: list[str] = []
        running = best = 0
        for message in body["messages"]:
            digest.update(json.dumps(message, sort_keys=True).encode())
            digest.update(b"\x00")  # never inside json.dumps output
            running += message_tokens(message)
            digests.append(digest.hexdigest())
            if digests[-1] in seen:
                best = running
        cached = best - best % CACHE_GRANULARITY if best >= CACHE_MIN_TOKENS else 0
        return key, digests, cached

    def _usage_json(self, usage: Usage) -> dict[str, Any]:
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    async def _not_found(self, request: web.Request) -> web.Response:
        return self._error(
            _ApiError(404, f"Invalid URL ({request.method} {request.path})", code=None)
        )

    async def _list_models(self, request: web.Request) -> web.Response:
        try:
            self._check_auth(request)
        except _ApiError as err:
            return self._error(err)
        served = [self.model, *sorted(self.extra_models)]
        return web.json_response(
            {"object": "list", "data": [self._model_json(m) for m in served]},
            headers=self._response_headers(),
        )

    async def _get_model(self, request: web.Request) -> web.Response:
        try:
            self._check_auth(request)
            model = request.match_info["model"]
            if model != self.model and model not in self.extra_models:
                raise self._model_not_found(model)
        except _ApiError as err:
            return self._error(err)
        return web.json_response(self._model_json(model), headers=self._response_headers())

    @staticmethod
    def _model_json(model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            parsed: object = json.loads(raw)
        except ValueError:
            parsed = None
        body = parsed if isinstance(parsed, dict) else {}
        record = Request(
            body=body,
            headers={k.lower(): v for k, v in request.headers.items()},
            at=time.monotonic(),
        )
        self.requests.append(record)
        self._notify()
        try:
            if not await self._pass_gate():
                return self._drop(request)
            self._check_auth(request)
            if not isinstance(parsed, dict):
                raise _invalid(
                    "We could not parse the JSON body of your request. The OpenAI API expects "
                    "a JSON payload."
                )
            self._validate(body)
            return await self._answer(request, record, body)
        except _ApiError as err:
            return self._error(err, record)
        finally:
            self._notify()

    def _validate_vision(self, messages: object) -> None:
        if not self.text_only or not isinstance(messages, list):
            return
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    raise _invalid(
                        "Invalid content type. image_url is only supported by certain models.",
                        param=f"messages.[{i}].content.[{j}].type",
                    )

    def _validate_images(self, messages: object) -> None:
        if not self.rejected_images or not isinstance(messages, list):
            return
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            for j, part in enumerate(content if isinstance(content, list) else []):
                if not isinstance(part, dict) or part.get("type") != "image_url":
                    continue
                url = str(part["image_url"]["url"])
                head, _, data = url.partition(";base64,")
                if not head.startswith("data:") or not data:
                    continue
                try:
                    raw = base64.b64decode(data, validate=True)
                except ValueError:
                    continue
                rejected = self.rejected_images.get(hashlib.sha256(raw).hexdigest())
                if rejected is None:
                    continue
                reason, name_part = rejected
                param = f"messages.[{i}].content.[{j}].image_url" if name_part else None
                if reason == "policy":
                    raise _invalid(
                        "Your input image may contain content that is not allowed by our "
                        "safety system.",
                        param=param,
                    )
                raise _invalid(
                    "You uploaded an unsupported image. Please make sure your image has of "
                    "one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
                    param=param,
                    code="invalid_image_format",
                )

    def _validate(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is None:
            raise _invalid(
                "You must provide a model parameter.",
                param="model",
                code="missing_required_parameter",
            )
        if not isinstance(model, str):
            raise _invalid_type("model", "a string", model)
        if model != self.model and model not in self.extra_models:
            raise self._model_not_found(model)
        _validate_params(body, self.allowed_extra_params)
        _validate_messages(body.get("messages"))
        self._validate_vision(body.get("messages"))
        self._validate_images(body.get("messages"))
        tokens = prompt_tokens(body)
        if tokens > self.context_limit:
            raise _invalid(
                f"This model's maximum context length is {self.context_limit} tokens. However, "
                f"your messages resulted in {tokens} tokens. Please reduce the length of the "
                "messages.",
                param="messages",
                code="context_length_exceeded",
            )

    def _reply(self, body: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
        reply = _hook("responder", self.responder, body)
        if isinstance(reply, ToolCalls):
            if not body.get("tools"):
                raise _ApiError(
                    500, "FakeOpenAI responder asked for tools, but none were offered",
                    type_="server_error",
                )  # fmt: skip
            calls = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for name, arguments in reply.calls
            ]
            return reply.content or "", "tool_calls", calls
        if not isinstance(reply, str):
            raise _ApiError(
                500,
                f"FakeOpenAI responder returned {type(reply).__name__}, not str",
                type_="server_error",
            )
        return (*_limit_reply(reply, body), [])

    async def _answer(
        self, request: web.Request, record: Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        fault = self._faults.popleft() if self._faults else None
        if fault is not None and fault.kind == "fail":
            error_type, code = _ERROR_TYPES.get(
                fault.status,
                ("server_error", None) if fault.status >= 500 else ("invalid_request_error", None),
            )
            message = fault.message or _DEFAULT_MESSAGES.get(
                fault.status, f"Injected error {fault.status}."
            )
            raise _ApiError(
                fault.status, message, type_=error_type, code=code, headers=fault.headers
            )
        streaming = body.get("stream") is True
        if fault is not None and fault.kind == "cut" and not streaming:
            return self._drop(request)
        if (
            fault is not None
            and (fault.kind == "hang" or (fault.kind == "stall" and not streaming))
            and not await self._sleep_or_stop(fault.seconds)
        ):
            return self._drop(request)
        reply, finish, calls = self._reply(body)
        thoughts = self._thoughts(body)
        key, digests, cached = self._prompt_cache(body)
        self._prefixes.setdefault(key, set()).update(digests)
        record.tool_calls = calls
        said = thoughts + reply + _tool_call_text({"tool_calls": calls})
        usage = Usage(
            prompt_tokens(body), completion_tokens(said), cached, math.ceil(len(thoughts) / 4)
        )
        record.usage = usage
        record.thoughts = thoughts
        if streaming:
            stream_fault = fault if fault is not None and fault.kind in ("cut", "stall") else None
            return await self._stream(request, record, body, reply, finish, stream_fault)
        said_msg: dict[str, Any] = {
            "role": "assistant",
            "content": reply if reply or not calls else None,
            "refusal": None,
            "annotations": [],
        }
        if calls:
            said_msg["tool_calls"] = calls
        if thoughts and self.reasoning_style == "think":
            said_msg["content"] = f"<think>{thoughts}</think>\n\n{reply}"
        elif thoughts:
            said_msg[self.reasoning_style] = thoughts
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": said_msg,
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
        }
        if self.report_usage:
            completion["usage"] = self._usage_json(usage)
            self.usages.append(usage)
        record.status = 200
        record.completed = True
        return web.json_response(completion, headers=self._response_headers())

    def _text_deltas(self, thoughts: str, reply: str, size: int) -> list[dict[str, Any]]:
        """The deltas of the thoughts (as ``reasoning_style`` says) and the reply."""
        deltas: list[dict[str, Any]] = []
        content = reply
        if thoughts and self.reasoning_style == "think":
            content = f"<think>{thoughts}</think>\n\n{reply}"
        elif thoughts:
            field = self.reasoning_style
            deltas += [
                {"content": None, field: thoughts[i : i + size]}
                for i in range(0, len(thoughts), size)
            ]
        return deltas + [{"content": content[i : i + size]} for i in range(0, len(content), size)]

    def _thoughts(self, body: dict[str, Any]) -> str:
        thoughts: str | None = _hook("reasoner", self.reasoner, body)
        return thoughts or ""

    async def _stream(
        self,
        request: web.Request,
        record: Request,
        body: dict[str, Any],
        reply: str,
        finish: str,
        fault: _Fault | None,
    ) -> web.StreamResponse:
        calls = record.tool_calls
        thoughts = record.thoughts
        options = body.get("stream_options") or {}
        usage_requested = options.get("include_usage") is True and self.report_usage
        base: dict[str, Any] = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            data = {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if usage_requested:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n".encode()

        size = max(1, self.chunk_chars)
        events = [chunk({"role": "assistant", "content": None if calls and not reply else ""})]
        events += [chunk(delta) for delta in self._text_deltas(thoughts, reply, size)]
        for index, call in enumerate(calls):
            if self.whole_tool_calls:
                events.append(chunk({"tool_calls": [call]}))
                continue
            function = call["function"]
            head = {**call, "function": {"name": function["name"], "arguments": ""}}
            events.append(chunk({"tool_calls": [{"index": index, **head}]}))
            arguments = function["arguments"]
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in (arguments[i : i + size] for i in range(0, len(arguments), size))
            ]
        stop_at = -1 if fault is None else min(1 + fault.after_chunks, len(events))
        events.append(chunk({}, finish))
        usage_at = -1
        if usage_requested and record.usage is not None:
            usage_at = len(events)
            final = {**base, "choices": [], "usage": self._usage_json(record.usage)}
            events.append(f"data: {json.dumps(final)}\n\n".encode())
        events.append(b"data: [DONE]\n\n")

        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **self._response_headers(),
            },
        )
        try:
            await response.prepare(request)
            record.status = 200
            self._notify()
            for index, event in enumerate(events):
                if not await self._pace(index, stop_at, fault):
                    return self._drop(request, response)
                transport = request.transport
                if transport is None or transport.is_closing():
                    raise ConnectionResetError("the client closed the stream")
                await response.write(event)
                record.events_sent += 1
                if index == usage_at and record.usage is not None:
                    self.usages.append(record.usage)
            await response.write_eof()
        except ConnectionError:  # the client went away: stop generating
            record.closed_early = True
            self._notify()
            return response
        record.completed = True
        return response
