"""What the fake model server checks in a chat-completions request, as strictly as OpenAI:
parameters, numbers, tools, messages and their parts."""

from __future__ import annotations

from typing import Any

from .model_types import _ApiError, _invalid, _invalid_type, completion_tokens

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
