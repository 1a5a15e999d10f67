"""Rich only where it adds something: RICH_MESSAGES=auto|always|off and each user's /format.

Telegram Web and the Watch show a rich message as "not supported", so under ``auto`` (the
default) an answer is a rich message only when it holds what HTML cannot show (a table,
a formula, more than one HTML message); every other answer is today's HTML. A user's
``/format plain`` or ``/format rich`` is kept in Redis for every chat and process. The
real bot runs against the strict Bot API and OpenAI test servers.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.chat.style import ALL_PLAIN, CHOSEN, USAGE
from bot.data.userprefs import user_prefs
from bot.telegram.rendering import answer_style
from bot.telegram.rich import needs_rich
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import USER, BotFactory, answers_to, ask

GROUP = -100555
TABLE = "Here you are.\n\n| side | length |\n|---|---|\n| a | 3 |\n| b | 4 |"
LONG = "\n\n".join(f"p{i:02d} " + " ".join(["word"] * 199) for i in range(6))  # ~6,000


def answering(llm: FakeOpenAI, answers: dict[str, str]) -> None:
    def reply(messages: list[dict[str, Any]]) -> str:
        question = str(messages[-1]["content"]).removeprefix("@replychain_bot ").strip()
        return answers.get(question, f"echo: {question}")

    llm.responder = reply


def rich_calls(tg: FakeTelegram) -> list[str]:
    return [c.method for c in tg.calls if "rich_message" in c.params]


def is_rich(message: StoredMessage) -> bool:
    return message.rich_message is not None


async def command(tg: FakeTelegram, text: str, chat: int = USER) -> StoredMessage:
    sent = tg.send_user_message(chat, USER, text)["message_id"]
    await tg.wait_for(lambda: bool(answers_to(tg, chat, sent)), 10)
    [answer] = answers_to(tg, chat, sent)
    return answer


def test_the_style_of_an_answer() -> None:
    assert [answer_style("auto", c) for c in (None, "rich", "plain")] == ["auto", "auto", "never"]
    assert [answer_style("always", c) for c in (None, "rich", "plain")] == [
        "always", "always", "never",
    ]  # fmt: skip
    assert [answer_style("off", c) for c in (None, "rich", "plain")] == ["never"] * 3
    assert needs_rich(TABLE) and needs_rich("so $x^2$ it is") and needs_rich("$$\nx\n$$")
    assert not needs_rich("It costs $5 and $6, a | b.") and not needs_rich("hello")


async def test_under_auto_only_an_answer_html_cannot_show_is_rich(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    answering(llm, {"table": TABLE, "long": LONG})
    async with start_bot(rich_messages="auto") as app:
        question, text = await ask(tg, app, USER, "hello")
        assert text == "[depth:2] echo: hello"
        [plain] = answers_to(tg, USER, question)
        assert not is_rich(plain) and not rich_calls(tg)  # an HTML sendMessage
        question, _ = await ask(tg, app, USER, "table", reply_to=plain.message_id)
        [table] = answers_to(tg, USER, question)
        assert is_rich(table) and rich_calls(tg) == ["sendRichMessage"]
        question, _ = await ask(tg, app, USER, "long", reply_to=table.message_id)
        [long] = answers_to(tg, USER, question)  # over one HTML message: one rich message
        assert is_rich(long) and (long.text or "").count("word") == LONG.count("word")
        _, text = await ask(tg, app, USER, "next", reply_to=long.message_id)
    assert text == "[depth:8] echo: next"


async def test_an_answer_that_gains_a_table_while_streaming_becomes_one_rich_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """In a group the answer's first part is on screen as HTML before the table comes:
    that message is edited into a rich one, once; nothing is sent twice or left unaliased."""
    intro = "Let me think about the sides of this triangle for a moment. " * 4
    answering(llm, {"sides": f"{intro}\n\n{TABLE}"})
    llm.chunk_chars, llm.chunk_delay = 12, 0.05  # the intro streams for about a second
    tg.add_group(GROUP, "Team")
    async with start_bot(rich_messages="auto") as app:
        question, text = await ask(tg, app, GROUP, "@replychain_bot sides")
        [answer] = answers_to(tg, GROUP, question)
        assert is_rich(answer) and text.startswith("[depth:2] Let me think")
        assert answer.history, "the first part went out as HTML before the table came"
        assert tg.calls_to("sendMessage") and not tg.calls_to("sendRichMessage")
        assert rich_calls(tg)[0] == "editMessageText"
        node = await TranscriptStore(app.redis).resolve(str(GROUP), answer.message_id)
        assert node is not None
        llm.chunk_delay = 0.0
        _, text = await ask(tg, app, GROUP, "@replychain_bot more", reply_to=answer.message_id)
    assert text == "[depth:4] echo: more"
    assert len(tg.bot_messages(GROUP)) == 2 and not tg.violations


async def test_format_plain_is_kept_for_the_user_in_every_process(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    answering(llm, {"table": TABLE})
    tg.add_group(GROUP, "Team")
    async with start_bot(rich_messages="auto") as app:
        reply = await command(tg, "/format plain")
        assert reply.text == CHOSEN["plain"] and not is_rich(reply)
        assert (await user_prefs(app.redis, USER)).format == "plain"
    async with start_bot(rich_messages="always") as app:  # another process, later
        question, text = await ask(tg, app, USER, "table")
        [answer] = answers_to(tg, USER, question)
        assert not is_rich(answer) and answer.parse_mode == "HTML"
        assert any(e["type"] == "pre" for e in answer.entities)
        assert "| a    | 3      |" in text
        question, _ = await ask(tg, app, GROUP, "@replychain_bot table")  # in a group too
        [answer] = answers_to(tg, GROUP, question)
        assert not is_rich(answer)
    assert not rich_calls(tg)


async def test_format_rich_sends_a_long_plain_answer_as_one_rich_message(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    answering(llm, {"long": LONG})
    async with start_bot(rich_messages="auto") as app:
        await command(tg, "/format plain")
        question, _ = await ask(tg, app, USER, "long")
        assert len(answers_to(tg, USER, question)) == 2  # plain: HTML parts
        reply = await command(tg, "/format rich")
        assert reply.text == CHOSEN["rich"]
        question, _ = await ask(tg, app, USER, "long")
        [answer] = answers_to(tg, USER, question)
    assert is_rich(answer) and (answer.text or "").count("word") == LONG.count("word")


async def test_format_without_an_argument_offers_two_buttons_for_the_asker_only(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot(rich_messages="auto") as app:
        menu = await command(tg, "/format")
        assert menu.reply_markup is not None
        [[rich], [plain]] = menu.reply_markup["inline_keyboard"]
        assert (rich["text"], plain["text"]) == (
            "Rich: tables and math",
            "Plain: every Telegram app",
        )
        assert tg.press_button(USER, menu.message_id, USER, plain["callback_data"])
        await tg.wait_for(lambda: tg.message(USER, menu.message_id).text == CHOSEN["plain"], 10)
        assert (await user_prefs(app.redis, USER)).format == "plain"
        wrong = await command(tg, "/format fancy")
        assert wrong.text == USAGE


@pytest.mark.parametrize("setting", ["off"])
async def test_with_rich_messages_off_format_says_every_answer_is_plain(
    tg: FakeTelegram, start_bot: BotFactory, setting: str
) -> None:
    async with start_bot(rich_messages=setting) as app:
        reply = await command(tg, "/format rich")
        assert reply.text == ALL_PLAIN
        assert (await user_prefs(app.redis, USER)).format is None
