"""ModelClient against the strict OpenAI-compatible test server.

The client builds request bodies itself (cached JSON per message) and hands
them to the SDK's ``post(content=...)``; these tests hold that the bytes are
the ones ``chat.completions.create`` would send, stable turn after turn, and
that streaming, the SDK's auth and retries, and the error kinds are unchanged.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._utils._json import openapi_dumps
from openai.resources.chat.completions import completions as sdk_completions

from bot.model import ModelClient, ModelError, WireCache, wire_messages
from bot.model.sdk import can_post_bytes
from transcript import ChatMessage
from transcript.records import ToolCall

from .fakes.model import FakeOpenAI

MODEL = "test-model"


def chain(pairs: int, *, tag: str = "") -> list[ChatMessage]:
    """A root prompt, a fold summary, then ``pairs`` user/assistant exchanges."""
    messages = [
        ChatMessage("system", "You are terse. Ünïcode ✓ 😀"),
        ChatMessage("system", 'Summary: earlier they spoke of "quotes" and </tags>.'),
    ]
    for i in range(pairs):
        messages.append(ChatMessage("user", f"question {i}{tag} \u2028 tab\t nl\n"))
        messages.append(ChatMessage("assistant", f"answer {i}{tag} — ok"))
    return messages


def with_tools(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [
        *messages,
        ChatMessage("assistant", None, (ToolCall("call_1", "lookup", '{"q": "x"}'),)),
        ChatMessage("tool", "found: 42", tool_call_id="call_1"),
        ChatMessage("user", "and then?", name="ada"),
    ]


def fresh(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Equal messages that are new objects (as decoded from Redis on a cold turn)."""
    return [
        ChatMessage(
            m.role,
            None if m.content is None else "".join(m.content),
            m.tool_calls,
            m.tool_call_id,
            m.name,
        )
        for m in messages
    ]


@asynccontextmanager
async def client(
    server: FakeOpenAI, *, max_retries: int = 0, seconds: float = 10.0, **kwargs: Any
) -> AsyncIterator[tuple[ModelClient, list[bytes]]]:
    """A ModelClient on ``server`` and the raw request bodies it sends, in order."""
    model = ModelClient(
        api_key="sk-test",
        base_url=server.base_url,
        model=MODEL,
        timeout=seconds,
        max_retries=max_retries,
        **kwargs,
    )
    sent: list[bytes] = []

    async def record(request: Any) -> None:
        sent.append(bytes(request.content))

    model._client._client.event_hooks["request"].append(record)
    try:
        yield model, sent
    finally:
        await model.close()


def ignore(_text: str) -> None:
    pass


def test_the_installed_sdk_takes_prebuilt_bodies() -> None:
    model = ModelClient(api_key="k", base_url=None, model=MODEL, timeout=1.0, max_retries=0)
    assert can_post_bytes(model._client)
    assert model._post_bytes


@pytest.mark.parametrize("tools", [False, True])
async def test_bodies_are_byte_identical_to_what_create_sends(llm: FakeOpenAI, tools: bool) -> None:
    messages = with_tools(chain(20)) if tools else chain(20)
    async with client(llm) as (fast, fast_sent), client(llm, sdk_bodies=True) as (sdk, sdk_sent):
        assert not sdk._post_bytes
        for model in (fast, sdk):
            await model.stream(messages, ignore)
            await model.complete(messages, max_tokens=7)
    assert fast_sent == sdk_sent
    assert len(fast_sent) == 2
    # and the server parsed what wire_messages describes
    expected = wire_messages(messages)
    assert [r.messages for r in llm.requests] == [expected] * 4
    assert llm.requests[0].body == {
        "model": MODEL,
        "stream": True,
        "messages": expected,
        "stream_options": {"include_usage": True},
    }
    assert llm.requests[1].body == {"model": MODEL, "messages": expected, "max_tokens": 7}
    assert all(r.headers["authorization"] == "Bearer sk-test" for r in llm.requests)
    assert all(r.headers["content-type"] == "application/json" for r in llm.requests)


async def test_the_same_chain_is_the_same_bytes_every_turn(llm: FakeOpenAI) -> None:
    messages = chain(30)
    async with client(llm) as (model, sent):
        await model.stream(messages, ignore)  # cold: encodes every message
        await model.stream(messages, ignore)  # warm: the same objects
        await model.stream(fresh(messages), ignore)  # equal messages, new objects
        model.wire = WireCache()  # as after a restart
        await model.stream(messages, ignore)
    assert len(set(sent)) == 1
    assert json.loads(sent[0])["messages"] == wire_messages(messages)


