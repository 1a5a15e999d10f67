"""A strict, OpenAI-compatible chat-completions server on loopback, for end-to-end tests.

Start it in the test's event loop and point the real ``openai.AsyncOpenAI`` at it (in-process,
or from a bot running as a subprocess)::

    async with FakeOpenAI() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/audio/transcriptions``,
``POST /v1/audio/speech``, ``POST /v1/images/generations``, ``POST /v1/images/edits``,
``GET /v1/models``, ``GET /v1/models/{id}``. The server serves ``model`` and any of
``extra_models``; each request's ``model`` is kept (``Request.model``), and a response names
the model asked for.
Several endpoints with their own keys are several servers. Any other path answers 404
with OpenAI error JSON (``Invalid URL (METHOD /path)``).

Transcriptions take OpenAI's multipart form (``file`` and ``model`` required; ``model`` must be
``transcribe_model``, else 404 ``model_not_found``; unknown form fields are rejected) and answer
``{"text": ...}`` from ``transcriber(bytes, filename)`` (default: the bytes decoded as UTF-8).
``fail_transcription_next(status)`` fails the next ones. Each is kept in ``transcriptions``.

Speech (``POST /v1/audio/speech``) takes OpenAI's JSON: ``model`` (``speech_model``, else 404
``model_not_found``), ``input`` (1 to 4,096 characters: a longer one gets OpenAI's 400
``String should have at most 4096 characters``, code ``string_above_max_length``) and ``voice``
(one of OpenAI's voices, or ``{"id": ...}``) required; ``response_format``, ``speed`` (0.25
to 4), ``instructions`` and ``stream_format`` optional; anything else is refused. It answers
real OGG/Opus bytes (:func:`ogg_opus_sample`, made once with libsndfile through the
``soundfile`` package: 0.2 s of a 440 Hz tone, mono, 48 kHz) for ``response_format: opus``;
the other formats the API knows (``mp3``, the default, among them) get a 400, as this server
encodes no other, so a client that forgets to ask for opus fails here. Each request answered
is kept in ``speeches`` (``speech_posts`` counts every one that arrived); a closed
``speech_gate`` holds them; ``fail_speech_next(status)`` fails the next ones.

Images: ``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart, the
source picture as ``image`` or ``image[]``, PNG, JPEG or WebP bytes up to ``edit_max_bytes``)
take ``prompt`` (required) and ``model`` (default ``dall-e-2``, as the API's; anything but
``image_model`` is 404). Like GPT image models, a ``gpt-image*`` model refuses
``response_format`` (400 ``Unknown parameter: 'response_format'.``, code
``unknown_parameter``) and answers ``b64_json`` (``refuses_response_format`` says so of any
model); other models answer ``b64_json`` when asked, else a ``url`` this server serves.
``size`` must be one the model knows (param ``size``). A prompt holding ``refuse_marker`` is
refused as OpenAI's safety system does (GPT image: ``moderation_blocked``; others:
``content_policy_violation``). Pictures are real PNGs of ``picture_side`` pixels
(:func:`png_bytes`), their colour drawn from the prompt (and, for an edit, the source). Each
request answered, edits with their uploaded files, is kept in ``image_requests``
(``image_posts`` counts every one that arrived); ``fail_images_next(status)`` fails the next
valid ones.

``text_only = True`` makes the model one that cannot see images: a request with an
``image_url`` part gets OpenAI's 400 ``Invalid content type. image_url is only supported by
certain models.`` (param ``messages.[i].content.[j].type``).

``reject_image(data)`` makes the (vision) model unable to read one image: a request with an
``image_url`` part whose data URL carries exactly those bytes gets OpenAI's 400 for it, as
the real API words it: ``"format"``: ``You uploaded an unsupported image. Please make sure
your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp'].`` (code
``invalid_image_format``), ``"policy"``: ``Your input image may contain content that is not
allowed by our safety system.``; param ``null`` (OpenAI does not say which image), or
``messages.[i].content.[j].image_url`` with ``name_part=True`` (as some compatible servers
do). Checked with the messages' validation, so such a request leaves the fault queue alone.

Wire format (as OpenAI sends it)
--------------------------------
* Errors: HTTP status plus ``{"error": {"message", "type", "param", "code"}}``. Every response
  carries an ``x-request-id`` header.
* Non-streaming: a ``chat.completion`` object, ``choices[0].message = {role: assistant,
  content}``, ``finish_reason`` "stop" (or "length" when ``max_tokens`` /
  ``max_completion_tokens`` cut the reply), and ``usage`` unless ``report_usage`` is False.
* Streaming (``stream: true``): ``text/event-stream``; each event is ``data: <json>\\n\\n`` and
  is written to the socket as soon as it is produced. Chunks, all ``chat.completion.chunk``
  with ``id``, ``created`` and ``model``: first ``delta {role: assistant, content: ""}``, then one
  chunk per ``chunk_chars`` characters of the reply, then an empty delta with
  ``finish_reason``; then, when the request had ``stream_options.include_usage: true`` and
  ``report_usage`` is True, a final chunk with ``choices: []`` and ``usage``; then
  ``data: [DONE]``. When include_usage is requested every other chunk carries ``usage: null``.
  ``chunk_delay`` seconds pass between consecutive chunks.

Validation (400 ``invalid_request_error`` with a clear message and ``param``)
-----------------------------------------------------------------------------
Checked in this order: auth (401, code ``invalid_api_key``; the message never echoes a key),
JSON body, ``model`` (string; unknown model -> 404 ``model_not_found``), unknown top-level
parameters (``Unrecognized request argument supplied: x``; extend ``allowed_extra_params`` for
provider-specific ones), parameter types/ranges, then ``messages``: a non-empty list; each
message an object whose ``role`` is system/developer/user/assistant/tool, with no keys beyond
that role's (e.g. ``Additional properties are not allowed ('x' was unexpected)``); ``content``
a string or a non-empty list of parts (``text`` everywhere, ``image_url`` for user, ``refusal``
for assistant); assistant content may be null only with ``tool_calls``; an assistant message
with ``tool_calls`` must be followed by ``tool`` messages answering each ``tool_call_id``, and a
tool message must answer a call of the assistant message right before it (OpenAI's rule).
Finally prompt tokens above ``context_limit`` -> 400 code ``context_length_exceeded``.
``stream_options`` is only allowed with ``stream: true``; only ``n`` = 1 is supported.

Token counting (deterministic; ``len`` counts Python characters)
----------------------------------------------------------------
* text of a message = its content string, or the concatenated ``text``/``refusal`` of its parts,
  plus, for each tool call, the function name and arguments;
* message_tokens = 4 + ceil(len(text) / 4) + 85 per ``image_url`` part;
* prompt_tokens = sum(message_tokens) + 2, plus ceil(len(json.dumps(tools, sort_keys=True)) / 4)
  when ``tools`` is given;
* completion_tokens = max(1, ceil(len(reply) / 4)).

Reasoning models
----------------
``reasoner`` (messages -> thoughts, or None) makes the model think before it answers;
``reasoning_style`` says how the thoughts are streamed: ``"reasoning_content"`` (DeepSeek,
vLLM) or ``"reasoning"`` (Ollama, OpenRouter) deltas before the content, or ``"think"``:
inside ``<think>…</think>`` at the start of the content (DeepSeek-R1, QwQ, Qwen3 served
raw). A non-streaming reply carries them the same way (``message.reasoning_content`` /
``message.reasoning``, or in the content). Thoughts are completion tokens:
completion_tokens = max(1, ceil(len(thoughts + reply) / 4)), and
``completion_tokens_details.reasoning_tokens`` = ceil(len(thoughts) / 4).

Early close
-----------
A client that closes a stream before ``[DONE]`` (a user's stop) is recorded:
``Request.closed_early`` is set and ``Request.events_sent`` says how many events went out
before the server noticed and stopped generating. Use ``chunk_delay`` for a slow stream.

Prompt cache emulation
----------------------
The server remembers every prompt it processed (per model and tools): the digest of each prefix
made of whole leading messages, serialized as ``json.dumps(message, sort_keys=True)``. For a new
request, ``cached_tokens`` = the sum of message_tokens of the longest such prefix seen before
(byte-identical messages only), rounded down to a multiple of 64, and 0 when below 1024
(like OpenAI). It is reported in ``usage.prompt_tokens_details.cached_tokens``. Prompts are
remembered when the model "ran": for answered requests and for cut/stalled streams, not for
auth/validation errors, injected failures or hangs that were never answered.

Fault injection
---------------
``fail_next``/``hang_next``/``cut_stream_next``/``stall_stream_next`` append to one FIFO queue;
each entry is consumed by one chat request that passed auth and validation (an invalid request
gets its honest 400 and leaves the queue alone). ``gate`` holds every chat request (before auth)
until the event is set. ``stop()`` ends every held, hung or stalled request by dropping its
connection, so nothing is left pending.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import hashlib
import io
import itertools
import json
import math
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar

from aiohttp import web

__all__ = [
    "FakeOpenAI",
    "ImageRequest",
    "Request",
    "SpeechRequest",
    "ToolCalls",
    "Usage",
    "completion_tokens",
    "default_responder",
    "message_tokens",
    "ogg_opus_sample",
    "png_bytes",
    "prompt_tokens",
]

T = TypeVar("T")

ROLES = ("system", "developer", "user", "assistant", "tool")
_MESSAGE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}
    ),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_PART_TYPES: dict[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}
# Top-level parameters of POST /v1/chat/completions (openai-python 3.x CompletionCreateParams).
KNOWN_PARAMS = frozenset(
    {
        "model",
        "messages",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
_NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
}
_INT_MINIMUMS: dict[str, int] = {
    "max_tokens": 1,
    "max_completion_tokens": 1,
    "n": 1,
    "top_logprobs": 0,
    "seed": -(2**63),
}
_BOOL_PARAMS = ("stream", "logprobs", "parallel_tool_calls", "store")
_STRING_PARAMS = ("user", "prompt_cache_key", "safety_identifier", "reasoning_effort")

IMAGE_TOKENS = 85
CACHE_MIN_TOKENS = 1024
CACHE_GRANULARITY = 64
_POLL_INTERVAL = 0.02

_DEFAULT_MESSAGES: dict[int, str] = {
    400: "Invalid request (injected by FakeOpenAI).",
    408: "Request timed out (injected by FakeOpenAI).",
    429: "Rate limit reached for requests (injected by FakeOpenAI). Please try again later.",
    500: "The server had an error while processing your request. Sorry about that!",
    502: "Bad gateway.",
    503: "The engine is currently overloaded, please try again later.",
    504: "Gateway timeout.",
}
_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass
class ToolCalls:
    """A responder's answer that asks to run tools: ``(name, arguments JSON)`` each, with
    optional text. Sent as ``tool_calls`` (ids ``call_<n>``), ``finish_reason``
    "tool_calls"; streamed as OpenAI does (one delta with id and name per call, then its
    arguments in pieces of ``chunk_chars``). Only allowed when the request offered ``tools``.
    """

    calls: list[tuple[str, str]]
    content: str | None = None


@dataclass
class Usage:
    """Token usage the server computed for one completion."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Request:
    """One chat request as the server saw it.

    ``headers`` keys are lower-cased. ``at`` is ``time.monotonic()`` at arrival. ``status`` is
    the HTTP status sent, 0 while none was sent (held by the gate, hanging, or dropped before
    any response). ``usage`` is what the server computed (set once the model "ran", whether or
    not it was reported). ``completed`` is True once the whole response (for streams: up to
    ``[DONE]``) was handed to the socket.
    """

    body: dict[str, Any]
    headers: dict[str, str]
    at: float
    status: int = 0
    usage: Usage | None = None
    completed: bool = False
    #: The ``tool_calls`` the answer carried (a responder's :class:`ToolCalls`).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: The client closed a stream before its end; nothing more was generated.
    closed_early: bool = False
    #: Stream events written so far (the role chunk included).
    events_sent: int = 0
    #: What the model thought before its reply (see ``FakeOpenAI.reasoner``).
    thoughts: str = ""

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def model(self) -> str:
        """The ``model`` the request named."""
        return str(self.body.get("model"))


