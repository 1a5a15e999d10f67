"""Any Bot API server, any answer: odd responses are Telegram failures, never a lost thread.

The Bot API test server misbehaves like the servers people really run
(third-party emulators, partial self-hosted servers, reverse proxies): fields
missing, HTML error pages, 5xx without ``ok``, ``ok:false`` without a
description, ``result:null``, unsupported methods. Each test shows what the
user and the operator see, and that nothing was lost. The last tests pin the
turn's failure path: an exception nobody foresaw ends in a notice the user can
reply to and a dead-letter entry, never in a silent acknowledgement.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import bot.telegram.rendering
from bot.bus.inbound import Inbound
from bot.bus.intake import Intake
from bot.data import keys
from bot.telegram.format import Chunk, render_chunks
from bot.turn import notices
from bot.usage.calls import day_of, utc_now
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram
from .harness import ROOT, USER, BotFactory, BotProcess, answers_to, ask, env_for, turns_done
from .redis_server import RedisServer

GROUP = -100777


async def start_and_exit(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    process = BotProcess(env, tmp_path)
    await process.start()
    code = await process.wait(timeout=60)
    return code, process.text


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("missing_field", "answered getMe with something this bot cannot read"),
        ("html", "HTTP 502 with an HTML page"),
        ("no_ok", "HTTP 500 with JSON without an 'ok' field"),
        ("lacks", "lacks getMe (API method 'getMe' is not supported"),
    ],
)
async def test_an_unreadable_get_me_is_one_line_at_start_up(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    kind: str,
    expected: str,
) -> None:
    field = "is_bot" if kind == "missing_field" else None
    if kind == "lacks":  # as telegram-test-api says it
        tg.unsupported_methods.add("getMe")
        tg.unsupported_answer = "emulator"
    else:
        tg.misbehave_next("getMe", kind, count=100, field=field)  # type: ignore[arg-type]
    code, output = await start_and_exit(tmp_path, env_for(tg, llm, redis_server.url))
    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith("replychain:")]
    assert len(lines) == 1, output
    assert expected in lines[0]
    assert tg.url in lines[0]
    assert "Traceback" not in output
    assert tg.token not in output


async def test_unsupported_set_up_methods_only_warn(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replychain")
    tg.unsupported_methods.update({"setMyCommands", "deleteWebhook"})
    tg.unsupported_answer = "no_ok"
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "still there?")
        # the set-up steps run beside polling: their warnings may come after the answer
        await tg.wait_for(
            lambda: (
                _logged(caplog, "lacks setMyCommands (method not supported); the command menu")
                and _logged(caplog, "lacks deleteWebhook (method not supported)")
            ),
            15,
        )
    assert text == "[depth:2] echo: still there?"
    assert not _logged(caplog, "could not")  # one line each: the session's


async def test_polling_and_answers_never_wait_for_set_up_calls(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """deleteWebhook held in flight and setMyCommands failing (500, every try): the bot
    polls and answers meanwhile; each set-up step's failure is one warning line."""
    caplog.set_level(logging.WARNING, logger="replychain")
    held, release = asyncio.Event(), asyncio.Event()

    async def hold(call: Call) -> None:
        if call.method == "deleteWebhook":
            held.set()
            await release.wait()

    tg.after_call = hold
    tg.fail_next("setMyCommands", status=500, count=100)
    try:
        async with start_bot() as app:
            await asyncio.wait_for(held.wait(), 15)
            await tg.wait_for(lambda: tg.polling, 15, what="polling while deleteWebhook is held")
            _, text = await ask(tg, app, USER, "hello")
            assert text == "[depth:2] echo: hello"
            assert not release.is_set() and not tg.calls_to("setMyCommands")
            release.set()  # now the commands step runs, and fails
            await tg.wait_for(lambda: bool(tg.calls_to("setMyCommands")), 15)
            await tg.wait_for(lambda: _logged(caplog, "could not register the commands"), 30)
    finally:
        release.set()
    failures = [r for r in caplog.records if "could not" in r.getMessage()]
    assert [r.getMessage().split(":")[0] for r in failures] == ["could not register the commands"]


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)


async def test_a_send_whose_answer_does_not_decode_is_one_answer_in_the_thread(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    tg.misbehave_next("sendMessage", "missing_field", field="chat")
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] echo: hello"
        [answer] = answers_to(tg, USER, first)
        assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None
        _, text = await ask(tg, app, USER, "and then?", reply_to=answer.message_id)
        assert text == "[depth:4] echo: and then?"
    assert len(tg.bot_messages(USER)) == 2


@pytest.mark.parametrize(
    ("kind", "status"),
    [("html", 502), ("no_ok", 500), ("bare_error", 500), ("bare_error", 200), ("null_result", 0)],
)
async def test_odd_answers_to_a_send_are_retried_like_an_outage(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, kind: str, status: int
) -> None:
    extra: dict[str, object] = {"applied": False} if kind == "null_result" else {"status": status}
    tg.misbehave_next("sendMessage", kind, **extra)  # type: ignore[arg-type]
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "hello")
    assert text == "[depth:2] echo: hello"
    assert len(answers_to(tg, USER, first)) == 1
    assert len(llm.requests) == 1  # the stored answer was shown, not asked for again


