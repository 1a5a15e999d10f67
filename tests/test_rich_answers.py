"""Rich answers end to end: the real bot against the strict Bot API and OpenAI test servers.

Answers go out as Bot API 10.1 rich messages (tables, math, one message up to the rich
limit), stream as rich drafts in private chats (the stop button still stops the model)
and as rich edits in groups; a server without rich messages gets today's HTML parts for
good (one log line), a rich message Telegram refuses is sent again as HTML once, for
that answer; every part is aliased; what is stored is the model's text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest
from aiogram import Bot
from aiogram.client.default import DefaultBotProperties
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ParseMode
from redis.asyncio import Redis

from bot.data import keys
from bot.telegram.drafts import draft_id
from bot.telegram.format import Chunk
from bot.telegram.out import TelegramOut
from bot.telegram.outcomes import AnswerRejectedError, RichUnavailableError
from bot.telegram.rich import render_rich
from bot.telegram.session import BotApiSession
from bot.telegram.writer import AnswerWriter
from bot.turn.notices import STOPPED
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import (
    ROOT_PROMPT,
    USER,
    BotFactory,
    BotProcess,
    answered_parts,
    answers_to,
    ask,
    env_for,
    said,
)
from .redis_server import RedisServer

GROUP = -100888
#: The production default (the harness's is the HTML path: tests/harness.py, RENDERING).
RICH = {"rich_messages": "always"}
SYSTEM = ("system", ROOT_PROMPT)
TABLE_AND_MATH = (
    "Here is the result, with $a^2 + b^2 = c^2$ inline.\n\n"
    "| side | length |\n|:--|--:|\n| a | 3 |\n| b | 4 |\n\n"
    "$$\nc = \\sqrt{a^2 + b^2}\n$$\n\nIt costs $5 and $6."
)
THOUGHTS = "secret thoughts: 3 squared plus 4 squared"


def paragraphs(count: int, size: int = 1000) -> list[str]:
    return [f"p{i:04d} " + " ".join(["word"] * ((size - 6) // 5)) for i in range(count)]


def answering(llm: FakeOpenAI, answers: dict[str, str]) -> None:
    """The model answers these questions so, and echoes anything else."""

    def reply(messages: list[dict[str, Any]]) -> str:
        question = str(messages[-1]["content"])
        return answers.get(question, f"echo: {question}")

    llm.responder = reply


def block_types(message: StoredMessage) -> list[str]:
    assert message.rich_message is not None, "not a rich message"
    return [block["type"] for block in message.rich_message["blocks"]]


async def journaled(redis: Redis, chat: int, part: int) -> None:
    """Wait until the chat's part ledger knows a sent part (a kill then loses nothing)."""
    deadline = time.monotonic() + 10
    while not await redis.hexists(keys.pending_parts_key(str(chat)), str(part)):
        assert time.monotonic() < deadline, f"part {part} was never journaled"
        await asyncio.sleep(0.02)


def rich_on(out: TelegramOut) -> bool:
    return out.rich


def rich_calls(tg: FakeTelegram) -> list[int]:
    return [c.status for c in tg.calls if "rich_message" in c.params]


# ------------------------------------------------------------------ what arrives