@dataclass(frozen=True)
class SpeechRequest:
    """One ``/audio/speech`` request the server answered."""

    model: str
    voice: object
    input: str
    response_format: str
    body: dict[str, Any]


@dataclass(frozen=True)
class ImageRequest:
    """One ``/images/generations`` or ``/images/edits`` request the server answered."""

    kind: Literal["generate", "edit"]
    model: str
    prompt: str
    #: The form's or body's fields (files apart), as sent.
    fields: dict[str, Any]
    #: An edit's uploaded pictures: (file name, content type, bytes).
    images: list[tuple[str, str, bytes]] = field(default_factory=list)
    #: The pictures answered.
    answered: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class _Fault:
    kind: Literal["fail", "hang", "cut", "stall"]
    status: int = 0
    message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    after_chunks: int = 0
    seconds: float = 0.0
    once: asyncio.Event | None = None


class _ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type_ = type_
        self.param = param
        self.code = code
        self.headers = headers or {}

    def payload(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type_,
                "param": self.param,
                "code": self.code,
            }
        }


def _invalid(message: str, *, param: str | None = None, code: str | None = None) -> _ApiError:
    return _ApiError(400, message, param=param, code=code)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _invalid_type(param: str, expected: str, value: object) -> _ApiError:
    return _invalid(
        f"Invalid type for '{param}': expected {expected}, but got {_json_type(value)} instead.",
        param=param,
        code="invalid_type",
    )


