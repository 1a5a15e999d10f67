"""Voice answers: an answer read aloud after its text, as voice notes of the answer.

The real bot against the Bot API test server (sendVoice) and the OpenAI test server
(/audio/speech answers real OGG/Opus): a voice note in gets the text and a voice note
out, each voice note aliased to the answer's node (a reply to one continues the thread);
``/voice`` per user; a long answer in several voice notes; a failing or unaffordable
speech call leaves the text answer with one line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.catalogue import Prices
from bot.chat.voice import CHOSEN, NO_SPEECH
from bot.data.userprefs import set_voice
from bot.media_texts import SPEECH_FAILED, VOICE_BUDGET
from bot.model.speech import MAX_INPUT_CHARS, Speaker
from bot.telegram.uploads import Attachment
from bot.turn.limits import Spending
from bot.turn.speaking import VoiceAnswers
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI, ogg_opus_sample
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import USER, BotFactory, answered_parts, answers_to, ask
from .test_turn import CHAT, RecordingTelegram, Rig, inbound

SPEECH = {"tts_model": "tts-test"}
#: An answer of 10,000 characters read aloud: three voice notes (4,096 at most each).
LONG = "\n\n".join(f"Paragraph {i}. " + "word " * 240 for i in range(8))


def voice_notes(parts: list[StoredMessage]) -> list[StoredMessage]:
    return [p for p in parts if "voice" in p.raw]


def texts(parts: list[StoredMessage]) -> list[StoredMessage]:
    return [p for p in parts if "voice" not in p.raw]


async def command(tg: FakeTelegram, text: str) -> str:
    sent = tg.send_user_message(USER, USER, text)["message_id"]
    await tg.wait_for(lambda: bool(answers_to(tg, USER, sent)), 10)
    return answers_to(tg, USER, sent)[0].text or ""


async def test_a_voice_note_gets_the_text_and_a_voice_note_a_reply_to_which_goes_on(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, store: TranscriptStore
) -> None:
    async with start_bot(**SPEECH) as app:
        asked, _ = await ask(tg, app, USER, None, voice=True, data=b"what is a haiku?")
        parts = answers_to(tg, USER, asked)
        [text] = texts(parts)
        [voice] = voice_notes(parts)
        assert text.text == "[depth:2] 🎙 “what is a haiku?”\necho: what is a haiku?"
        assert voice.message_id > text.message_id  # the text first, as always
        assert tg.file_bytes(voice.raw["voice"]["file_id"]) == ogg_opus_sample()
        [speech] = llm.speeches
        assert (speech.input, speech.response_format, speech.voice) == (
            "echo: what is a haiku?", "opus", "alloy",
        )  # fmt: skip
        node = await store.resolve(str(USER), text.message_id)
        assert node is not None and await store.resolve(str(USER), voice.message_id) == node
        _, answer = await ask(tg, app, USER, "and a tanka?", reply_to=voice.message_id)
        assert answer == "[depth:4] echo: and a tanka?"  # a text in: text out (auto)
    said = [(m["role"], m["content"]) for m in llm.requests[-1].messages[1:]]
    assert said == [
        ("user", "what is a haiku?"), ("assistant", "echo: what is a haiku?"),
        ("user", "and a tanka?"),
    ]  # fmt: skip
    assert len(llm.speeches) == 1


async def test_voice_on_off_and_auto_are_each_users_own(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(**SPEECH) as app:
        assert await command(tg, "/voice off") == CHOSEN["off"]
        asked, _ = await ask(tg, app, USER, None, voice=True, data=b"quietly")
        assert not voice_notes(answers_to(tg, USER, asked)) and not llm.speeches
        assert await command(tg, "/voice on") == CHOSEN["on"]
        asked, text = await ask(tg, app, USER, "out loud")
        await answered_parts(tg, app, USER, asked, 2)
        assert text == "[depth:2] echo: out loud"
        assert len(voice_notes(answers_to(tg, USER, asked))) == 1
        assert await command(tg, "/voice auto") == CHOSEN["auto"]
        asked, _ = await ask(tg, app, USER, "in writing")
        assert not voice_notes(answers_to(tg, USER, asked))
    assert [s.input for s in llm.speeches] == ["echo: out loud"]
    assert not [c for c in tg.calls_to("sendVoice") if c.status != 200]


async def test_a_long_answer_is_three_voice_notes_each_aliased(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, store: TranscriptStore
) -> None:
    llm.responder = lambda _messages: LONG
    assert 9_500 < len(LONG) <= 10_000
    async with start_bot(**SPEECH) as app:
        asked, _ = await ask(tg, app, USER, None, voice=True, data=b"tell me everything")
        parts = answers_to(tg, USER, asked)
        node = await store.resolve(str(USER), parts[0].message_id)
        assert node is not None
        for part in parts:
            assert await store.resolve(str(USER), part.message_id) == node
    assert len(voice_notes(parts)) == 3 and len(texts(parts)) == 3
    assert all(len(s.input) <= MAX_INPUT_CHARS for s in llm.speeches)
    assert " ".join(s.input for s in llm.speeches).split() == LONG.split()


async def test_a_failing_speech_call_leaves_the_text_answer_and_one_log_line(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="replychain")
    llm.fail_speech_next(500, count=5)  # more than the retries
    async with start_bot(**SPEECH) as app:
        asked, text = await ask(tg, app, USER, None, voice=True, data=b"hello")
    assert text == f"[depth:2] 🎙 “hello”\necho: hello\n\n{SPEECH_FAILED}"
    assert not voice_notes(answers_to(tg, USER, asked))
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines] == [f"speech for chat {USER} failed: unavailable"]


async def test_a_spent_budget_leaves_the_text_answer_and_one_line(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    priced: dict[str, Any] = {"price_input_per_mtok": 1e6, "user_daily_budget_usd": 0.01}
    async with start_bot(**SPEECH, **priced) as app:
        asked, text = await ask(tg, app, USER, None, voice=True, data=b"hello")
    assert text == f"[depth:2] 🎙 “hello”\necho: hello\n\n{VOICE_BUDGET}"  # its call spent it
    assert not voice_notes(answers_to(tg, USER, asked)) and not llm.speech_posts


async def test_without_a_speech_model_voice_says_so(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot():
        assert await command(tg, "/voice on") == NO_SPEECH


class KilledAfterSending(Exception):
    """The process died right after Telegram accepted the voice note."""


class Voiced(RecordingTelegram):
    """Records voice notes too; ``die``: the next one is accepted, then the run dies."""

    die = False

    async def send_attachment(
        self, chat_id: int, attachment: Attachment, *, reply_to: int | None,
        thread_id: int | None, ready: Callable[[bool], Awaitable[None]],
    ) -> int:  # fmt: skip
        await ready(False)
        self.next_id += 1
        self.sends += 1
        self.shown[self.next_id] = f"<{attachment.kind}>"
        if self.die:
            raise KilledAfterSending
        return self.next_id


def voiced(redis: Redis, speaker: Speaker) -> tuple[Rig, Voiced]:
    """A turn rig (tests/test_turn.py) that reads its answers aloud."""
    rig, telegram = Rig(redis), Voiced()
    rig.telegram = rig.engine.out = telegram
    accounting = rig.engine.accounting
    spending = Spending(accounting, daily_tokens=0, daily_dollars=0.0)
    voice = VoiceAnswers(speaker, accounting=accounting, prices=Prices(), spending=spending)
    rig.engine.outputs = (voice,)
    return rig, telegram


async def test_a_voice_note_lost_between_sending_and_recording_is_adopted_by_a_reply(
    redis: Redis, llm: FakeOpenAI
) -> None:
    """The window the part ledger cannot close, as for text: Telegram took the voice
    note and the run died before recording its id. The run that finishes the turn sends
    it again (the one tolerated duplicate) and notes where the lost one lies; a reply to
    it (a voice note shows no text) continues the answer's thread."""
    speaker = Speaker(
        api_key="sk-test", base_url=llm.base_url, model="tts-test", voice="alloy", timeout=5.0,
        max_retries=0,
    )  # fmt: skip
    await set_voice(redis, 5, "on")
    first, telegram = voiced(redis, speaker)
    telegram.die = True
    with pytest.raises(KilledAfterSending):
        await first.engine.run(inbound(1))
    [text, lost] = telegram.shown
    fresh, again = voiced(redis, speaker)
    again.next_id = lost + 10
    await fresh.engine.run(inbound(1))
    assert (again.sends, again.edits, again.shown[lost + 11]) == (1, 1, "<voice>")
    answer = await fresh.store.resolve(str(CHAT), lost + 11)
    assert answer is not None and await fresh.store.resolve(str(CHAT), text) == answer
    reply = Inbound(CHAT, 2, 5, "more", reply_to=lost, reply_to_bot=True, reply_head="")
    await fresh.engine.run(reply)
    await speaker.close()
    assert await fresh.store.resolve(str(CHAT), lost) == answer
    assert "[depth:4] echo: more" in again.shown.values()
    assert len(llm.speeches) == 3  # the lost one, again, and the reply's answer
