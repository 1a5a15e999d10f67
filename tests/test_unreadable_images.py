"""A vision model that cannot read one image of a thread: that image is set aside.

The real bot against the Bot API test server and the OpenAI test server (which
answers OpenAI's 400 for one image's bytes), with a real Redis: the turn answers at
once without the image (one more model call, under the per-turn guard), the user is
told once, and every later turn of the thread sends a placeholder instead of it,
while its other images are still sent and the image itself stays stored.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx2
import openai
import pytest
from redis.asyncio import Redis

from bot.app import App
from bot.data.keys import unread_key
from bot.model import IMAGE_UNREADABLE, ModelClient, ModelError, wire_messages
from bot.model.sdk import classify
from bot.model.wire import data_url, named_image
from bot.turn import notices
from transcript import ChatMessage, Image, keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotFactory, answered_parts, answers_to, ask
from .test_media import image_parts, sent_alike


def photo_bytes(tg: FakeTelegram, message: dict[str, Any]) -> bytes:
    """The bytes of the size the bot sends (the largest of the default sizes)."""
    largest = max(message["photo"], key=lambda p: p["width"])
    return tg.file_bytes(largest["file_id"])


async def answered(tg: FakeTelegram, app: App, message: dict[str, Any], done: int) -> str:
    """Wait for the turn of ``message`` (sent by the test) and return its answer's text."""
    parts = await answered_parts(tg, app, USER, message["message_id"], done)
    return "".join(p.text or "" for p in parts)


def url_of(data: bytes) -> str:
    return data_url("image/jpeg", data)


async def test_an_unreadable_photo_is_answered_without_and_the_thread_goes_on(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, None, photo=True, caption="a cat")
        good = photo_bytes(tg, tg.message(USER, first).raw)
        answer = answers_to(tg, USER, first)[-1].message_id
        # the next photo is one the model cannot read (OpenAI's 400, param null)
        done = app.runner.completed + 1
        sent = tg.send_user_message(USER, USER, None, photo=True, caption="and this?",
                                    reply_to=answer)  # fmt: skip
        bad = photo_bytes(tg, sent)
        llm.reject_image(bad)
        text = await answered(tg, app, sent, done)
        # answered at once without it, and told so (once, above the answer)
        placeholder = f"{IMAGE_UNREADABLE}\nand this?"  # the caption is kept
        assert text == f"[depth:4] {notices.IMAGE_SET_ASIDE}echo: {placeholder}"
        assert [r.status for r in llm.requests] == [200, 400, 200]
        assert image_parts(llm, 1) == [url_of(good), url_of(bad)]
        assert image_parts(llm) == [url_of(good)]  # the other image is still sent
        [_, _, _, user] = llm.requests[-1].messages
        assert user["content"] == placeholder
        # the thread goes on: the next turn sends no failing request first, and no notice
        later = answers_to(tg, USER, sent["message_id"])[-1].message_id
        _, text = await ask(tg, app, USER, "what colour is the cat?", reply_to=later)
        assert text == "[depth:6] echo: what colour is the cat?"
        assert [r.status for r in llm.requests] == [200, 400, 200, 200]
        assert image_parts(llm) == [url_of(good)]
        assert llm.requests[-1].messages[3]["content"] == placeholder
    # nothing is lost: both pictures stay stored; the set-aside one is remembered
    digest = hashlib.sha256(bad).hexdigest()
    assert await redis.get(keys.blob_key(str(USER), digest)) == bad
    assert await redis.hgetall(unread_key(str(USER))) == {digest.encode(): b"test-model"}


