"""Running the real bot against the test servers: in-process or as ``python -m bot``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ClassVar

from redis.asyncio import Redis

from bot.app import App
from bot.settings import Settings
from bot.turn.reading import prompt_rules
from bot.usage.calls import Clock, utc_now
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram, StoredMessage

ROOT = Path(__file__).resolve().parent.parent
BotFactory = Callable[..., AbstractAsyncContextManager[App]]
USER = 1001
OTHER_USER = 1002
#: The test bot's SYSTEM_PROMPT, and the root prompt of its new conversations: that, with
#: the rules the reading capability adds (bot/turn/reading.py).
SYSTEM_PROMPT = "You are a test assistant."
ROOT_PROMPT = SYSTEM_PROMPT + prompt_rules(search_tools=False)


#: The rendering a test's bot uses unless it asks for another: the HTML path, which every
#: Bot API server without rich messages (and RICH_MESSAGES=off) gets, and which most tests
#: were written for (they count sendMessage calls, 4,096-character parts, HTML entities).
#: Rich answers, the production default, are asked for by tests/test_rich_answers.py and
#: the update storm of tests/test_fuzz.py.
RENDERING = "off"


def settings_for(tg: FakeTelegram, llm: FakeOpenAI, redis_url: str, **extra: Any) -> Settings:
    """Settings pointing the bot at the test servers (no .env is read; RICH_MESSAGES as
    :data:`RENDERING` unless given)."""
    values: dict[str, Any] = {
        "telegram_bot_token": tg.token,
        "telegram_api_url": tg.url,
        "openai_api_key": "sk-test",
        "openai_base_url": llm.base_url,
        "openai_model": "test-model",
        "openai_timeout": 5.0,
        "openai_max_retries": 1,
        "redis_url": redis_url,
        "system_prompt": SYSTEM_PROMPT,
        "shutdown_timeout": 10.0,
        "rich_messages": RENDERING,
    }
    values.update(extra)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def env_for(tg: FakeTelegram, llm: FakeOpenAI, redis_url: str, **extra: str) -> dict[str, str]:
    """Environment for ``python -m bot`` pointing at the test servers (RICH_MESSAGES as
    :data:`RENDERING` unless given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TELEGRAM_"))}
    env.update(
        TELEGRAM_BOT_TOKEN=tg.token,
        TELEGRAM_API_URL=tg.url,
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_MODEL="test-model",
        OPENAI_TIMEOUT="5",
        OPENAI_MAX_RETRIES="1",
        REDIS_URL=redis_url,
        SYSTEM_PROMPT=SYSTEM_PROMPT,
        SHUTDOWN_TIMEOUT="10",
        PYTHONUNBUFFERED="1",
        RICH_MESSAGES=RENDERING,
    )
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def running_bot(settings: Settings, clock: Clock = utc_now) -> AsyncIterator[App]:
    """The real bot (aiogram, openai, redis clients) in this event loop."""
    app = App(settings, clock=clock)
    task = asyncio.create_task(app.run(install_signals=False))
    try:
        yield app
    finally:
        app.stop("test over")
        code = await asyncio.wait_for(task, timeout=30)
        assert code == 0


class BotProcess:
    """``python -m bot`` as a subprocess, with its output kept for assertions. Every one
    started is remembered until it exits, so a failed test leaves none running
    (``kill_leftovers``, called after every test)."""

    running: ClassVar[set[asyncio.subprocess.Process]] = set()

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self.output = b""

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot",
            cwd=self.cwd, env={**self.env, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        BotProcess.running.add(self.proc)

    async def wait(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        assert self.proc is not None
        out, _ = await asyncio.wait_for(self.proc.communicate(), timeout)
        self.output += out
        BotProcess.running.discard(self.proc)
        return self.proc.returncode if self.proc.returncode is not None else -1

    async def terminate(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await self.wait(timeout)

    async def kill(self) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.kill()
        await self.wait()

    async def wait_for_output(self, needle: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Read the process's output until it has printed ``needle``."""
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while needle not in self.text:
                line = await self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"the bot exited without printing {needle!r}")
                self.output += line

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    @classmethod
    async def kill_leftovers(cls) -> None:
        """Kill the processes a test started and did not see exit (it failed first)."""
        for proc in list(cls.running):
            if proc.returncode is None:
                proc.kill()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
        cls.running.clear()


def answers_to(tg: FakeTelegram, chat_id: int, message_id: int) -> list[StoredMessage]:
    """The bot's messages that reply to ``message_id`` (the parts of one answer)."""
    return [m for m in tg.bot_messages(chat_id) if m.reply_to == message_id]


async def turns_done(tg: FakeTelegram, app: App, count: int, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait until ``count`` turns have finished (answer sent and stored)."""
    await tg.wait_for(lambda: app.runner.completed >= count, timeout)


def said(llm: FakeOpenAI, index: int = -1) -> list[tuple[str, str]]:
    """(role, content) of every message the model was sent in one request."""
    return [(m["role"], m["content"]) for m in llm.requests[index].messages]


async def ask(
    tg: FakeTelegram, app: App, chat: int, text: str | None, *, user: int = USER, **kw: Any
) -> tuple[int, str]:
    """Send a message, wait for its turn, return (its id, the full answer text)."""
    done = app.runner.completed + 1
    message = tg.send_user_message(chat, user, text, **kw)
    parts = await answered_parts(tg, app, chat, message["message_id"], done)
    assert parts, f"no answer to {text!r}"
    return message["message_id"], "".join(p.text or "" for p in parts)


async def answered_parts(
    tg: FakeTelegram, app: App, chat: int, message_id: int, done: int
) -> list[StoredMessage]:
    """Wait for this message's turn, not any turn: answered and no longer running (with
    at least ``done`` turns completed); its answer's parts."""
    key = (str(chat), message_id)
    await tg.wait_for(
        lambda: (
            app.runner.completed >= done
            and bool(answers_to(tg, chat, message_id))
            and app.runner.in_flight.get(key) is None
        ),
        15.0,
    )
    return answers_to(tg, chat, message_id)


async def answered_while_held(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis, method: str
) -> None:
    """One question answered while every ``method`` call sits in flight (as in a flood
    window): the answer is sent and recorded before any of them returns."""
    in_flight, release = asyncio.Event(), asyncio.Event()

    async def hold(call: Call) -> None:
        if call.method == method:
            in_flight.set()
            await release.wait()

    tg.after_call = hold
    llm.gate = asyncio.Event()
    try:
        async with start_bot() as app:
            message = tg.send_user_message(USER, USER, "hello")["message_id"]
            await asyncio.wait_for(in_flight.wait(), 15)
            llm.gate.set()
            await turns_done(tg, app, 1, timeout=15)  # finished while the call is held
            assert not release.is_set()
            [answer] = answers_to(tg, USER, message)
            assert answer.text == "[depth:2] echo: hello"
            assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None
            release.set()
    finally:
        release.set()
