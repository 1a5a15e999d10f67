"""Speech and image models in the catalogue (``kind = "tts" | "image"``), TTS_MODEL,
TTS_VOICE and IMAGE_MODEL, and what their calls cost: exact to the nano-dollar, and
recorded by accounting like any call (real Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.catalogue import CatalogueError, Defaults, Models, Prices, load
from bot.model import Usage
from bot.settings import Settings, SettingsError
from bot.usage.accounting import Accounting
from bot.usage.calls import CallRecord, utc_now
from bot.usage.costs import image_cost, nano, speech_cost
from transcript import NodeId

from .fakes.model import FakeOpenAI, ogg_opus_sample

CATALOGUE = """
[models.fast]
model = "test-model"
price_input = 1.0
price_output = 2.0

[models.voice]
kind = "tts"
model = "tts-test"
price_per_1m_chars = 15.0

[models.cheap-voice]
kind = "tts"
model = "tts-1"
base_url = "http://127.0.0.1:9/v1"

[models.painter]
kind = "image"
model = "gpt-image-1"
price_per_image = 0.04
"""


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


def defaults(base_url: str | None = None) -> Defaults:
    return Defaults(base_url=base_url, api_key="sk-test", model="test-model", context_tokens=32000)


def settings(**values: Any) -> Settings:
    base: dict[str, Any] = {
        "telegram_bot_token": "123:abc", "openai_api_key": "sk-test",
        "openai_base_url": "http://127.0.0.1:1/v1", "system_prompt": "test",
    }  # fmt: skip
    return Settings(_env_file=None, **{**base, **values})  # type: ignore[call-arg]


@pytest.fixture
def catalogue_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(CATALOGUE)
    return path


# ------------------------------------------------------------------ the catalogue


def test_speech_and_image_models_are_kept_apart_from_the_chat_models(
    catalogue_file: Path,
) -> None:
    found = load(catalogue_file, defaults())
    assert list(found.models) == ["fast"] and found.default == "fast"  # what /model offers
    assert list(found.media_models) == ["voice", "cheap-voice", "painter"]
    voice, painter = found.media_models["voice"], found.media_models["painter"]
    assert (voice.kind, voice.model, voice.api_key) == ("tts", "tts-test", "sk-test")
    assert voice.prices == Prices(per_1m_chars=15.0) and voice.prices.configured
    assert (painter.kind, painter.prices) == ("image", Prices(per_image=0.04))
    assert found.media_models["cheap-voice"].base_url == "http://127.0.0.1:9/v1"
    assert not found.media_models["cheap-voice"].prices.configured
    assert found.models["fast"].kind == "chat" and found.speech is None and found.images is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[models.a]\nmodel = 'x'\nkind = 'video'\n", '[models.a] kind: must be "chat", "tts"'),
        (
            "[models.a]\nmodel = 'x'\n[models.v]\nkind = 'tts'\nmodel = 'y'\nprice_per_image = 1\n",
            '[models.v] price_per_image: only a model of kind = "image" has it',
        ),
        (
            "[models.a]\nmodel = 'x'\nprice_per_1m_chars = 1\n",
            '[models.a] price_per_1m_chars: only a model of kind = "tts" has it',
        ),
        (
            "[models.a]\nmodel = 'x'\n[models.v]\nkind = 'tts'\nmodel = 'y'\nvision = false\n",
            '[models.v] vision: only a model of kind = "chat" has it',
        ),
        (
            "[models.a]\nmodel = 'x'\n[models.v]\nkind = 'tts'\nmodel = 'y'\ndefault = true\n",
            '[models.v] default: only a model of kind = "chat"',
        ),
        (
            "[models.v]\nkind = 'tts'\nmodel = 'y'\n",
            '[models]: needs at least one chat model (kind = "chat")',
        ),
        (
            "[models.a]\nmodel = 'x'\n[models.p]\nkind = 'image'\nmodel = 'y'\n"
            "price_per_image = -1\n",
            "[models.p] price_per_image: must be a number of at least 0 (USD per picture)",
        ),
        (
            "[models.a]\nmodel = 'x'\n[models.v]\nkind = 'tts'\nmodel = 'y'\n"
            "[personas.p]\nprompt = 'hi'\nmodel = 'v'\n",
            "[personas.p] model: names no [models.v] table of a chat model",
        ),
    ],
)
def test_a_bad_speech_or_image_entry_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(CatalogueError) as raised:
        load(path, defaults(), env={})
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_tts_model_and_image_model_name_catalogue_entries_of_their_kind(
    catalogue_file: Path,
) -> None:
    found = settings(models_file=catalogue_file, tts_model="voice", image_model="painter")
    chosen = found.catalogue()
    assert chosen.speech is not None and chosen.speech.name == "voice"
    assert chosen.images is not None and chosen.images.name == "painter"
    assert chosen.prices == {
        "fast": Prices(1.0, 0.0, 2.0), "voice": Prices(per_1m_chars=15.0),
        "painter": Prices(per_image=0.04),
    }  # fmt: skip
    assert settings(models_file=catalogue_file).catalogue().speech is None
    no_table = "is no [models.<name>] table of kind"
    for wrong, line in (
        ({"tts_model": "fast"}, f'TTS_MODEL is invalid: fast {no_table} = "tts"'),
        ({"tts_model": "painter"}, "(voice, cheap-voice)"),
        ({"image_model": "voice"}, f'IMAGE_MODEL is invalid: voice {no_table} = "image"'),
    ):
        with pytest.raises(SettingsError) as raised:
            settings(models_file=catalogue_file, **wrong).catalogue()
        assert line in str(raised.value)


def test_without_a_catalogue_they_are_model_ids_on_the_openai_endpoint() -> None:
    found = settings(tts_model="tts-1", image_model="gpt-image-1")
    if found.catalogue_path() is not None:
        pytest.skip("config/models.toml exists in this checkout")
    chosen = found.catalogue()
    assert chosen.speech is not None and chosen.images is not None
    wanted = ((chosen.speech, "tts", "tts-1"), (chosen.images, "image", "gpt-image-1"))
    for spec, kind, model in wanted:
        assert (spec.kind, spec.model, spec.name) == (kind, model, model)
        assert (spec.base_url, spec.api_key) == ("http://127.0.0.1:1/v1", "sk-test")
        assert not spec.prices.configured
    assert list(chosen.models) == ["gpt-4o-mini"]  # the one chat model is unchanged
    off = settings().catalogue()
    assert off.speech is None and off.images is None
    assert settings().tts_voice == "alloy"
    with pytest.raises(ValueError, match="tts_voice"):
        settings(tts_voice="two words")


async def test_the_catalogue_makes_one_client_of_each(server: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    here = f'model = "tts-test"\nbase_url = "{server.base_url}"'
    path.write_text(CATALOGUE.replace('model = "tts-test"', here))
    chosen = settings(models_file=path, tts_model="voice", image_model="painter").catalogue()
    models = Models(chosen, timeout=5.0, max_retries=0, voice="nova")
    try:
        speaker = models.speaker()
        assert speaker is not None and speaker is models.speaker()
        assert (speaker.name, speaker.model, speaker.voice) == ("voice", "tts-test", "nova")
        assert (await speaker.speak("hello")).audio == ogg_opus_sample()
        maker = models.image_maker()
        assert maker is not None and maker is models.image_maker() and maker.name == "painter"
    finally:
        await models.close()
    assert server.speeches[0].voice == "nova"
    off = Models(settings().catalogue(), timeout=5.0, max_retries=0)
    assert off.speaker() is None and off.image_maker() is None


# ------------------------------------------------------------------ costs


def test_costs_are_exact_to_the_nano_dollar() -> None:
    voice, painter = Prices(per_1m_chars=15.0), Prices(per_image=0.04)
    assert speech_cost(voice, 4096) == 61_440_000  # $0.06144
    assert speech_cost(Prices(per_1m_chars=0.6), 10_000) == 6_000_000
    assert sum(speech_cost(voice, 4096) for _ in range(1000)) == 61_440_000_000  # $61.44
    # a price per million characters, rounded once per call, half up
    tiny = Prices(per_1m_chars=0.000001)  # 1,000 nano-dollars per million characters
    assert [speech_cost(tiny, n) for n in (0, 499, 500, 1_499, 1_500)] == [0, 0, 1, 1, 2]
    assert image_cost(painter) == 40_000_000 and image_cost(painter, 3) == 120_000_000
    assert image_cost(Prices(per_image=0.011)) == 11_000_000  # 0.011 is no exact float
    assert image_cost(Prices(per_image=0.167)) * 3 == image_cost(Prices(per_image=0.167), 3)
    assert speech_cost(Prices(), 4096) == 0 and image_cost(Prices(), 2) == 0
    assert nano(0.1) + nano(0.2) == nano(0.3)  # the float sum would not be
    with pytest.raises(ValueError):
        speech_cost(voice, -1)


async def test_a_speech_and_an_image_call_are_counted_once_at_their_cost(redis: Redis) -> None:
    prices = {
        "fast": Prices(1.0, 0.5, 2.0), "voice": Prices(per_1m_chars=15.0),
        "painter": Prices(per_image=0.04),
    }  # fmt: skip
    accounting = Accounting(redis, clock=utc_now, model_prices=prices)
    answer, picture = NodeId("5", 1, 0, 2), NodeId("5", 1, 0, 4)
    spoken = [4096, 4096, 1808]  # a 10,000-character answer, three parts
    calls = [
        CallRecord(5, 7, 11, answer, "voice", Usage(0, 0), 0.4,
                   cost=speech_cost(prices["voice"], n))
        for n in spoken
    ]  # fmt: skip
    calls.append(CallRecord(5, 7, 13, picture, "painter", Usage(0, 0), 9.0,
                            cost=image_cost(prices["painter"])))  # fmt: skip
    chat = CallRecord(5, 7, 11, NodeId("5", 1, 0, 1), "fast", Usage(1000, 500), 1.0)
    for call in [*calls, chat, *calls]:  # each call recorded twice: counted once
        await accounting.record(call)
    await accounting.settled(5)
    today = await accounting.user_today(7)
    speech = 10_000 * 15_000  # 15,000 nano-dollars a character
    assert today.cost == speech + 40_000_000 + (1000 + 500 * 2) * 1000
    assert today.calls == 5 and today.tokens == 1500  # speech and pictures add no tokens
    assert today.models["voice"].cost == speech and today.models["voice"].calls == 3
    assert today.models["painter"].cost == 40_000_000
    assert today.models["fast"].cost == 2_000_000
    picture_turn = await accounting.turn(5, 13)  # per turn: calls and tokens (no money)
    assert (picture_turn.calls, picture_turn.tokens) == (1, 0)
