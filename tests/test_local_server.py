"""A local Bot API server (``telegram-bot-api --local``), end to end.

The real bot against the Bot API test server in local mode: getFile answers the
absolute path of a file the server wrote to its disk (its ``--dir``, here a temp dir),
no file is served over HTTP unless a web server in front does it, and webhooks may be
http:// on any port. Settings refused for Telegram's own server are checked with
``python -m bot check-config`` like the other settings errors (tests/test_first_run.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from redis.asyncio import Redis

from bot.app import App
from bot.app_startup import StartupError
from bot.reading import quoting
from bot.reading.texts import FAILURES
from bot.telegram.files import Files, FileUnreadableError
from bot.telegram.session import BotApiSession
from bot.turn import media

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import USER, BotFactory, answers_to, ask, running_bot, settings_for
from .redis_server import RedisServer, free_port
from .test_first_run import TOKEN, one_line, run_bot

CODE = "print('read from the disk')\n"


@pytest.fixture
async def tg(tmp_path: Path) -> AsyncIterator[FakeTelegram]:
    """The Bot API test server in local mode; the bot can read its --dir (one machine)."""
    async with FakeTelegram(local_mode=True, files_dir=tmp_path / "bot-api") as server:
        server.add_private_chat(USER, "Ada")
        yield server


def send_code(tg: FakeTelegram, **extra: Any) -> dict[str, Any]:
    return tg.send_user_message(
        USER, USER, None, document=True, data=CODE.encode(), file_name="hi.py",
        mime_type="text/x-python", **extra,
    )  # fmt: skip


def on_disk(path: str | Path) -> bytes | None:
    """The bytes of the regular file at ``path`` on this machine, else None."""
    path = Path(path)
    return path.read_bytes() if path.is_absolute() and path.is_file() else None


def file_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "replychain.files"]


# ------------------------------------------------------------------ files read from disk


async def test_text_files_and_voice_notes_are_read_from_the_servers_disk(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="replychain.files")
    async with start_bot() as app:
        _, text = await ask(
            tg, app, USER, None, document=True, data=CODE.encode(), file_name="hi.py",
            mime_type="text/x-python", caption="what does it print?",
        )  # fmt: skip
        assert text.startswith("[depth:2] echo: what does it print?")
        _, text = await ask(tg, app, USER, None, voice=True, data=b"heard from the disk")
        assert text == "[depth:2] 🎙 “heard from the disk”\necho: heard from the disk"
    [user] = [m for m in llm.requests[0].messages if m["role"] == "user"]
    assert user["content"] == "what does it print?\n\n" + quoting.quote("document hi.py", CODE)
    assert llm.transcriptions[-1][3] == b"heard from the disk"
    # getFile named files on the server's disk, and nothing was downloaded over HTTP
    paths = [call.result["file_path"] for call in tg.calls_to("getFile")]
    assert [Path(p).parent.name for p in paths] == ["documents", "voice"]
    assert [on_disk(p) for p in paths] == [CODE.encode(), b"heard from the disk"]
    assert tg.download_requests == []
    assert file_log(caplog) == ["reading files from the local Bot API server's disk"]


async def test_the_bot_apis_20_mb_download_limit_does_not_apply(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    """Telegram's server refuses this file (tests/test_media.py); a local one gives it."""
    size = 25 * 1024 * 1024
    async with start_bot() as app:
        _, text = await ask(tg, app, USER, None, audio=True, data=b"a long talk", file_size=size)
    assert text == "[depth:2] 🎙 “a long talk”\necho: a long talk"
    assert [c.result["file_size"] for c in tg.calls_to("getFile")] == [size]
    assert tg.download_requests == []