# --------------------------------------------------------------------------- token counting


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                for key in ("text", "refusal"):
                    value = part.get(key)
                    if isinstance(value, str):
                        texts.append(value)
        return "".join(texts)
    return ""


def _image_parts(content: object) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")


def _tool_call_text(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    texts: list[str] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            texts.append(str(function.get("name", "")) + str(function.get("arguments", "")))
    return "".join(texts)


def message_tokens(message: dict[str, Any]) -> int:
    """4 + ceil(len(text) / 4) + 85 per image part (see the module docstring)."""
    content = message.get("content")
    text = _content_text(content) + _tool_call_text(message)
    return 4 + math.ceil(len(text) / 4) + IMAGE_TOKENS * _image_parts(content)


def _tools_tokens(body: dict[str, Any]) -> int:
    tools = body.get("tools")
    if not tools:
        return 0
    return math.ceil(len(json.dumps(tools, sort_keys=True)) / 4)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of a (valid) request body: sum(message_tokens) + 2 (+ tools)."""
    messages: list[dict[str, Any]] = body["messages"]
    return sum(message_tokens(m) for m in messages) + 2 + _tools_tokens(body)


def completion_tokens(reply: str) -> int:
    """max(1, ceil(len(reply) / 4))."""
    return max(1, math.ceil(len(reply) / 4))


def default_responder(messages: list[dict[str, Any]]) -> str:
    """Deterministic reply: ``"echo: " + text of the last user message``."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return "echo: " + _content_text(message.get("content"))
    return "echo: "


# --------------------------------------------------------------------------- validation


def _validate_params(body: dict[str, Any], allowed_extra: frozenset[str]) -> None:
    for key in body:
        if key not in KNOWN_PARAMS and key not in allowed_extra:
            raise _invalid(
                f"Unrecognized request argument supplied: {key}",
                param=key,
                code="unknown_parameter",
            )
    _validate_numbers(body)
    for key in _BOOL_PARAMS:
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise _invalid_type(key, "a boolean", body[key])
    for key in _STRING_PARAMS:
        if body.get(key) is not None and not isinstance(body[key], str):
            raise _invalid_type(key, "a string", body[key])
    if body.get("n") not in (None, 1):
        raise _invalid("FakeOpenAI supports only n=1.", param="n", code="invalid_value")
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str)
        or (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop))
    ):
        raise _invalid_type("stop", "a string or an array of at most 4 strings", stop)
    _validate_stream_options(body)
    _validate_tools(body.get("tools"))