async def test_each_turn_extends_the_previous_request_bytes(llm: FakeOpenAI) -> None:
    """What a prompt cache sees: turn n+1's body starts with turn n's messages."""
    messages = chain(3)
    async with client(llm) as (model, sent):
        for turn in range(4):
            await model.stream(messages, ignore)
            messages = [*messages, ChatMessage("assistant", "x" * turn), ChatMessage("user", "y")]
    for before, after in itertools.pairwise(sent):
        cut = before.index(b'],"stream_options"')
        assert after.startswith(before[:cut] + b",")
    assert llm.requests[-1].usage is not None


async def test_the_sdk_transform_is_not_used(
    llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("the request went through the SDK's transform")

    monkeypatch.setattr(sdk_completions, "async_maybe_transform", refuse)
    async with client(llm) as (model, _sent):
        answer = await model.stream(chain(5), ignore)
        summary = await model.complete(chain(5), max_tokens=50)
    assert answer.text and summary.text


async def test_streaming_reports_growing_text_usage_and_finish(llm: FakeOpenAI) -> None:
    llm.responder = lambda _messages: "a fairly long answer, streamed in small chunks"
    seen: list[str] = []
    async with client(llm) as (model, _sent):
        answer = await model.stream(chain(2), seen.append)
    assert len(seen) > 3
    assert all(b.startswith(a) for a, b in itertools.pairwise(seen))
    assert seen[-1] == answer.text == "a fairly long answer, streamed in small chunks"
    assert not answer.usage.estimated
    assert answer.usage.prompt_tokens == llm.usages[-1].prompt_tokens


async def test_prompt_cache_hits_on_the_second_turn(llm: FakeOpenAI) -> None:
    messages = chain(200)
    async with client(llm) as (model, _sent):
        first = await model.stream(messages, ignore)
        second = await model.stream(
            [*messages, ChatMessage("assistant", first.text), ChatMessage("user", "more")], ignore
        )
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens >= 1024


async def test_sdk_retries_resend_the_same_body(llm: FakeOpenAI) -> None:
    llm.fail_next(503, retry_after_ms=10, count=2)
    async with client(llm, max_retries=2) as (model, sent):
        answer = await model.stream(chain(4), ignore)
    assert answer.text
    assert len(sent) == 3 and len(set(sent)) == 1
    assert [r.status for r in llm.requests] == [503, 503, 200]


async def test_a_stream_cut_before_text_is_tried_again(llm: FakeOpenAI) -> None:
    llm.cut_stream_next(after_chunks=0)
    async with client(llm, max_retries=1) as (model, sent):
        answer = await model.stream(chain(4), ignore)
    assert answer.text
    assert len(sent) == 2 and sent[0] == sent[1]


async def test_retries_of_a_call_are_one_count_never_nested(llm: FakeOpenAI) -> None:
    """A stream cut before text, then 503s: OPENAI_MAX_RETRIES=2 is three requests in
    all (the SDK's own retries inside ours made it four and up to nine)."""
    llm.cut_stream_next(after_chunks=0)
    llm.fail_next(503, retry_after_ms=1, count=5)
    async with client(llm, max_retries=2) as (model, sent):
        with pytest.raises(ModelError) as caught:
            await model.stream(chain(4), ignore)
    assert caught.value.kind == "unavailable"
    assert len(sent) == 3 and len(set(sent)) == 1


async def test_a_failed_summary_call_is_tried_again(llm: FakeOpenAI) -> None:
    llm.fail_next(502, retry_after_ms=1)
    async with client(llm, max_retries=1) as (model, sent):
        answer = await model.complete(chain(4), max_tokens=10)
    assert answer.text and len(sent) == 2


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry_after": 7}, 7.0),
        ({"retry_after_ms": 250}, 0.25),
        ({"retry_after": 7, "retry_after_ms": 1500}, 1.5),
        ({"retry_after": 3600}, None),  # beyond the honoured bound: the backoff decides
        ({}, None),
    ],
)
async def test_the_wait_a_rate_limit_names_is_kept(
    llm: FakeOpenAI, headers: dict[str, Any], wait: float | None
) -> None:
    llm.fail_next(429, **headers)
    async with client(llm) as (model, _sent):
        with pytest.raises(ModelError) as caught:
            await model.stream(chain(4), ignore)
    assert caught.value.kind == "rate_limited" and caught.value.transient
    assert caught.value.retry_after == wait


async def test_a_server_that_says_do_not_retry_is_not_retried(llm: FakeOpenAI) -> None:
    llm.fail_next(503, should_retry=False)
    async with client(llm, max_retries=2) as (model, sent):
        with pytest.raises(ModelError):
            await model.stream(chain(4), ignore)
    assert len(sent) == 1


async def test_a_stream_cut_after_text_keeps_the_partial(llm: FakeOpenAI) -> None:
    llm.cut_stream_next(after_chunks=2)
    async with client(llm, max_retries=1) as (model, _sent):
        with pytest.raises(ModelError) as caught:
            await model.stream(chain(40), ignore)
    assert caught.value.kind == "unavailable"
    assert caught.value.mid_stream and caught.value.partial
    assert caught.value.usage.estimated and caught.value.usage.completion_tokens > 0