async def test_the_turn_guard_bounds_the_retries_and_a_reply_still_goes_on(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot(turn_max_model_calls=2) as app:
        first, _ = await ask(tg, app, USER, None, photo=True, caption="one")
        answer = answers_to(tg, USER, first)[-1].message_id
        second, _ = await ask(tg, app, USER, None, photo=True, caption="two", reply_to=answer)
        answer = answers_to(tg, USER, second)[-1].message_id
        pictures = [photo_bytes(tg, tg.message(USER, m).raw) for m in (first, second)]
        for data in pictures:  # the model can no longer read either (say, a new policy)
            llm.reject_image(data, "policy")
        asked, text = await ask(tg, app, USER, "still there?", reply_to=answer)
        # two calls, the most one message may use: each set one picture aside, newest first
        assert text == notices.TURN_GUARD
        assert [r.status for r in llm.requests] == [200, 200, 400, 400]
        assert image_parts(llm, 2) == [url_of(p) for p in pictures]
        assert image_parts(llm, 3) == [url_of(pictures[0])]
        # replying to the notice goes on, both pictures as placeholders, in one call
        notice = answers_to(tg, USER, asked)[-1].message_id
        _, text = await ask(tg, app, USER, "go on", reply_to=notice)
        assert text == "[depth:7] echo: go on"
        assert [r.status for r in llm.requests][4:] == [200]
        users = [m["content"] for m in llm.requests[-1].messages if m["role"] == "user"]
        assert users == [f"{IMAGE_UNREADABLE}\none", f"{IMAGE_UNREADABLE}\ntwo",
                         "still there?", "go on"]  # fmt: skip
    for data in pictures:  # still stored
        assert await redis.get(keys.blob_key(str(USER), hashlib.sha256(data).hexdigest())) == data
    assert await redis.hlen(unread_key(str(USER))) == 2


async def test_the_image_an_error_names_is_the_one_set_aside(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        first, _ = await ask(tg, app, USER, None, photo=True, caption="old")
        answer = answers_to(tg, USER, first)[-1].message_id
        second, _ = await ask(tg, app, USER, None, photo=True, caption="new", reply_to=answer)
        old, new = (photo_bytes(tg, tg.message(USER, m).raw) for m in (first, second))
        # a server that names the part: the older picture, not the newest one
        llm.reject_image(old, name_part=True)
        answer = answers_to(tg, USER, second)[-1].message_id
        _, text = await ask(tg, app, USER, "compare them", reply_to=answer)
        assert text == f"[depth:6] {notices.IMAGE_SET_ASIDE}echo: compare them"
        assert [r.status for r in llm.requests] == [200, 200, 400, 200]
        assert image_parts(llm) == [url_of(new)]
    digest = hashlib.sha256(old).hexdigest()
    assert await redis.hgetall(unread_key(str(USER))) == {digest.encode(): b"test-model"}


async def test_images_set_aside_on_a_guess_are_given_back_once_the_culprit_is_found(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    async with start_bot() as app:
        ids = [(await ask(tg, app, USER, None, photo=True, caption="A"))[0]]
        for caption in ("B", "C"):
            answer = answers_to(tg, USER, ids[-1])[-1].message_id
            ids.append(
                tg.send_user_message(USER, USER, None, photo=True, caption=caption,
                                     reply_to=answer)["message_id"]
            )  # fmt: skip
            done = app.runner.completed + 1
            if caption == "C":  # the model can no longer read B (param null: unnamed)
                llm.reject_image(photo_bytes(tg, tg.message(USER, ids[1]).raw), "policy")
            text = await answered(tg, app, tg.message(USER, ids[-1]).raw, done)
        a, b, c = (photo_bytes(tg, tg.message(USER, m).raw) for m in ids)
        # C, the newest, is tried first; then B; the third call (of three) is answered
        assert text == f"[depth:6] {notices.IMAGE_SET_ASIDE}echo: {IMAGE_UNREADABLE}\nC"
        assert [r.status for r in llm.requests] == [200, 200, 400, 400, 200]
        assert [image_parts(llm, i) for i in (2, 3, 4)] == [
            [url_of(a), url_of(b), url_of(c)],
            [url_of(a), url_of(b)],
            [url_of(a)],
        ]
        # B was the one: it stays aside, and C, set aside on a guess, is sent again
        answer = answers_to(tg, USER, ids[-1])[-1].message_id
        _, text = await ask(tg, app, USER, "and now?", reply_to=answer)
        assert text == "[depth:8] echo: and now?"
        assert llm.requests[-1].status == 200
        assert image_parts(llm) == [url_of(a), url_of(c)]
    digest = hashlib.sha256(b).hexdigest()
    assert await redis.hgetall(unread_key(str(USER))) == {digest.encode(): b"test-model"}


# ------------------------------------------------------------------ the parts, one by one


@pytest.mark.parametrize(
    ("message", "param", "code"),
    [
        ("You uploaded an unsupported image. Please make sure your image has of one the "
         "following formats: ['png', 'jpeg', 'gif', 'webp'].", None, "invalid_image_format"),
        ("You uploaded an unsupported image. Please make sure your image is below 20 MB in "
         "size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].", None,
         "sanitizer_server_error"),
        ("Your input image may contain content that is not allowed by our safety system.",
         None, None),
        ("Invalid image.", None, None),
        ("Invalid image data.", "messages.[1].content.[1].image_url", None),
        ("messages.0.content.1.image.source.base64.data: The image specified was not valid",
         None, None),
        ("image exceeds 5 MB maximum: 7340032 bytes > 5242880 bytes", None, None),
        ("cannot identify image file <_io.BytesIO object at 0x7f>", None, None),
        ("Something about the request.", None, "image_parse_error"),
    ],
)  # fmt: skip
def test_a_400_about_one_image_is_bad_image(
    message: str, param: str | None, code: str | None
) -> None:
    request = httpx2.Request("POST", "http://model/v1/chat/completions")
    body = {"message": message, "param": param, "code": code}  # the SDK passes "error"
    exc = openai.BadRequestError(message, response=httpx2.Response(400, request=request),
                                 body=body)  # fmt: skip
    error = classify(exc)
    assert error.kind == "bad_image"
    assert error.part == ((1, 1) if param else None)


def test_the_part_an_error_names_maps_to_its_image() -> None:
    a, b, c = (Image(d * 64, "image/jpeg") for d in "abc")
    messages = [
        ChatMessage("system", "prompt"),
        ChatMessage("system", "summary"),  # joined with the prompt into wire message 0
        ChatMessage("user", "two", images=(a, b)),
        ChatMessage("assistant", "ok"),
        ChatMessage("user", "", images=(c,)),
    ]
    media = {a.digest: b"a", b.digest: b"b", c.digest: b"c"}
    assert named_image(messages, media, (1, 1)) == a.digest  # part 0 is the text
    assert named_image(messages, media, (1, 2)) == b.digest
    assert named_image(messages, media, (3, 0)) == c.digest  # no text part
    assert named_image(messages, media, (1, 0)) is None
    assert named_image(messages, media, (0, 0)) is None
    assert named_image(messages, media, (9, 0)) is None
    assert named_image(messages, {b.digest: b"b"}, (1, 2)) == b.digest  # a set aside
    assert named_image(messages, None, (1, 1)) is None


@pytest.mark.parametrize("name_part", [False, True])
async def test_fake_openai_rejects_one_image_like_openai(llm: FakeOpenAI, name_part: bool) -> None:
    good, bad = b"\xff\xd8good", b"\xff\xd8bad"
    llm.reject_image(bad, name_part=name_part)
    images = [Image(hashlib.sha256(d).hexdigest(), "image/jpeg") for d in (good, bad)]
    media = {i.digest: d for i, d in zip(images, (good, bad), strict=True)}
    messages = [ChatMessage("system", "p"), ChatMessage("user", "hi", images=tuple(images))]
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=llm.base_url, max_retries=0)
    model = ModelClient(api_key="sk-test", base_url=llm.base_url, model="test-model",
                        timeout=5, max_retries=0)  # fmt: skip
    try:
        with pytest.raises(openai.BadRequestError) as raw:
            await client.chat.completions.create(
                model="test-model",
                messages=wire_messages(messages, media),  # type: ignore[arg-type]
            )
        with pytest.raises(ModelError) as raised:
            await model.stream(messages, lambda _t: None, media=media)
        answer = await model.stream(messages, lambda _t: None, media={images[0].digest: good})
    finally:
        await client.close()
        await model.close()
    assert raw.value.code == "invalid_image_format"
    assert raw.value.param == ("messages.[1].content.[2].image_url" if name_part else None)
    assert raised.value.kind == "bad_image"
    assert raised.value.image == (images[1].digest if name_part else None)
    assert answer.text == f"echo: hi{IMAGE_UNREADABLE}"
    assert [r.status for r in llm.requests] == [400, 400, 200]


async def test_bodies_with_an_image_set_aside_are_what_create_sends(llm: FakeOpenAI) -> None:
    seen, unread = b"\xff\xd8seen" * 50, b"\xff\xd8unread"
    one, other = (Image(hashlib.sha256(d).hexdigest(), "image/jpeg") for d in (seen, unread))
    messages = [
        ChatMessage("system", "prompt"),
        ChatMessage("user", "both", images=(one, other)),
        ChatMessage("assistant", "ok"),
        ChatMessage("user", "", images=(other,)),
        ChatMessage("user", "just one", images=(one,)),
    ]
    media = {one.digest: seen}  # ``other`` was set aside
    sent = await sent_alike(llm, messages, media)
    assert sent == wire_messages(messages, media)
    assert sent[1]["content"] == [
        {"type": "text", "text": "both"},
        {"type": "image_url", "image_url": {"url": url_of(seen)}},
        {"type": "text", "text": IMAGE_UNREADABLE},
    ]
    assert sent[3]["content"] == IMAGE_UNREADABLE  # nothing else: plain text
    assert image_parts(llm) == [url_of(seen), url_of(seen)]