async def test_files_over_the_operators_limits_get_the_same_answers_and_nothing_is_lost(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(max_document_bytes=1048576) as app:
        # the size Telegram gave is over the limit: refused before getFile, which a local
        # server answers only after downloading the whole file
        _, text = await ask(
            tg, app, USER, None, document=True, data=b"x" * 2097152, file_name="big.log",
            mime_type="text/plain",
        )  # fmt: skip
        assert text == FAILURES["too_big"].format(name="big.log", size="2.0", limit="1")
        big = 500 * 1024 * 1024  # under 10 minutes, but more bytes than any such recording
        _, text = await ask(tg, app, USER, None, audio=True, data=b"x", file_size=big)
        limit = f"{600 * media.AUDIO_BYTES_PER_SECOND / 1048576:.0f}"
        assert text == media.AUDIO_TOO_BIG.format(size="500.0", limit=limit)
        assert not tg.calls_to("getFile")
        # a size given too small: reading the disk stops at the limit
        wrong, text = await ask(
            tg, app, USER, None, document=True, data=b"y" * 2097152, file_name="wrong.log",
            mime_type="text/plain", file_size=100,
        )  # fmt: skip
        assert text.startswith("wrong.log is too big for me (")
        # replying to a notice goes on instead of getting stuck
        notice = answers_to(tg, USER, wrong)[-1].message_id
        _, text = await ask(tg, app, USER, "here is the part that matters", reply_to=notice)
        assert text == "[depth:2] echo: here is the part that matters"
    assert len(tg.calls_to("getFile")) == 1
    assert len(llm.requests) == 1 and not llm.transcriptions


# ------------------------------------------------------------ paths the bot cannot read


@pytest.mark.parametrize("served", [True, False], ids=["web-server-in-front", "server-alone"])
async def test_a_path_the_bot_cannot_read_is_downloaded_from_the_server_instead(
    tmp_path: Path,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
    served: bool,
) -> None:
    """The server runs in another container: its --dir is not mounted in the bot's."""
    async with FakeTelegram(
        local_mode=True, files_dir=tmp_path / "volume", server_dir=tmp_path / "elsewhere",
        serve_local_files=served,
    ) as tg:  # fmt: skip
        tg.add_private_chat(USER, "Ada")
        async with running_bot(settings_for(tg, llm, redis_server.url)) as app:
            _, text = await ask(tg, app, USER, None, voice=True, data=b"first")
            _, again = await ask(tg, app, USER, None, voice=True, data=b"second")
    answered = [c.result["file_path"] for c in tg.calls_to("getFile")]
    assert len(answered) == 2 and all(Path(p).is_absolute() and not on_disk(p) for p in answered)
    assert tg.download_requests == [(p, 200 if served else 404) for p in answered]
    if served:
        assert (text, again) == (
            "[depth:2] 🎙 “first”\necho: first",
            "[depth:2] 🎙 “second”\necho: second",
        )
    else:  # telegram-bot-api serves no files: the user hears why, and can send it again
        assert text == media.UNREADABLE_FILE.format(reason="download refused (404)")
    # the operator is told once how to fix it; the path is shown, the token never
    [warning] = file_log(caplog)
    assert "cannot read" in warning and "TELEGRAM_LOCAL_FILES=false" in warning
    assert "/<token>/voice/file_" in warning
    assert tg.token.replace(":", "~") not in caplog.text and tg.token not in caplog.text


async def test_local_files_true_says_when_a_path_is_unreadable_and_downloads_nothing(
    tmp_path: Path,
    llm: FakeOpenAI,
    redis_server: RedisServer,
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeTelegram(
        local_mode=True, files_dir=tmp_path / "volume", server_dir=tmp_path / "elsewhere",
        serve_local_files=True,
    ) as tg:  # fmt: skip
        tg.add_private_chat(USER, "Ada")
        settings = settings_for(tg, llm, redis_server.url, telegram_local_files=True)
        async with running_bot(settings) as app:
            message, text = await ask(
                tg, app, USER, None, document=True, data=b"notes", file_name="a.txt",
                mime_type="text/plain",
            )  # fmt: skip
            assert text == media.UNREADABLE_FILE.format(
                reason="the bot cannot read the server's copy"
            )
            # the notice can be replied to
            notice = answers_to(tg, USER, message)[-1].message_id
            _, text = await ask(tg, app, USER, "then in text: notes", reply_to=notice)
            assert text == "[depth:2] echo: then in text: notes"
    assert tg.download_requests == []
    [warning] = file_log(caplog)
    assert "unset TELEGRAM_LOCAL_FILES" in warning and "/<token>/documents/" in warning


async def test_local_files_false_never_reads_the_disk(
    tmp_path: Path, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    async with FakeTelegram(
        local_mode=True, files_dir=tmp_path / "bot-api", serve_local_files=True
    ) as tg:
        tg.add_private_chat(USER, "Ada")
        settings = settings_for(tg, llm, redis_server.url, telegram_local_files=False)
        async with running_bot(settings) as app:
            _, text = await ask(tg, app, USER, None, voice=True, data=b"over http")
    assert text == "[depth:2] 🎙 “over http”\necho: over http"
    [call] = tg.calls_to("getFile")
    assert on_disk(call.result["file_path"]) == b"over http"  # readable, yet downloaded
    assert tg.download_requests == [(call.result["file_path"], 200)]


def local_files(tg: FakeTelegram, local: bool | None) -> Files:
    bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
    return Files(bot, local_files=local)


@pytest.mark.parametrize("kind", ["fifo", "directory", "dot-dot"])
async def test_only_the_regular_file_getfile_named_is_read(tg: FakeTelegram, kind: str) -> None:
    """Anything else at (or behind) the path counts as unreadable: never a hang, never
    another file; detected falls back to the download URL, true refuses."""
    file_id = send_code(tg)["document"]["file_id"]
    path = tg.local_file(file_id)
    if kind == "dot-dot":  # a path through "..": the same file, but not read
        tg.local_paths[file_id] = str(path.parent / ".." / path.parent.name / path.name)
    else:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
    files, strict = local_files(tg, None), local_files(tg, True)
    try:
        with pytest.raises(FileUnreadableError, match="download refused"):
            await asyncio.wait_for(files.fetch(file_id, limit=4096), 10)
        # the download URL's path, as the client normalises it
        assert tg.download_requests == [(str(path), 404)]
        with pytest.raises(FileUnreadableError, match="cannot read the server's copy"):
            await asyncio.wait_for(strict.fetch(file_id, limit=4096), 10)
        assert len(tg.download_requests) == 1
    finally:
        await files.bot.session.close()
        await strict.bot.session.close()


# ------------------------------------------------------------------------- webhooks


async def test_an_http_webhook_on_any_port_works_with_a_local_server(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    webhook = {
        "webhook_url": url,
        "webhook_secret": "s3cret",
        "webhook_listen": f"127.0.0.1:{port}",
    }
    async with start_bot(**webhook) as app:
        await tg.wait_for(lambda: bool(tg.webhook_url), what="setWebhook")
        _, text = await ask(tg, app, USER, "hello over plain http")
    assert text == "[depth:2] echo: hello over plain http"
    [registered] = tg.calls_to("setWebhook")
    assert registered.params["url"] == url and registered.status == 200
    # posted to the URL itself (0: before the bot listened, as with Telegram's server)
    assert tg.webhook_deliveries[-1] == (1, 200)
    assert {status for _, status in tg.webhook_deliveries} <= {0, 200}
    assert not tg.calls_to("getUpdates")


def test_the_same_webhook_is_refused_for_telegrams_own_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/tg/hook"
    values = {"TELEGRAM_BOT_TOKEN": TOKEN, "OPENAI_API_KEY": "k", "WEBHOOK_SECRET": "s3cret"}
    line = one_line(run_bot(tmp_path, "check-config", WEBHOOK_URL=url, **values))
    assert line.startswith("replychain: WEBHOOK_URL is invalid: ")
    assert "https://" in line and "443, 80, 88 or 8443" in line
    assert "local Bot API server (telegram-bot-api --local)" in line and "TELEGRAM_API_URL" in line
    https_8080 = "https://bot.example.org:8080/tg/hook"
    assert "8443" in one_line(run_bot(tmp_path, "check-config", WEBHOOK_URL=https_8080, **values))
    local = run_bot(
        tmp_path, "check-config", WEBHOOK_URL=url, TELEGRAM_API_URL="http://127.0.0.1:8081",
        **values,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    line = one_line(run_bot(tmp_path, "check-config", TELEGRAM_LOCAL_FILES="true", **values))
    assert "TELEGRAM_LOCAL_FILES is invalid" in line and "--local" in line


async def test_a_self_hosted_server_without_local_mode_refusing_http_stops_start_up(
    llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """Allowed by the settings (the server is not Telegram's), refused by the server."""
    port = free_port()
    async with FakeTelegram() as tg:  # telegram-bot-api without --local
        settings = settings_for(
            tg, llm, redis_server.url, webhook_url=f"http://127.0.0.1:{port}/hook",
            webhook_secret="s3cret", webhook_listen=f"127.0.0.1:{port}",
        )  # fmt: skip
        with pytest.raises(StartupError) as raised:
            await App(settings).run(install_signals=False)
    assert str(raised.value) == (
        "the Bot API server refused WEBHOOK_URL: Bad Request: bad webhook: An HTTPS URL must "
        "be provided for webhook; a self-hosted Bot API server takes http:// and any port "
        "only when it runs with --local; without it, an https:// URL on port 443, 80, 88 or "
        "8443"
    )


async def test_the_fake_local_server_behaves_like_telegram_bot_api_local(
    tg: FakeTelegram,
) -> None:
    voice = tg.send_user_message(USER, USER, None, voice=True, data=b"ogg bytes")["voice"]
    big = tg.send_user_message(USER, USER, None, document=True, file_size=1999 * 1024 * 1024)
    async with aiohttp.ClientSession() as http:

        async def call(method: str, **params: Any) -> Any:
            async with http.post(f"{tg.url}/bot{tg.token}/{method}", json=params) as r:
                return await r.json()

        path = (await call("getFile", file_id=voice["file_id"]))["result"]["file_path"]
        assert on_disk(path) == b"ogg bytes"
        # laid out as the real --dir: the token's directory (":" as "~"), a folder per kind
        token_dir = tg.token.replace(":", "~")
        assert Path(path).parts[-3:] == (token_dir, "voice", f"file_{voice['file_id']}.oga")
        again = await call("getFile", file_id=voice["file_id"])
        assert again["result"]["file_path"] == path  # kept on disk, answered again
        ok = await call("getFile", file_id=big["document"]["file_id"])
        assert ok["ok"] and ok["result"]["file_size"] == 1999 * 1024 * 1024
        async with http.get(f"{tg.url}/file/bot{tg.token}/{path}") as r:
            assert r.status == 404  # telegram-bot-api serves no files
        for hook in ("http://127.0.0.1:1/x", "https://10.0.0.1:9999/x"):
            assert (await call("setWebhook", url=hook))["ok"]
        assert (await call("setWebhook", url="ftp://host/x"))["description"] == (
            "Bad Request: invalid webhook URL specified"
        )
        assert (await call("setWebhook", url="http://h/x", max_connections=5000))["ok"]
    assert tg.download_requests == [(path, 404)] and tg.downloads == []
