"""Media in a thread, end to end: photos, text-only models, voice, text files, limits.

The real bot against the Bot API test server (real getFile and file downloads)
and the OpenAI test server (image parts, transcriptions), with a real Redis.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import msgpack
import openai
import pytest
from redis.asyncio import Redis

from bot.bus.inbound import Inbound, MediaRef
from bot.data.keys import album_key
from bot.model import (
    IMAGE_PLACEHOLDER,
    MESSAGE_OVERHEAD,
    Media,
    ModelClient,
    ModelError,
    estimate_messages,
    wire_messages,
)
from bot.model.sdk import classify
from bot.model.wire import data_url
from bot.reading import quoting
from bot.reading.texts import FAILURES
from bot.retry import Backoff, retrying
from bot.turn import notices
from transcript import ChatMessage, CorruptRecordError, Image, TranscriptStore, codec, keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import (
    USER,
    BotFactory,
    BotProcess,
    answers_to,
    ask,
    env_for,
    running_bot,
    settings_for,
)
from .redis_server import RedisServer

SIZES = [(90, 68), (320, 240), (1280, 960), (2560, 1920)]


def image_parts(llm: FakeOpenAI, index: int = -1) -> list[str]:
    """The data URLs of every image part of one request, in order."""
    return [
        part["image_url"]["url"]
        for m in llm.requests[index].messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image_url"
    ]


def photo_id(message: dict[str, Any], width: int) -> str:
    return str(next(p["file_id"] for p in message["photo"] if p["width"] == width))


def data_url_of(tg: FakeTelegram, file_id: str) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(tg.file_bytes(file_id)).decode()


async def test_captioned_photo_goes_to_the_model_and_stays_in_the_thread(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        first, text = await ask(
            tg, app, USER, None, photo=True, photo_sizes=SIZES, caption="what is this?"
        )
        sent = tg.message(USER, first).raw
        assert text == "[depth:2] echo: what is this?"
        # the largest size within IMAGE_MAX_PIXELS (2048), never the thumbnail
        expected = data_url_of(tg, photo_id(sent, 1280))
        [user] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
        assert user["content"] == [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": expected}},
        ]
        answer = answers_to(tg, USER, first)[-1].message_id
        _, text = await ask(tg, app, USER, "and the colour?", reply_to=answer)
        assert text == "[depth:4] echo: and the colour?"
        assert image_parts(llm) == [expected]
    # downloaded once (getFile), stored once, content-addressed under the chat's tag
    assert len(tg.downloads) == 1 and len(tg.calls_to("getFile")) == 1
    digest = hashlib.sha256(tg.file_bytes(photo_id(sent, 1280))).hexdigest()
    assert await redis.get(keys.blob_key(str(USER), digest)) == tg.file_bytes(photo_id(sent, 1280))
    # the later turn's request starts with the same bytes as the first one's messages
    first_body = llm.requests[0].messages
    assert llm.requests[1].messages[: len(first_body)] == first_body


async def test_uncaptioned_photo_then_restart_resends_the_same_bytes(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    settings = settings_for(tg, llm, redis_server.url)
    async with running_bot(settings) as app:
        first, text = await ask(tg, app, USER, None, photo=True)
        assert text == "[depth:2] echo:"  # Telegram trims the trailing space
        [user] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
        assert [p["type"] for p in user["content"]] == ["image_url"]  # the image alone
        answer = answers_to(tg, USER, first)[-1].message_id
    before = image_parts(llm)
    async with running_bot(settings) as app:  # a new process: nothing cached
        _, text = await ask(tg, app, USER, "describe it", reply_to=answer)
    assert text == "[depth:4] echo: describe it"
    assert image_parts(llm) == before
    assert len(tg.downloads) == 1  # never downloaded again
    # two branches below the photo, and the photo again: still one stored copy
    blobs = [k async for k in redis.scan_iter(match=f"rc:{{{USER}}}:b:*")]
    assert len(blobs) == 1


async def test_text_only_model_gets_a_notice_then_placeholders(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    llm.text_only = True
    async with start_bot() as app:
        first, text = await ask(tg, app, USER, None, photo=True, caption="read this")
        assert notices.MODEL_ERRORS["no_images"] in text
        notice = answers_to(tg, USER, first)[-1].message_id
        _, text = await ask(tg, app, USER, "ok, just text then", reply_to=notice)
        assert text == "[depth:3] echo: ok, just text then"
        [photo, reply] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
        assert photo["content"] == f"{IMAGE_PLACEHOLDER}\nread this"  # the caption is kept
        assert reply["content"] == "ok, just text then"
        # remembered: a new photo goes straight to placeholders, no failing call first
        calls = len(llm.requests)
        _, text = await ask(tg, app, USER, None, photo=True, caption="and this?")
        assert text == "[depth:2] echo: " + f"{IMAGE_PLACEHOLDER}\nand this?"
        assert len(llm.requests) == calls + 1
    assert await redis.sismember("rc:text-only", "test-model")


async def test_voice_note_is_transcribed_shown_and_kept_in_history(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        heard = "is 1 < 2 & <b>3</b> > 2?"  # shown as heard, never as markup
        first, text = await ask(tg, app, USER, None, voice=True, data=heard.encode())
        assert text == f"[depth:2] 🎙 “{heard}”\necho: {heard}"
        assert llm.transcriptions[-1][:3] == ("whisper-1", "voice.ogg", "audio/ogg")
        answer = answers_to(tg, USER, first)[-1].message_id
        _, text = await ask(tg, app, USER, "and tomorrow?", reply_to=answer)
    assert text == "[depth:4] echo: and tomorrow?"
    users = [m["content"] for m in llm.requests[-1].messages if m["role"] == "user"]
    assert users == [heard, "and tomorrow?"]
    assert len(llm.transcriptions) == 1


async def test_failed_transcription_is_kept_and_a_reply_to_the_voice_retries(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    llm.fail_transcription_next(500, count=5)  # more than the SDK's retries
    async with start_bot() as app:
        voice, text = await ask(tg, app, USER, None, voice=True, data=b"remember the milk")
        assert "could not transcribe your voice message" in text
        assert not llm.requests  # no model call on a failed transcription
        llm._transcription_faults.clear()
        _, text = await ask(tg, app, USER, "try again", reply_to=voice)
    assert text == "[depth:3] echo: try again"
    users = [m["content"] for m in llm.requests[-1].messages if m["role"] == "user"]
    assert users == ["remember the milk", "try again"]


async def test_text_file_is_read_with_its_name_and_caption(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    code = "def add(a, b):\n    return a + b\n"
    async with start_bot() as app:
        _, text = await ask(
            tg, app, USER, None, document=True, data=code.encode(), file_name="add.py",
            mime_type="text/x-python", caption="review this",
        )  # fmt: skip
    assert text.startswith("[depth:2] echo: review this")
    [user] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
    # a text file is a document: quoted with its name (bot/turn/reading.py)
    assert user["content"] == "review this\n\n" + quoting.quote("document add.py", code)


async def test_unreadable_files_get_clear_notices_and_nothing_is_sent(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, store: TranscriptStore
) -> None:
    async with start_bot(max_document_bytes=1048576) as app:
        _, text = await ask(
            tg, app, USER, None, document=True, data=b"%PDF-1.7", file_name="a.pdf",
            mime_type="application/pdf",
        )  # fmt: skip
        assert text == FAILURES["corrupt"].format(name="a.pdf")
        _, text = await ask(
            tg, app, USER, None, document=True, data=b"\xff\xfe\x00bad\x00\x00\xd8",
            file_name="notes.txt", mime_type="text/plain",
        )  # fmt: skip
        assert text == FAILURES["undecodable"].format(name="notes.txt")
        _, text = await ask(
            tg, app, USER, None, document=True, data=b"x" * 4096, file_name="big.log",
            mime_type="text/plain", file_size=2 * 1048576,
        )  # fmt: skip
        assert text == FAILURES["too_big"].format(name="big.log", size="2.0", limit="1")
        _, text = await ask(
            tg, app, USER, None, document=True, data=b"PK", file_name="a.zip",
            mime_type="application/zip",
        )  # fmt: skip
        assert text == FAILURES["unsupported"].format(name="a.zip")
        big, text = await ask(
            tg, app, USER, None, audio=True, data=b"x", file_size=25 * 1024 * 1024
        )
        assert "too big for me to read (25.0 MB; bots can download at most 20 MB)" in text
        # replying to a notice continues a conversation instead of getting stuck
        notice = answers_to(tg, USER, big)[-1].message_id
        _, text = await ask(tg, app, USER, "fine, here it is in text", reply_to=notice)
        assert text == "[depth:2] echo: fine, here it is in text"
    assert len(llm.requests) == 1
    assert not llm.transcriptions  # nothing of the 25 MB recording was fetched
    # the damaged PDF and the undecodable file were fetched; the zip and both oversize
    # files were refused first
    assert len(tg.calls_to("getFile")) == 2


def send_album(tg: FakeTelegram, group: str, count: int, caption: str = "") -> list[int]:
    """An album: ``count`` photos, each its own update; the caption on the first."""
    ids = []
    for i in range(count):
        message = tg.send_user_message(
            USER, USER, None, photo=True, photo_sizes=[(90, 90), (640 + i, 480)],
            caption=caption if i == 0 and caption else None, media_group_id=group,
        )  # fmt: skip
        ids.append(message["message_id"])
    return ids


def album_answers(tg: FakeTelegram, ids: list[int]) -> list[Any]:
    return [m for m in tg.bot_messages(USER) if m.reply_to in ids]


async def test_album_is_one_turn_with_every_photo_in_order(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(album_wait=0.3) as app:
        ids = send_album(tg, "album-1", 3, caption="compare these")
        await tg.wait_for(lambda: bool(album_answers(tg, ids)) and app.runner.completed >= 3)
        [answer] = album_answers(tg, ids)
        assert answer.text == "[depth:2] echo: compare these"
        assert len(llm.requests) == 1
        expected = [data_url_of(tg, photo_id(tg.message(USER, i).raw, 640 + n))
                    for n, i in enumerate(ids)]  # fmt: skip
        assert image_parts(llm) == expected
        # every photo is aliased to the album's node: replying to the last one continues it
        _, text = await ask(tg, app, USER, "which is best?", reply_to=ids[-1])
        assert text == "[depth:3] echo: which is best?"
        assert image_parts(llm) == expected
    assert len(album_answers(tg, ids)) == 1


async def test_crash_while_an_album_is_collected_loses_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    env = env_for(tg, llm, redis_server.url, ALBUM_WAIT="30")
    first = BotProcess(env, tmp_path)
    await first.start()
    ids = send_album(tg, "album-2", 3, caption="all three")
    key = album_key(str(USER), "album-2")

    async def collecting() -> None:  # every photo confirmed and noted; the leader waits
        assert not tg.pending_updates
        assert await redis.hexists(key, "lead") and await redis.hlen(key) == 4

    await retrying(collecting, on=(AssertionError,), within=30, backoff=Backoff(0.05, 0.05, 0))
    await first.kill()
    assert not llm.requests
    second = BotProcess({**env, "ALBUM_WAIT": "0.2"}, tmp_path)
    await second.start()
    await tg.wait_for(lambda: bool(album_answers(tg, ids)), timeout=30)
    await second.terminate()
    [answer] = album_answers(tg, ids)
    assert answer.text == "[depth:2] echo: all three"
    [request] = llm.requests
    assert len(image_parts(llm)) == 3
    assert request.status == 200


# ------------------------------------------------------------------ the parts, one by one


def test_image_references_round_trip_and_a_message_without_extras_stays_short() -> None:
    image = Image("ab" * 32, "image/png", 1280, 960)  # the digest is stored as 32 bytes
    message = ChatMessage("user", "look", images=(image,))
    [decoded] = codec.decode_node("n", codec.encode_node(1, [message])).messages
    assert decoded == message
    plain = ChatMessage("user", "no picture")
    assert codec.encode_node(1, [plain]) == msgpack.packb([1, "n", 1, [[1, "no picture"]]])


def test_image_token_estimate_follows_the_documented_rule() -> None:
    assert Image("d", "image/jpeg", 1024, 1024).tokens == 765  # 768x768: 4 tiles
    assert Image("d", "image/jpeg", 512, 512).tokens == 255  # one tile
    assert Image("d", "image/jpeg", 4096, 2048).tokens == 1105  # 1536x768: 6 tiles
    assert Image("d", "image/jpeg").tokens == 765  # size unknown: counted as 1024x1024
    assert estimate_messages([ChatMessage("user", "", images=(Image("d", "x", 512, 512),))]) == (
        MESSAGE_OVERHEAD + 255
    )


def test_inbound_with_files_round_trips() -> None:
    ref = MediaRef("photo", "file-1", 1234, 1280, 960)
    inbound = Inbound(1, 2, 3, "cap", reply_to=4, media=(ref,), group="g")
    assert Inbound.decode(inbound.encode()) == inbound


async def test_blobs_are_stored_once_and_a_damaged_one_is_an_error(
    store: TranscriptStore, redis: Redis
) -> None:
    digest = await store.put_blob("7", b"\xff\xd8picture")
    assert await store.put_blob("7", b"\xff\xd8picture") == digest
    assert digest == hashlib.sha256(b"\xff\xd8picture").hexdigest()
    cold = TranscriptStore(redis)
    assert await cold.blobs("7", [digest, digest]) == {digest: b"\xff\xd8picture"}
    await redis.set(keys.blob_key("7", digest), b"other bytes")
    with pytest.raises(CorruptRecordError):
        await TranscriptStore(redis).blobs("7", [digest])


async def sent_alike(llm: FakeOpenAI, messages: list[ChatMessage], media: Media) -> Any:
    """The request's messages as our prebuilt body sends them, checked byte-identical to
    what the SDK's ``create()`` sends (prebuilt, SDK, then prebuilt again: cached)."""
    fast = ModelClient(api_key="sk-test", base_url=llm.base_url, model="test-model",
                       timeout=5, max_retries=0)  # fmt: skip
    sdk = ModelClient(api_key="sk-test", base_url=llm.base_url, model="test-model",
                      timeout=5, max_retries=0, sdk_bodies=True)  # fmt: skip
    try:
        for model in (fast, sdk, fast):
            await model.stream(messages, lambda _t: None, media=media)
    finally:
        await fast.close()
        await sdk.close()
    bodies = [r.body for r in llm.requests]
    assert bodies[0] == bodies[1] == bodies[2]
    return bodies[0]["messages"]


