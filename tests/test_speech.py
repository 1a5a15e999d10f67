"""Voice answers, their core (bot/model/speech.py): what an answer reads aloud as, in parts
the speech endpoint takes, and the speech call itself, by the real openai SDK over HTTP to
the test model server, whose ``/audio/speech`` is as strict as OpenAI's."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator

import openai
import pytest
import soundfile
from hypothesis import given
from hypothesis import strategies as st

from bot.media_texts import SPOKEN_CODE, SPOKEN_FORMULA, SPOKEN_TABLE
from bot.model import ModelError, sdk
from bot.model.speech import (
    MAX_INPUT_CHARS,
    Speaker,
    Unread,
    is_ogg_opus,
    spoken_blocks,
    spoken_parts,
)

from .fakes.model import FakeOpenAI, ogg_opus_sample

UNREAD = Unread(SPOKEN_CODE, SPOKEN_TABLE, SPOKEN_FORMULA)
KEY = "sk-test"

CODE = "```python\n" + "".join(f"def step_{i}(x):\n    return x * {i}\n" for i in range(8)) + "```"
TABLE = "| city | people |\n|---|---|\n" + "".join(
    f"| town {i} | {i * 1000} |\n" for i in range(12)
)


def paragraph(n: int) -> str:
    """About 650 characters of prose, in sentences, numbered so the order can be checked."""
    return f"See [the notes](https://example.org/{n}). " + " ".join(
        f"Paragraph {n}, sentence {i}, says a little more about **reply chains** and branches."
        for i in range(7)
    )


def long_answer() -> str:
    """A 10,000-character answer: headings, prose, two code blocks, a table, a list."""
    parts = ["# How it works", paragraph(0), paragraph(1), CODE, paragraph(2), "## Numbers"]
    parts += [TABLE, paragraph(3), "1. first point\n2. second point", paragraph(4), CODE]
    parts += [paragraph(n) for n in range(5, 30)]
    text = "\n\n".join(parts)
    while len(text) > 10_000:
        text = text.rsplit("\n\n", 1)[0]
    closing = "\n\n"  # a last paragraph, sentence by sentence, up to 10,000 characters
    for i in range(100):
        sentence = f"Paragraph 99, sentence {i}, closes. "
        if len(text) + len(closing) + len(sentence) > 10_000:
            break
        closing += sentence
    return text + closing.rstrip()


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


def speaker(server: FakeOpenAI, **kw: object) -> Speaker:
    options: dict[str, object] = {
        "api_key": KEY, "base_url": server.base_url, "model": server.speech_model,
        "voice": "alloy", "timeout": 5.0, "max_retries": 1,
    }  # fmt: skip
    options.update(kw)
    return Speaker(**options)  # type: ignore[arg-type]


# ------------------------------------------------------------------ what is read aloud


def test_a_10000_character_answer_is_read_in_three_parts_without_code_or_tables() -> None:
    text = long_answer()
    assert 9_500 <= len(text) <= 10_000
    parts = spoken_parts(text, UNREAD)
    assert len(parts) == 3
    assert all(0 < len(part) <= MAX_INPUT_CHARS for part in parts)
    spoken = "\n\n".join(parts)
    assert "def step_" not in spoken and "town 1" not in spoken and "|" not in spoken
    assert spoken.count(SPOKEN_CODE) == 2 and spoken.count(SPOKEN_TABLE) == 1
    assert "**" not in spoken and "https://" not in spoken and "#" not in spoken
    # every paragraph is read, whole, in order, and a part ends where a paragraph ends
    said = re.findall(r"Paragraph (\d+), sentence (\d+)", spoken)
    kept = len(re.findall(r"Paragraph \d+, sentence", text))
    assert said == sorted(said, key=lambda p: (int(p[0]), int(p[1]))) and len(said) == kept
    assert all(part.endswith(("branches.", "closes.")) for part in parts)


def test_markup_is_said_as_words_and_blocks_by_their_phrase() -> None:
    text = (
        "# Plan\n\nRead *this* and `x = 1`, then [the docs](https://d.example) and "
        "![a cat](cat.png).<b>raw</b>\n\n3. three\n4. four\n\n- a\n- b\n\n> quoted\n\n"
        "```\none\n```\n\n```\ntwo\n```\n\n$$\nE = mc^2\n$$\n\nInline $a+b$ too.\n\n"
        "## Done!\n\n<div>html</div>"
    )
    assert spoken_blocks(text, UNREAD) == [
        "Plan.",
        "Read this and x = 1, then the docs and a cat.raw",
        "3. three", "4. four", "a", "b", "quoted",
        SPOKEN_CODE,  # two code blocks in a row: said once
        SPOKEN_FORMULA,
        "Inline a+b too.",
        "Done!",
    ]  # fmt: skip
    assert spoken_parts("", UNREAD) == [] and spoken_parts("```\nonly code\n```", UNREAD) == [
        SPOKEN_CODE
    ]


def test_parts_break_between_paragraphs_then_sentences_then_words() -> None:
    paragraphs = ["p" + "a" * 1498 + "." for _ in range(5)]  # 1,500 characters each
    parts = spoken_parts("\n\n".join(paragraphs), UNREAD)
    assert parts == ["\n\n".join(paragraphs[:2]), "\n\n".join(paragraphs[2:4]), paragraphs[4]]
    sentences = [f"Sentence {i} " + "word " * 190 + "ends." for i in range(10)]  # ~970 each
    parts = spoken_parts(" ".join(sentences), UNREAD)
    assert all(len(p) <= MAX_INPUT_CHARS and p.endswith("ends.") for p in parts)
    assert " ".join(parts) == " ".join(sentences)
    words = "lorem " * 2000  # one sentence of 12,000 characters
    parts = spoken_parts(words, UNREAD)
    assert [len(p) for p in parts] == [4091, 4091, 3815]  # 682, 682 and 636 words
    assert all(set(p.split()) == {"lorem"} for p in parts)
    url = "https://example.org/" + "x" * 9000  # a word longer than a part: cut
    assert [len(p) for p in spoken_parts(url, UNREAD)] == [4096, 4096, 9020 - 8192]
    chinese = "这是一个句子。" * 1000  # sentences without spaces
    parts = spoken_parts(chinese, UNREAD)
    assert all(p.endswith("。") and len(p) <= MAX_INPUT_CHARS for p in parts)
    assert "".join(parts) == chinese


@given(
    st.lists(
        st.lists(st.text("abcxyz .!?", min_size=1, max_size=30), min_size=1, max_size=8),
        min_size=1,
        max_size=12,
    ),
    st.integers(20, 80),
)
def test_parts_hold_every_word_in_order_within_the_limit(
    paragraphs: list[list[str]], limit: int
) -> None:
    text = "\n\n".join(" ".join(p) for p in paragraphs)
    parts = spoken_parts(text, UNREAD, limit=limit)
    assert all(0 < len(part) <= limit for part in parts)
    blocks = spoken_blocks(text, UNREAD)
    # words longer than a part are cut: compare the letters, in order
    assert "".join("".join(parts).split()) == "".join("".join(blocks).split())


# ------------------------------------------------------------------ the speech call


async def test_each_part_is_read_aloud_as_ogg_opus(server: FakeOpenAI) -> None:
    voice = speaker(server, voice="coral")
    parts = spoken_parts(long_answer(), UNREAD)
    try:
        spoken = [await voice.speak(part) for part in parts]
    finally:
        await voice.close()
    assert [r.input for r in server.speeches] == parts
    assert {(r.model, r.voice, r.response_format) for r in server.speeches} == {
        ("tts-test", "coral", "opus")
    }
    for speech, part in zip(spoken, parts, strict=True):
        assert speech.audio == ogg_opus_sample() and is_ogg_opus(speech.audio)
        assert speech.characters == len(part) and speech.latency > 0
    info = soundfile.info(io.BytesIO(spoken[0].audio))  # libsndfile decodes it
    assert (info.format, info.subtype, info.samplerate) == ("OGG", "OPUS", 48_000)


async def test_a_part_over_the_limit_or_empty_is_never_sent(server: FakeOpenAI) -> None:
    voice = speaker(server)
    for text in ("x" * (MAX_INPUT_CHARS + 1), "  "):
        with pytest.raises(ValueError, match="spoken_parts"):
            await voice.speak(text)
    assert not server.speeches


async def test_an_outage_is_tried_again_then_typed(server: FakeOpenAI) -> None:
    voice = speaker(server, max_retries=1)
    try:
        server.fail_speech_next(503)
        assert (await voice.speak("once more")).audio == ogg_opus_sample()  # the retry
        server.fail_speech_next(500, count=2)
        with pytest.raises(ModelError) as failed:
            await voice.speak("and again")
        assert failed.value.kind == "unavailable" and failed.value.transient
        assert failed.value.latency > 0
    finally:
        await voice.close()
    assert [r.input for r in server.speeches] == ["once more"]


@pytest.mark.parametrize(
    ("change", "kind"),
    [({"api_key": "sk-wrong"}, "config"), ({"model": "tts-unknown"}, "config")],
)
async def test_a_refused_key_or_model_is_config(
    server: FakeOpenAI, change: dict[str, object], kind: str
) -> None:
    voice = speaker(server, **change)
    try:
        with pytest.raises(ModelError) as failed:
            await voice.speak("hello")
    finally:
        await voice.close()
    assert failed.value.kind == kind and not failed.value.transient


async def test_a_part_the_endpoint_finds_too_long_is_a_size_failure(server: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
    try:
        with pytest.raises(ModelError) as failed:
            await sdk.speak(client, model="tts-test", voice="alloy", text="x" * 5000)
    finally:
        await client.close()
    assert failed.value.kind == "size" and not failed.value.transient


async def test_an_endpoint_answering_other_audio_is_rejected(server: FakeOpenAI) -> None:
    server.speech_audio = b"ID3\x04" + b"\x00" * 100  # an MP3, whatever was asked
    voice = speaker(server)
    try:
        with pytest.raises(ModelError) as failed:
            await voice.speak("hello")
    finally:
        await voice.close()
    assert failed.value.kind == "rejected"


async def test_an_unreachable_endpoint_is_unavailable() -> None:
    async with FakeOpenAI() as gone:
        url = gone.base_url
    voice = Speaker(
        api_key=KEY, base_url=url, model="tts-test", voice="alloy", timeout=2, max_retries=0
    )
    try:
        with pytest.raises(ModelError) as failed:
            await voice.speak("hello")
    finally:
        await voice.close()
    assert failed.value.kind == "unavailable" and failed.value.transient


# ------------------------------------------------------------------ the test server


async def test_the_test_server_is_as_strict_as_the_speech_api(server: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
    speech = client.audio.speech
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await speech.create(model="tts-test", voice="alloy", input="x" * 4097,
                                response_format="opus")  # fmt: skip
        assert refused.value.code == "string_above_max_length"
        assert refused.value.param == "input"
        with pytest.raises(openai.BadRequestError) as refused:
            await speech.create(model="tts-test", voice="alloy", input="hi")  # mp3
        assert refused.value.param == "response_format"
        with pytest.raises(openai.BadRequestError) as refused:
            await speech.create(model="tts-test", voice="nobody", input="hi",
                                response_format="opus")  # fmt: skip
        assert refused.value.param == "voice"
        with pytest.raises(openai.BadRequestError) as refused:
            await speech.create(model="tts-test", voice="alloy", input="hi",
                                response_format="opus", speed=9)  # fmt: skip
        assert refused.value.param == "speed"
        with pytest.raises(openai.BadRequestError) as refused:
            await speech.create(model="tts-test", voice="alloy", input="hi",
                                response_format="opus", extra_body={"pitch": 2})  # fmt: skip
        assert "pitch" in refused.value.message
        for missing in ("model", "input", "voice"):
            body = {"model": "tts-test", "input": "hi", "voice": "alloy"}
            del body[missing]
            with pytest.raises(openai.BadRequestError) as refused:
                await client.post("/audio/speech", body=body, cast_to=object)
            assert (refused.value.param, refused.value.code) == (
                missing, "missing_required_parameter",
            )  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            await speech.create(model="tts-2", voice="alloy", input="hi", response_format="opus")
        answered = await speech.create(
            model="tts-test", voice={"id": "voice_custom"}, input="x" * 4096,
            response_format="opus", speed=1.5, instructions="Calmly.",
        )  # fmt: skip
        assert await answered.aread() == ogg_opus_sample()
    finally:
        await client.close()
    assert len(server.speeches) == 1 and server.speeches[0].voice == {"id": "voice_custom"}
