"""Tools: MCP servers of our own (stdio and HTTP), the per-node tool loop, its pairing
and crash safety, against the real bot, the real openai SDK and the OpenAI test
server, which rejects (400) any request with a call or result left unpaired.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from redis.asyncio import Redis

from bot.data import keys
from bot.ops.doctor import doctor
from bot.settings import SettingsError
from bot.settings_load import load_settings
from bot.tools.box import ToolResult
from bot.tools.config import parse_config
from bot.tools.hub import ToolHub
from bot.turn.notices import TOOL_ROUNDS, TURN_GUARD
from bot.turn.tools import ERROR_MARK, INTERRUPTED
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI, ToolCalls
from .fakes.telegram import FakeTelegram
from .harness import USER, BotProcess, answers_to, ask, env_for, running_bot, settings_for
from .redis_server import RedisServer

SERVER = str(Path(__file__).parent / "fakes" / "mcp_server.py")
GROUP = -100700


def tool_responder(messages: list[dict[str, Any]]) -> str | ToolCalls:
    """A model that uses the test tools: what it does depends on the user's last message."""
    users = [m for m in messages if m["role"] == "user"]
    asked = str(users[-1]["content"]) if users else ""
    last = messages[-1]
    if last["role"] == "tool":
        results: list[str] = []
        for m in reversed(messages):
            if m["role"] != "tool":
                break
            results.insert(0, str(m["content"]))
        if asked == "loop":
            return ToolCalls([("t__add", '{"a": 1, "b": 1}')])
        if asked == "mail after weather" and len([m for m in messages if m["role"] == "tool"]) == 1:
            return ToolCalls(
                [
                    ("t__send_mail", '{"to": "ada"}'),
                    ("t__slow_read", '{"seconds": 0}'),
                    ("t__add", '{"a": 20, "b": 22}'),
                ]
            )
        return "result: " + " | ".join(results)
    if asked.startswith("weather "):
        return ToolCalls([("t__weather", json.dumps({"city": asked[8:]}))], "Let me look.")
    if asked == "two tools":
        return ToolCalls([("t__weather", '{"city": "Oslo"}'), ("t__add", '{"a": 2, "b": 3}')])
    if asked == "fail":
        return ToolCalls([("t__fail", '{"reason": "boom"}')])
    if asked == "slow":
        return ToolCalls([("t__slow_read", '{"seconds": 0}')])
    if asked == "big":
        return ToolCalls([("t__big", '{"chars": 3000}')])
    if asked in ("loop", "mail after weather"):
        return ToolCalls([("t__weather", '{"city": "Rome"}')])
    return f"echo: {asked}"


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def stdio_server(log: Path, **env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER], "env": {"MCP_CALL_LOG": str(log), **env}}


def calls_logged(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()]


@pytest.fixture(autouse=True)
def _fresh_redis(redis: Redis) -> None:
    """Every test starts on an empty Redis (message ids start at 1 in each test)."""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "mcp.json", {"t": stdio_server(tmp_path / "calls.log")})


@pytest.fixture
def tool_llm(llm: FakeOpenAI) -> FakeOpenAI:
    llm.responder = tool_responder
    return llm


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