@pytest.mark.parametrize("text_only", [False, True])
async def test_image_bodies_are_byte_identical_to_what_create_sends(
    llm: FakeOpenAI, text_only: bool
) -> None:
    data = b"\xff\xd8" + bytes(range(256)) * 40
    digest = hashlib.sha256(data).hexdigest()
    image = Image(digest, "image/jpeg", 640, 480)
    messages = [
        ChatMessage("system", "prompt"),
        ChatMessage("user", "what is it?", images=(image,)),
        ChatMessage("assistant", "a test pattern"),
        ChatMessage("user", "", images=(image, image)),
    ]
    media = None if text_only else {digest: data}
    assert await sent_alike(llm, messages, media) == wire_messages(messages, media)
    if not text_only:
        assert image_parts(llm) == [data_url("image/jpeg", data)] * 3


async def test_a_400_naming_images_is_its_own_error_kind(llm: FakeOpenAI) -> None:
    llm.text_only = True
    model = ModelClient(api_key="sk-test", base_url=llm.base_url, model="test-model",
                        timeout=5, max_retries=0)  # fmt: skip
    image = Image(hashlib.sha256(b"x").hexdigest(), "image/jpeg")
    try:
        with pytest.raises(ModelError) as raised:
            await model.stream(
                [ChatMessage("user", "hi", images=(image,))], lambda _t: None,
                media={image.digest: b"x"},
            )  # fmt: skip
    finally:
        await model.close()
    assert raised.value.kind == "no_images"