async def test_a_stalled_stream_is_a_timeout(llm: FakeOpenAI) -> None:
    llm.stall_stream_next(after_chunks=1, seconds=30)
    async with client(llm, seconds=0.5) as (model, _sent):
        with pytest.raises(ModelError) as caught:
            await model.stream(chain(40), ignore)
    assert caught.value.kind == "timeout"


Setup = Callable[[FakeOpenAI], None]


def _fail(status: int) -> Setup:
    return lambda server: server.fail_next(status, count=3)


def _wrong_key(server: FakeOpenAI) -> None:
    server.api_key = "sk-other"


def _unknown_model(server: FakeOpenAI) -> None:
    server.model = "another-model"


def _small_context(server: FakeOpenAI) -> None:
    server.context_limit = 50


@pytest.mark.parametrize(
    ("setup", "kind"),
    [
        (_fail(429), "rate_limited"),
        (_fail(500), "unavailable"),
        (_fail(503), "unavailable"),
        (_fail(400), "rejected"),
        (_fail(422), "rejected"),
        (_wrong_key, "config"),
        (_unknown_model, "config"),
        (_small_context, "too_long"),
    ],
)
@pytest.mark.parametrize("streamed", [True, False])
async def test_errors_keep_their_kinds(
    llm: FakeOpenAI, setup: Setup, kind: str, streamed: bool
) -> None:
    setup(llm)
    async with client(llm) as (model, _sent):
        with pytest.raises(ModelError) as caught:
            if streamed:
                await model.stream(chain(10), ignore)
            else:
                await model.complete(chain(10), max_tokens=10)
    assert caught.value.kind == kind
    assert not caught.value.mid_stream


async def test_an_unreachable_endpoint_is_unavailable() -> None:
    server = FakeOpenAI()
    await server.start()
    base_url = server.base_url
    await server.stop()
    model = ModelClient(api_key="k", base_url=base_url, model=MODEL, timeout=2.0, max_retries=0)
    try:
        with pytest.raises(ModelError) as caught:
            await model.stream(chain(1), ignore)
    finally:
        await model.close()
    assert caught.value.kind == "unavailable"


def test_the_wire_cache_stays_within_its_budget() -> None:
    cache = WireCache(max_bytes=64 * 1024)
    for i in range(20_000):
        cache.encode(ChatMessage("user", f"message number {i} " + "x" * (i % 300)))
        assert cache.nbytes <= 64 * 1024
    assert 0 < len(cache) < 1_000
    held = sum(map(len, cache._young.values())) + sum(map(len, cache._old.values()))
    assert held <= cache.nbytes // 2


def test_a_message_larger_than_the_budget_passes_through() -> None:
    cache = WireCache(max_bytes=1024)
    big = ChatMessage("user", "z" * 5000)
    assert json.loads(cache.encode(big)) == {"role": "user", "content": "z" * 5000}
    cache.encode(ChatMessage("user", "small"))
    cache.encode(ChatMessage("user", "another"))
    assert big not in cache._young and big not in cache._old


def test_the_wire_cache_keeps_a_chain_it_keeps_seeing() -> None:
    cache = WireCache(max_bytes=256 * 1024)
    messages = chain(100)
    first = cache.messages(messages)
    for i in range(5_000):  # other chats' traffic, far beyond the budget
        cache.encode(ChatMessage("user", f"other {i} " + "y" * 100))
        if i % 100 == 0:
            assert cache.messages(messages) == first
    assert cache.messages(fresh(messages)) == first
    assert json.loads(first) == wire_messages(messages)


_texts = st.text(st.characters(codec="utf-8"), max_size=60)
_messages = st.lists(
    st.builds(
        ChatMessage,
        st.sampled_from(["system", "user", "assistant", "tool"]),
        st.one_of(st.none(), _texts),
        st.tuples() | st.tuples(st.builds(ToolCall, _texts, _texts, _texts)),
        st.none() | _texts,
        st.none() | _texts,
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(messages=_messages, model=_texts, max_tokens=st.integers(1, 100_000))
def test_bodies_are_what_the_sdk_serializer_writes(
    messages: list[ChatMessage], model: str, max_tokens: int
) -> None:
    cache = WireCache(max_bytes=4096)
    wire = wire_messages(messages)
    streamed = {
        "model": model,
        "stream": True,
        "messages": wire,
        "stream_options": {"include_usage": True},
    }
    for _ in range(2):  # encoded, then from the cache
        assert cache.stream_body(model, messages) == openapi_dumps(streamed)
        assert cache.complete_body(model, messages, max_tokens) == openapi_dumps(
            {"model": model, "messages": wire, "max_tokens": max_tokens}
        )