async def test_an_unforeseen_failure_ends_in_a_notice_and_a_dead_letter(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    start_bot: BotFactory,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="replychain")

    def fragile(text: str, *, prefix: str = "", reasoning: str = "") -> list[Chunk]:
        if "boom" in text:
            raise RuntimeError("a bug nobody foresaw")
        return render_chunks(text, prefix=prefix, reasoning=reasoning)

    monkeypatch.setattr(bot.telegram.rendering, "render_chunks", fragile)
    async with start_bot(turn_max_attempts=2) as app:
        message = tg.send_user_message(USER, USER, "boom")["message_id"]
        await turns_done(tg, app, 1, timeout=30)
        [notice] = answers_to(tg, USER, message)
        assert notice.text == notices.GAVE_UP
        parked: Any = await redis.xrange(keys.DEAD_LETTER_STREAM)
        assert len(parked) == 1
        assert parked[0][1][b"why"] == b"RuntimeError"
        assert await redis.xlen(keys.INTAKE_STREAM) == 0
        state = await redis.hgetall(keys.turn_key(str(USER), message))
        assert b"d" not in state and state[b"x"] == b"2"  # never recorded as answered
        done = keys.done_key(str(USER), day_of(utc_now()), message)
        assert not await redis.sismember(done, str(message))
        # replying to the notice retries from the kept question
        _, text = await ask(tg, app, USER, "again", reply_to=notice.message_id)
        assert text == "[depth:3] echo: again"
    assert len(llm.requests) == 2  # the stored answer was never asked for twice
    assert any("giving up on message" in r.getMessage() for r in caplog.records)


async def test_the_operator_lists_and_replays_parked_messages(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    intake = Intake(redis, "test")
    await intake.ensure_group()
    message = Inbound(USER, 42, USER, "parked text", reply_to=7)
    await redis.xadd(keys.INTAKE_STREAM, {b"m": message.encode()})
    [entry] = await intake.read_new(10, 100)
    await intake.park(entry, "RuntimeError")
    env = {**env_for(tg, llm, redis_server.url), "PYTHONPATH": str(ROOT)}

    async def cli(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "dead-letters", *args, cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out
        return out.decode()

    listing = await cli()
    assert "1 parked message(s)" in listing
    assert f"chat {USER} message 42: RuntimeError" in listing
    assert "parked text" not in listing  # no message text in operator output
    assert "put 1 parked message(s) back" in await cli("--replay")
    assert await redis.xlen(keys.DEAD_LETTER_STREAM) == 0
    [back] = await intake.read_new(10, 100)
    assert back.inbound == message


async def test_fields_from_a_newer_server_change_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    for method in ("getMe", "sendMessage", "editMessageText"):
        tg.misbehave_next(method, "extra_fields", count=50)
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "hello")
        _, again = await ask(
            tg, app, USER, "more", reply_to=answers_to(tg, USER, first)[0].message_id
        )
    assert (text, again) == ("[depth:2] echo: hello", "[depth:4] echo: more")
    assert len(llm.requests) == 2


async def test_a_server_answering_unknown_methods_with_a_500_gets_answers_the_older_way(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41's regression: telegram-test-api answers every method it lacks with a 500
    whose body (no ``ok``) names it unsupported. Each such method is one log line and is
    not asked again; every answer goes out at once the older way (HTML, edits, no menu)."""
    caplog.set_level(logging.WARNING, logger="replychain")
    tg.like_telegram_test_api()
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    llm.responder = lambda messages: table if "table" in str(messages[-1]["content"]) else "hi"
    tg.add_group(GROUP)
    tg.add_member(GROUP, USER)
    llm.chunk_chars, llm.chunk_delay = 1, 0.02  # a streamed answer: drafts, edits
    async with start_bot(rich_messages="always") as app:
        started = time.monotonic()
        first, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] hi"
        assert time.monotonic() - started < 5  # no retries of a method it lacks
        [answer] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, "a table please", reply_to=answer.message_id)
        assert text.startswith("[depth:4]") and "| 1 | 2 |" in text
        _, text = await ask(tg, app, GROUP, "@replychain_bot a table too")
        assert text.startswith("[depth:2]")
        await tg.wait_for(lambda: _logged(caplog, "lacks getMyCommands"), 15)
    lacking = {c.method for c in tg.calls if c.fault == "unsupported"}
    assert {"sendRichMessage", "sendMessageDraft", "getMyCommands"} <= lacking
    for method in lacking:
        assert len(tg.calls_to(method)) <= 2, (method, len(tg.calls_to(method)))
    lines = [r.getMessage() for r in caplog.records if "Bot API server lacks" in r.getMessage()]
    assert sorted(line.split()[5] for line in lines) == sorted(lacking), lines
    assert not tg.violations and not tg.server_errors
    assert all(m.rich_message is None for m in tg.bot_messages(USER) + tg.bot_messages(GROUP))


async def test_a_rich_message_failing_with_server_errors_goes_out_as_html(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """A server that fails sendRichMessage with 500s (every try): the answer goes out as
    HTML after flood control's tries, never held back; the next answer tries rich again."""
    tg.fail_next("sendRichMessage", status=500, count=3)
    tg.unsupported_methods.add("sendMessageDraft")
    async with start_bot(rich_messages="always") as app:
        started = time.monotonic()
        first, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] echo: hello"
        assert time.monotonic() - started < 10
        assert len(tg.calls_to("sendRichMessage")) == 3
        [answer] = answers_to(tg, USER, first)
        assert answer.rich_message is None
        _, text = await ask(tg, app, USER, "again", reply_to=answer.message_id)
        assert text == "[depth:4] echo: again"
    assert tg.bot_messages(USER)[-1].rich_message is not None