@pytest.mark.parametrize(
    ("message", "param", "kind"),
    [
        ("Invalid content type. image_url is only supported by certain models.",
         "messages.[1].content.[1].type", "no_images"),
        ("llava is not a multimodal model", None, "no_images"),
        ("This model does not support image input.", None, "no_images"),
        ("You uploaded an unsupported image. Please make sure your image is valid.",
         None, "bad_image"),
        ("Invalid image data.", "messages.[1].content.[1].image_url", "bad_image"),
    ],
)  # fmt: skip
def test_only_a_model_without_sight_counts_as_text_only(
    message: str, param: str | None, kind: str
) -> None:
    request = httpx2.Request("POST", "http://model/v1/chat/completions")
    body = {"error": {"message": message, "param": param}}
    exc = openai.BadRequestError(message, response=httpx2.Response(400, request=request),
                                 body=body)  # fmt: skip
    assert classify(exc).kind == kind


async def test_fake_bot_api_serves_files_like_telegram(tg: FakeTelegram) -> None:
    message = tg.send_user_message(USER, USER, None, voice=True, data=b"ogg bytes")
    file_id = message["voice"]["file_id"]
    big = tg.send_user_message(USER, USER, None, document=True, file_size=21 * 1024 * 1024)
    async with aiohttp.ClientSession() as http:

        async def call(method: str, **params: Any) -> Any:
            async with http.post(f"{tg.url}/bot{tg.token}/{method}", json=params) as r:
                return await r.json()

        ok = await call("getFile", file_id=file_id)
        path = ok["result"]["file_path"]
        async with http.get(f"{tg.url}/file/bot{tg.token}/{path}") as r:
            assert r.status == 200 and await r.read() == b"ogg bytes"
        async with http.get(f"{tg.url}/file/bot123:wrong/{path}") as r:
            assert r.status == 401
        too_big = await call("getFile", file_id=big["document"]["file_id"])
        assert too_big["description"] == "Bad Request: file is too big"
        unknown = await call("getFile", file_id="nope")
        assert unknown["description"] == "Bad Request: invalid file_id"
    assert tg.downloads == [path]


