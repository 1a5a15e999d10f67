"""``python -m bot`` as a real process: start-up errors, SIGTERM, restarts, clean logs."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotProcess, answers_to, env_for
from .redis_server import RedisServer, free_port


async def run_to_exit(env: dict[str, str], cwd: Path) -> tuple[int, str]:
    process = BotProcess(env, cwd)
    await process.start()
    code = await process.wait(timeout=60)
    return code, process.text


def bare_env(**values: str) -> dict[str, str]:
    env = os.environ.copy()
    for key in list(env):
        if key.startswith(("OPENAI_", "TELEGRAM_", "REDIS_", "SYSTEM_PROMPT")):
            del env[key]
    env.update(values)
    return env


@pytest.mark.parametrize(
    ("values", "names", "hint"),
    [
        ({}, "TELEGRAM_BOT_TOKEN is not set", "BotFather"),
        ({"TELEGRAM_BOT_TOKEN": "not a token"}, "TELEGRAM_BOT_TOKEN is invalid", "BotFather"),
        ({"TELEGRAM_BOT_TOKEN": "1:abc"}, "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        (
            {"TELEGRAM_BOT_TOKEN": "1:abc", "OPENAI_API_KEY": "k", "CONTEXT_TOKEN_BUDGET": "lots"},
            "CONTEXT_TOKEN_BUDGET is invalid",
            "integer",
        ),
        (
            {"TELEGRAM_BOT_TOKEN": "1:abc", "OPENAI_API_KEY": "k", "ALLOWED_USER_IDS": "ada"},
            "ALLOWED_USER_IDS is invalid",
            "comma-separated",
        ),
        (
            {"TELEGRAM_BOT_TOKEN": "1:abc", "OPENAI_API_KEY": "k", "RICH_MESSAGES": "maybe"},
            "RICH_MESSAGES is invalid",
            "'auto', 'always' or 'off'",
        ),
        (
            {"TELEGRAM_BOT_TOKEN": "1:abc", "OPENAI_API_KEY": "k", "SYSTEM_PROMPT_FILE": "/nope"},
            "SYSTEM_PROMPT_FILE",
            "readable",
        ),
    ],
)
async def test_bad_settings_stop_startup_with_one_clear_line(
    tmp_path: Path, values: dict[str, str], names: str, hint: str
) -> None:
    code, output = await run_to_exit(bare_env(**values), tmp_path)
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert names in lines[0]
    assert hint in lines[0]
    assert "Traceback" not in output


async def test_settings_are_read_from_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TELEGRAM_BOT_TOKEN=1:abc\nCONTEXT_TOKEN_BUDGET=seven\n")
    code, output = await run_to_exit(bare_env(OPENAI_API_KEY="k"), tmp_path)
    assert code == 2
    assert "CONTEXT_TOKEN_BUDGET is invalid" in output


async def test_unreachable_redis_is_one_clear_line_without_secrets(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI
) -> None:
    url = f"redis://:pa55word-secret@127.0.0.1:{free_port()}/0"
    code, output = await run_to_exit(env_for(tg, llm, url), tmp_path)
    assert code == 1
    assert (
        f"cannot reach Redis at 127.0.0.1:{url.rsplit(':', 1)[1].split('/', maxsplit=1)[0]}"
        in output
    )
    assert "pa55word-secret" not in output
    assert "Traceback" not in output


async def test_a_bot_started_before_its_redis_waits_for_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI
) -> None:
    """Started beside its Redis (a restart, a compose stack), the bot waits for it
    instead of exiting, then answers."""
    server = RedisServer(tmp_path / "late-redis")
    process = BotProcess(env_for(tg, llm, server.url), tmp_path)
    await process.start()
    try:
        await process.wait_for_output("cannot reach Redis")
        server.start()
        message = tg.send_user_message(USER, USER, "are you there?")["message_id"]
        await tg.wait_for(
            lambda: (
                [m.text for m in answers_to(tg, USER, message)]
                == ["[depth:2] echo: are you there?"]
            ),
            timeout=30,
        )
        assert await process.terminate() == 0
    finally:
        server.stop()
    assert "Traceback" not in process.text


async def test_rejected_token_is_one_clear_line(
    tmp_path: Path, llm: FakeOpenAI, redis_server: RedisServer
) -> None:
    async with FakeTelegram(token="999:the-real-token-abcdefghijklmnop") as other:
        env = env_for(other, llm, redis_server.url, TELEGRAM_BOT_TOKEN="999:wrong-token-xyz123456")
        code, output = await run_to_exit(env, tmp_path)
    assert code == 1
    assert "TELEGRAM_BOT_TOKEN was rejected" in output
    assert "wrong-token-xyz123456" not in output
    assert "Traceback" not in output


async def wait_alias(redis: Redis, chat: int, message_id: int, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait until the bot has stored the node a message id points to."""
    store = TranscriptStore(redis)
    deadline = time.monotonic() + timeout
    while await store.resolve(str(chat), message_id) is None:
        assert time.monotonic() < deadline, f"message {message_id} was never stored"
        await asyncio.sleep(0.05)


