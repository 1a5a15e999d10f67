"""Prometheus metrics, /healthz and the /stats chart, against the real bot and test servers."""

from __future__ import annotations

import io
import re
import struct
import time
from collections.abc import Iterator

import aiohttp
import pytest
from matplotlib.image import imread
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from bot.app import App
from bot.app_startup import StartupError
from bot.bus.inbound import Inbound
from bot.bus.intake import Intake
from bot.data import keys
from bot.settings import SettingsError
from bot.settings_load import load_settings
from bot.usage.reports import OWNER_ONLY_TEXT

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import OTHER_USER, USER, BotFactory, answers_to, ask, running_bot, settings_for
from .redis_server import RedisServer, free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def scrape(port: int) -> tuple[Samples, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    return _parse(text), text


async def healthz(port: int) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as response,
    ):
        return response.status, await response.text()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def changed(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def serving(tg: FakeTelegram) -> None:
    """The metrics server starts before polling: polling means it is up."""
    await tg.wait_for(lambda: tg.polling, 15.0)


async def test_metrics_change_as_turns_run(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    port = free_port()
    async with start_bot(metrics_listen=f"127.0.0.1:{port}") as app:
        await serving(tg)
        before, _ = await scrape(port)
        question, first = await ask(tg, app, USER, "a secret question about Ada")
        answer = answers_to(tg, USER, question)[-1].message_id
        await ask(tg, app, USER, "and a follow-up", reply_to=answer)
        llm.fail_next(400, message="no")  # rejected: the user gets a notice
        await ask(tg, app, USER, "this one fails")
        after, text = await scrape(port)

    assert first.startswith("[depth:2] ")
    assert changed(before, after, "replychain_turns_total", outcome="answer") == 2
    assert changed(before, after, "replychain_turns_total", outcome="notice") == 1
    assert changed(before, after, "replychain_turn_seconds_count") == 3
    assert changed(before, after, "replychain_first_text_seconds_count") == 2
    assert changed(before, after, "replychain_model_call_seconds_count") == 3
    assert changed(before, after, "replychain_model_errors_total", kind="rejected") == 1
    reported = llm.usages
    assert changed(before, after, "replychain_model_tokens_total", kind="prompt") == sum(
        u.prompt_tokens for u in reported
    )
    assert changed(before, after, "replychain_model_tokens_total", kind="completion") == sum(
        u.completion_tokens for u in reported
    )
    # the follow-up found its chain in memory; the first message's routing did not
    assert changed(before, after, "replychain_transcript_cache_lookups_total", result="hit") > 0
    assert 0 < value(after, "replychain_transcript_cache_hit_ratio") <= 1
    assert value(after, "replychain_transcript_cache_bytes") > value(
        before, "replychain_transcript_cache_bytes"
    )
    assert value(after, "replychain_intake_backlog") == 0
    assert value(after, "replychain_intake_oldest_age_seconds") == 0
    assert value(after, "replychain_up", service="redis") == 1
    assert value(after, "replychain_up", service="telegram") == 1
    assert value(after, "replychain_outages_total", service="redis") == 0
    # no message text, no user id, no name, no chat id anywhere in the scrape
    for secret in ("secret question", "Ada", "follow-up"):
        assert secret not in text
    # an id as a value of its own (a float's digits may hold it: 0.0082461810015)
    assert re.search(rf"(?<![\d.]){USER}(?![\d.])", text) is None


async def test_telegram_429_and_retries_are_counted(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    port = free_port()
    async with start_bot(metrics_listen=f"127.0.0.1:{port}") as app:
        await serving(tg)
        before, _ = await scrape(port)
        tg.fail_next("sendMessage", status=429, retry_after=1)
        tg.fail_next("sendMessage", status=502)
        await ask(tg, app, USER, "hello")
        after, _ = await scrape(port)
    assert changed(before, after, "replychain_telegram_429_total", method="sendMessage") == 1
    assert changed(before, after, "replychain_telegram_retries_total", reason="flood_control") == 1
    assert changed(before, after, "replychain_telegram_retries_total", reason="server_error") == 1


async def test_intake_backlog_is_read_from_the_stream(redis: Redis) -> None:
    intake = Intake(redis, "test")
    assert (await intake.backlog()).entries == 0
    for message_id in (1, 2, 3):
        inbound = Inbound(USER, message_id, USER, "text")
        await redis.xadd(keys.INTAKE_STREAM, {b"m": inbound.encode()}, id=f"{1000 * message_id}-0")
    await redis.xadd(keys.DEAD_LETTER_STREAM, {b"m": b"", b"why": b"x", b"at": b"0"})
    backlog = await intake.backlog()
    assert backlog.entries == 3
    assert backlog.dead_letters == 1
    # the oldest entry was accepted at 1 s after the epoch (its id), by Redis's clock
    assert backlog.oldest_age == pytest.approx(time.time() - 1, abs=60)


async def test_healthz_is_503_while_redis_is_away(
    tg: FakeTelegram, llm: FakeOpenAI, private_redis: RedisServer
) -> None:
    port = free_port()
    settings = settings_for(tg, llm, private_redis.url, metrics_listen=f"127.0.0.1:{port}")
    async with running_bot(settings) as app:
        await serving(tg)
        status, body = await healthz(port)
        assert (status, body) == (200, "redis: ok\ntelegram: ok\n")
        private_redis.stop()
        status, body = await healthz(port)
        assert status == 503
        assert body.startswith("redis: unreachable")
        await tg.wait_for(lambda: app.intake.outage.since is not None, 15.0)  # the runner saw it
        during, text = await scrape(port)  # the scrape still answers, without the backlog
        assert "replychain_intake_backlog" not in text
        assert value(during, "replychain_up", service="redis") == 0
        assert value(during, "replychain_outages_total", service="redis") == 1
        private_redis.start_same_port()
        await tg.wait_for(lambda: app.intake.outage.since is None, 15.0)
        assert (await healthz(port))[0] == 200
        after, _ = await scrape(port)
        assert value(after, "replychain_up", service="redis") == 1
        assert value(after, "replychain_intake_backlog") == 0
        assert value(after, "replychain_turn_retries_total", cause="redis") == 0  # no turn ran


async def test_healthz_is_503_while_telegram_is_away(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    port = free_port()
    async with start_bot(metrics_listen=f"127.0.0.1:{port}") as app:
        await serving(tg)
        assert app.metrics_server is not None
        assert (await healthz(port))[0] == 200
        getme = len(tg.calls_to("getMe"))
        assert (await healthz(port))[0] == 200
        assert len(tg.calls_to("getMe")) == getme  # within TELEGRAM_CHECK_EVERY: not asked
        app.metrics_server.health.telegram_every = 0
        await tg.stop()
        status, body = await healthz(port)
        await tg.start()
    assert status == 503
    assert "telegram: unreachable" in body
    assert "redis: ok" in body


def test_metrics_listen_must_be_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "1:abc")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for good in ("127.0.0.1:9108", ":9108", "[::1]:9108"):
        monkeypatch.setenv("METRICS_LISTEN", good)
        assert load_settings(env_file=None).metrics_listen == good
    for bad in ("localhost", "host:port", "127.0.0.1:70000"):
        monkeypatch.setenv("METRICS_LISTEN", bad)
        with pytest.raises(SettingsError, match="METRICS_LISTEN is invalid: must be host:port"):
            load_settings(env_file=None)


async def test_a_taken_metrics_port_stops_start_up_with_one_line(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    port = free_port()
    settings = settings_for(tg, llm, redis_server.url, metrics_listen=f"127.0.0.1:{port}")
    async with running_bot(settings):
        await serving(tg)
        with pytest.raises(StartupError) as raised:
            await App(settings).run(install_signals=False)
    assert str(raised.value).startswith(f"METRICS_LISTEN: cannot listen on 127.0.0.1:{port} (")


# ------------------------------------------------------------------------ /stats chart


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_SIGNATURE)
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def photos(tg: FakeTelegram, chat: int) -> Iterator[bytes]:
    for message in tg.bot_messages(chat):
        if message.photo is not None:
            yield message.photo


async def test_stats_sends_a_chart_to_owners_only(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(
        owner_user_ids=frozenset({USER}), price_input_per_mtok=1.0, price_output_per_mtok=2.0
    ) as app:
        await ask(tg, app, OTHER_USER, "spend a little", user=OTHER_USER)
        denied = tg.send_user_message(OTHER_USER, OTHER_USER, "/stats")["message_id"]
        allowed = tg.send_user_message(USER, USER, "/stats")["message_id"]
        await tg.wait_for(
            lambda: (
                len(answers_to(tg, USER, allowed)) == 2 and bool(answers_to(tg, OTHER_USER, denied))
            )
        )
    assert [m.text for m in answers_to(tg, OTHER_USER, denied)] == [OWNER_ONLY_TEXT]
    assert not list(photos(tg, OTHER_USER))
    assert not [c for c in tg.calls_to("sendPhoto") if c.params.get("chat_id") == OTHER_USER]
    [chart] = [m for m in answers_to(tg, USER, allowed) if m.photo is not None]
    assert chart.photo is not None
    assert png_size(chart.photo) == (1100, 480)
    image = imread(io.BytesIO(chart.photo), format="png")
    assert image.shape[:2] == (480, 1100)
    assert image.std() > 0  # something is drawn
    assert "estimated cost" in (chart.caption or "")
    [sizes] = [c.result["photo"] for c in tg.calls_to("sendPhoto")]
    assert sizes[-1]["width"] == 1100


async def test_a_chart_without_usage_or_prices_still_renders(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(owner_user_ids=frozenset({USER})):
        allowed = tg.send_user_message(USER, USER, "/stats")["message_id"]
        await tg.wait_for(lambda: len(answers_to(tg, USER, allowed)) == 2)
    [chart] = [m for m in answers_to(tg, USER, allowed) if m.photo is not None]
    assert chart.photo is not None
    assert png_size(chart.photo) == (1100, 480)
    assert "estimated cost" not in (chart.caption or "")
