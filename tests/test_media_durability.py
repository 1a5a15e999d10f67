"""kill -9 between an attachment's send and the turn's end: voice notes and pictures are
parts like text, announced in the part ledger before they are sent and recorded once
Telegram names them, so a run again sends none of them twice and a reply to one finds
its node (``python -m bot`` killed with SIGKILL and started again)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from transcript.keys import alias_key

from .fakes.model import FakeOpenAI, ToolCalls
from .fakes.telegram import Call, FakeTelegram, StoredMessage
from .harness import USER, BotProcess, answers_to, env_for
from .redis_server import RedisServer
from .test_durability import part_journaled, stored

#: An answer read aloud in two voice notes (and shown in two messages).
LONG = "\n\n".join(f"Paragraph {i}. " + "word " * 240 for i in range(5))


def kinds(tg: FakeTelegram, message: int) -> list[str]:
    return [
        "voice" if "voice" in m.raw else "photo" if m.photo else "text"
        for m in answers_to(tg, USER, message)
    ]


async def reply_to(tg: FakeTelegram, part: StoredMessage) -> str:
    follow = tg.send_user_message(USER, USER, "and then?", reply_to=part.message_id)
    await tg.wait_for(lambda: bool(answers_to(tg, USER, follow["message_id"])), timeout=30)
    return answers_to(tg, USER, follow["message_id"])[0].text or ""


async def test_kill_after_a_voice_note_was_sent_before_its_alias(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    llm.responder = lambda m: LONG if m[-1]["content"] == "read it all" else "echo: and then?"
    env = env_for(tg, llm, redis_server.url, TTS_MODEL="tts-test")
    first = BotProcess(env, tmp_path)

    async def hold_the_second_voice_note(call: Call) -> None:
        if call.method == "sendVoice":
            tg.after_call, llm.speech_gate = None, asyncio.Event()

    tg.after_call = hold_the_second_voice_note
    await first.start()
    asked = tg.send_user_message(USER, USER, None, voice=True, data=b"read it all")["message_id"]
    await llm.wait_for(lambda: llm.speech_posts == 2, timeout=30)
    [voice] = [m for m in answers_to(tg, USER, asked) if "voice" in m.raw]
    await part_journaled(redis, USER, voice.message_id)  # recorded, not aliased yet
    assert await redis.hget(alias_key(str(USER)), str(voice.message_id)) is None
    await first.kill()
    llm.speech_gate = None
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: kinds(tg, asked).count("voice") == 2, timeout=30)
    assert await stored(redis, USER, voice.message_id) == 2
    assert kinds(tg, asked) == ["text", "text", "voice", "voice"]  # nothing sent twice
    assert len(tg.calls_to("sendVoice")) == 2 and len(llm.requests) == 1
    assert await reply_to(tg, voice) == "[depth:4] echo: and then?"
    await second.terminate()


async def test_kill_after_a_picture_was_sent_before_its_alias(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    def model(messages: list[dict[str, Any]]) -> str | ToolCalls:
        last = messages[-1]
        if last["content"] == "draw me a cube":
            return ToolCalls([("generate_image", json.dumps({"prompt": "a red cube"}))])
        if isinstance(last["content"], list):
            return "Here is your cube."
        return "echo: and then?"

    llm.responder = model
    llm.speech_gate = asyncio.Event()  # the voice note after the picture waits
    env = env_for(tg, llm, redis_server.url, TTS_MODEL="tts-test", IMAGE_MODEL="gpt-image-1")
    first = BotProcess(env, tmp_path)
    await first.start()
    asked = tg.send_user_message(USER, USER, None, voice=True, data=b"draw me a cube")
    await llm.wait_for(lambda: llm.speech_posts == 1, timeout=30)
    [photo] = [m for m in answers_to(tg, USER, asked["message_id"]) if m.photo]
    await part_journaled(redis, USER, photo.message_id)
    assert await redis.hget(alias_key(str(USER)), str(photo.message_id)) is None
    await first.kill()
    llm.speech_gate = None
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: "voice" in kinds(tg, asked["message_id"]), timeout=30)
    assert await stored(redis, USER, photo.message_id) == 2
    assert kinds(tg, asked["message_id"]) == ["text", "photo", "voice"]  # nothing twice
    assert len(tg.calls_to("sendPhoto")) == 1 and len(llm.image_requests) == 1
    assert await reply_to(tg, photo) == "[depth:4] echo: and then?"
    await second.terminate()