async def test_restart_between_turns_keeps_the_chain_and_logs_no_secrets(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    env = env_for(tg, llm, redis_server.url, LOG_LEVEL="DEBUG")
    first_run = BotProcess(env, tmp_path)
    await first_run.start()
    first = tg.send_user_message(USER, USER, "remember 42")["message_id"]
    await tg.wait_for(
        lambda: [m.text for m in answers_to(tg, USER, first)] == ["[depth:2] echo: remember 42"],
        timeout=30,
    )
    [answer] = answers_to(tg, USER, first)
    await wait_alias(redis, USER, answer.message_id)
    assert await first_run.terminate() == 0
    assert "stopped cleanly" in first_run.text

    second_run = BotProcess(env, tmp_path)
    await second_run.start()
    follow = tg.send_user_message(USER, USER, "what number?", reply_to=answer.message_id)
    await tg.wait_for(
        lambda: (
            [m.text for m in answers_to(tg, USER, follow["message_id"])]
            == ["[depth:4] echo: what number?"]
        ),
        timeout=30,
    )
    assert await second_run.terminate() == 0
    contents = [m["content"] for m in llm.requests[-1].messages]
    assert contents[1:] == ["remember 42", "echo: remember 42", "what number?"]
    for run in (first_run, second_run):
        assert tg.token not in run.text
        assert tg.token.split(":")[1] not in run.text
        assert "sk-test" not in run.text
        assert "Traceback" not in run.text


async def test_sigterm_lets_the_answer_in_flight_finish(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    llm.gate = asyncio.Event()
    process = BotProcess(env_for(tg, llm, redis_server.url), tmp_path)
    await process.start()
    message = tg.send_user_message(USER, USER, "finish me")["message_id"]
    await llm.wait_for(lambda: len(llm.requests) == 1, timeout=30)
    assert process.proc is not None
    process.proc.send_signal(15)
    await process.wait_for_output("SIGTERM: finishing answers in flight")
    later = tg.send_user_message(USER, USER, "too late")["message_id"]
    llm.gate.set()
    assert await process.wait() == 0
    assert [m.text for m in answers_to(tg, USER, message)] == ["[depth:2] echo: finish me"]
    [answer] = answers_to(tg, USER, message)
    assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None
    # A message arriving as the signal lands may already be in the long poll's hands
    # (then this process answers it) or not (then it stays unconfirmed at Telegram):
    # either way the next process answers it if this one did not, and never twice.
    assert len(answers_to(tg, USER, later)) <= 1
    successor = BotProcess(env_for(tg, llm, redis_server.url), tmp_path)
    await successor.start()
    # If the first process answered it, nothing is left to wait for: without this the
    # signal below could land while the interpreter is still starting (exit -15).
    await successor.wait_for_output("connected as")
    await tg.wait_for(lambda: bool(answers_to(tg, USER, later)), timeout=30)
    await tg.wait_for(lambda: tg.pending_updates == 0, timeout=30)
    assert await successor.terminate() == 0
    assert [m.text for m in answers_to(tg, USER, later)] == ["[depth:2] echo: too late"]
