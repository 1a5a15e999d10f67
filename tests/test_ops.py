"""The operator's commands, run as ``python -m bot ...`` against real Redis and the test servers.

``doctor`` checks a set-up (good, a wrong token, Redis without persistence, an
unknown model, Redis away, a bad setting); ``export``, ``tree`` and ``why`` read
threads the real bot stored (a branched thread, a folded one, unknown ids,
expired audit records).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.data import keys as bot_keys
from bot.turn.context import SUMMARY_PREFIX

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import ROOT, USER, BotFactory, answers_to, ask, env_for
from .redis_server import RedisServer, _ping, free_port
from .test_layout import REFUSED, holding

WRONG_TOKEN = "999:wrong-token-xyz123456"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


async def cli(cwd: Path, env: dict[str, str], *args: str) -> Result:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def line_of(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.startswith(start)]
    assert found, f"no line starting with {start!r} in:\n{text}"
    return found[0]


def assert_no_secrets(text: str, tg: FakeTelegram) -> None:
    for secret in (tg.token, tg.token.partition(":")[2], "sk-test", WRONG_TOKEN):
        assert secret not in text
    assert "Traceback" not in text


@pytest.fixture
def bare_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server without persistence (no AOF, no snapshots) that may evict keys."""
    binary = shutil.which("redis-server")
    assert binary is not None
    port = free_port()
    proc = subprocess.Popen(
        [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
            "--appendonly", "no", "--save", "", "--maxmemory-policy", "allkeys-lru",
            "--daemonize", "no",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(500):
            if _ping(port):
                break
            assert proc.poll() is None, "redis-server did not start"
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---------------------------------------------------------------------- doctor


async def test_doctor_passes_a_good_set_up(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    result = await cli(tmp_path, env_for(tg, llm, redis_server.url), "doctor", "--call")
    assert result.code == 0, result
    out = result.out
    assert line_of(out, "✓ settings")
    assert "@" in line_of(out, "✓ Telegram:")
    assert "none set" in line_of(out, "✓ Telegram webhook:")
    assert "on: @replychain_bot answers" in line_of(out, "✓ guest mode:")
    assert line_of(out, "✓ Redis: Redis ")
    assert "none yet" in line_of(out, "✓ Redis key layout:")  # the bot never ran here
    assert "AOF on" in line_of(out, "✓ Redis persistence:")
    assert "noeviction" in line_of(out, "✓ Redis eviction:")
    assert "test-model" in line_of(out, "✓ model:")
    assert "one-token" in line_of(out, "✓ model call:")
    assert out.rstrip().endswith("✓ the bot can run")
    assert "✗" not in out and "⚠" not in out
    assert_no_secrets(out + result.err, tg)
    assert [r.body.get("max_tokens") for r in llm.requests] == [1]


async def test_doctor_says_how_to_turn_guest_mode_on(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    tg.guest_mode = False  # not switched on in @BotFather
    result = await cli(tmp_path, env_for(tg, llm, redis_server.url), "doctor")
    assert result.code == 0, result  # the bot runs; nobody can summon it elsewhere
    line = line_of(result.out, "⚠ guest mode:")
    assert "supports_guest_queries" in line and "@BotFather" in line
    off = await cli(tmp_path, env_for(tg, llm, redis_server.url, GUEST_MODE="false"), "doctor")
    assert "GUEST_MODE=false" in line_of(off.out, "✓ guest mode:")


async def test_doctor_names_a_rejected_token(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    env = env_for(tg, llm, redis_server.url, TELEGRAM_BOT_TOKEN=WRONG_TOKEN)
    result = await cli(tmp_path, env, "doctor")
    assert result.code == 1, result
    line = line_of(result.out, "✗ Telegram:")
    assert "TELEGRAM_BOT_TOKEN was rejected (401" in line
    assert line_of(result.out, "✓ Redis:")  # the other checks still ran
    assert line_of(result.out, "✓ model:")
    assert result.out.rstrip().endswith("✗ the bot cannot run: fix the lines marked ✗")
    assert_no_secrets(result.out + result.err, tg)


async def test_doctor_warns_about_redis_without_persistence_and_a_webhook(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, bare_redis: str
) -> None:
    tg.webhook_url = "https://hooks.example.org/path/s3cret-path-part"
    result = await cli(tmp_path, env_for(tg, llm, bare_redis), "doctor")
    assert result.code == 0, result  # the bot can run, but should not like this
    assert "neither AOF nor RDB snapshots are on" in line_of(result.out, "⚠ Redis persistence:")
    assert "allkeys-lru" in line_of(result.out, "⚠ Redis eviction:")
    webhook = line_of(result.out, "⚠ Telegram webhook:")
    assert "hooks.example.org" in webhook
    assert "s3cret" not in result.out  # a webhook path often holds a secret
    assert "see the lines marked ⚠" in result.out.splitlines()[-1]


async def test_doctor_names_an_unknown_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    env = env_for(tg, llm, redis_server.url, OPENAI_MODEL="no-such-model")
    result = await cli(tmp_path, env, "doctor", "--call")
    assert result.code == 1, result
    line = line_of(result.out, "✗ model:")
    assert "OPENAI_MODEL=no-such-model is not among the 1 model(s)" in line
    assert "test-model" in line
    assert not llm.requests  # no call to a model known not to exist


async def test_doctor_names_a_rejected_key_and_an_unreachable_redis(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI
) -> None:
    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    env = env_for(tg, llm, redis_url, OPENAI_API_KEY="sk-wrong-key-123456")
    result = await cli(tmp_path, env, "doctor")
    assert result.code == 1, result
    assert "REDIS_URL" in line_of(result.out, "✗ Redis: cannot reach Redis")
    assert "OPENAI_API_KEY was rejected (401)" in line_of(result.out, "✗ model:")
    assert "sk-wrong-key-123456" not in result.out + result.err


async def test_doctor_reports_a_bad_setting_in_one_line(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    env = env_for(tg, llm, redis_server.url, CONTEXT_TOKEN_BUDGET="lots")
    result = await cli(tmp_path, env, "doctor")
    assert result.code == 2, result
    assert result.out.count("\n") == 1
    assert result.out.startswith("✗ settings: CONTEXT_TOKEN_BUDGET is invalid")


async def test_every_operator_command_has_help(tmp_path: Path) -> None:
    top = await cli(tmp_path, {}, "--help")
    assert top.code == 0
    for name in ("doctor", "export", "tree", "why"):
        assert name in top.out
        result = await cli(tmp_path, {}, name, "--help")
        assert result.code == 0, result
        assert f"python -m bot {name}" in result.out


# -------------------------------------------------------------- export, tree, why


@dataclass(frozen=True)
class Branched:
    hello: int
    first_answer: int
    joke: int
    joke_answer: int
    explain: int
    explain_answer: int


async def branched_thread(tg: FakeTelegram, start_bot: BotFactory, **extra: Any) -> Branched:
    """hello → answer; two replies to that answer: "tell me a joke" and "explain it"."""
    async with start_bot(**extra) as app:
        hello, _ = await ask(tg, app, USER, "hello there, how are you today my dear friend")
        first = answers_to(tg, USER, hello)[-1].message_id
        joke, _ = await ask(tg, app, USER, "tell me a joke", reply_to=first)
        explain, _ = await ask(tg, app, USER, "explain it", reply_to=first)
    return Branched(
        hello,
        first,
        joke,
        answers_to(tg, USER, joke)[-1].message_id,
        explain,
        answers_to(tg, USER, explain)[-1].message_id,
    )


async def test_export_tree_and_why_of_a_branched_thread(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    start_bot: BotFactory,
) -> None:
    thread = await branched_thread(tg, start_bot)
    env = env_for(tg, llm, redis_server.url)
    texts = [
        await check_export(tmp_path, env, tg, thread),
        await check_tree(tmp_path, env, thread),
        await check_why(tmp_path, env, tg, llm, thread),
    ]
    assert_no_secrets("".join(texts), tg)


async def check_export(
    tmp_path: Path, env: dict[str, str], tg: FakeTelegram, thread: Branched
) -> str:
    exported = await cli(tmp_path, env, "export", str(USER), str(thread.joke_answer))
    assert exported.code == 0, exported
    md = exported.out
    assert md.startswith(f"# Conversation in chat {USER}, up to message {thread.joke_answer}\n")
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == ["## System prompt", "## User", "## Assistant", "## User", "## Assistant"]
    assert "## System prompt\n\nYou are a test assistant.\n" in md
    assert "## User\n\nhello there, how are you today my dear friend\n" in md
    assert "## User\n\ntell me a joke\n" in md
    assert "explain it" not in md  # exactly that branch
    jokes = [m.text for m in answers_to(tg, USER, thread.joke)]
    assert jokes
    assert jokes[0] and jokes[0].removeprefix("[depth:4] ") in md
    return md


async def check_tree(tmp_path: Path, env: dict[str, str], thread: Branched) -> str:
    shown = await cli(tmp_path, env, "tree", str(USER), str(thread.explain))
    assert shown.code == 0, shown
    lines = shown.out.splitlines()
    assert "7 nodes, 2 branches" in lines[0]
    assert lines[1].startswith("system prompt: You are a test assistant.")
    assert "6 below" in lines[1]
    assert lines[2].startswith("[depth:1] user: hello there, how are you today my dear…")
    assert f"msg {thread.hello}; 5 below" in lines[2]
    assert lines[3].startswith("[depth:2] bot: ")
    assert f"msg {thread.first_answer}; 4 below" in lines[3]
    assert lines[4].startswith("├─ [depth:3] user: tell me a joke")
    assert lines[5].startswith("│  [depth:4] bot: ")
    assert lines[6].startswith("└─ [depth:3] user: explain it")
    assert lines[6].endswith("◀ this message")
    assert lines[7].startswith("   [depth:4] bot: ")
    assert "0 below" in lines[7]
    assert sum("◀" in line for line in lines) == 1
    return shown.out


async def check_why(
    tmp_path: Path, env: dict[str, str], tg: FakeTelegram, llm: FakeOpenAI, thread: Branched
) -> str:
    why = await cli(tmp_path, env, "why", str(USER), str(thread.explain_answer))
    assert why.code == 0, why
    text = why.out
    assert f"# Why: answer message {thread.explain_answer} in chat {USER}" in text
    assert f"the user's message {thread.explain}" in text
    call = line_of(text, "- ")
    assert "answer call to test-model" in call
    request = llm.requests[-1]  # the "explain it" call
    assert request.usage is not None
    usage = line_of(text, "  usage: ")
    assert f"prompt {request.usage.prompt_tokens} tokens" in usage
    assert f"completion {request.usage.completion_tokens} tokens" in usage
    assert "outcome: answered" in text
    assert "View: the full history (no fold)." in text
    rendered = text.split("## Rendered request", 1)[1].split("## What came back")[0]
    for message in request.messages:  # every message sent is in the rendered request
        assert str(message["content"]) in rendered
    assert "tell me a joke" not in rendered
    assert rendered.index("hello there") < rendered.index("explain it")
    back = text.split("## What came back", 1)[1]
    shown_answer = answers_to(tg, USER, thread.explain)[0].text or ""
    assert shown_answer.removeprefix("[depth:4] ") in back
    return text


async def test_unknown_chats_and_messages_are_one_line(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    start_bot: BotFactory,
) -> None:
    thread = await branched_thread(tg, start_bot)
    env = env_for(tg, llm, redis_server.url)
    for command in ("export", "tree", "why"):
        unknown_chat = await cli(tmp_path, env, command, "424242", "1")
        assert unknown_chat.code == 1, unknown_chat
        assert unknown_chat.out == ""
        assert unknown_chat.err == "replychain: chat 424242 is unknown: no thread is stored " \
            "for it (check CHAT_ID, and that REDIS_URL is the bot's Redis)\n"  # fmt: skip
        unknown = await cli(tmp_path, env, command, str(USER), "999999")
        assert unknown.code == 1, unknown
        assert unknown.err.count("\n") == 1
        assert unknown.err.startswith(f"replychain: message 999999 of chat {USER} is unknown")
    root = await cli(tmp_path, env, "why", str(USER), str(thread.hello))
    assert root.code == 0, root  # a user's message: the call that answered it
    assert "# Why: question message" in root.out


async def test_why_says_when_audit_records_are_gone(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    redis: Redis,
    start_bot: BotFactory,
) -> None:
    thread = await branched_thread(tg, start_bot)
    pattern = bot_keys.chat_usage_key(USER, "a", "*")
    audit = [k async for k in redis.scan_iter(match=pattern)]
    assert len(audit) == 1  # the chat's audit hash of the day
    assert await redis.hlen(audit[0]) == 3  # one field per call
    await redis.delete(*audit)  # as if MODEL_AUDIT_DAYS had passed
    env = env_for(tg, llm, redis_server.url)
    gone = await cli(tmp_path, env, "why", str(USER), str(thread.joke_answer))
    assert gone.code == 1, gone
    assert gone.err.count("\n") == 1
    assert "MODEL_AUDIT_DAYS=7 day(s), so this one has expired" in gone.err
    off_env = {**env, "MODEL_AUDIT_DAYS": "0"}
    off = await cli(tmp_path, off_env, "why", str(USER), str(thread.joke_answer))
    assert off.code == 1
    assert "MODEL_AUDIT_DAYS=0 turns them off" in off.err
    exported = await cli(tmp_path, env, "export", str(USER), str(thread.joke_answer))
    assert exported.code == 0  # the thread itself never expires


SUMMARY_MARK = "You keep a running summary"


def folding_responder(messages: list[dict[str, Any]]) -> str:
    if str(messages[0]["content"]).startswith(SUMMARY_MARK):
        return "The user asked numbered questions; all were answered."
    return f"echo: {messages[-1]['content']}"


async def test_why_shows_the_fold_a_call_was_sent(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    start_bot: BotFactory,
) -> None:
    llm.responder = folding_responder
    reply_to: int | None = None
    async with start_bot(context_token_budget=600) as app:
        for i in range(24):
            message, _ = await ask(
                tg, app, USER, f"question number {i}: what comes next?", reply_to=reply_to
            )
            reply_to = answers_to(tg, USER, message)[-1].message_id
    assert reply_to is not None
    answers = [
        r for r in llm.requests if not str(r.messages[0]["content"]).startswith(SUMMARY_MARK)
    ]
    last = answers[-1]
    assert SUMMARY_PREFIX in str(last.messages[0]["content"])  # the last call was folded
    result = await cli(
        tmp_path, env_for(tg, llm, redis_server.url), "why", str(USER), str(reply_to)
    )
    assert result.code == 0, result
    text = result.out
    assert "View: the fold at node " in text
    assert "### fold summary (at node " in text
    rendered = text.split("## Rendered request", 1)[1].split("## What came back")[0]
    wire = f"({len(last.messages)} message(s) on the wire;"
    assert wire in rendered
    assert "The user asked numbered questions; all were answered." in rendered
    # the verbatim part is exactly what the model got after the joined system message
    for sent in last.messages[1:]:
        assert f"\n\n{sent['content']}\n" in rendered + "\n"
    assert "question number 0:" not in rendered  # folded away: not what the model saw
    exported = await cli(
        tmp_path, env_for(tg, llm, redis_server.url), "export", str(USER), str(reply_to)
    )
    assert "question number 0:" in exported.out  # the full history is still there
    # the fold summary is there too, marked as such, after the message it was made at
    summary = exported.out.split("## Fold summary (stands for everything above)\n\n", 1)[1]
    assert summary.startswith(SUMMARY_PREFIX + "The user asked numbered questions")


async def test_a_read_without_redis_is_one_line(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI
) -> None:
    env = env_for(tg, llm, f"redis://127.0.0.1:{free_port()}/0")
    for command in ("export", "tree", "why"):
        result = await cli(tmp_path, env, command, "-100123", "7")  # a group's chat id
        assert result.code == 1, result
        assert result.out == ""
        assert result.err.startswith("replychain: Redis is unreachable")
        assert result.err.rstrip().endswith("check REDIS_URL")
        assert result.err.count("\n") == 1


async def test_every_command_reading_redis_refuses_an_unknown_layout(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    redis = await holding(private_redis, "99")
    env = env_for(tg, llm, private_redis.url)
    for command in (["export", str(USER), "1"], ["tree", str(USER), "1"], ["why", str(USER), "1"]):
        result = await cli(tmp_path, env, *command)
        assert (result.code, result.out, result.err) == (1, "", f"replychain: {REFUSED}\n")
    for args in ([], ["--replay"]):
        result = await cli(tmp_path, env, "dead-letters", *args)
        assert (result.code, result.out, result.err) == (1, "", f"replychain: {REFUSED}\n")
    doctor = await cli(tmp_path, env, "doctor")
    assert doctor.code == 1, doctor
    assert line_of(doctor.out, "✗ Redis key layout:") == f"✗ Redis key layout: {REFUSED}"
    assert doctor.out.rstrip().endswith("✗ the bot cannot run: fix the lines marked ✗")
    assert [k async for k in redis.scan_iter()] == [bot_keys.LAYOUT_KEY.encode()]
    assert await redis.get(bot_keys.LAYOUT_KEY) == b"99"
    await redis.aclose()