async def test_a_tool_turn_end_to_end_and_the_next_turn_keeps_the_pair(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, redis: Redis, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        message, text = await ask(tg, app, USER, "weather Paris")
        assert text == "[depth:2] result: sunny, 21 C in Paris"
        first, second = tool_llm.requests
        assert first.stream and second.stream
        offered = [t["function"]["name"] for t in first.body["tools"]]
        assert "t__weather" in offered and "t__send_mail" in offered
        [call] = first.tool_calls
        assert roles(second.messages) == ["system", "user", "assistant", "tool"]
        assert second.messages[2]["tool_calls"][0]["id"] == call["id"]
        assert second.messages[2]["content"] == "Let me look."
        assert second.messages[3] == {
            "role": "tool",
            "content": "sunny, 21 C in Paris",
            "tool_call_id": call["id"],
        }
        # the node: user message, the step (call and result), the answer, in order
        store = TranscriptStore(redis)
        [answer] = answers_to(tg, USER, message)
        node = await store.resolve(str(USER), answer.message_id)
        assert node is not None
        history = await store.history(node)
        assert [m.role for m in history.messages] == [
            "system", "user", "assistant", "tool", "assistant",
        ]  # fmt: skip
        assert history.depth == 2
        spent = await app.accounting.turn(USER, message)
        assert spent.calls == 2  # both calls of the loop are accounted
        assert spent.prompt == sum(r.usage.prompt_tokens for r in tool_llm.requests if r.usage)
        # the next turn sends the call and its result again, paired (else: 400)
        _, text = await ask(tg, app, USER, "thanks", reply_to=answer.message_id)
        assert text == "[depth:4] echo: thanks"
        last = tool_llm.requests[-1]
        assert last.status == 200
        assert roles(last.messages) == [
            "system", "user", "assistant", "tool", "assistant", "user",
        ]  # fmt: skip


@pytest.mark.parametrize("whole", [False, True], ids=["openai", "whole-calls"])
async def test_two_tools_in_one_round_run_and_come_back_in_order(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path, whole: bool
) -> None:
    tool_llm.whole_tool_calls = whole  # sloppy servers send each call whole, no index
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "two tools")
    assert text == "[depth:2] result: sunny, 21 C in Oslo | 5"
    assert len(tool_llm.requests) == 2
    ids = [c["id"] for c in tool_llm.requests[0].tool_calls]
    sent = tool_llm.requests[1].messages
    assert [m.get("tool_call_id") for m in sent[3:]] == ids


async def test_a_tool_error_goes_back_to_the_model_as_a_result(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "fail")
    result = tool_llm.requests[1].messages[-1]
    assert result["role"] == "tool"
    assert result["content"].startswith(ERROR_MARK)
    assert "boom" in result["content"]
    assert text == f"[depth:2] result: {result['content']}"


async def test_the_round_limit_ends_with_a_notice_that_can_be_continued(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config, tool_max_rounds=2)
    async with running_bot(settings) as app:
        message, text = await ask(tg, app, USER, "loop")
        assert TOOL_ROUNDS.format(rounds=2) in text
        assert len(tool_llm.requests) == 3  # two rounds run, the third ask is refused
        [notice] = answers_to(tg, USER, message)
        _, text = await ask(tg, app, USER, "go on", reply_to=notice.message_id)
    assert text == "[depth:3] echo: go on"  # the notice is no answer: it does not count
    last = tool_llm.requests[-1]
    assert last.status == 200
    assert roles(last.messages) == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user",
    ]  # fmt: skip


