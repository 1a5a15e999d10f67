"""The Bot API test server's ``sendVoice``, driven by the real aiogram client: an OGG/Opus
voice note the bot sends is a voice message like a user's (its file served by getFile and
the file server, a reply to it a reply like any), refused as Telegram refuses."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import numpy
import pytest
import soundfile
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import BufferedInputFile, ReplyParameters

from .fakes.model import ogg_opus_sample
from .fakes.telegram import FakeTelegram
from .harness import USER


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    made = Bot(tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.url)))
    yield made
    await made.session.close()


def ogg_seconds(seconds: float) -> bytes:
    rate = 48_000
    out = io.BytesIO()
    silence = numpy.zeros(int(rate * seconds), dtype="float32")
    soundfile.write(out, silence, rate, format="OGG", subtype="OPUS")
    return out.getvalue()


async def test_a_voice_note_is_a_voice_message_whose_file_can_be_fetched(
    tg: FakeTelegram, bot: Bot
) -> None:
    asked = tg.send_user_message(USER, USER, "read it to me")
    audio = ogg_seconds(2.4)
    sent = await bot.send_voice(
        USER, BufferedInputFile(audio, "answer.ogg"),
        reply_parameters=ReplyParameters(message_id=asked["message_id"]),
        caption="<b>1</b>/3", parse_mode="HTML",
    )  # fmt: skip
    assert sent.voice is not None and sent.reply_to_message is not None
    assert sent.reply_to_message.message_id == asked["message_id"]
    assert (sent.voice.duration, sent.voice.mime_type, sent.voice.file_size) == (
        2, "audio/ogg", len(audio),
    )  # fmt: skip
    assert sent.caption == "1/3"
    stored = tg.message(USER, sent.message_id)
    assert stored.is_bot and stored.reply_to == asked["message_id"]
    assert tg.file_bytes(sent.voice.file_id) == audio
    file = await bot.get_file(sent.voice.file_id)
    assert file.file_path is not None
    downloaded = await bot.download_file(file.file_path)
    assert downloaded is not None and downloaded.read() == audio
    # replying to the voice note is a reply like any
    reply = tg.send_user_message(USER, USER, "and then?", reply_to=sent.message_id)
    assert reply["reply_to_message"]["voice"]["file_id"] == sent.voice.file_id
    again = await bot.send_voice(USER, sent.voice.file_id)  # sent again by its file id
    assert again.voice is not None and again.voice.file_id == sent.voice.file_id


async def test_what_telegram_refuses_is_refused(tg: FakeTelegram, bot: Bot) -> None:
    refused: dict[str, str | BufferedInputFile] = {
        "mp3": BufferedInputFile(b"ID3\x04" + b"\x00" * 64, "a.mp3"),
        "empty": BufferedInputFile(b"", "a.ogg"),
        "unknown id": "AwACAgIAAxkDnope",
        "url": "https://example.org/a.ogg",
    }
    for what, voice in refused.items():
        with pytest.raises(TelegramBadRequest):
            await bot.send_voice(USER, voice)
        assert tg.calls_to("sendVoice")[-1].status == 400, what
    with pytest.raises(TelegramBadRequest, match="message to be replied not found"):
        await bot.send_voice(
            USER, BufferedInputFile(ogg_opus_sample(), "a.ogg"),
            reply_parameters=ReplyParameters(message_id=999),
        )  # fmt: skip
    assert not tg.bot_messages(USER)
