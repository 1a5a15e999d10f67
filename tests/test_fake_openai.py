"""Proves tests/fakes/model.py against the real openai SDK (AsyncOpenAI)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from .fakes.model import FakeOpenAI, Usage, message_tokens

MODEL = "test-model"
KEY = "sk-test"
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


def sdk(
    server: FakeOpenAI, *, max_retries: int = 0, timeout: float = 5.0, api_key: str = KEY
) -> openai.AsyncOpenAI:
    """A real SDK client; use as ``async with sdk(server) as client``."""
    return openai.AsyncOpenAI(
        base_url=server.base_url, api_key=api_key, max_retries=max_retries, timeout=timeout
    )


async def collect(
    stream: openai.AsyncStream[ChatCompletionChunk],
) -> tuple[str, list[ChatCompletionChunk]]:
    chunks: list[ChatCompletionChunk] = []
    async with stream:
        async for chunk in stream:
            chunks.append(chunk)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


async def post_raw(
    server: FakeOpenAI, body: object, *, path: str = "/chat/completions", auth: str | None = KEY
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = f"Bearer {auth}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.base_url + path, data=data, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


# --------------------------------------------------------------------------- happy paths


async def test_non_streaming_completion_and_usage(server: FakeOpenAI) -> None:
    async with sdk(server) as client:
        completion = await client.chat.completions.create(model=MODEL, messages=HI)
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "echo: hi"
    assert completion.choices[0].finish_reason == "stop"
    # prompt = (4 + ceil(2/4)) + 2 = 7; completion = ceil(len("echo: hi") / 4) = 2
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 2)
    assert completion.usage.total_tokens == 9
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    assert server.usages == [Usage(prompt_tokens=7, completion_tokens=2, cached_tokens=0)]
    [request] = server.requests
    assert (request.status, request.completed) == (200, True)
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.headers["authorization"] == f"Bearer {KEY}"


async def test_stream_assembles_to_responder_output_with_usage_chunk(server: FakeOpenAI) -> None:
    reply = "The quick brown fox jumps over the lazy dog. " * 3 + "ünïcode ✓"
    server.responder = lambda messages: reply
    server.chunk_chars = 5
    async with sdk(server) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}
        )
        text, chunks = await collect(stream)
    assert text == reply
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    assert len({c.id for c in chunks}) == 1
    first, *content, finish, usage_chunk = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    assert all(len(c.choices[0].delta.content or "") <= 5 for c in content)
    assert len(content) == -(-len(reply) // 5)
    assert finish.choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == -(-len(reply) // 4)
    assert server.usages == [Usage(7, -(-len(reply) // 4), 0)]
    assert server.requests[0].completed


async def test_stream_without_include_usage_has_no_usage_chunk(server: FakeOpenAI) -> None:
    async with sdk(server) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=HI, stream=True)
        text, chunks = await collect(stream)
    assert text == "echo: hi"
    assert all(c.choices and c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert server.usages == []  # nothing was reported to the client
    assert server.requests[0].usage == Usage(7, 2, 0)  # but it was computed


async def test_report_usage_false_omits_usage_everywhere(server: FakeOpenAI) -> None:
    server.report_usage = False
    async with sdk(server) as client:
        completion = await client.chat.completions.create(model=MODEL, messages=HI)
        stream = await client.chat.completions.create(
            model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}
        )
        text, chunks = await collect(stream)
    assert completion.usage is None
    assert text == "echo: hi"
    assert all(c.choices and c.usage is None for c in chunks)
    assert server.usages == []


async def test_sse_wire_format(server: FakeOpenAI) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "wire"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, headers, raw = await post_raw(server, body)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = raw.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    for payload in payloads:
        assert {"id", "object", "created", "model", "choices", "usage"} <= payload.keys()
        assert payload["object"] == "chat.completion.chunk"
    assert all(p["usage"] is None for p in payloads[:-1])
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert payloads[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    # Without include_usage the key is absent, as on OpenAI.
    del body["stream_options"]
    _, _, raw = await post_raw(server, body)
    chunks = [json.loads(e.removeprefix("data: ")) for e in raw.decode().split("\n\n")[:-2]]
    assert all("usage" not in c for c in chunks)


async def test_chunk_delay_slows_the_stream(server: FakeOpenAI) -> None:
    server.chunk_delay = 0.03
    server.chunk_chars = 4  # "echo: hi" -> 2 content chunks; 5 events after the first
    started = time.monotonic()
    async with sdk(server) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=HI, stream=True)
        text, _ = await collect(stream)
    assert text == "echo: hi"
    assert time.monotonic() - started >= 4 * 0.03


async def test_max_tokens_and_stop_sequences(server: FakeOpenAI) -> None:
    server.responder = lambda messages: "abcdefghijklmnopqrstuvwxyz"
    async with sdk(server) as client:
        limited = await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        stopped = await client.chat.completions.create(model=MODEL, messages=HI, stop=["k", "e"])
    assert limited.choices[0].message.content == "abcdefgh"
    assert limited.choices[0].finish_reason == "length"
    assert limited.usage is not None and limited.usage.completion_tokens == 2
    assert stopped.choices[0].message.content == "abcd"
    assert stopped.choices[0].finish_reason == "stop"


async def test_models_list(server: FakeOpenAI) -> None:
    async with sdk(server) as client:
        page = await client.models.list()
        model = await client.models.retrieve(MODEL)
    assert [m.id for m in page.data] == [MODEL]
    assert model.id == MODEL
    status, _, raw = await post_raw(server, {}, path="/nope")
    assert status == 404
    assert json.loads(raw)["error"]["message"] == "Invalid URL (POST /v1/nope)"


# --------------------------------------------------------------------------- prompt cache


async def test_cached_tokens_grow_when_a_prefix_repeats(server: FakeOpenAI) -> None:
    system: ChatCompletionMessageParam = {"role": "system", "content": "S" * 5000}  # 1254 tokens
    first: ChatCompletionMessageParam = {"role": "user", "content": "first question"}  # 8
    answer: ChatCompletionMessageParam = {"role": "assistant", "content": "echo: first question"}
    second: ChatCompletionMessageParam = {"role": "user", "content": "x" * 400}  # 104
    reply2: ChatCompletionMessageParam = {"role": "assistant", "content": "ok"}
    third: ChatCompletionMessageParam = {"role": "user", "content": "third"}
    turns = [
        [system, first],
        [system, first, answer, second],
        [system, first, answer, second, reply2, third],
    ]
    cached: list[int] = []
    async with sdk(server) as client:
        for messages in turns:
            completion = await client.chat.completions.create(model=MODEL, messages=messages)
            assert completion.usage is not None
            assert completion.usage.prompt_tokens_details is not None
            cached.append(completion.usage.prompt_tokens_details.cached_tokens or 0)
    # turn 2 reuses [system, first] = 1254 + 8 = 1262 -> 1216 (multiple of 64);
    # turn 3 reuses [system, first, answer, second] = 1262 + 9 + 104 = 1375 -> 1344.
    assert cached == [0, 1216, 1344]
    assert [u.cached_tokens for u in server.usages] == cached
    prefix = sum(message_tokens(dict(m)) for m in turns[2][:4])
    assert prefix == 1375
    # + reply2 (4 + 1) + third (4 + 2) + 2 priming tokens
    assert server.usages[2].prompt_tokens == prefix + 5 + 6 + 2 == 1388


async def test_cache_needs_byte_identical_messages_and_1024_tokens(server: FakeOpenAI) -> None:
    long_a: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "A" * 5000},
        {"role": "user", "content": "q"},
    ]
    long_b: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "A" * 4999 + "B"},
        {"role": "user", "content": "q"},
    ]
    short: list[ChatCompletionMessageParam] = [{"role": "system", "content": "C" * 3000}]
    async with sdk(server) as client:
        for messages in (long_a, long_b, short, short, long_a):
            await client.chat.completions.create(model=MODEL, messages=messages)
    # long_b differs by one byte; short stays under 1024 tokens; long_a again is a full hit.
    assert [u.cached_tokens for u in server.usages] == [0, 0, 0, 0, 1216]
    server.clear_cache()
    async with sdk(server) as client:
        await client.chat.completions.create(model=MODEL, messages=long_a)
    assert server.usages[-1].cached_tokens == 0


# --------------------------------------------------------------------------- faults


async def test_429_with_retry_after_is_retried_by_the_sdk(server: FakeOpenAI) -> None:
    server.fail_next(429, retry_after=0.05)
    async with sdk(server, max_retries=2) as client:
        completion = await client.chat.completions.create(model=MODEL, messages=HI)
    assert completion.choices[0].message.content == "echo: hi"
    assert len(server.requests) == 2
    assert [r.status for r in server.requests] == [429, 200]
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"
    assert server.requests[1].at - server.requests[0].at >= 0.04  # the SDK slept retry-after


async def test_retry_after_ms_header_is_honoured(server: FakeOpenAI) -> None:
    server.fail_next(429, retry_after_ms=40, count=2)
    async with sdk(server, max_retries=2) as client:
        await client.chat.completions.create(model=MODEL, messages=HI)
    assert [r.status for r in server.requests] == [429, 429, 200]
    assert server.requests[2].at - server.requests[0].at >= 0.07


async def test_429_error_shape_and_header(server: FakeOpenAI) -> None:
    server.fail_next(429, retry_after=2, message="slow down")
    async with sdk(server) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await client.chat.completions.create(model=MODEL, messages=HI)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.body == {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert [r.status for r in server.requests] == [429]


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_raises_internal_server_error(server: FakeOpenAI, status: int) -> None:
    server.fail_next(status)
    async with sdk(server, max_retries=0) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model=MODEL, messages=HI)
    assert info.value.status_code == status
    assert info.value.type == "server_error"
    assert [r.status for r in server.requests] == [status]
    assert server.usages == []


async def test_x_should_retry_false_stops_sdk_retries(server: FakeOpenAI) -> None:
    server.fail_next(503, should_retry=False)
    async with sdk(server, max_retries=2) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model=MODEL, messages=HI)
    assert len(server.requests) == 1


async def test_faults_are_fifo_and_only_consumed_by_valid_requests(server: FakeOpenAI) -> None:
    server.fail_next(500)
    server.fail_next(400, message="injected")
    async with sdk(server) as client:
        with pytest.raises(openai.NotFoundError):  # unknown model: honest 404, queue untouched
            await client.chat.completions.create(model="other", messages=HI)
        assert server.pending_faults == 2
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model=MODEL, messages=HI)
        with pytest.raises(openai.BadRequestError, match="injected"):
            await client.chat.completions.create(model=MODEL, messages=HI)
        await client.chat.completions.create(model=MODEL, messages=HI)
    assert [r.status for r in server.requests] == [404, 500, 400, 200]


async def test_hang_times_out_in_the_sdk(server: FakeOpenAI) -> None:
    server.hang_next()
    async with sdk(server, timeout=0.5) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model=MODEL, messages=HI)
    [request] = server.requests
    assert request.status == 0  # nothing was ever sent


async def test_hang_with_seconds_answers_late(server: FakeOpenAI) -> None:
    server.hang_next(seconds=0.2)
    started = time.monotonic()
    async with sdk(server) as client:
        completion = await client.chat.completions.create(model=MODEL, messages=HI)
    assert completion.choices[0].message.content == "echo: hi"
    assert time.monotonic() - started >= 0.2


async def test_cut_stream_raises_api_connection_error(server: FakeOpenAI) -> None:
    server.responder = lambda messages: "abcdefghijklmnopqrstuvwxyz" * 2
    server.chunk_chars = 4
    server.cut_stream_next(after_chunks=3)
    received: list[str] = []
    async with sdk(server) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}
        )
        with pytest.raises(openai.APIConnectionError) as info:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
    assert info.type is openai.APIConnectionError  # not the APITimeoutError subclass
    assert "".join(received) == "abcdefghijkl"
    [request] = server.requests
    assert (request.status, request.completed) == (200, False)
    assert server.usages == []


async def test_cut_non_streaming_request_drops_the_connection(server: FakeOpenAI) -> None:
    server.cut_stream_next()
    async with sdk(server) as client:
        with pytest.raises(openai.APIConnectionError) as info:
            await client.chat.completions.create(model=MODEL, messages=HI)
    assert info.type is openai.APIConnectionError


async def test_stall_stream_times_out_in_sdk_iteration(server: FakeOpenAI) -> None:
    server.responder = lambda messages: "0123456789" * 3
    server.chunk_chars = 5
    server.stall_stream_next(after_chunks=2)
    received: list[str] = []
    async with sdk(server, timeout=0.5) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=HI, stream=True)
        with pytest.raises(openai.APITimeoutError):
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "0123456789"


async def test_stall_with_seconds_resumes(server: FakeOpenAI) -> None:
    server.stall_stream_next(after_chunks=0, seconds=0.2)
    started = time.monotonic()
    async with sdk(server) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=HI, stream=True)
        text, _ = await collect(stream)
    assert text == "echo: hi"
    assert time.monotonic() - started >= 0.2
    assert server.requests[0].completed


@pytest.mark.parametrize("hold", ["hang", "stall", "gate"])
async def test_stop_ends_held_requests_promptly(server: FakeOpenAI, hold: str) -> None:
    if hold == "hang":
        server.hang_next()
    elif hold == "stall":
        server.stall_stream_next(after_chunks=1)
    else:
        server.gate = asyncio.Event()

    async with sdk(server, timeout=30) as client:

        async def call() -> None:
            stream = await client.chat.completions.create(model=MODEL, messages=HI, stream=True)
            await collect(stream)

        task = asyncio.create_task(call())
        if hold == "stall":
            await server.wait_for(
                lambda: server.requests[-1].status == 200 if server.requests else False
            )
        else:
            await server.wait_for(lambda: len(server.requests) == 1)
        started = time.monotonic()
        await server.stop()
        assert time.monotonic() - started < 2
        with pytest.raises(openai.APIConnectionError):
            await task


async def test_gate_holds_requests_until_set(server: FakeOpenAI) -> None:
    server.gate = asyncio.Event()
    async with sdk(server) as client:
        tasks = [
            asyncio.create_task(client.chat.completions.create(model=MODEL, messages=HI))
            for _ in range(2)
        ]
        await server.wait_for(lambda: len(server.requests) == 2)
        assert [r.status for r in server.requests] == [0, 0]
        assert not any(t.done() for t in tasks)
        server.gate.set()
        results = await asyncio.gather(*tasks)
    assert [r.choices[0].message.content for r in results] == ["echo: hi", "echo: hi"]
    assert [r.status for r in server.requests] == [200, 200]


async def test_wait_for_times_out_with_a_helpful_message(server: FakeOpenAI) -> None:
    with pytest.raises(AssertionError, match=r"still false after 0.05s; 0 chat request"):
        await server.wait_for(lambda: False, timeout=0.05)


# --------------------------------------------------------------------------- strictness


async def test_tool_message_must_answer_a_preceding_tool_call(server: FakeOpenAI) -> None:
    call: ChatCompletionMessageParam = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    good: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "hi"},
        call,
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    bad: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "hi"},
        call,
        {"role": "tool", "tool_call_id": "call_2", "content": "42"},
    ]
    async with sdk(server) as client:
        completion = await client.chat.completions.create(model=MODEL, messages=good)
        with pytest.raises(openai.BadRequestError, match="role 'tool'") as info:
            await client.chat.completions.create(model=MODEL, messages=bad)
    assert completion.choices[0].message.content == "echo: hi"
    assert info.value.param == "messages[2].role"
    assert [r.status for r in server.requests] == [200, 400]


def _body(messages: object, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": messages, **extra}


_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model", "provide a model"),
        (_body([]), "messages", "empty array"),
        ({"model": MODEL}, "messages", "Missing required parameter"),
        (_body([{"role": "bot", "content": "x"}]), "messages[0].role", "Supported values"),
        (_body([{"role": "user", "content": 5}]), "messages[0].content", "got number"),
        (_body([{"role": "user"}]), "messages[0].content", "Missing required"),
        (_body([{"role": "assistant", "content": None}]), "messages[0].content", "got null"),
        (_body([{"role": "user", "content": []}]), "messages[0].content", "empty array"),
        (
            _body([{"role": "system", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content[0].type",
            "Supported values",
        ),
        (
            _body([{"role": "user", "content": "x", "ts": 1}]),
            "messages[0].ts",
            "Additional properties are not allowed ('ts' was unexpected)",
        ),
        (
            _body([{"role": "assistant", "content": None, "tool_calls": [_CALL]}]),
            "messages[0]",
            "did not have response messages: c1",
        ),
        (
            _body(
                [
                    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
                    {"role": "user", "content": "x"},
                ]
            ),
            "messages[0]",
            "must be followed by tool messages",
        ),
        (_body([{"role": "tool", "content": "x"}]), "messages[0].tool_call_id", "Missing"),
        (_body(HI, foo=1), "foo", "Unrecognized request argument supplied: foo"),
        (_body(HI, stream_options={"include_usage": True}), "stream_options", "only allowed"),
        (_body(HI, temperature=3), "temperature", "between 0.0 and 2.0"),
        (_body(HI, max_tokens=0), "max_tokens", "minimum"),
        (_body(HI, stream="yes"), "stream", "expected a boolean"),
        ({"model": 1, "messages": HI}, "model", "expected a string"),
        (b"{not json", None, "could not parse the JSON body"),
    ],
)
async def test_invalid_bodies_get_400(
    server: FakeOpenAI, body: object, param: str | None, fragment: str
) -> None:
    server.fail_next(500)  # must not be consumed by an invalid request
    status, _, raw = await post_raw(server, body)
    error = json.loads(raw)["error"]
    assert status == 400, error
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert fragment in error["message"]
    assert server.pending_faults == 1
    assert [r.status for r in server.requests] == [400]


async def test_valid_content_shapes_are_accepted(server: FakeOpenAI) -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
            "name": "alice",
        },
    ]
    status, _, raw = await post_raw(server, _body(messages, temperature=0.5, seed=1))
    assert status == 200, raw
    reply = json.loads(raw)
    assert reply["choices"][0]["message"]["content"] == "echo: look"
    # (4 + ceil(8/4)) + (4 + ceil(4/4) + 85) + 2
    assert reply["usage"]["prompt_tokens"] == 6 + 90 + 2


async def test_unknown_model_is_404(server: FakeOpenAI) -> None:
    async with sdk(server) as client:
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(model="gpt-nope", messages=HI)
    assert info.value.code == "model_not_found"


async def test_context_length_exceeded() -> None:
    async with FakeOpenAI(context_limit=100) as server, sdk(server) as client:
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x" * 1000}]
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model=MODEL, messages=messages)
    assert info.value.code == "context_length_exceeded"
    assert "maximum context length is 100 tokens" in info.value.message


async def test_wrong_key_is_401_without_echoing_it(server: FakeOpenAI) -> None:
    wrong = "sk-wrong-secret-123456"
    async with sdk(server, api_key=wrong) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(model=MODEL, messages=HI)
    assert info.value.code == "invalid_api_key"
    assert info.value.type == "invalid_request_error"
    text = str(info.value) + json.dumps(info.value.body)
    assert wrong not in text
    assert "wrong-secret" not in text
    assert KEY not in text
    assert [r.status for r in server.requests] == [401]
    status, _, raw = await post_raw(server, _body(HI), auth=None)
    assert status == 401
    assert "didn't provide an API key" in json.loads(raw)["error"]["message"]


async def test_no_api_key_configured_accepts_any_key() -> None:
    async with FakeOpenAI(api_key=None) as server, sdk(server, api_key="anything") as client:
        completion = await client.chat.completions.create(model=MODEL, messages=HI)
    assert completion.choices[0].message.content == "echo: hi"


async def test_responder_errors_become_500(server: FakeOpenAI) -> None:
    def broken(messages: list[dict[str, Any]]) -> str:
        raise RuntimeError("boom")

    server.responder = broken
    async with sdk(server) as client:
        with pytest.raises(openai.InternalServerError, match="boom"):
            await client.chat.completions.create(model=MODEL, messages=cast(Any, HI))