def _validate_numbers(body: dict[str, Any]) -> None:
    for key, (low, high) in _NUMBER_RANGES.items():
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _invalid_type(key, "a decimal", value)
        if not low <= value <= high:
            raise _invalid(
                f"Invalid '{key}': expected a value between {low} and {high}, but got {value}.",
                param=key,
                code="invalid_value",
            )
    for key, minimum in _INT_MINIMUMS.items():
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid_type(key, "an integer", value)
        if value < minimum:
            raise _invalid(
                f"Invalid '{key}': integer below minimum value. Expected a value >= {minimum}, "
                f"but got {value} instead.",
                param=key,
                code="integer_below_min_value",
            )


def _validate_stream_options(body: dict[str, Any]) -> None:
    options = body.get("stream_options")
    if options is None:
        return
    if body.get("stream") is not True:
        raise _invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    if not isinstance(options, dict):
        raise _invalid_type("stream_options", "an object", options)
    for key, value in options.items():
        if key not in ("include_usage", "include_obfuscation"):
            raise _invalid(
                f"Unrecognized request argument supplied: stream_options.{key}",
                param=f"stream_options.{key}",
                code="unknown_parameter",
            )
        if not isinstance(value, bool):
            raise _invalid_type(f"stream_options.{key}", "a boolean", value)


def _validate_tools(tools: object) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _invalid_type("tools", "an array", tools)
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _invalid(
                f"Invalid 'tools[{i}]': expected an object with a function name.",
                param=f"tools[{i}]",
                code="invalid_value",
            )


def _validate_parts(content: list[Any], role: str, where: str) -> None:
    if not content:
        raise _invalid(
            f"Invalid '{where}': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param=where,
            code="empty_array",
        )
    allowed = _PART_TYPES[role]
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise _invalid_type(at, "an object", part)
        kind = part.get("type")
        if kind not in allowed:
            supported = ", ".join(f"'{t}'" for t in sorted(allowed))
            raise _invalid(
                f"Invalid value: {kind!r}. Supported values for role '{role}' are: {supported}.",
                param=f"{at}.type",
                code="invalid_value",
            )
        if kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                raise _invalid_type(f"{at}.image_url", "an object with a url string", image)
        elif not isinstance(part.get(kind), str):
            raise _invalid_type(f"{at}.{kind}", "a string", part.get(kind))