async def test_the_pairs_stay_on_a_branch_after_a_restart_and_across_a_fold(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        message, _ = await ask(tg, app, USER, "two tools")
        [answer] = answers_to(tg, USER, message)
        left, text = await ask(tg, app, USER, "left", reply_to=answer.message_id)
        assert text == "[depth:4] echo: left"
        _, text = await ask(tg, app, USER, "weather Lima", reply_to=answer.message_id)
        assert text == "[depth:4] result: sunny, 21 C in Lima"
        branch = tool_llm.requests[-1].messages
        assert roles(branch)[:5] == ["system", "user", "assistant", "tool", "tool"]
        assert {"role": "user", "content": "left"} not in branch
    # a new process (cold caches) on a small budget: the chain folds as it grows
    small = settings_for(
        tg, tool_llm, redis_server.url, mcp_config=config, context_token_budget=700,
        allowed_tools="t/weather",
    )  # fmt: skip
    reply_to = answers_to(tg, USER, left)[0].message_id
    async with running_bot(small) as app:
        for i in range(12):
            question = f"weather City{i}" if i % 2 else f"question {i} " + "x" * 120
            message, text = await ask(tg, app, USER, question, reply_to=reply_to)
            assert text.startswith(f"[depth:{6 + 2 * i}] ")
            reply_to = answers_to(tg, USER, message)[-1].message_id
    answered = [r for r in tool_llm.requests if "running summary" not in str(r.messages[0])]
    assert all(r.status == 200 for r in tool_llm.requests)
    folded = [r for r in answered if "Summary of the earlier part" in str(r.messages[0])]
    assert folded, "the chain never folded"
    for request in folded:
        # the verbatim part after the summary starts with a user's message: no orphans
        assert request.messages[1]["role"] == "user"


async def test_a_result_over_its_share_of_the_budget_is_cut_and_kept_paired(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(
        tg, tool_llm, redis_server.url, mcp_config=config, context_token_budget=2000,
        allowed_tools="t/big",
    )  # fmt: skip
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "big")
    result = tool_llm.requests[1].messages[-1]
    assert result["tool_call_id"] == tool_llm.requests[0].tool_calls[0]["id"]
    assert result["content"] == "0123456789" * 200 + "\n[cut: 3000 characters in all]"
    assert text.startswith("[depth:2] result: 0123456789")


async def test_the_turn_token_guard_covers_the_whole_loop(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config, turn_max_tokens=1)
    async with running_bot(settings) as app:
        message, text = await ask(tg, app, USER, "loop")
        assert TURN_GUARD in text
        assert len(tool_llm.requests) == 1  # no second call past the guard
        assert (await app.accounting.turn(USER, message)).calls == 1
        [notice] = answers_to(tg, USER, message)
        _, text = await ask(tg, app, USER, "hello again", reply_to=notice.message_id)
    assert text == "[depth:3] echo: hello again"  # the user's message was kept


async def test_large_results_of_earlier_turns_become_stubs_keeping_the_pair(
    tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        message, _ = await ask(tg, app, USER, "big")
        assert len(tool_llm.requests[1].messages[-1]["content"]) == 3000  # this turn: whole
        [answer] = answers_to(tg, USER, message)
        await ask(tg, app, USER, "next", reply_to=answer.message_id)
    stub = tool_llm.requests[-1].messages[3]
    assert stub["role"] == "tool"
    assert stub["tool_call_id"] == tool_llm.requests[0].tool_calls[0]["id"]
    assert "3000 characters" in stub["content"] and len(stub["content"]) < 200


async def test_a_server_that_fails_at_start_is_logged_and_skipped(
    tmp_path: Path,
    tg: FakeTelegram,
    tool_llm: FakeOpenAI,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = tmp_path / "calls.log"
    config = write_config(
        tmp_path / "mcp.json",
        {
            "broken": stdio_server(log, MCP_FAIL_AT_START="1"),
            "missing": {"command": str(tmp_path / "no-such-server")},
            "t": stdio_server(log),
        },
    )
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    with caplog.at_level(logging.WARNING, logger="replychain.tools"):
        async with running_bot(settings) as app:
            _, text = await ask(tg, app, USER, "weather Oslo")
    assert text == "[depth:2] result: sunny, 21 C in Oslo"
    failed = [r.getMessage() for r in caplog.records if "failed to start" in r.getMessage()]
    assert len(failed) == 2
    assert any(line.startswith("tool server broken failed to start") for line in failed)
    assert any(line.startswith("tool server missing failed to start") for line in failed)


async def test_bad_calls_come_back_as_error_results(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    server = parse_config(
        json.dumps({"mcpServers": {"t": stdio_server(tmp_path / "log", MCP_HOLD=str(hold))}})
    )
    hub = ToolHub(server, call_timeout=0.5)
    await hub.start()
    try:
        assert await hub.call("t__add", "{not json") == ToolResult(
            "the arguments are not valid JSON", error=True
        )
        assert await hub.call("t__add", "[1, 2]") == ToolResult(
            "the arguments must be a JSON object", error=True
        )
        assert await hub.call("t__nope", "{}") == ToolResult(
            "there is no tool named 't__nope'", error=True
        )
        assert await hub.call("t__slow_read", '{"seconds": 0}') == ToolResult(
            "the tool did not answer within 0.5s", error=True
        )
        assert await hub.call("t__add", '{"a": 1, "b": 2}') == ToolResult("3")
        assert hub.idempotent("t__slow_read") and not hub.idempotent("t__send_mail")
    finally:
        hold.unlink()
        await hub.close()


async def test_doctor_names_each_tool_server(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    log = tmp_path / "calls.log"
    config = write_config(
        tmp_path / "mcp.json",
        {"t": stdio_server(log), "broken": stdio_server(log, MCP_FAIL_AT_START="1")},
    )
    lines, failed = await doctor(settings_for(tg, llm, redis_server.url, mcp_config=config))
    assert not failed
    assert "✓ tool server t: 6 tool(s) offered" in lines
    [broken] = [line for line in lines if "tool server broken" in line]
    assert broken.startswith("⚠ tool server broken: failed to start (")


async def test_only_failing_servers_or_no_config_send_no_tools(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    config = write_config(tmp_path / "mcp.json", {"x": {"command": str(tmp_path / "nothing")}})
    async with running_bot(settings_for(tg, llm, redis_server.url, mcp_config=config)) as app:
        await ask(tg, app, USER, "hello")
    async with running_bot(settings_for(tg, llm, redis_server.url)) as app:
        await ask(tg, app, USER, "hello")
    with_config, without = llm.requests
    assert "tools" not in with_config.body
    assert with_config.body == without.body


async def test_allowed_tools_and_groups_limit_what_is_offered(
    tmp_path: Path, tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer, config: Path
) -> None:
    tg.add_group(GROUP, "Team")
    settings = settings_for(
        tg, tool_llm, redis_server.url, mcp_config=config, allowed_tools="t/weather,t/add"
    )
    async with running_bot(settings) as app:
        await ask(tg, app, USER, "weather Oslo")
        offered = sorted(t["function"]["name"] for t in tool_llm.requests[0].body["tools"])
        assert offered == ["t__add", "t__weather"]
        tool_llm.responder = lambda _m: "no tools here"
        _, text = await ask(tg, app, GROUP, "@replychain_bot weather Oslo")
    assert "tools" not in tool_llm.requests[-1].body
    assert text == "[depth:2] no tools here"


async def test_the_answer_shows_which_tool_is_working(
    tmp_path: Path, tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    log, hold = tmp_path / "calls.log", tmp_path / "hold"
    config = write_config(tmp_path / "mcp.json", {"t": stdio_server(log, MCP_HOLD=str(hold))})
    hold.touch()
    async with running_bot(settings_for(tg, tool_llm, redis_server.url, mcp_config=config)):
        message = tg.send_user_message(USER, USER, "slow")["message_id"]
        # a private chat shows it in the draft (a group, in the message being edited)
        await tg.wait_for(
            lambda: (
                (draft := tg.current_draft(USER)) is not None
                and draft.text == "[depth:2] 🔧 Using slow_read…"
            ),
            timeout=30,
        )
        assert not answers_to(tg, USER, message)
        hold.unlink()
        await tg.wait_for(
            lambda: (
                [m.text for m in answers_to(tg, USER, message)]
                == ["[depth:2] result: read after 0.0s"]
            ),
            timeout=30,
        )


def test_a_bad_mcp_config_is_one_clear_settings_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"x": {"args": []}}}')
    monkeypatch.setenv("MCP_CONFIG", str(bad))
    with pytest.raises(SettingsError) as caught:
        load_settings(env_file=None)
    assert str(caught.value) == (
        'MCP_CONFIG mcpServers.x needs either "command" (stdio) or "url" (HTTP); '
        "see docs/operating.md, Tools, for the format"
    )
    monkeypatch.setenv("MCP_CONFIG", str(tmp_path / "missing.json"))
    with pytest.raises(SettingsError, match=r"MCP_CONFIG cannot read .*missing\.json"):
        load_settings(env_file=None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, SERVER, "--http", str(port),
        env={"MCP_CALL_LOG": str(tmp_path / "http.log"), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


async def test_a_streamable_http_server_serves_tools(
    tmp_path: Path, tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer,
    http_server: str,
) -> None:  # fmt: skip
    config = write_config(tmp_path / "mcp.json", {"t": {"url": http_server}})
    settings = settings_for(tg, tool_llm, redis_server.url, mcp_config=config)
    async with running_bot(settings) as app:
        _, text = await ask(tg, app, USER, "two tools")
    assert text == "[depth:2] result: sunny, 21 C in Oslo | 5"
    assert calls_logged(tmp_path / "http.log") == ["weather", "add"] or calls_logged(
        tmp_path / "http.log"
    ) == ["add", "weather"]


async def test_kill_mid_loop_resumes_without_rerunning_a_stored_call(
    tmp_path: Path, tg: FakeTelegram, tool_llm: FakeOpenAI, redis_server: RedisServer,
    redis: Redis,
) -> None:  # fmt: skip
    log, hold = tmp_path / "calls.log", tmp_path / "hold"
    config = write_config(tmp_path / "mcp.json", {"t": stdio_server(log, MCP_HOLD=str(hold))})
    env = env_for(tg, tool_llm, redis_server.url, MCP_CONFIG=str(config))
    hold.touch()
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "mail after weather")["message_id"]
    # round 1 (weather) is stored; in round 2 add's result is noted, two calls are held
    await tg.wait_for(
        lambda: sorted(calls_logged(log)) == ["add", "send_mail", "slow_read", "weather"], 30
    )
    turn_key = keys.turn_key(str(USER), message)
    for _ in range(500):
        if await redis.hexists(turn_key, "q2.2"):
            break
        await asyncio.sleep(0.02)
    assert await redis.hexists(turn_key, "q2.2")
    assert not await redis.hexists(turn_key, "q2.0")
    await first.kill()
    hold.unlink()
    second = BotProcess(env, tmp_path)
    await second.start()
    try:  # a new process and its tool server start first: give it time on a busy machine
        await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=60)
    finally:
        await second.terminate()
        print(second.text)  # shown when the test fails
    [answer] = answers_to(tg, USER, message)
    # stored and noted results are reused; the mail is not sent twice; the read runs again
    assert sorted(calls_logged(log)) == ["add", "send_mail", "slow_read", "slow_read", "weather"]
    assert answer.text == f"[depth:2] result: {INTERRUPTED} | read after 0.0s | 42"
    last = tool_llm.requests[-1].messages
    assert roles(last) == ["system", "user", "assistant", "tool", "assistant", *["tool"] * 3]
    assert len(tool_llm.requests) == 3  # weather round, mail round, the answer after restart
    assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None


async def test_the_test_server_sends_tool_calls_without_streaming(tool_llm: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(base_url=tool_llm.base_url, api_key="sk-test", max_retries=0)
    tools: list[Any] = [{"type": "function", "function": {"name": "t__add", "parameters": {}}}]
    response = await client.chat.completions.create(
        model="test-model",
        messages=[{"role": "user", "content": "two tools"}],
        tools=tools,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    names = [c.function.name for c in choice.message.tool_calls]  # type: ignore[union-attr]
    assert names == ["t__weather", "t__add"]
    with pytest.raises(openai.BadRequestError, match="did not have response messages"):
        await client.chat.completions.create(
            model="test-model",
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
                ]},
                {"role": "user", "content": "unpaired"},
            ],
        )  # fmt: skip
    await client.close()