async def test_fake_openai_transcribes_strictly(llm: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=llm.base_url, max_retries=0)
    try:
        result = await client.audio.transcriptions.create(
            model="whisper-1", file=("v.ogg", b"hello there", "audio/ogg")
        )
        assert result.text == "hello there"
        with pytest.raises(openai.NotFoundError):
            await client.audio.transcriptions.create(model="nope", file=("v.ogg", b"x"))
        llm.fail_transcription_next(500)
        with pytest.raises(openai.InternalServerError):
            await client.audio.transcriptions.create(model="whisper-1", file=("v.ogg", b"x"))
    finally:
        await client.close()
    assert llm.transcriptions == [("whisper-1", "v.ogg", "audio/ogg", b"hello there")]


async def test_telegram_failing_the_download_retries_the_turn_and_loses_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    tg.fail_next("getFile", status=502, count=4)  # past the session's own 5xx retries
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, None, photo=True, caption="still there?")
    assert text == "[depth:2] echo: still there?"
    assert len(image_parts(llm)) == 1
    assert [c.status for c in tg.calls_to("getFile")] == [502] * 4 + [200]


async def test_a_text_file_too_large_for_the_budget_is_read_in_part_and_nothing_blocks_the_thread(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(context_token_budget=1000) as app:
        first, _ = await ask(tg, app, USER, "hello")
        answer = answers_to(tg, USER, first)[-1].message_id
        # a text file is a document: its first part, as much as the budget holds
        _, text = await ask(
            tg, app, USER, None, reply_to=answer, document=True, data=b"word " * 2000,
            file_name="long.txt", mime_type="text/plain",
        )  # fmt: skip
        assert text.startswith("[depth:4] 📄 long.txt: I read the first ")
        # a typed message too large for the budget gets the notice
        big, text = await ask(tg, app, USER, "word " * 800, reply_to=answer)
        assert text == notices.TOO_LARGE.format(budget="1,000")
        notice = answers_to(tg, USER, big)[-1].message_id
        _, text = await ask(tg, app, USER, "a short question then", reply_to=notice)
    assert text == "[depth:4] echo: a short question then"
    users = [m["content"] for m in llm.requests[-1].messages if m["role"] == "user"]
    assert users == ["hello", "a short question then"]


async def test_group_album_addressed_by_its_caption_is_one_turn(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    group = tg.add_group(-100700)
    async with start_bot(album_wait=0.3) as app:
        ids = []
        for i in range(3):
            caption = "@replychain_bot which one?" if i == 0 else None
            sent = tg.send_user_message(group, USER, None, photo=True, caption=caption,
                                        media_group_id="g-album")  # fmt: skip
            ids.append(sent["message_id"])
        other = tg.send_user_message(group, USER, None, photo=True, media_group_id="g-other")
        await tg.wait_for(
            lambda: (
                bool([m for m in tg.bot_messages(group) if m.reply_to in ids])
                and app.runner.completed >= 3
                and not tg.pending_updates  # the other album's update was handled too
            )
        )
    [answer] = [m for m in tg.bot_messages(group) if m.reply_to in ids]
    assert answer.text == "[depth:2] echo: which one?"
    assert len(image_parts(llm)) == 3 and len(llm.requests) == 1
    # an album nobody addressed to the bot stays unanswered
    assert not [m for m in tg.bot_messages(group) if m.reply_to == other["message_id"]]


async def test_an_album_of_text_files_is_one_message_with_every_file(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(album_wait=0.3) as app:
        ids = [
            tg.send_user_message(
                USER,
                USER,
                None,
                document=True,
                data=body,
                file_name=name,
                mime_type="text/plain",
                caption=caption,
                media_group_id="files",
            )["message_id"]
            for name, body, caption in (
                ("a.txt", b"first file", "diff these"),
                ("b.txt", b"second file", None),
            )
        ]
        await tg.wait_for(lambda: bool(album_answers(tg, ids)) and app.runner.completed >= 2)
    [answer] = album_answers(tg, ids)
    [user] = [m for m in llm.requests[-1].messages if m["role"] == "user"]
    files = [
        quoting.quote("document a.txt", "first file"),
        quoting.quote("document b.txt", "second file"),
    ]
    assert user["content"] == "\n\n".join(["diff these", *files])
    assert answer.text.startswith("[depth:2] echo: diff these")