def _validate_content(message: dict[str, Any], role: str, where: str) -> None:
    content = message.get("content")
    param = f"{where}.content"
    if content is None:
        if role == "assistant" and any(
            message.get(k) for k in ("tool_calls", "function_call", "refusal", "audio")
        ):
            return
        if "content" not in message:
            raise _invalid(
                f"Missing required parameter: '{param}'.",
                param=param,
                code="missing_required_parameter",
            )
        raise _invalid_type(param, "one of a string or array of objects", content)
    if isinstance(content, str):
        return
    if isinstance(content, list):
        _validate_parts(content, role, param)
        return
    raise _invalid_type(param, "one of a string or array of objects", content)


def _validate_tool_calls(message: dict[str, Any], where: str) -> list[str]:
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list) or not calls:
        raise _invalid_type(f"{where}.tool_calls", "a non-empty array", calls)
    ids: list[str] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise _invalid(
                f"Invalid '{at}': expected {{id: string, type: 'function', "
                "function: {name: string, arguments: string}}.",
                param=at,
                code="invalid_value",
            )
        ids.append(call["id"])
    return ids


def _unanswered(pending: list[str], where: str) -> _ApiError:
    return _invalid(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending),
        param=where,
        code="invalid_value",
    )


def _validate_message(message: object, i: int, pending: list[str]) -> list[str]:
    """Validate messages[i]; returns the tool_call ids still awaiting a tool message."""
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise _invalid_type(where, "an object", message)
    role = message.get("role")
    if role not in _MESSAGE_KEYS:
        raise _invalid(
            f"Invalid value: {role!r}. Supported values are: "
            + ", ".join(f"'{r}'" for r in ROLES)
            + ".",
            param=f"{where}.role",
            code="invalid_value",
        )
    extra = sorted(set(message) - _MESSAGE_KEYS[role])
    if extra:
        raise _invalid(
            f"Additional properties are not allowed ({extra[0]!r} was unexpected) - '{where}'",
            param=f"{where}.{extra[0]}",
            code="unknown_parameter",
        )
    if "name" in message and not isinstance(message["name"], str):
        raise _invalid_type(f"{where}.name", "a string", message["name"])
    if role != "tool" and pending:
        raise _unanswered(pending, f"messages[{i - 1}]")
    _validate_content(message, role, where)
    if role == "assistant":
        return _validate_tool_calls(message, where)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise _invalid(
                f"Missing required parameter: '{where}.tool_call_id'.",
                param=f"{where}.tool_call_id",
                code="missing_required_parameter",
            )
        if call_id not in pending:
            raise _invalid(
                "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                f"message with 'tool_calls' (no pending tool call has id {call_id!r}).",
                param=f"{where}.role",
                code="invalid_value",
            )
        return [p for p in pending if p != call_id]
    return []