async def test_a_table_and_a_formula_arrive_as_a_rich_table_and_math(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    answering(llm, {"pythagoras": TABLE_AND_MATH})
    async with start_bot(**RICH) as app:
        question, text = await ask(tg, app, USER, "pythagoras")
    [answer] = answers_to(tg, USER, question)
    assert text.startswith("[depth:2] Here is the result")
    assert block_types(answer) == ["paragraph", "table", "mathematical_expression", "paragraph"]
    assert answer.rich_message is not None
    first, table, formula, last = answer.rich_message["blocks"]
    assert {"type": "mathematical_expression", "expression": "a^2 + b^2 = c^2"} in first["text"]
    assert [[cell["text"] for cell in row] for row in table["cells"]] == [
        ["side", "length"], ["a", "3"], ["b", "4"],
    ]  # fmt: skip
    assert formula["expression"] == "c = \\sqrt{a^2 + b^2}"
    assert last["text"] == "It costs $5 and $6."  # a price is no formula
    assert not tg.calls_to("sendMessage") and rich_calls(tg) == [200]
    node = await TranscriptStore(redis).resolve(str(USER), answer.message_id)
    assert node is not None  # what is stored is the model's text, not the rendering
    assert (await TranscriptStore(redis).history(node)).messages[-1].content == TABLE_AND_MATH


async def test_a_12000_character_answer_is_one_message_and_a_reply_continues(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    long = "\n\n".join(paragraphs(12, 1010))
    assert len(long) >= 12_000
    answering(llm, {"long": long})
    llm.chunk_chars = 2000
    async with start_bot(**RICH) as app:
        question, _ = await ask(tg, app, USER, "long")
        [answer] = answers_to(tg, USER, question)
        assert answer.text is not None and answer.text.startswith("[depth:2] p0000")
        assert answer.text.count("word") == long.count("word")
        _, text = await ask(tg, app, USER, "next", reply_to=answer.message_id)
    assert text == "[depth:4] echo: next"
    assert said(llm)[-2] == ("assistant", long)


async def test_a_70000_character_answer_splits_at_block_boundaries_every_part_aliased(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    paras = paragraphs(70)
    answering(llm, {"longer": "\n\n".join(paras)})
    llm.chunk_chars = 5000
    async with start_bot(**RICH) as app:
        question, _ = await ask(tg, app, USER, "longer")
        parts = answers_to(tg, USER, question)
        assert len(parts) == 3
        assert all(block_types(p) == ["paragraph"] * len(block_types(p)) for p in parts)
        assert parts[0].text is not None and parts[0].text.startswith("[depth:2] p0000")
        for para in paras:  # never cut inside a paragraph
            assert sum(para in (p.text or "") for p in parts) == 1
        store = TranscriptStore(redis)
        nodes = {await store.resolve(str(USER), p.message_id) for p in parts}
        assert len(nodes) == 1 and None not in nodes
        _, text = await ask(tg, app, USER, "next", reply_to=parts[2].message_id)
    assert text == "[depth:4] echo: next"
    sends = tg.calls_to("sendRichMessage")
    assert [c.status for c in sends] == [200, 200, 200, 200]  # three parts, one reply


async def test_rich_messages_off_sends_html(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    answering(llm, {"pythagoras": TABLE_AND_MATH})
    async with start_bot(rich_messages="off") as app:
        question, _ = await ask(tg, app, USER, "pythagoras")
    [answer] = answers_to(tg, USER, question)
    assert answer.parse_mode == "HTML" and answer.rich_message is None
    assert not rich_calls(tg)


# ------------------------------------------------------------------ fallbacks


async def test_a_server_without_rich_messages_gets_html_parts_for_good(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    tg.unsupported_methods |= {"sendRichMessage", "sendRichMessageDraft"}
    long = "\n\n".join(paragraphs(6))
    answering(llm, {"long": long})
    caplog.set_level(logging.WARNING, logger="replychain")
    async with start_bot(**RICH) as app:
        question, _ = await ask(tg, app, USER, "long")
        parts = answers_to(tg, USER, question)
        assert len(parts) == 2  # today's HTML parts of at most 4096 characters
        assert all(p.parse_mode == "HTML" for p in parts)
        assert parts[0].text is not None and parts[0].text.startswith("[depth:2] p0000")
        # the first refusal told (a draft cut short by the answer's end may have met a
        # second one on its way); from then on nothing rich is tried
        told = rich_calls(tg)
        assert set(told) == {404} and len(told) <= 2
        _, text = await ask(tg, app, USER, "next", reply_to=parts[1].message_id)
        assert text == "[depth:4] echo: next"
        tg.add_group(GROUP, "Team")
        await ask(tg, app, GROUP, "@replychain_bot hi")
    assert rich_calls(tg) == told
    lines = [r for r in caplog.records if "lacks sendRich" in r.getMessage()]
    assert len(lines) in (1, 2)  # one a method, if a draft met the other on its way
    assert all("answers go out as HTML messages" in r.getMessage() for r in lines)


async def test_a_refused_rich_message_is_sent_once_as_html(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    answering(llm, {"pythagoras": TABLE_AND_MATH})
    tg.fail_next("sendRichMessage", status=400, description="Bad Request: RICH_MESSAGE_INVALID")
    async with start_bot(**RICH) as app:
        question, text = await ask(tg, app, USER, "pythagoras")
        [answer] = answers_to(tg, USER, question)
        assert answer.parse_mode == "HTML" and answer.rich_message is None
        assert text.startswith("[depth:2] Here is the result")
        assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None
        # the refusal was this answer's: the next one is rich again
        second, _ = await ask(tg, app, USER, "again", reply_to=answer.message_id)
        [again] = answers_to(tg, USER, second)
        assert again.rich_message is not None and again.text == "[depth:4] echo: again"
    assert [c.status for c in tg.calls_to("sendRichMessage")] == [400, 200]
    assert [c.status for c in tg.calls_to("sendMessage")] == [200]


async def test_a_refusal_after_a_rich_part_was_sent_edits_it_into_html_every_part_aliased(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    paras = paragraphs(40)  # two rich messages, ten HTML ones
    answering(llm, {"longer": "\n\n".join(paras)})
    llm.chunk_chars = 2000
    llm.chunk_delay = 0.2  # the first part is sent seconds before the second
    async with start_bot(**RICH) as app:
        done = app.runner.completed + 1
        question = tg.send_user_message(USER, USER, "longer")["message_id"]
        await tg.wait_for(lambda: bool(tg.calls_to("sendRichMessage")))
        tg.fail_next("sendRichMessage", status=400, description="Bad Request: RICH_MESSAGE_INVALID")
        parts = await answered_parts(tg, app, USER, question, done)
        # the rich part on screen was edited into the HTML rendering's first part, the
        # rest sent as HTML: one answer, nothing twice, nothing deleted
        assert [p.parse_mode for p in parts] == ["HTML"] * len(parts) and len(parts) >= 10
        assert not any(p.deleted or p.rich_message for p in parts)
        first_rich = tg.calls_to("sendRichMessage")[0].result["message_id"]
        assert parts[0].message_id == first_rich and parts[0].edits >= 1
        assert parts[0].text is not None and parts[0].text.startswith("[depth:2] p0000")
        for para in paras:
            assert sum(para in (p.text or "") for p in parts) == 1
        store = TranscriptStore(redis)
        nodes = {await store.resolve(str(USER), p.message_id) for p in parts}
        assert len(nodes) == 1 and None not in nodes
        _, text = await ask(tg, app, USER, "next", reply_to=parts[-1].message_id)
    assert text == "[depth:4] echo: next"
    assert [c.status for c in tg.calls_to("sendRichMessage")] == [200, 400, 200]  # +the reply


async def test_a_group_edit_refused_goes_on_as_html_in_the_same_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    reply = " ".join(f"w{i:03d}" for i in range(150))
    answering(llm, {"go": reply})
    llm.chunk_chars = 40
    llm.chunk_delay = 0.1
    tg.fail_next("editMessageText", status=400, description="Bad Request: RICH_MESSAGE_INVALID")
    async with start_bot(**RICH) as app:
        question, text = await ask(tg, app, GROUP, "@replychain_bot go")
    [answer] = answers_to(tg, GROUP, question)
    assert text == f"[depth:2] {reply}"
    assert answer.parse_mode == "HTML"  # edited from rich into HTML, never sent twice
    edits = tg.calls_to("editMessageText")
    assert edits[0].status == 400 and "rich_message" in edits[0].params
    assert all("rich_message" not in c.params for c in edits[1:])
    assert len(tg.calls_to("sendRichMessage")) == 1 and not tg.calls_to("sendMessage")


# ------------------------------------------------------------------ streaming


async def test_a_private_stream_uses_rich_drafts_and_the_stop_button_stops_the_model(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    full = "| n | square |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(200))
    llm.responder = lambda m: full if m[-1]["content"] == "squares" else "echo: more"
    llm.chunk_chars = 12
    llm.chunk_delay = 0.1
    async with start_bot(**RICH) as app:
        question = tg.send_user_message(USER, USER, "squares")["message_id"]
        await tg.wait_for(lambda: any(d.blocks_of("table") for d in tg.drafts_in(USER)))
        shown = [d for d in tg.drafts_in(USER) if d.rich_message is not None]
        assert all(d.can_stop and d.draft_id == draft_id(question, 1) for d in shown)
        tg.stop_generation(USER)
        await tg.wait_for(lambda: bool(answers_to(tg, USER, question)), timeout=5)
        await llm.wait_for(lambda: llm.requests[0].closed_early, timeout=5)
        [answer] = answers_to(tg, USER, question)
        assert answer.text is not None and answer.text.endswith(STOPPED)
        assert block_types(answer) == ["paragraph", "table", "paragraph"]
        node = await TranscriptStore(redis).resolve(str(USER), answer.message_id)
        assert node is not None
        partial = (await TranscriptStore(redis).history(node)).messages[-1].content
        assert partial and full.startswith(partial) and partial != full
        _, text = await ask(tg, app, USER, "more", reply_to=answer.message_id)
    assert text == "[depth:4] echo: more"
    assert said(llm)[-2] == ("assistant", partial)
    assert not tg.violations


async def test_a_group_streams_by_rich_edits_of_one_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.add_group(GROUP, "Team")
    tg.flood_edits_per_second = 1
    long = "\n\n".join(paragraphs(8))  # 8,000 characters: one rich message, two HTML ones
    answering(llm, {"essay": long})
    llm.chunk_chars = 400
    llm.chunk_delay = 0.2
    async with start_bot(**RICH) as app:
        question, _ = await ask(tg, app, GROUP, "@replychain_bot essay")
    [answer] = answers_to(tg, GROUP, question)
    assert (
        answer.edits >= 1
        and answer.text is not None
        and answer.text.count("word") == long.count("word")
    )
    edits = tg.calls_to("editMessageText")
    assert edits and all(c.status == 200 and "rich_message" in c.params for c in edits)
    assert not tg.violations


@pytest.mark.parametrize("style", ["reasoning_content", "think"])
async def test_reasoning_shows_live_in_drafts_and_in_the_message_only_with_show_reasoning(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    start_bot: BotFactory,
    style: Literal["reasoning_content", "think"],
) -> None:
    llm.reasoner = lambda _messages: THOUGHTS
    llm.reasoning_style = style
    llm.chunk_chars = 4
    llm.chunk_delay = 0.1  # about a second of thinking before the answer begins
    async with start_bot(**RICH) as app:
        done = app.runner.completed + 1
        question = tg.send_user_message(USER, USER, "why?")["message_id"]
        # while the model thinks, the draft's thinking block shows its thoughts so far
        await tg.wait_for(lambda: any(d.blocks_of("thinking") for d in tg.drafts_in(USER)))
        [answer] = await answered_parts(tg, app, USER, question, done)
    thinking = [d for d in tg.drafts_in(USER) if d.blocks_of("thinking")]
    assert all(THOUGHTS.startswith(d.blocks_of("thinking")[0]["text"]) for d in thinking)
    assert answer.text == "[depth:2] echo: why?" and block_types(answer) == ["paragraph"]
    drafts = tg.drafts_in(USER)
    after = drafts[drafts.index(thinking[-1]) + 1 :]  # the answer's text replaced them
    assert not any("secret" in (d.text or "") for d in after)
    llm.chunk_delay = 0.0
    async with start_bot(show_reasoning=True, **RICH) as app:
        question, text = await ask(tg, app, USER, "why not?")
    [answer] = answers_to(tg, USER, question)
    assert block_types(answer) == ["paragraph", "expandable_blockquote", "paragraph"]
    assert text == f"[depth:2]\n\n{THOUGHTS}\n\necho: why not?"
    assert all("secret" not in content for _, content in said(llm))  # never sent back


# ------------------------------------------------------------------ crashes


async def test_kill_mid_rich_edits_then_the_same_message_is_finished(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    tg.add_group(GROUP, "Team")
    long = "\n\n".join(paragraphs(12, 500))
    answering(llm, {"essay": long})
    llm.chunk_chars = 60
    llm.chunk_delay = 0.1  # ~10 s of streaming
    env = env_for(tg, llm, redis_server.url, RICH_MESSAGES="always")
    first = BotProcess(env, tmp_path)
    await first.start()
    question = tg.send_user_message(GROUP, USER, "@replychain_bot essay")["message_id"]
    await tg.wait_for(lambda: bool(answers_to(tg, GROUP, question)), timeout=30)
    [partial] = answers_to(tg, GROUP, question)
    await journaled(redis, GROUP, partial.message_id)
    await first.kill()
    assert partial.rich_message is not None and (partial.text or "").count("word") < 12 * 98
    llm.chunk_delay = 0.0
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: (partial.text or "").count("word") == long.count("word"), timeout=30)
    await second.terminate()
    [answer] = answers_to(tg, GROUP, question)
    assert answer.message_id == partial.message_id and answer.rich_message is not None
    assert await TranscriptStore(redis).resolve(str(GROUP), answer.message_id) is not None
    assert len(tg.calls_to("sendRichMessage")) == 1  # edited, never sent again


async def test_kill_mid_rich_draft_then_the_answer_is_sent_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    answering(llm, {"pythagoras": TABLE_AND_MATH})
    llm.chunk_chars = 8
    llm.chunk_delay = 0.1
    env = env_for(tg, llm, redis_server.url, RICH_MESSAGES="auto")
    first = BotProcess(env, tmp_path)
    await first.start()
    message = tg.send_user_message(USER, USER, "pythagoras")["message_id"]
    await tg.wait_for(lambda: any(d.rich_message for d in tg.drafts_in(USER)), timeout=30)
    await first.kill()
    assert not answers_to(tg, USER, message)  # only a draft was on screen
    llm.chunk_delay = 0.0
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: bool(answers_to(tg, USER, message)), timeout=30)
    await second.terminate()
    [answer] = answers_to(tg, USER, message)
    assert "table" in block_types(answer) and len(tg.calls_to("sendRichMessage")) == 1
    assert await TranscriptStore(redis).resolve(str(USER), answer.message_id) is not None


# ------------------------------------------------------------------ the edge itself


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    session = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
    bot = Bot(tg.token, session=session, default=DefaultBotProperties(parse_mode=ParseMode.HTML))
    yield bot
    await bot.session.close()


async def test_the_thinking_block_shows_live_in_the_draft_only(tg: FakeTelegram, bot: Bot) -> None:
    question = tg.send_user_message(USER, USER, "think")["message_id"]
    writer = AnswerWriter(
        TelegramOut(bot), chat_id=USER, reply_to=question, thread_id=None,
        edit_interval=0.1, draft_of=question,
    )  # fmt: skip
    writer.prefix = "[depth:2] "
    await writer.start()
    writer.think("first I square three")
    await tg.wait_for(lambda: any(d.blocks_of("thinking") for d in tg.drafts_in(USER)))
    writer.think("first I square three, then four")
    await tg.wait_for(lambda: "then four" in (tg.drafts_in(USER)[-1].text or ""))
    writer.update("The answer is **5**.")
    await tg.wait_for(lambda: "answer is 5" in (tg.drafts_in(USER)[-1].text or ""))
    assert not tg.drafts_in(USER)[-1].blocks_of("thinking")  # the text replaced the thoughts
    writer.ended()
    [part] = await writer.finish("The answer is **5**.")
    await writer.close()
    sent = tg.message(USER, part)
    assert sent.text == "[depth:2] The answer is 5." and block_types(sent) == ["paragraph"]
    assert all("square" not in (m.text or "") for m in tg.bot_messages(USER))


async def test_the_edge_tells_a_refused_rich_message_from_other_refusals(
    tg: FakeTelegram, bot: Bot
) -> None:
    out = TelegramOut(bot)
    [chunk] = render_rich("**rich**", prefix="[depth:2] ")
    tg.fail_next("sendRichMessage", status=400, description="Bad Request: RICH_MESSAGE_INVALID")
    with pytest.raises(RichUnavailableError):
        await out.send(USER, chunk, reply_to=None, thread_id=None)
    assert rich_on(out)  # a refusal of one message turns nothing off
    message_id = await out.send(USER, chunk, reply_to=None, thread_id=None)
    assert tg.message(USER, message_id).rich_message is not None
    # a refusal of any message (the chat) is one of this message too: no second try as HTML
    calls = len(tg.calls)
    with pytest.raises(AnswerRejectedError):
        await out.send(-1, chunk, reply_to=None, thread_id=None)
    assert len(tg.calls) == calls + 1
    tg.fail_next("sendRichMessage", status=400, description="Bad Request: can't parse rich message")
    with pytest.raises(RichUnavailableError):
        await out.send(USER, chunk, reply_to=None, thread_id=None)
    with pytest.raises(AnswerRejectedError):
        await out.send(-1, Chunk("x", "x"), reply_to=None, thread_id=None)
    tg.unsupported_methods.add("sendRichMessage")
    with pytest.raises(RichUnavailableError):
        await out.send(USER, chunk, reply_to=None, thread_id=None)
    assert not rich_on(out)  # the server has none: off for good, no call tried again
    calls = len(tg.calls)
    with pytest.raises(RichUnavailableError):
        await out.edit(USER, message_id, chunk)
    assert len(tg.calls) == calls
    await out.edit(USER, message_id, Chunk("<b>plain</b> now", "plain now"))  # rich -> HTML
    assert tg.message(USER, message_id).rich_message is None


async def test_drafts_of_a_writer_are_rich_until_the_server_says_no(
    tg: FakeTelegram, bot: Bot
) -> None:
    question = tg.send_user_message(USER, USER, "go")["message_id"]
    out = TelegramOut(bot)
    tg.unsupported_methods.add("sendRichMessageDraft")
    writer = AnswerWriter(
        out, chat_id=USER, reply_to=question, thread_id=None, edit_interval=0.1,
        draft_of=question,
    )  # fmt: skip
    writer.prefix = "[depth:2] "
    await writer.start()
    writer.update("| a | b |\n|---|---|\n| 1 | 2 |")
    await tg.wait_for(lambda: bool(tg.drafts_in(USER)) and tg.drafts_in(USER)[-1].text is not None)
    assert tg.drafts_in(USER)[-1].rich_message is None and not rich_on(out)  # HTML drafts now
    writer.ended()
    [part] = await writer.finish("| a | b |\n|---|---|\n| 1 | 2 |")
    await writer.close()
    assert tg.message(USER, part).parse_mode == "HTML"
    assert len(tg.bot_messages(USER)) == 1


async def test_a_run_again_keeps_an_earlier_runs_later_part_while_it_streams(
    tg: FakeTelegram, bot: Bot
) -> None:
    """A turn run again (a takeover) streams its answer anew over the parts the first
    run left on screen: the second part stays while the text is still short, so a
    reply to it keeps its place, and the final text edits it (soak seed 4322 with three
    processes: it was deleted at the first push and sent again as a new message). HTML
    messages: a rich one holds more text."""
    question = tg.send_user_message(USER, USER, "long")["message_id"]
    words = " ".join(f"w{i}" for i in range(1000))
    first = AnswerWriter(
        TelegramOut(bot, rich=False),
        chat_id=USER,
        reply_to=question,
        thread_id=None,
        edit_interval=0.1,
    )
    first.prefix = "[depth:2] "
    await first.start()
    first.ended()
    parts = await first.finish(words)
    await first.close()
    assert len(parts) == 2
    again = AnswerWriter(
        TelegramOut(bot, rich=False), chat_id=USER, reply_to=question, thread_id=None,
        edit_interval=0.1, existing=parts,
    )  # fmt: skip
    again.prefix = "[depth:2] "
    await again.start()
    again.update("w0 w1 w2")
    await tg.wait_for(lambda: (tg.message(USER, parts[0]).text or "").endswith("w2"))
    assert not tg.message(USER, parts[1]).deleted  # needed again: kept while streaming
    again.ended()
    assert await again.finish(words) == parts
    await again.close()
    assert [m.message_id for m in tg.bot_messages(USER) if not m.deleted] == parts
