"""Pictures, their core (bot/model/images.py): made and edited by the real openai SDK over
HTTP to the test model server, whose ``/images/generations`` and ``/images/edits`` are as
strict as OpenAI's; the failures a caller tells apart (content refused, size, outage)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from PIL import Image

from bot.model import ModelError
from bot.model.images import OUTAGE, ImageMaker, picture_info

from .fakes.model import FakeOpenAI, png_bytes

KEY = "sk-test"


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
async def maker(server: FakeOpenAI) -> AsyncIterator[ImageMaker]:
    made = painter(server)
    yield made
    await made.close()


def painter(server: FakeOpenAI, **kw: object) -> ImageMaker:
    options: dict[str, object] = {
        "api_key": KEY, "base_url": server.base_url, "model": server.image_model,
        "timeout": 5.0, "max_retries": 1,
    }  # fmt: skip
    options.update(kw)
    return ImageMaker(**options)  # type: ignore[arg-type]


def encoded(kind: str, size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, format=kind)
    return out.getvalue()


async def test_a_picture_is_made_from_a_prompt(server: FakeOpenAI, maker: ImageMaker) -> None:
    picture = await maker.generate("a red cube")
    [request] = server.image_requests
    assert (request.kind, request.model, request.prompt) == (
        "generate",
        "gpt-image-1",
        "a red cube",
    )
    assert "response_format" not in request.fields  # GPT image models take none
    assert picture.data == request.answered[0]
    assert (picture.mime, picture.width, picture.height) == ("image/png", 32, 32)
    assert Image.open(io.BytesIO(picture.data)).size == (32, 32)  # a real PNG
    assert picture.latency > 0 and picture.revised_prompt is None


async def test_an_edit_uploads_the_source_and_answers_a_new_picture(
    server: FakeOpenAI, maker: ImageMaker
) -> None:
    first = await maker.generate("a red cube")
    edited = await maker.edit("make it blue", first.data)
    request = server.image_requests[-1]
    assert (request.kind, request.prompt) == ("edit", "make it blue")
    assert request.images == [("image.png", "image/png", first.data)]  # the source, as it is
    assert edited.data == request.answered[0] and edited.data != first.data
    photo = encoded("JPEG")  # a photo a user sent
    again = await maker.edit("make it blue", photo)
    assert server.image_requests[-1].images == [("image.jpeg", "image/jpeg", photo)]
    assert again.data != edited.data  # drawn from the source too
    with pytest.raises(ValueError, match="PNG, JPEG"):
        await maker.edit("anything", b"not a picture")
    assert len(server.image_requests) == 3


async def test_other_models_are_asked_for_base64(server: FakeOpenAI) -> None:
    server.image_model = "dall-e-3"
    maker = painter(server)
    try:
        picture = await maker.generate("a lighthouse")
    finally:
        await maker.close()
    assert server.image_requests[0].fields["response_format"] == "b64_json"
    assert picture.data == server.image_requests[0].answered[0]


async def test_an_endpoint_refusing_response_format_is_asked_without_it_from_then_on(
    server: FakeOpenAI,
) -> None:
    server.image_model = "painter"  # a GPT image model under another name
    server.refuses_response_format = True
    maker = painter(server, max_retries=0)
    try:
        await maker.generate("one")
        await maker.generate("two")
    finally:
        await maker.close()
    assert server.image_posts == 3  # the first asked twice; the second once, without it
    assert [r.prompt for r in server.image_requests] == ["one", "two"]
    assert not maker.b64


@pytest.mark.parametrize("model", ["gpt-image-1", "dall-e-3"])
async def test_a_content_refusal_is_typed_and_never_tried_again(
    server: FakeOpenAI, model: str
) -> None:
    server.image_model = model
    maker = painter(server, max_retries=3)
    try:
        with pytest.raises(ModelError) as refused:
            await maker.generate("something [refuse] here")
        with pytest.raises(ModelError) as refused_edit:
            await maker.edit("now [refuse] this", png_bytes(b"source"))
    finally:
        await maker.close()
    for failed in (refused.value, refused_edit.value):
        assert failed.kind == "refused" and not failed.transient and not failed.retryable
    assert server.image_posts == 2 and not server.image_requests  # one try each


async def test_a_refused_size_is_typed(server: FakeOpenAI, maker: ImageMaker) -> None:
    server.edit_max_bytes = 100
    with pytest.raises(ModelError) as refused:
        await maker.edit("smaller please", encoded("PNG", (300, 300)))
    assert refused.value.kind == "size" and not refused.value.transient
    assert server.image_posts == 1


async def test_an_outage_is_tried_again_then_typed(server: FakeOpenAI, maker: ImageMaker) -> None:
    server.fail_images_next(503)
    assert (await maker.generate("a cube")).data  # tried again
    server.fail_images_next(500, count=2)
    with pytest.raises(ModelError) as failed:
        await maker.generate("a sphere")
    assert failed.value.kind in OUTAGE and failed.value.transient
    server.fail_images_next(429, count=2)
    with pytest.raises(ModelError) as limited:
        await maker.edit("a cone", png_bytes(b"cube"))
    assert limited.value.kind == "rate_limited" and limited.value.kind in OUTAGE
    assert [r.prompt for r in server.image_requests] == ["a cube"]


async def test_a_wrong_key_or_model_is_config(server: FakeOpenAI) -> None:
    for change in ({"api_key": "sk-nope"}, {"model": "gpt-image-9"}):
        maker = painter(server, **change)
        try:
            with pytest.raises(ModelError) as failed:
                await maker.generate("a cube")
        finally:
            await maker.close()
        assert failed.value.kind == "config"


def test_pictures_are_told_by_their_bytes() -> None:
    assert picture_info(png_bytes(b"x", 17)) == ("image/png", 17, 17)
    assert picture_info(encoded("JPEG", (40, 30))) == ("image/jpeg", 40, 30)
    assert picture_info(encoded("GIF", (12, 7))) == ("image/gif", 12, 7)
    assert picture_info(encoded("WEBP", (64, 48))) == ("image/webp", 64, 48)
    out = io.BytesIO()
    Image.new("RGB", (33, 21)).save(out, format="WEBP", lossless=True)
    assert picture_info(out.getvalue()) == ("image/webp", 33, 21)
    assert picture_info(b"<html>nope</html>") is None


# ------------------------------------------------------------------ the test server


async def test_the_test_server_is_as_strict_as_the_images_api(server: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
    images = client.images
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await images.generate(model="gpt-image-1", prompt="x", response_format="b64_json")
        assert (refused.value.param, refused.value.code) == ("response_format", "unknown_parameter")
        with pytest.raises(openai.BadRequestError) as refused:
            await images.generate(model="gpt-image-1", prompt="x", size="999x999")
        assert refused.value.param == "size"
        with pytest.raises(openai.BadRequestError) as refused:
            await client.post("/images/generations", body={"model": "gpt-image-1"}, cast_to=object)
        assert (refused.value.param, refused.value.code) == ("prompt", "missing_required_parameter")
        with pytest.raises(openai.BadRequestError) as refused:
            await images.generate(model="gpt-image-1", prompt="x", extra_body={"seed": 1})
        assert "seed" in refused.value.message
        with pytest.raises(openai.BadRequestError) as refused:
            await images.generate(model="gpt-image-1", prompt="x" * 32001)
        assert refused.value.param == "prompt"
        with pytest.raises(openai.NotFoundError):  # the API's default model: dall-e-2
            await images.generate(prompt="x")
        with pytest.raises(openai.BadRequestError) as refused:
            await images.edit(
                model="gpt-image-1", prompt="x", image=("a.txt", b"text", "text/plain")
            )
        assert (refused.value.param, refused.value.code) == ("image", "invalid_image_format")
        with pytest.raises(openai.BadRequestError) as refused:
            await client.post(
                "/images/edits", body={"model": "gpt-image-1", "prompt": "x"}, cast_to=object,
                options={"headers": {"Content-Type": "multipart/form-data"}},
                files=[("mask", ("m.png", png_bytes(b"m"), "image/png"))],
            )  # fmt: skip
        assert refused.value.param == "image"
        answered = await images.generate(model="gpt-image-1", prompt="two", n=2)
        assert len(answered.data or []) == 2 and answered.usage is not None
    finally:
        await client.close()
    assert server.image_posts == 9 and len(server.image_requests) == 1


async def test_other_models_answer_a_url_the_server_serves(server: FakeOpenAI) -> None:
    server.image_model = "dall-e-2"
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
    try:
        answered = await client.images.generate(model="dall-e-2", prompt="a fox", size="256x256")
    finally:
        await client.close()
    [picture] = answered.data or []
    assert picture.url and not picture.b64_json
    async with aiohttp.ClientSession() as session, session.get(picture.url) as response:
        assert response.status == 200
        assert await response.read() == server.image_requests[0].answered[0]