def _validate_messages(messages: object) -> None:
    if messages is None:
        raise _invalid(
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not isinstance(messages, list):
        raise _invalid_type("messages", "an array", messages)
    if not messages:
        raise _invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    pending: list[str] = []
    for i, message in enumerate(messages):
        pending = _validate_message(message, i, pending)
    if pending:
        raise _unanswered(pending, f"messages[{len(messages) - 1}]")


def _limit_reply(reply: str, body: dict[str, Any]) -> tuple[str, str]:
    """Apply ``stop`` sequences and max_(completion_)tokens; returns (reply, finish_reason)."""
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else (stop or [])
    cuts = [reply.find(s) for s in stops if s and s in reply]
    if cuts:
        reply = reply[: min(cuts)]
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and completion_tokens(reply) > limit:
        return reply[: limit * 4], "length"
    return reply, "stop"


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# --------------------------------------------------------------------------- the server


class FakeOpenAI:
    """OpenAI-compatible chat-completions server on 127.0.0.1 (see the module docstring)."""

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

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``; valid after start()."""
        if self._base_url is None:
            raise RuntimeError("FakeOpenAI.base_url is only known after start()")
        return self._base_url

    async def start(self) -> None:
        if self._runner is not None or self._stopping.is_set():
            raise RuntimeError("FakeOpenAI can be started once")
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/images/generations", self._generate_image)
        app.router.add_post("/v1/images/edits", self._edit_image)
        app.router.add_get("/v1/images/files/{name}", self._image_file)
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

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ fault injection

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

    # ------------------------------------------------------------------ inspection

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

    # ------------------------------------------------------------------ helpers

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

    # ------------------------------------------------------------------ handlers

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

    async def _transcribe(self, request: web.Request) -> web.Response:
        try:
            self._check_auth(request)
            if request.content_type != "multipart/form-data":
                raise _invalid("Expected a multipart/form-data request body.")
            form = await request.post()
            unknown = sorted(
                set(form) - {"file", "model", "language", "prompt", "response_format",
                             "temperature"}
            )  # fmt: skip
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            upload, model = form.get("file"), form.get("model")
            if not isinstance(model, str) or not model:
                raise _invalid(
                    "you must provide a model parameter", param="model",
                    code="missing_required_parameter",
                )  # fmt: skip
            if not isinstance(upload, web.FileField):
                raise _invalid("1 validation error for Request\nbody -> file\n  field required")
            if model != self.transcribe_model:
                raise self._model_not_found(model)
            data = upload.file.read()
            if self._transcription_faults:
                status = self._transcription_faults.popleft()
                kind = "server_error" if status >= 500 else "invalid_request_error"
                raise _ApiError(status, "The server had an error processing your request.",
                                type_=kind)  # fmt: skip
            text = self.transcriber(data, upload.filename)
            self.transcriptions.append((model, upload.filename, upload.content_type, data))
            return web.json_response({"text": text}, headers=self._response_headers())
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    # ------------------------------------------------------------------ speech and images

    def _injected(self, faults: deque[int]) -> None:
        """The next queued failure of one endpoint, raised (nothing queued: nothing)."""
        if faults:
            status = faults.popleft()
            message = _DEFAULT_MESSAGES.get(status, f"Injected failure ({status}).")
            kind, code = _ERROR_TYPES.get(status, ("server_error", None))
            raise _ApiError(status, message, type_=kind, code=code)

    async def _speech(self, request: web.Request) -> web.Response:
        self.speech_posts += 1
        self._notify()
        if self.speech_gate is not None and not await self._pass_gate(self.speech_gate):
            return web.Response(status=503)
        try:
            self._check_auth(request)
            body = await _json_body(request)
            _required(body, ("model", "input", "voice"))
            unknown = sorted(set(body) - _SPEECH_PARAMS)
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            model, text, voice = body["model"], body["input"], body["voice"]
            if not isinstance(model, str):
                raise _invalid_type("model", "a string", model)
            if model != self.speech_model:
                raise self._model_not_found(model)
            if not isinstance(text, str) or not text:
                raise _invalid("input must be a non-empty string", param="input")
            if len(text) > SPEECH_MAX_CHARS:
                raise _invalid(
                    f"[{{'type': 'string_too_long', 'loc': ('body', 'input'), 'msg': 'String "
                    f"should have at most {SPEECH_MAX_CHARS} characters'}}]",
                    param="input", code="string_above_max_length",
                )  # fmt: skip
            _check_voice(voice)
            audio_format = _speech_options(body)
            self._injected(self._speech_faults)
            self.speeches.append(SpeechRequest(model, voice, text, audio_format, body))
            return web.Response(
                body=self.speech_audio or ogg_opus_sample(), content_type="audio/ogg",
                headers=self._response_headers(),
            )  # fmt: skip
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _generate_image(self, request: web.Request) -> web.Response:
        self.image_posts += 1
        try:
            self._check_auth(request)
            body = await _json_body(request)
            _required(body, ("prompt",))
            unknown = sorted(set(body) - _IMAGE_PARAMS - {"style", "moderation"})
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            model, prompt, b64 = self._check_image_request(body)
            self._injected(self._image_faults)
            record = ImageRequest("generate", model, prompt, fields=body)
            return self._pictures(record, b64, _count(body), prompt.encode())
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _edit_image(self, request: web.Request) -> web.Response:
        self.image_posts += 1
        try:
            self._check_auth(request)
            if request.content_type != "multipart/form-data":
                raise _invalid("Expected a multipart/form-data request body.")
            fields, images = await self._edit_form(request)
            _required(fields, ("prompt",))
            if not images:
                raise _invalid(
                    "1 validation error for Request\nbody -> image\n  field required",
                    param="image",
                )
            model, prompt, b64 = self._check_image_request(fields)
            for name, _type, data in images:
                self._check_source(name, data)
            self._injected(self._image_faults)
            record = ImageRequest("edit", model, prompt, fields=fields, images=images)
            seed = prompt.encode() + b"".join(hashlib.sha256(i[2]).digest() for i in images)
            return self._pictures(record, b64, _count(fields), seed)
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _edit_form(
        self, request: web.Request
    ) -> tuple[dict[str, Any], list[tuple[str, str, bytes]]]:
        """The form's fields (numbers as numbers) and its ``image``/``image[]`` files."""
        fields: dict[str, Any] = {}
        images: list[tuple[str, str, bytes]] = []
        form = await request.post()
        for key, value in form.items():
            if key in ("image", "image[]"):
                if not isinstance(value, web.FileField):
                    raise _invalid("image must be a file", param="image")
                images.append((value.filename, value.content_type, value.file.read()))
            elif key == "mask":
                continue
            elif key not in _IMAGE_PARAMS | {"input_fidelity"}:
                raise _invalid(f"Unrecognized request argument supplied: {key}")
            else:
                text = str(value)
                fields[key] = int(text) if key == "n" and text.isdigit() else text
        return fields, images

    def _check_image_request(self, body: dict[str, Any]) -> tuple[str, str, bool]:
        """(model, prompt, answer base64?) of a valid request; else the API's error."""
        model = body.get("model", "dall-e-2")
        if not isinstance(model, str):
            raise _invalid_type("model", "a string", model)
        if model != self.image_model:
            raise self._model_not_found(model)
        prompt = body["prompt"]
        gpt_image = model.startswith("gpt-image")
        b64_only = (
            gpt_image if self.refuses_response_format is None else self.refuses_response_format
        )
        longest = 32000 if gpt_image else 4000
        if not isinstance(prompt, str) or not prompt.strip():
            raise _invalid("prompt must be a non-empty string", param="prompt")
        if len(prompt) > longest:
            raise _invalid(
                f"Invalid 'prompt': string too long. Expected a string with maximum length "
                f"{longest}, but got a string with length {len(prompt)} instead.",
                param="prompt", code="string_above_max_length",
            )  # fmt: skip
        if "response_format" in body and b64_only:
            raise _invalid(
                "Unknown parameter: 'response_format'.",
                param="response_format", code="unknown_parameter",
            )  # fmt: skip
        answer = body.get("response_format", "url")
        if answer not in ("url", "b64_json"):
            raise _invalid(
                f"Invalid value: '{answer}'. Supported values are: 'url' and 'b64_json'.",
                param="response_format", code="invalid_value",
            )  # fmt: skip
        sizes = _SIZES["gpt-image" if gpt_image else "other"]
        size = body.get("size", "auto" if gpt_image else "1024x1024")
        if size not in sizes:
            listed = ", ".join(f"'{s}'" for s in sizes)
            raise _invalid(
                f"Invalid value: '{size}'. Supported values are: {listed}.",
                param="size", code="invalid_value",
            )  # fmt: skip
        if self.refuse_marker and self.refuse_marker in prompt:
            if gpt_image:
                raise _ApiError(
                    400,
                    "Your request was rejected by the safety system. If you believe this is "
                    "an error, contact us at help.openai.com and include the request ID.",
                    type_="image_generation_user_error", code="moderation_blocked",
                )  # fmt: skip
            raise _invalid(
                "Your request was rejected as a result of our safety system. Your prompt may "
                "contain text that is not allowed by our safety system.",
                code="content_policy_violation",
            )  # fmt: skip
        return model, prompt, b64_only or answer == "b64_json"

    def _check_source(self, name: str, data: bytes) -> None:
        """An edit's source picture: PNG, JPEG or WebP bytes, at most ``edit_max_bytes``."""
        kind = _picture_kind(data)
        if kind is None:
            raise _invalid(
                f"Invalid file '{name}': unsupported mimetype. Supported file formats are "
                "'image/jpeg', 'image/png', and 'image/webp'.",
                param="image", code="invalid_image_format",
            )  # fmt: skip
        if len(data) > self.edit_max_bytes:
            raise _invalid(
                f"Invalid file '{name}': the image is too large ({len(data)} bytes; at most "
                f"{self.edit_max_bytes}).",
                param="image", code="image_too_large",
            )  # fmt: skip

    def _pictures(self, record: ImageRequest, b64: bool, n: int, seed: bytes) -> web.Response:
        """The answer of ``n`` pictures drawn from ``seed``, kept in ``record``."""
        data: list[dict[str, Any]] = []
        for i in range(n):
            picture = png_bytes(seed + bytes([i]), self.picture_side)
            record.answered.append(picture)
            if b64:
                data.append({"b64_json": base64.b64encode(picture).decode()})
            else:
                name = f"img-{next(self._ids)}.png"
                self._image_files[name] = picture
                data.append({"url": f"{self.base_url}/images/files/{name}"})
        self.image_requests.append(record)
        answer: dict[str, Any] = {"created": int(time.time()), "data": data}
        if record.model.startswith("gpt-image"):
            side = self.picture_side
            answer |= {
                "background": "opaque", "output_format": "png", "quality": "medium",
                "size": f"{side}x{side}",
                "usage": {
                    "input_tokens": 50, "output_tokens": 1056, "total_tokens": 1106,
                    "input_tokens_details": {"text_tokens": 50, "image_tokens": 0},
                },
            }  # fmt: skip
        return web.json_response(answer, headers=self._response_headers())

    async def _image_file(self, request: web.Request) -> web.Response:
        found = self._image_files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=found, content_type="image/png")

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


