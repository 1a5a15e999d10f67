"""The fake model server's records (requests, usage, tool calls), its errors, and how it
counts tokens."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

IMAGE_TOKENS = 85

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
