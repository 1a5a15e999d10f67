"""Telegram's own AI streaming: drafts with a stop button, and reasoning kept apart.

End to end (the real bot against the Bot API and OpenAI test servers): private
chats stream drafts and persist the answer with one sendMessage per part;
groups keep editing; a server without drafts switches the process to edits for
good; the stop button closes the model's stream and keeps the partial answer,
which a reply continues from; reasoning is never shown as the answer nor sent
back. Plus the test servers' draft and reasoning behaviour, and the model
client's stop and reasoning handling on their own.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path

import openai
import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest, TelegramNotFound
from redis.asyncio import Redis

from bot.bus.relay import Relay
from bot.data import keys
from bot.model.client import ModelClient, split_think
from bot.retry import Outage
from bot.telegram.drafts import StopButtons, draft_id, question_of
from bot.turn.notices import STOPPED, STOPPED_EARLY
from transcript import ChatMessage, TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import (
    OTHER_USER,
    ROOT_PROMPT,
    USER,
    BotFactory,
    BotProcess,
    answered_while_held,
    answers_to,
    ask,
    env_for,
    said,
    turns_done,
)
from .redis_server import RedisServer

SYSTEM = ("system", ROOT_PROMPT)
GROUP = -100777
THOUGHTS = "secret thoughts: 6 times 7 is 42"


def words(count: int) -> str:
    return " ".join(f"w{i:03d}" for i in range(count))


def slow(llm: FakeOpenAI, reply: str, *, delay: float = 0.05) -> None:
    """Every answer is ``reply``, streamed 8 characters (two words) per ``delay`` seconds."""
    llm.responder = lambda _messages: reply
    llm.chunk_chars = 8
    llm.chunk_delay = delay


def draft_calls(tg: FakeTelegram, chat_id: int) -> list[int]:
    """HTTP statuses of the sendMessageDraft calls to a chat."""
    return [c.status for c in tg.calls_to("sendMessageDraft") if c.params["chat_id"] == chat_id]


# ------------------------------------------------------------------ private chats


async def test_private_answer_streams_as_drafts_then_one_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    reply = words(100)  # 50 chunks, 50 ms apart: ~2.5 s of streaming
    slow(llm, reply)
    llm.hang_next(seconds=1.0)  # the first token comes late: "Thinking…" first
    tg.flood_drafts_per_second = 1  # faster drafting is a violation
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "stream it")
    assert text == f"[depth:2] {reply}"
    drafts = tg.drafts_in(USER)
    assert drafts[0].text is None  # "Thinking…" first
    assert len(drafts) >= 3  # the placeholder and at least two growing texts
    assert {d.draft_id for d in drafts} == {draft_id(first, 1)}
    assert all(d.can_stop and d.keep_on_stop for d in drafts)
    texts = [d.text for d in drafts[1:]]
    assert all(t is not None and t.startswith("[depth:2] w000") for t in texts)
    assert all(len(a or "") < len(b or "") for a, b in itertools.pairwise(texts))
    [part] = answers_to(tg, USER, first)
    assert part.edits == 0 and not tg.calls_to("editMessageText")
    assert [c.status for c in tg.calls_to("sendMessage")] == [200]
    assert not tg.calls_to("sendChatAction")  # the empty draft says "Thinking…"
    assert tg.current_draft(USER) is None  # the message replaced the draft
    assert not tg.violations


async def test_thinking_draft_with_a_stop_button_while_waiting_for_the_model(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.gate = asyncio.Event()
    async with start_bot() as app:
        message = tg.send_user_message(USER, USER, "think hard")["message_id"]
        await tg.wait_for(lambda: tg.current_draft(USER) is not None)
        shown = tg.current_draft(USER)
        assert shown is not None and shown.text is None and shown.can_stop
        assert not answers_to(tg, USER, message)
        llm.gate.set()
        await turns_done(tg, app, 1)
    assert [m.text for m in answers_to(tg, USER, message)] == ["[depth:2] echo: think hard"]


async def test_long_answer_drafts_one_part_at_a_time(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    reply = words(1800)  # 9,000 characters: three parts
    slow(llm, reply, delay=0.0)
    llm.chunk_chars = 400
    llm.chunk_delay = 0.05
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, "a lot")
    parts = answers_to(tg, USER, first)
    assert len(parts) == 3
    assert " ".join(p.text or "" for p in parts).split() == f"[depth:2] {reply}".split()
    assert parts[0].text is not None and parts[0].text.startswith("[depth:2] w0000"[:14])
    ids = {d.draft_id for d in tg.drafts_in(USER)}
    assert draft_id(first, 1) in ids and ids <= {draft_id(first, n) for n in (1, 2, 3)}
    assert len(tg.calls_to("sendMessage")) == 3  # each part sent once
    store = TranscriptStore(redis)
    node = await store.resolve(str(USER), first)
    assert all([await store.resolve(str(USER), p.message_id) for p in parts])
    assert node is not None


async def test_draft_429_is_honoured_and_the_answer_completes(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    reply = words(80)
    slow(llm, reply)
    tg.fail_next("sendMessageDraft", status=429, retry_after=1)
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "flood")
    assert text == f"[depth:2] {reply}"
    assert draft_calls(tg, USER)[0] == 429
    assert not tg.violations


async def test_blocked_chat_gets_one_refused_call_and_nothing_more(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    slow(llm, words(40))  # streamed for a while: a draft goes out first
    tg.block_chat(OTHER_USER)
    async with start_bot() as app:
        tg.send_user_message(OTHER_USER, OTHER_USER, "bye")
        await turns_done(tg, app, 1)
        _, text = await ask(tg, app, USER, "still there?")
    assert text == f"[depth:2] {words(40)}"
    refused = [(c.method, c.status) for c in tg.calls if c.params.get("chat_id") == OTHER_USER]
    # the final text may already be on its way when the draft's 403 arrives (the end
    # of the answer cuts a draft call short): at most that one message more
    assert refused in (
        [("sendMessageDraft", 403)],
        [("sendMessageDraft", 403), ("sendMessage", 403)],
    )


async def test_stream_cut_while_drafting_keeps_the_shown_text_with_a_notice(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    reply = words(60)
    slow(llm, reply, delay=0.05)
    drafted = asyncio.Event()  # the stream is cut once a draft is on screen
    llm.cut_stream_next(after_chunks=3, once=drafted)

    async def cut_once_drafted() -> None:
        await tg.wait_for(lambda: any(shown(d.text) for d in tg.drafts_in(USER)), timeout=30)
        drafted.set()

    def shown(text: str | None) -> bool:
        return bool(text and text.startswith("[depth:2] w000"))

    async with start_bot() as app:
        cutting = asyncio.create_task(cut_once_drafted())
        first, text = await ask(tg, app, USER, "cut me")
        await cutting
    partial = reply[: 3 * 8].strip()
    assert text.startswith(f"[depth:2] {partial}\n\n⚠️")
    assert len(tg.calls_to("sendMessage")) == 1 and len(llm.requests) == 1
    node = await TranscriptStore(redis).resolve(str(USER), first)
    assert node is not None
    history = await TranscriptStore(redis).history(node)
    assert [m.role for m in history.messages] == ["system", "user"]  # no answer was stored


async def test_a_draft_in_flight_never_holds_up_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """A draft sitting out a flood window must not delay sending and recording the answer."""
    await answered_while_held(tg, llm, start_bot, redis, "sendMessageDraft")


# ------------------------------------------------------------------ groups and old servers


async def test_groups_stream_by_editing_and_never_draft(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    reply = words(100)
    slow(llm, reply)
    async with start_bot() as app:
        first, text = await ask(tg, app, GROUP, "@replychain_bot stream here", user=OTHER_USER)
    assert text == f"[depth:2] {reply}"
    assert not tg.calls_to("sendMessageDraft")
    [part] = answers_to(tg, GROUP, first)
    assert part.edits >= 1  # it grew by edits


async def test_server_without_drafts_switches_to_editing_for_good(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    tg.unsupported_methods.add("sendMessageDraft")
    reply = words(80)
    slow(llm, reply)
    with caplog.at_level(logging.WARNING, logger="replychain.telegram"):
        async with start_bot() as app:
            first, text = await ask(tg, app, USER, "old server")
            _, again = await ask(tg, app, OTHER_USER, "and you?", user=OTHER_USER)
    assert text == f"[depth:2] {reply}"
    assert again == f"[depth:2] {reply}"
    assert draft_calls(tg, USER) == [404] and draft_calls(tg, OTHER_USER) == []
    [part] = answers_to(tg, USER, first)
    assert part.edits >= 1  # streamed by editing
    assert tg.calls_to("sendChatAction")  # and typing while it waited
    switched = [r for r in caplog.records if "sendMessageDraft" in r.getMessage()]
    assert len(switched) == 1


async def test_drafts_refused_mid_answer_go_on_by_editing_without_loss(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    reply = words(100)
    slow(llm, reply)
    async with start_bot() as app:
        message = tg.send_user_message(USER, USER, "switch mid way")["message_id"]
        await tg.wait_for(lambda: any(d.text for d in tg.drafts_in(USER)))
        tg.unsupported_methods.add("sendMessageDraft")  # e.g. a rolled-back server
        await turns_done(tg, app, 1)
    [part] = answers_to(tg, USER, message)
    assert part.text == f"[depth:2] {reply}"
    assert draft_calls(tg, USER).count(404) == 1
    assert len(tg.calls_to("sendMessage")) == 1  # neither lost nor sent twice


# ------------------------------------------------------------------ the stop button


async def test_stop_closes_the_model_stream_and_keeps_the_partial_answer(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    full = words(200)  # 100 chunks, 0.1 s apart: 10 s if never stopped
    llm.responder = lambda m: full if m[-1]["content"] == "tell me everything" else "echo: more"
    llm.chunk_chars = 8
    llm.chunk_delay = 0.1
    async with start_bot() as app:
        question = tg.send_user_message(USER, USER, "tell me everything")["message_id"]
        await tg.wait_for(lambda: any(d.text for d in tg.drafts_in(USER)))
        tg.stop_generation(USER)
        await tg.wait_for(lambda: bool(answers_to(tg, USER, question)), timeout=5)
        await llm.wait_for(lambda: llm.requests[0].closed_early, timeout=5)
        [answer] = answers_to(tg, USER, question)
        assert answer.text is not None and answer.text.endswith(f"\n\n{STOPPED}")
        partial = answer.text.removeprefix("[depth:2] ").removesuffix(f"\n\n{STOPPED}")
        assert partial and full.startswith(partial) and partial != full
        assert llm.requests[0].events_sent < 100  # the provider stopped generating
        # stored as what the user saw; the call's usage is recorded (estimated)
        store = TranscriptStore(redis)
        node = await store.resolve(str(USER), answer.message_id)
        assert node is not None
        assert (await store.history(node)).messages[-1].content == partial
        spent = await app.accounting.turn(USER, question)
        assert spent.calls == 1 and spent.completion > 0 and spent.estimated == 1
        # a reply continues from exactly the partial answer
        _, text = await ask(tg, app, USER, "more", reply_to=answer.message_id)
        assert text == "[depth:4] echo: more"
        assert said(llm) == [
            SYSTEM, ("user", "tell me everything"), ("assistant", partial), ("user", "more"),
        ]  # fmt: skip
    assert len(answers_to(tg, USER, question)) == 1


async def test_stop_before_any_text_ends_with_a_notice(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.hang_next(seconds=30)
    async with start_bot() as app:
        question = tg.send_user_message(USER, USER, "never mind")["message_id"]
        await llm.wait_for(lambda: len(llm.requests) == 1)
        await tg.wait_for(lambda: tg.current_draft(USER) is not None)
        tg.stop_generation(USER)
        await turns_done(tg, app, 1)
        [notice] = answers_to(tg, USER, question)
        assert notice.text == STOPPED_EARLY
        # the question was kept: replying to the notice asks again
        _, text = await ask(tg, app, USER, "ok, go", reply_to=notice.message_id)
        assert text == "[depth:3] echo: ok, go"
    assert len(llm.requests) == 2


async def test_a_stop_for_a_draft_nobody_writes_is_ignored(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    slow(llm, words(20))  # streamed for a while: a draft with the stop button goes out
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, "done already")
        tg.stop_generation(USER, draft_id(first, 1))  # pressed after the answer was sent
        tg.push_update(  # a draft of a process that restarted since
            {"stopped_message_generation": {"chat": {"id": USER, "type": "private",
             "first_name": "Ada"}, "draft_id": draft_id(999, 1)}}
        )  # fmt: skip
        _, text = await ask(tg, app, USER, "still fine?")
    assert text == f"[depth:2] {words(20)}"
    assert not tg.pending_updates  # both stops were taken (confirmed) and ignored
    assert not tg.server_errors
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_draft_ids_name_the_question_and_part() -> None:
    assert question_of(draft_id(12345, 1)) == 12345
    assert question_of(draft_id(12345, 3)) == 12345
    assert draft_id(7, 1) != draft_id(7, 2) and draft_id(1, 1) != 0
    assert question_of(draft_id(7, 10_000)) == 7  # later parts share the last id
    stops = StopButtons()
    assert not stops.press(1, draft_id(5, 1))
    with stops.watching(1, 5) as event:
        assert not stops.press(2, draft_id(5, 1))  # another chat
        assert stops.press(1, draft_id(5, 2)) and event.is_set()
    assert not stops.press(1, draft_id(5, 1))  # finished: unknown again


async def test_a_stop_reaches_the_process_writing_the_answer(redis: Redis) -> None:
    """Telegram sends the stop to the polling process; another one writes the answer."""
    await stop_passed_on(redis)


async def stop_passed_on(redis: Redis) -> None:
    """Two processes' stop relays on one Redis: a stop pressed in one ends the answer
    the other writes, and only that one."""
    outage = Outage("Redis", "")
    poller, worker = StopButtons(), StopButtons()
    polling, working = Relay(redis, poller, outage), Relay(redis, worker, outage)
    stopping = asyncio.Event()
    reading = asyncio.create_task(working.run(stopping))
    try:
        with worker.watching(USER, 5) as event, poller.watching(USER, 9) as here:
            await asyncio.wait_for(working.listening.wait(), 10)
            assert await polling.press(USER, draft_id(9, 1))  # its own: ended here
            assert here.is_set() and await redis.xlen(keys.RELAY_STREAM) == 0
            assert not await polling.press(USER, draft_id(7, 1))  # nobody's: ignored
            assert not await polling.press(USER, draft_id(5, 2))  # the worker's
            await asyncio.wait_for(event.wait(), 10)
    finally:
        stopping.set()
        await asyncio.wait_for(reading, 10)  # ends within one read's wait
    assert await redis.xlen(keys.RELAY_STREAM) == 2


# ------------------------------------------------------------------ reasoning


@pytest.mark.parametrize("style", ["reasoning_content", "reasoning", "think"])
async def test_reasoning_is_never_shown_nor_sent_back(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, style: str
) -> None:
    llm.reasoner = lambda _messages: THOUGHTS
    llm.reasoning_style = style  # type: ignore[assignment]
    llm.chunk_delay = 0.02
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, "what is 6*7?")
        assert text == "[depth:2] echo: what is 6*7?"
        [answer] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, "sure?", reply_to=answer.message_id)
        assert text == "[depth:4] echo: sure?"
        spent = await app.accounting.turn(USER, first)
    assert said(llm)[2] == ("assistant", "echo: what is 6*7?")  # no thoughts in history
    assert all("secret" not in (d.text or "") for d in tg.drafts)
    assert all("secret" not in (m.text or "") for m in tg.bot_messages(USER))
    # reasoning tokens are completion tokens, as the provider reported them
    assert spent.completion == llm.usages[0].completion_tokens > len("echo: what is 6*7?") / 4


async def test_show_reasoning_adds_the_thoughts_collapsed(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    llm.reasoner = lambda _messages: THOUGHTS
    llm.reasoning_style = "think"
    async with start_bot(show_reasoning=True) as app:
        first, text = await ask(tg, app, USER, "why?")
        [answer] = answers_to(tg, USER, first)
        assert text == f"[depth:2] {THOUGHTS}\necho: why?"
        quote = [e for e in answer.entities if e["type"] == "expandable_blockquote"]
        assert len(quote) == 1 and quote[0]["length"] == len(THOUGHTS)
        assert all("secret" not in (d.text or "") for d in tg.drafts)  # only in the final
        store = TranscriptStore(redis)
        node = await store.resolve(str(USER), answer.message_id)
        assert node is not None
        assert (await store.history(node)).messages[-1].content == "echo: why?"
        await ask(tg, app, USER, "ok", reply_to=answer.message_id)
    assert all("secret" not in c for _, c in said(llm))


def test_think_tags_split_from_the_answer() -> None:
    assert split_think("") is None and split_think("  <thi") is None
    assert split_think("<think>a b") == ("a b", "")
    assert split_think("\n<think> a b </think>\n\nanswer") == ("a b", "answer")
    assert split_think("<b>bold</b>") == ("", "<b>bold</b>")
    assert split_think("plain") == ("", "plain")
    assert split_think("x <think>not at the start</think>") == (
        "",
        "x <think>not at the start</think>",
    )


# ------------------------------------------------------------------ the model client alone


async def test_model_client_stop_closes_the_stream(llm: FakeOpenAI) -> None:
    llm.responder = lambda _messages: words(200)
    llm.chunk_chars = 8
    llm.chunk_delay = 0.05
    client = ModelClient(
        api_key="sk-test", base_url=llm.base_url, model="test-model", timeout=5, max_retries=0
    )
    stop = asyncio.Event()
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        if len(seen) == 3:
            stop.set()

    try:
        answer = await client.stream([ChatMessage("user", "go")], on_text, stop=stop)
    finally:
        await client.close()
    assert answer.stopped and answer.text.startswith(seen[2])
    assert answer.usage.estimated and answer.usage.completion_tokens >= len(seen[2]) // 4
    await llm.wait_for(lambda: llm.requests[0].closed_early, timeout=5)
    assert not llm.requests[0].completed


async def test_model_client_keeps_reasoning_deltas_apart(llm: FakeOpenAI) -> None:
    llm.reasoner = lambda _messages: THOUGHTS
    llm.chunk_chars = 5
    client = ModelClient(
        api_key="sk-test", base_url=llm.base_url, model="test-model", timeout=5, max_retries=0
    )
    seen: list[str] = []
    try:
        for style in ("reasoning_content", "reasoning", "think"):
            llm.reasoning_style = style
            answer = await client.stream([ChatMessage("user", "hi")], seen.append)
            assert (answer.text, answer.reasoning) == ("echo: hi", THOUGHTS)
            assert answer.usage.completion_tokens == llm.usages[-1].completion_tokens
            summary = await client.complete([ChatMessage("user", "hi")], max_tokens=100)
            assert summary.text == "echo: hi"  # summaries never carry thoughts either
        llm.report_usage = False  # estimated: the thoughts count as completion
        answer = await client.stream([ChatMessage("user", "hi")], seen.append)
        assert answer.usage.completion_tokens >= (len(THOUGHTS) + len("echo: hi")) // 4
    finally:
        await client.close()
    assert all("secret" not in text for text in seen)


# ------------------------------------------------------------------ crash safety


async def test_kill_mid_draft_then_the_answer_is_sent_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    reply = words(120)
    slow(llm, reply, delay=0.1)
    env = env_for(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "crash while drafting")["message_id"]
    await tg.wait_for(lambda: any(d.text for d in tg.drafts_in(USER)), timeout=30)
    await first.kill()
    assert not answers_to(tg, USER, message)  # only a draft was on screen
    llm.chunk_delay = 0.0
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=30)
    await second.terminate()
    assert [m.text for m in answers_to(tg, USER, message)] == [f"[depth:2] {reply}"]
    assert len(tg.calls_to("sendMessage")) == 1
    assert len(llm.requests) == 2
    node = await TranscriptStore(redis).resolve(str(USER), message)
    assert node is not None


# ------------------------------------------------------------------ the test servers


async def test_fake_telegram_drafts_are_strict() -> None:
    async with FakeTelegram() as tg:
        tg.add_private_chat(USER, "Ada")
        tg.add_group(GROUP, "Team")
        bot = Bot(tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.url)))
        try:
            assert await bot.send_message_draft(chat_id=USER, draft_id=5, text="")
            assert await bot.send_message_draft(
                chat_id=USER, draft_id=5, text="<b>hi</b>", parse_mode="HTML", can_stop=True
            )
            shown = tg.current_draft(USER)
            assert shown is not None and shown.text == "hi" and shown.can_stop
            with pytest.raises(TelegramBadRequest, match="TEXTDRAFT_PEER_INVALID"):
                await bot.send_message_draft(chat_id=GROUP, draft_id=5, text="no")
            with pytest.raises(TelegramBadRequest, match="too long"):
                await bot.send_message_draft(chat_id=USER, draft_id=5, text="x" * 4097)
            with pytest.raises(TelegramBadRequest, match="non-zero"):
                await bot.send_message_draft(chat_id=USER, draft_id=0, text="x")
            update_id = tg.stop_generation(USER)
            assert tg.pending_updates == 1 and update_id > 0
            await bot.send_message(chat_id=USER, text="final")
            assert tg.current_draft(USER) is None  # the message replaced it
            tg.unsupported_methods.add("sendMessageDraft")  # an older server
            with pytest.raises(TelegramNotFound, match="method not found"):
                await bot.send_message_draft(chat_id=USER, draft_id=6, text="x")
        finally:
            await bot.session.close()
        with pytest.raises(ValueError, match="stop button"):
            tg.stop_generation(USER, draft_id=6)  # never shown


async def test_fake_openai_streams_reasoning_and_records_an_early_close(
    llm: FakeOpenAI,
) -> None:
    llm.reasoner = lambda _messages: "hmm"
    llm.chunk_chars = 2
    llm.chunk_delay = 0.05
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="sk-test", max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        thoughts = ""
        async for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            extra = (delta.model_extra or {}) if delta is not None else {}
            thoughts += extra.get("reasoning_content") or ""
            if delta is not None and delta.content:
                break  # the answer began: close early
        await stream.close()
        assert thoughts == "hmm"
        await llm.wait_for(lambda: llm.requests[0].closed_early, timeout=5)
        assert llm.requests[0].usage is not None
        assert llm.requests[0].usage.reasoning_tokens == 1
    finally:
        await client.close()


async def test_an_instant_answer_goes_out_alone_without_a_draft_or_typing(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Calls that buy nothing: an answer complete as soon as it starts needs no draft
    before its message in a private chat, and no "typing…" before it in a group."""
    tg.add_group(GROUP, "Team")
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, "quick")
        _, group_text = await ask(tg, app, GROUP, "@replychain_bot quick too")
    assert text == "[depth:2] echo: quick"
    assert group_text == "[depth:2] echo: quick too"
    assert tg.calls_to("sendMessageDraft") == []
    assert tg.calls_to("sendChatAction") == []
    assert len(tg.calls_to("sendMessage")) == 2