def _hook(name: str, hook: Callable[[list[dict[str, Any]]], T], body: dict[str, Any]) -> T:
    """A test's hook on the request's messages (a copy); its failure is a 500."""
    try:
        return hook(copy.deepcopy(body["messages"]))
    except Exception as exc:
        raise _ApiError(500, f"FakeOpenAI {name} raised {exc!r}", type_="server_error") from exc


# ------------------------------------------------------------------ speech and images

#: The most characters one speech request may carry (OpenAI's limit).
SPEECH_MAX_CHARS = 4096
_SPEECH_PARAMS = frozenset(
    {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
)
_SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
#: OpenAI's built-in voices.
VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer",
     "verse", "marin", "cedar"}
)  # fmt: skip
_IMAGE_PARAMS = frozenset(
    {"prompt", "model", "n", "size", "quality", "response_format", "background",
     "output_format", "output_compression", "user", "safety_identifier"}
)  # fmt: skip
_SIZES = {
    "gpt-image": ("auto", "1024x1024", "1536x1024", "1024x1536"),
    "other": ("256x256", "512x512", "1024x1024", "1792x1024", "1024x1792"),
}


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise _invalid(
            "We could not parse the JSON body of your request. The OpenAI API expects a JSON "
            "payload."
        )
    return body


def _required(body: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if name not in body:
            raise _invalid(
                f"Missing required parameter: '{name}'.",
                param=name, code="missing_required_parameter",
            )  # fmt: skip


def _check_voice(voice: object) -> None:
    custom = isinstance(voice, dict) and set(voice) == {"id"} and isinstance(voice["id"], str)
    if not custom and not (isinstance(voice, str) and voice in VOICES):
        listed = ", ".join(f"'{v}'" for v in sorted(VOICES))
        raise _invalid(
            f"Invalid value: {json.dumps(voice)}. Supported values are: {listed}.",
            param="voice", code="invalid_value",
        )  # fmt: skip


def _speech_options(body: dict[str, Any]) -> str:
    """The checked optional parameters of a speech request; its audio format."""
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4:
        raise _invalid("speed must be a number from 0.25 to 4.0", param="speed")
    if not isinstance(body.get("instructions", ""), str):
        raise _invalid_type("instructions", "a string", body["instructions"])
    if body.get("stream_format", "audio") not in ("audio", "sse"):
        raise _invalid("stream_format must be 'audio' or 'sse'", param="stream_format")
    audio_format = str(body.get("response_format", "mp3"))
    if audio_format not in _SPEECH_FORMATS:
        listed = ", ".join(f"'{f}'" for f in _SPEECH_FORMATS)
        raise _invalid(
            f"Invalid value: '{audio_format}'. Supported values are: {listed}.",
            param="response_format", code="invalid_value",
        )  # fmt: skip
    if audio_format != "opus":
        raise _invalid(
            f"FakeOpenAI encodes only opus; this request asked for {audio_format} "
            "(the API's default is mp3).",
            param="response_format",
        )
    return audio_format


def _count(body: dict[str, Any]) -> int:
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10:
        raise _invalid("n must be an integer from 1 to 10", param="n")
    return n


def _picture_kind(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


@functools.cache
def ogg_opus_sample() -> bytes:
    """Real OGG/Opus bytes: 0.2 s of a quiet 440 Hz tone, mono, 48 kHz, encoded once by
    libsndfile (the ``soundfile`` package's wheel ships it with Opus)."""
    import numpy  # noqa: PLC0415 - only tests that speak pay for the import
    import soundfile  # noqa: PLC0415

    rate = 48_000
    tone = 0.2 * numpy.sin(2 * numpy.pi * 440 * numpy.arange(rate // 5) / rate)
    out = io.BytesIO()
    soundfile.write(out, tone.astype("float32"), rate, format="OGG", subtype="OPUS")
    return out.getvalue()


def png_bytes(seed: bytes, side: int = 32) -> bytes:
    """A real PNG: ``side`` × ``side`` pixels of one RGB colour drawn from ``seed``."""
    colour = hashlib.sha256(seed).digest()[:3]
    rows = (b"\x00" + colour * side) * side  # filter type 0 on each row

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8 bits, RGB
    return b"".join(
        (b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header), chunk(b"IDAT", zlib.compress(rows)),
         chunk(b"IEND", b""))
    )  # fmt: skip
