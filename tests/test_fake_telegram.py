"""The fake Bot API server answers the real aiogram client exactly as strictly as Telegram."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import (
    BotCommand,
    BufferedInputFile,
    EphemeralMessageParameters,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InlineQueryResultArticle,
    InputRichMessage,
    InputTextMessageContent,
    Message,
    MessageEntity,
    ReplyParameters,
)
from pydantic import ValidationError

from bot.chat.sidebar import SetMySettings

from .fakes.telegram import FakeTelegram

PARSE_ERROR = "Bad Request: can't parse entities: "


class _Session(AiohttpSession):
    """aiogram's session minus its 250 ms TLS grace sleep on close (plain HTTP here)."""

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_bot(fake: FakeTelegram, token: str | None = None) -> Bot:
    api = TelegramAPIServer.from_base(fake.url)
    return Bot(token or fake.token, session=_Session(api=api))


@contextlib.asynccontextmanager
async def running(**kwargs: Any) -> AsyncIterator[tuple[FakeTelegram, Bot]]:
    async with FakeTelegram(**kwargs) as fake:
        bot = make_bot(fake)
        try:
            yield fake, bot
        finally:
            await bot.session.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    client = make_bot(fake)
    yield client
    await client.session.close()


async def raw_call(
    fake: FakeTelegram, method: str, *, token: str | None = None, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    url = f"{fake.url}/bot{token or fake.token}/{method}"
    async with aiohttp.ClientSession() as http, http.post(url, **kwargs) as response:
        body: dict[str, Any] = await response.json()
        return response.status, body


# --------------------------------------------------------------------------- protocol basics


async def test_get_me_method_names_are_case_insensitive(fake: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.username, me.is_bot) == (fake.bot_id, "replychain_bot", True)
    status, body = await raw_call(fake, "GETME")
    assert status == 200
    assert body["ok"] is True
    assert body["result"]["username"] == "replychain_bot"
    assert [call.method for call in fake.calls] == ["getMe", "getMe"]


async def test_unknown_method_and_path_are_404(fake: FakeTelegram) -> None:
    status, body = await raw_call(fake, "sendSticker")
    assert (status, body) == (404, {"ok": False, "error_code": 404, "description": "Not Found"})
    async with aiohttp.ClientSession() as http, http.get(f"{fake.url}/nothing/here") as resp:
        assert resp.status == 404
    assert fake.calls[-1].method == "sendSticker"
    assert fake.calls[-1].status == 404


async def test_wrong_token_is_401(fake: FakeTelegram) -> None:
    intruder = make_bot(fake, token="999:not-the-token")
    try:
        with pytest.raises(TelegramUnauthorizedError, match="Unauthorized"):
            await intruder.get_me()
    finally:
        await intruder.session.close()
    status, body = await raw_call(fake, "getMe", token="123456:wrong")
    assert (status, body["error_code"], body["description"]) == (401, 401, "Unauthorized")
    assert [call.status for call in fake.calls] == [401, 401]


async def test_all_request_encodings_are_decoded(fake: FakeTelegram) -> None:
    fake.add_private_chat(7)
    fake.send_user_message(7, 7, "question")  # id 1
    base = f"{fake.url}/bot{fake.token}/sendMessage"
    form = aiohttp.FormData()
    form.add_field("chat_id", "7")
    form.add_field("text", "multipart")
    form.add_field("attachment", b"\x00\x01", filename="blob.bin")  # forces multipart
    async with aiohttp.ClientSession() as http:
        async with http.get(base, params={"chat_id": "7", "text": "query"}) as resp:
            assert resp.status == 200
        reply = json.dumps({"message_id": 1})
        urlencoded = {"chat_id": "7", "text": "123", "reply_parameters": reply}
        async with http.post(base, data=urlencoded) as resp:
            assert resp.status == 200
        async with http.post(base, data=form) as resp:
            assert resp.status == 200
        body = {"chat_id": 7, "text": "json", "reply_parameters": {"message_id": 1}}
        async with http.post(base, json=body) as resp:
            assert resp.status == 200
    assert [m.text for m in fake.bot_messages(7)] == ["query", "123", "multipart", "json"]
    urlencoded_call = fake.calls[1]
    assert urlencoded_call.params == {
        "chat_id": 7,
        "text": "123",  # text stays a string even when it looks like JSON
        "reply_parameters": {"message_id": 1},
    }
    assert fake.calls[2].params["attachment"]["filename"] == "blob.bin"
    assert [m.reply_to for m in fake.bot_messages(7)] == [None, 1, None, 1]


async def test_aiogram_encodes_nested_objects_as_json_fields(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(5)
    fake.send_user_message(5, 5, "hi")
    keyboard = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="More", callback_data="more")]]
    )
    sent = await bot.send_message(
        5,
        "pick",
        reply_parameters=ReplyParameters(message_id=1),
        entities=[MessageEntity(type="bold", offset=0, length=4)],
        reply_markup=keyboard,
    )
    params = fake.calls[-1].params
    assert params["chat_id"] == 5
    assert params["reply_parameters"] == {"message_id": 1}
    assert params["entities"] == [{"type": "bold", "offset": 0, "length": 4}]
    assert params["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "more"
    assert sent.reply_markup is not None
    assert sent.entities is not None
    assert sent.entities[0].type == "bold"


# --------------------------------------------------------------------------- message ids


async def test_message_ids_are_per_chat_and_shared_by_user_and_bot(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(1, "Ann")
    fake.add_private_chat(2, "Bob")
    assert fake.send_user_message(1, 1, "hi")["message_id"] == 1
    assert fake.send_user_message(2, 2, "yo")["message_id"] == 1
    assert (await bot.send_message(1, "hello Ann")).message_id == 2
    assert (await bot.send_message(2, "hello Bob")).message_id == 2
    assert fake.send_user_message(1, 1, "again")["message_id"] == 3
    history = fake.messages(1)
    assert [(m.message_id, m.is_bot, m.text) for m in history] == [
        (1, False, "hi"),
        (2, True, "hello Ann"),
        (3, False, "again"),
    ]
    assert all(isinstance(m.date, int) and m.date > 1_600_000_000 for m in history)
    assert fake.message(2, 2).from_id == fake.bot_id
    with pytest.raises(KeyError):
        fake.message(2, 3)


# --------------------------------------------------------------------------- getUpdates


async def test_long_poll_wakes_as_soon_as_an_update_arrives(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(5)
    assert await bot.get_updates(timeout=0) == []
    loop = asyncio.get_running_loop()
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for(lambda: fake.polling, timeout=5)
    assert not poll.done()
    started = loop.time()
    fake.send_user_message(5, 5, "ping")
    updates = await asyncio.wait_for(poll, 5)
    assert loop.time() - started < 1.0
    assert len(updates) == 1
    assert updates[0].message is not None
    assert updates[0].message.text == "ping"


async def test_offset_confirms_and_unconfirmed_updates_are_redelivered(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(3)
    for text in ("one", "two", "three"):
        fake.send_user_message(3, 3, text)
    first = await bot.get_updates()
    ids = [update.update_id for update in first]
    assert len(ids) == 3
    assert ids == sorted(ids)
    # Nothing was confirmed: a restarted bot gets the very same updates again.
    assert [update.update_id for update in await bot.get_updates()] == ids
    assert fake.pending_updates == 3
    page = await bot.get_updates(offset=ids[1], limit=1)
    assert [update.update_id for update in page] == [ids[1]]
    assert fake.pending_updates == 2
    assert await bot.get_updates(offset=ids[-1] + 1) == []
    assert fake.pending_updates == 0


async def test_negative_offset_keeps_only_the_newest(fake: FakeTelegram, bot: Bot) -> None:
    ids = [fake.push_update({"update_id": 500 + i, "poll_answer": {}}) for i in range(3)]
    assert ids == [500, 501, 502]
    assert fake.push_update({"message_reaction_count": {}}) == 503
    status, body = await raw_call(fake, "getUpdates", params={"offset": "-2"})
    assert status == 200
    # message_reaction_count is not delivered unless asked for, and is dropped.
    assert [update["update_id"] for update in body["result"]] == [502]
    assert fake.pending_updates == 1


async def test_raw_updates_of_any_shape_are_served_verbatim(fake: FakeTelegram) -> None:
    update_id = fake.push_update({"mystery": {"nested": [1, 2]}})
    status, body = await raw_call(fake, "getUpdates", json={"timeout": 0})
    assert status == 200
    assert body["result"] == [{"update_id": update_id, "mystery": {"nested": [1, 2]}}]


async def test_allowed_updates_filter_and_persist(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(3)
    fake.send_user_message(3, 3, "one")
    fake.edit_user_message(3, 1, "one, edited")
    updates = await bot.get_updates(allowed_updates=["edited_message"])
    assert len(updates) == 1
    assert updates[0].edited_message is not None
    assert updates[0].edited_message.text == "one, edited"
    assert updates[0].edited_message.edit_date is not None
    fake.send_user_message(3, 3, "two")
    # allowed_updates omitted: the previous setting still applies.
    assert await bot.get_updates(offset=updates[0].update_id + 1) == []


async def test_overlapping_get_updates_conflict(fake: FakeTelegram, bot: Bot) -> None:
    second_instance = make_bot(fake)
    try:
        first = asyncio.create_task(bot.get_updates(timeout=30))
        await fake.wait_for(lambda: fake.polling, timeout=5)
        assert await second_instance.get_updates(timeout=0) == []
        with pytest.raises(TelegramConflictError, match="terminated by other getUpdates"):
            await asyncio.wait_for(first, 5)
    finally:
        await second_instance.session.close()
    assert len(fake.violations) == 1
    assert "getUpdates" in fake.violations[0]
    assert [call.status for call in fake.calls_to("getUpdates")] == [200, 409]


async def test_abandoned_long_poll_is_not_a_conflict(fake: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for(lambda: fake.polling, timeout=5)
    first.cancel()  # the process died: its connection is gone
    with contextlib.suppress(asyncio.CancelledError):
        await first
    await fake.wait_for(lambda: not fake.polling, timeout=5)
    assert await bot.get_updates(timeout=0) == []
    assert fake.violations == []


async def test_webhook_blocks_get_updates(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(TelegramBadRequest, match="HTTPS URL must be provided"):
        await bot.set_webhook("http://example.com/hook")
    assert await bot.set_webhook("https://example.com/hook")
    with pytest.raises(TelegramConflictError, match="webhook is active"):
        await bot.get_updates()
    fake.add_private_chat(1)
    fake.send_user_message(1, 1, "hi")
    info = await bot.get_webhook_info()
    assert (info.url, info.pending_update_count) == ("https://example.com/hook", 1)
    assert await bot.delete_webhook(drop_pending_updates=True)
    assert await bot.get_updates() == []


async def test_set_webhook_is_checked_like_telegram_and_delivers_with_the_secret(
    fake: FakeTelegram, bot: Bot
) -> None:
    with pytest.raises(TelegramBadRequest, match="ports 80, 88, 443 or 8443"):
        await bot.set_webhook("https://example.com:8080/hook")
    with pytest.raises(TelegramBadRequest, match="secret token contains unallowed characters"):
        await bot.set_webhook("https://example.com/hook", secret_token="no spaces")
    with pytest.raises(TelegramBadRequest, match="max_connections"):
        await bot.set_webhook("https://example.com/hook", max_connections=101)
    received: list[tuple[str | None, dict[str, Any]]] = []
    arrived = asyncio.Event()

    async def hook(request: aiohttp.web.Request) -> aiohttp.web.Response:
        received.append(
            (request.headers.get("X-Telegram-Bot-Api-Secret-Token"), await request.json())
        )
        arrived.set()
        status = 500 if len(received) == 1 else 200  # the first try fails: retried
        return aiohttp.web.Response(status=status)

    app = aiohttp.web.Application()
    app.router.add_post("/hook", hook)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        fake.webhook_target = f"http://127.0.0.1:{port}/hook"
        assert await bot.set_webhook(
            "https://example.com/hook", secret_token="Abc_123-x", allowed_updates=["message"]
        )
        info = await bot.get_webhook_info()
        assert (info.max_connections, info.allowed_updates) == (40, ["message"])
        fake.add_private_chat(1)
        fake.send_user_message(1, 1, "hi")
        await fake.wait_for(lambda: fake.pending_updates == 0, 10)
        assert [secret for secret, _update in received] == ["Abc_123-x", "Abc_123-x"]
        assert received[0][1] == received[1][1]  # the same update again after the 500
        assert received[1][1]["message"]["text"] == "hi"
        assert [status for _id, status in fake.webhook_deliveries] == [500, 200]
        info = await bot.get_webhook_info()
        assert (
            info.last_error_message == "Wrong response from the webhook: 500 Internal Server Error"
        )
    finally:
        await runner.cleanup()


async def test_stop_answers_open_polls_and_restart_keeps_the_url(
    fake: FakeTelegram, bot: Bot
) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for(lambda: fake.polling, timeout=5)
    url = fake.url
    await fake.stop()
    assert await asyncio.wait_for(poll, 5) == []
    await fake.start()
    assert fake.url == url
    assert (await bot.get_me()).id == fake.bot_id


# --------------------------------------------------------------------------- HTML


async def test_html_entities_are_computed_in_utf16_units(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    html = (
        "😀 <b>bold <i>both</i></b> "
        '<a href="https://Example.com?q=1&amp;r=2">link</a> '
        '<code>c</code> <pre><code class="language-python">x = 1</code></pre> '
        '<tg-spoiler>s</tg-spoiler> <span class="tg-spoiler">t</span> <u>u</u> <s>s</s> '
        "<blockquote expandable>q</blockquote> &lt;&gt;&amp;&quot;&#65;&#x42;"
    )
    sent = await bot.send_message(1, html, parse_mode="HTML")
    assert sent.text == '😀 bold both link c x = 1 s t u s q <>&"AB'
    stored = fake.message(1, sent.message_id)
    assert stored.html == html
    assert stored.parse_mode == "HTML"
    assert stored.entities == [
        {"type": "bold", "offset": 3, "length": 9},
        {"type": "italic", "offset": 8, "length": 4},
        {"type": "text_link", "offset": 13, "length": 4, "url": "https://example.com/?q=1&r=2"},
        {"type": "code", "offset": 18, "length": 1},
        {"type": "pre", "offset": 20, "length": 5, "language": "python"},
        {"type": "spoiler", "offset": 26, "length": 1},
        {"type": "spoiler", "offset": 28, "length": 1},
        {"type": "underline", "offset": 30, "length": 1},
        {"type": "strikethrough", "offset": 32, "length": 1},
        {"type": "expandable_blockquote", "offset": 34, "length": 1},
    ]
    assert stored.raw["entities"] == stored.entities
    plain_pre = await bot.send_message(1, "<pre><code>a\nb</code></pre>", parse_mode="HTML")
    assert fake.message(1, plain_pre.message_id).entities == [
        {"type": "pre", "offset": 0, "length": 3}
    ]


@pytest.mark.parametrize(
    ("html", "reason"),
    [
        ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
        ("a <br> b", 'Unsupported start tag "br" at byte offset 2'),
        ("<foo>x</foo>", 'Unsupported start tag "foo" at byte offset 0'),
        ("😀<b", "Unclosed start tag at byte offset 4"),
        ("fish & chips", 'Unsupported HTML entity "&" at byte offset 5'),
        ("a &nbsp; b", 'Unsupported HTML entity "&nbsp;" at byte offset 2'),
        ("AT&T", 'Unsupported HTML entity "&T" at byte offset 2'),
        ("<b>bold", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<b>x</i>", 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ("<i>x</i", "Unclosed end tag at byte offset 4"),
        ("<a>x</a>", 'Tag "a" must have a non-empty "href" attribute at byte offset 0'),
        ('<span class="x">x</span>', 'Tag "span" must have class "tg-spoiler"'),
        ('<a href="x?a=1&b=2">x</a>', 'Unsupported HTML entity "&b" at byte offset 14'),
    ],
)
async def test_bad_html_is_rejected(fake: FakeTelegram, bot: Bot, html: str, reason: str) -> None:
    fake.add_private_chat(1)
    with pytest.raises(TelegramBadRequest) as error:
        await bot.send_message(1, html, parse_mode="HTML")
    assert error.value.message.startswith(PARSE_ERROR + reason)
    assert fake.messages(1) == []
    assert fake.calls[-1].status == 400


async def test_lenient_html_mode_matches_telegram() -> None:
    async with running(strict_html=False) as (fake, bot):
        fake.add_private_chat(1)
        sent = await bot.send_message(1, "AT&T &amp <a>plain</a>", parse_mode="HTML")
        assert sent.text == "AT&T & plain"
        assert sent.entities is None


# --------------------------------------------------------------------------- length limits


@pytest.mark.parametrize(
    ("text", "parse_mode", "error"),
    [
        ("a" * 4096, None, None),
        ("a" * 4097, None, "Bad Request: message is too long"),
        ("😀" * 2048, None, None),
        ("😀" * 2049, None, "Bad Request: message is too long"),  # 4098 UTF-16 units
        ("<b>" + "a" * 4096 + "</b>", "HTML", None),  # markup does not count
        ("  " + "a" * 4096 + "\n\n", None, None),  # surrounding whitespace is trimmed
        ("", None, "Bad Request: message text is empty"),
        (" \n ", None, "Bad Request: message text is empty"),
        ("<b></b>", "HTML", "Bad Request: message text is empty"),
    ],
)
async def test_text_length_is_measured_after_parsing_in_utf16(
    fake: FakeTelegram, bot: Bot, text: str, parse_mode: str | None, error: str | None
) -> None:
    fake.add_private_chat(1)
    if error is None:
        sent = await bot.send_message(1, text, parse_mode=parse_mode)
        assert sent.text is not None
        assert sent.text == sent.text.strip()
        return
    with pytest.raises(TelegramBadRequest) as raised:
        await bot.send_message(1, text, parse_mode=parse_mode)
    assert raised.value.message == error


# --------------------------------------------------------------------------- Markdown


async def test_markdown_v2_entities(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    source = (
        r"*bold* _it_ __under__ ~strike~ ||spoil|| `co\`de` "
        r"[link](https://example.com/a\)b) 1\+1\=2\."
    )
    sent = await bot.send_message(1, source, parse_mode="MarkdownV2")
    assert sent.text == "bold it under strike spoil co`de link 1+1=2."
    assert fake.message(1, sent.message_id).entities == [
        {"type": "bold", "offset": 0, "length": 4},
        {"type": "italic", "offset": 5, "length": 2},
        {"type": "underline", "offset": 8, "length": 5},
        {"type": "strikethrough", "offset": 14, "length": 6},
        {"type": "spoiler", "offset": 21, "length": 5},
        {"type": "code", "offset": 27, "length": 5},
        {"type": "text_link", "offset": 33, "length": 4, "url": "https://example.com/a)b"},
    ]
    block = await bot.send_message(
        1, ">quoted\nplain\n```python\nprint(1)\n```", parse_mode="MarkdownV2"
    )
    assert block.text == "quoted\nplain\nprint(1)"
    assert fake.message(1, block.message_id).entities == [
        {"type": "blockquote", "offset": 0, "length": 6},
        {"type": "pre", "offset": 13, "length": 8, "language": "python"},
    ]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("Hello.", "Character '.' is reserved and must be escaped with the preceding '\\'"),
        ("1 + 1", "Character '+' is reserved and must be escaped with the preceding '\\'"),
        ("a (b)", "Character '(' is reserved and must be escaped with the preceding '\\'"),
        ("x > y", "Character '>' is reserved and must be escaped with the preceding '\\'"),
        ("*bold", "Can't find end of Bold entity at byte offset 0"),
        ("ok `code", "Can't find end of Code entity at byte offset 3"),
        ("[x](http://a.b", "Can't find end of a URL at byte offset 4"),
    ],
)
async def test_bad_markdown_v2_is_rejected(
    fake: FakeTelegram, bot: Bot, source: str, reason: str
) -> None:
    fake.add_private_chat(1)
    with pytest.raises(TelegramBadRequest) as error:
        await bot.send_message(1, source, parse_mode="MarkdownV2")
    assert error.value.message == PARSE_ERROR + reason


async def test_legacy_markdown_and_unknown_parse_mode(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    sent = await bot.send_message(1, "*b* _i_ `c` [l](http://x.org) 1+1.", parse_mode="Markdown")
    assert sent.text == "b i c l 1+1."
    assert [e["type"] for e in fake.message(1, sent.message_id).entities] == [
        "bold",
        "italic",
        "code",
        "text_link",
    ]
    with pytest.raises(TelegramBadRequest) as error:
        await bot.send_message(1, "*open", parse_mode="Markdown")
    assert error.value.message == (
        PARSE_ERROR + "Can't find end of the entity starting at byte offset 0"
    )
    with pytest.raises(TelegramBadRequest, match="Bad Request: unsupported parse_mode"):
        await bot.send_message(1, "x", parse_mode="BBCode")


async def test_arbitrary_markup_is_answered_with_200_or_400(fake: FakeTelegram) -> None:
    pieces = [*"<>/&;#x0ab \n`*_~|[]()!\\.+-😀", "<b>", "</b>", "<i>", "</i>", "&amp;"]
    pieces += ["<pre>", "</pre>", '<code class="language-py">', "</code>", "```", "||", "__"]
    pieces += ['<a href="http://x.io">', "</a>", "<blockquote expandable>", "</blockquote>"]
    rng = random.Random(20240601)
    fake.add_private_chat(1)
    url = f"{fake.url}/bot{fake.token}/sendMessage"
    statuses: set[int] = set()
    async with aiohttp.ClientSession() as http:
        for _ in range(120):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
            for mode in ("HTML", "MarkdownV2", "Markdown"):
                form = {"chat_id": "1", "text": text, "parse_mode": mode}
                async with http.post(url, data=form) as response:
                    statuses.add(response.status)
    assert statuses == {200, 400}
    assert fake.server_errors == []
    for message in fake.messages(1):
        assert message.text is not None
        units = len(message.text.encode("utf-16-le")) // 2
        assert all(e["offset"] + e["length"] <= units for e in message.entities)


# --------------------------------------------------------------------------- replies


async def test_replies_must_exist_unless_allowed_without(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(9)
    fake.send_user_message(9, 9, "question")  # id 1
    answer = await bot.send_message(9, "answer", reply_parameters=ReplyParameters(message_id=1))
    assert answer.reply_to_message is not None
    assert answer.reply_to_message.text == "question"
    assert fake.message(9, answer.message_id).reply_to == 1

    nested = await bot.send_message(
        9, "follow-up", reply_parameters=ReplyParameters(message_id=answer.message_id)
    )
    assert nested.reply_to_message is not None
    assert nested.reply_to_message.message_id == answer.message_id
    assert nested.reply_to_message.reply_to_message is None  # never nested twice

    with pytest.raises(TelegramBadRequest, match="message to be replied not found"):
        await bot.send_message(9, "x", reply_parameters=ReplyParameters(message_id=99))
    fake.delete_message(9, 1)
    with pytest.raises(TelegramBadRequest, match="message to be replied not found"):
        await bot.send_message(9, "x", reply_parameters=ReplyParameters(message_id=1))
    anyway = await bot.send_message(
        9,
        "anyway",
        reply_parameters=ReplyParameters(message_id=1, allow_sending_without_reply=True),
    )
    assert anyway.reply_to_message is None
    assert fake.message(9, anyway.message_id).reply_to is None

    status, body = await raw_call(
        fake, "sendMessage", data={"chat_id": "9", "text": "legacy", "reply_to_message_id": "2"}
    )
    assert status == 200
    assert body["result"]["reply_to_message"]["message_id"] == 2


# --------------------------------------------------------------------------- forum topics


async def test_message_thread_rules(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_group(-100, "Plain")
    fake.add_group(-200, "Forum", forum=True)
    topic = fake.add_topic(-200, "Ideas")
    assert topic == 1
    with pytest.raises(TelegramBadRequest, match="message thread not found"):
        await bot.send_message(-100, "x", message_thread_id=1)
    with pytest.raises(TelegramBadRequest, match="message thread not found"):
        await bot.send_message(-200, "x", message_thread_id=topic + 40)
    with pytest.raises(TelegramBadRequest, match="message thread not found"):
        await bot.send_chat_action(-200, "typing", message_thread_id=topic + 40)

    general = await bot.send_message(-200, "general")
    assert general.message_thread_id is None
    assert general.is_topic_message is None
    assert general.reply_to_message is None

    in_topic = await bot.send_message(-200, "in topic", message_thread_id=topic)
    assert (in_topic.message_thread_id, in_topic.is_topic_message) == (topic, True)
    assert in_topic.reply_to_message is not None
    assert in_topic.reply_to_message.forum_topic_created is not None
    assert in_topic.reply_to_message.forum_topic_created.name == "Ideas"
    assert fake.message(-200, in_topic.message_id).reply_to is None


async def test_replies_land_in_the_topic_of_the_replied_message(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_group(-200, "Forum", forum=True)
    topic = fake.add_topic(-200, "Ideas")
    other_topic = fake.add_topic(-200, "Other")
    asked = fake.send_user_message(-200, 77, "user in topic", thread_id=topic)
    assert (asked["message_thread_id"], asked["is_topic_message"]) == (topic, True)
    assert asked["reply_to_message"]["message_id"] == topic  # the topic's creation message
    assert fake.message(-200, asked["message_id"]).reply_to is None

    reply = await bot.send_message(
        -200, "reply", reply_parameters=ReplyParameters(message_id=asked["message_id"])
    )
    assert reply.message_thread_id == topic
    assert reply.reply_to_message is not None
    assert reply.reply_to_message.message_id == asked["message_id"]

    follow = fake.send_user_message(-200, 77, "thanks", reply_to=reply.message_id)
    assert follow["message_thread_id"] == topic
    assert follow["reply_to_message"]["message_id"] == reply.message_id
    stored = fake.message(-200, follow["message_id"])
    assert (stored.reply_to, stored.thread_id) == (reply.message_id, topic)

    with pytest.raises(TelegramBadRequest, match="message to be replied not found"):
        await bot.send_message(
            -200,
            "wrong topic",
            message_thread_id=other_topic,
            reply_parameters=ReplyParameters(message_id=asked["message_id"]),
        )


# --------------------------------------------------------------------------- editing


async def test_edit_rules(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(4)
    fake.send_user_message(4, 4, "hi")  # id 1
    draft = await bot.send_message(4, "draft")  # id 2
    with pytest.raises(TelegramBadRequest) as same:
        await bot.edit_message_text("draft", chat_id=4, message_id=draft.message_id)
    assert same.value.message.startswith("Bad Request: message is not modified: ")
    # Same visible text with different entities is a modification.
    edited = await bot.edit_message_text(
        "<b>draft</b>", chat_id=4, message_id=draft.message_id, parse_mode="HTML"
    )
    assert isinstance(edited, Message)
    assert edited.edit_date is not None
    assert edited.entities is not None
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text(
            "<b>draft</b>", chat_id=4, message_id=draft.message_id, parse_mode="HTML"
        )
    stored = fake.message(4, draft.message_id)
    assert (stored.edits, stored.history, stored.html) == (1, ["draft"], "<b>draft</b>")
    with pytest.raises(TelegramBadRequest, match="message can't be edited"):
        await bot.edit_message_text("mine now", chat_id=4, message_id=1)
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text("nope", chat_id=4, message_id=99)
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await bot.edit_message_text("a" * 4097, chat_id=4, message_id=draft.message_id)
    with pytest.raises(TelegramBadRequest, match="can't parse entities"):
        await bot.edit_message_text(
            "<b>x", chat_id=4, message_id=draft.message_id, parse_mode="HTML"
        )
    with pytest.raises(TelegramBadRequest, match="MESSAGE_ID_INVALID"):  # no such inline message
        await bot.edit_message_text("x", inline_message_id="abc")
    fake.delete_message(4, draft.message_id)
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text("gone", chat_id=4, message_id=draft.message_id)


async def test_dropping_the_keyboard_is_a_modification(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(4)
    keyboard = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="Stop", callback_data="stop")]]
    )
    sent = await bot.send_message(4, "streaming", reply_markup=keyboard)
    assert fake.message(4, sent.message_id).raw["reply_markup"] == keyboard.model_dump(
        exclude_none=True
    )
    with pytest.raises(TelegramBadRequest, match="not modified"):
        await bot.edit_message_text(
            "streaming", chat_id=4, message_id=sent.message_id, reply_markup=keyboard
        )
    done = await bot.edit_message_text("streaming", chat_id=4, message_id=sent.message_id)
    assert isinstance(done, Message)
    assert done.reply_markup is None
    with pytest.raises(TelegramBadRequest, match="Text buttons are unallowed"):
        await bot.send_message(
            4,
            "x",
            reply_markup=InlineKeyboardMarkup(inline_keyboard=[[InlineKeyboardButton(text="t")]]),
        )


# --------------------------------------------------------------------------- flood control


async def test_429_then_early_retry_is_a_violation() -> None:
    clock = ManualClock()
    async with running(clock=clock) as (fake, bot):
        fake.add_private_chat(1)
        fake.add_private_chat(2)
        fake.fail_next("sendMessage", retry_after=3, chat_id=1)
        await bot.send_message(2, "other chat is not the target")
        with pytest.raises(TelegramRetryAfter) as first:
            await bot.send_message(1, "too fast")
        assert first.value.retry_after == 3
        assert "Too Many Requests: retry after 3" in first.value.message
        assert fake.calls_to("sendMessage")[-1].description == "Too Many Requests: retry after 3"
        assert fake.violations == []
        await bot.send_message(2, "other chats are unaffected")

        clock.now += 1.2
        with pytest.raises(TelegramRetryAfter) as early:
            await bot.send_chat_action(1, "typing")  # any send/edit/action to that chat
        assert early.value.retry_after == 2
        assert len(fake.violations) == 1
        assert "chat 1" in fake.violations[0]

        clock.now += 1.9
        assert (await bot.send_message(1, "patient")).text == "patient"
        assert [call.status for call in fake.calls_to("sendMessage")] == [200, 429, 200, 200]


async def test_edit_flood_limit() -> None:
    clock = ManualClock()
    async with running(clock=clock, flood_edits_per_second=2) as (fake, bot):
        fake.add_private_chat(1)
        sent = await bot.send_message(1, "v0")
        await bot.edit_message_text("v1", chat_id=1, message_id=sent.message_id)
        clock.now += 0.1
        await bot.edit_message_text("v2", chat_id=1, message_id=sent.message_id)
        clock.now += 0.1
        with pytest.raises(TelegramRetryAfter) as flood:
            await bot.edit_message_text("v3", chat_id=1, message_id=sent.message_id)
        assert flood.value.retry_after == 1
        assert len(fake.violations) == 1
        clock.now += 1.05
        await bot.edit_message_text("v3", chat_id=1, message_id=sent.message_id)
        assert fake.message(1, sent.message_id).text == "v3"
        assert len(fake.violations) == 1


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, TelegramBadRequest),
        (401, TelegramUnauthorizedError),
        (403, TelegramForbiddenError),
        (404, TelegramNotFound),
        (409, TelegramConflictError),
        (500, TelegramServerError),
    ],
)
async def test_injected_status_maps_to_aiogram_exceptions(
    fake: FakeTelegram, bot: Bot, status: int, exception: type[TelegramAPIError]
) -> None:
    fake.fail_next("getMe", status=status, count=2)
    for _ in range(2):
        with pytest.raises(exception):
            await bot.get_me()
    assert (await bot.get_me()).id == fake.bot_id


async def test_injected_429_without_chat_blocks_the_method() -> None:
    clock = ManualClock()
    async with running(clock=clock) as (fake, bot):
        fake.fail_next("getUpdates", retry_after=5, description="Too Many Requests: retry after 5")
        with pytest.raises(TelegramRetryAfter):
            await bot.get_updates()
        with pytest.raises(TelegramRetryAfter) as again:
            await bot.get_updates()
        assert again.value.retry_after == 5
        assert len(fake.violations) == 1
        clock.now += 5
        assert await bot.get_updates() == []


async def test_send_flood_limit_per_chat() -> None:
    clock = ManualClock()
    async with running(clock=clock, flood_sends_per_second=1) as (fake, bot):
        fake.add_private_chat(1)
        fake.add_private_chat(2)
        await bot.send_message(1, "first")
        clock.now += 0.5
        with pytest.raises(TelegramRetryAfter) as flood:
            await bot.send_message(1, "too soon")
        assert flood.value.retry_after == 1
        assert fake.violations == []  # hitting a chat's limit is not the bot's fault...
        await bot.send_message(2, "other chats are unaffected")
        clock.now += 0.5
        with pytest.raises(TelegramRetryAfter):
            await bot.send_message(1, "retry_after ignored")
        assert len(fake.violations) == 1  # ... ignoring retry_after is
        assert "chat 1" in fake.violations[0]
        clock.now += 0.6
        await bot.send_message(1, "patient")
        assert [m.text for m in fake.bot_messages(1)] == ["first", "patient"]
        assert [call.fault for call in fake.calls] == [None] * 5


async def test_fractional_send_rate_spaces_sends_out() -> None:
    clock = ManualClock()
    async with running(clock=clock, flood_sends_per_second=0.5) as (fake, bot):
        fake.add_private_chat(1)
        await bot.send_message(1, "one")
        clock.now += 0.5
        with pytest.raises(TelegramRetryAfter) as flood:
            await bot.send_message(1, "two")
        assert flood.value.retry_after == 2
        clock.now += 2
        await bot.send_message(1, "two")
        assert fake.violations == []


# --------------------------------------------------------------------------- sloppy servers


async def test_missing_field_fails_to_decode_but_the_method_is_applied(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.misbehave_next("getMe", "missing_field", field="is_bot")
    with pytest.raises(ClientDecodeError) as get_me:
        await bot.get_me()
    assert get_me.value.message == "Failed to deserialize object"
    assert isinstance(get_me.value.original, ValidationError)
    assert not isinstance(get_me.value, TelegramAPIError)  # `except TelegramAPIError` misses it
    assert "is_bot" not in get_me.value.data["result"]
    assert (await bot.get_me()).is_bot is True  # one call only

    fake.add_private_chat(1)
    fake.misbehave_next("sendMessage", "missing_field", field="chat")
    with pytest.raises(ClientDecodeError) as send:
        await bot.send_message(1, "sent, but the answer is broken")
    served = send.value.data["result"]
    assert "chat" not in served
    stored = fake.bot_messages(1)
    assert [(m.message_id, m.text) for m in stored] == [
        (served["message_id"], "sent, but the answer is broken")
    ]
    call = fake.calls[-1]
    assert (call.status, call.fault, call.result) == (200, "missing_field", served)

    fake.misbehave_next("sendMessage", "missing_field", field="from.is_bot")
    with pytest.raises(ClientDecodeError, match=r"from\.is_bot"):
        await bot.send_message(1, "nested")
    assert len(fake.bot_messages(1)) == 2


async def test_extra_unknown_fields_still_decode(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    fake.misbehave_next("getMe", "extra_fields", extra={"can_fly": True})
    me = await bot.get_me()
    # has_topic_sidebar is Bot API 10.5's, which aiogram 3.31 does not know either
    assert (me.id, me.model_extra) == (
        fake.bot_id,
        {"can_fly": True, "has_topic_sidebar": False},
    )
    fake.misbehave_next("sendMessage", "extra_fields")
    sent = await bot.send_message(1, "from the future")
    assert sent.text == "from the future"
    assert sent.model_extra is not None
    assert set(sent.model_extra) == {"some_future_field"}
    assert fake.calls[-1].result["some_future_field"] == sent.model_extra["some_future_field"]
    assert fake.calls[-1].fault == "extra_fields"
    assert [m.message_id for m in fake.bot_messages(1)] == [sent.message_id]


async def test_json_without_ok_is_not_applied(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    fake.misbehave_next("setMyCommands", "no_ok")
    with pytest.raises(ClientDecodeError) as error:
        await bot.set_my_commands([BotCommand(command="help", description="Help")])
    assert error.value.message == "Failed to deserialize object"
    assert isinstance(error.value.original, ValidationError)
    assert error.value.data == {"error": "upstream request failed"}
    assert fake.commands == {}
    assert (fake.calls[-1].status, fake.calls[-1].fault) == (500, "no_ok")

    fake.misbehave_next("sendMessage", "no_ok", status=501, body='{"message": "nope"}')
    with pytest.raises(ClientDecodeError) as send:
        await bot.send_message(1, "lost")
    assert send.value.data == {"message": "nope"}
    assert fake.bot_messages(1) == []
    assert fake.calls[-1].status == 501


async def test_html_error_pages(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    fake.misbehave_next("sendMessage", "html")
    with pytest.raises(ClientDecodeError) as proxy:
        await bot.send_message(1, "never reached Telegram")
    assert proxy.value.message == "Failed to decode object"
    assert isinstance(proxy.value.original, json.JSONDecodeError)
    assert "<h1>502 Bad Gateway</h1>" in proxy.value.data
    assert fake.bot_messages(1) == []
    assert (fake.calls[-1].status, fake.calls[-1].fault) == (502, "html")

    fake.misbehave_next("getMe", "html", status=200)  # a captive portal
    with pytest.raises(ClientDecodeError, match="Sign in"):
        await bot.get_me()

    fake.misbehave_next("sendMessage", "html", status=504, applied=True)  # proxy timed out late
    with pytest.raises(ClientDecodeError, match="<h1>504 Gateway Timeout</h1>"):
        await bot.send_message(1, "delivered anyway")
    assert [m.text for m in fake.bot_messages(1)] == ["delivered anyway"]

    fake.misbehave_next("getMe", "html", body="<p>oops</p>")
    url = f"{fake.url}/bot{fake.token}/getMe"
    async with aiohttp.ClientSession() as http, http.post(url) as response:
        assert (response.status, response.content_type) == (502, "text/html")
        assert await response.text() == "<p>oops</p>"


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, TelegramBadRequest),
        (403, TelegramForbiddenError),
        (200, TelegramAPIError),
        (429, TelegramAPIError),  # no ``parameters``, so no TelegramRetryAfter
    ],
)
async def test_ok_false_without_description(
    fake: FakeTelegram, bot: Bot, status: int, exception: type[TelegramAPIError]
) -> None:
    fake.add_private_chat(1)
    fake.misbehave_next("sendMessage", "bare_error", status=status)
    with pytest.raises(exception) as error:
        await bot.send_message(1, "x")
    assert type(error.value) is exception
    message: object = error.value.message  # typed str, but None here
    assert message is None
    assert str(error.value) == "Telegram server says - None"
    assert fake.bot_messages(1) == []
    assert (fake.calls[-1].status, fake.calls[-1].fault) == (status, "bare_error")


async def test_ok_false_without_description_on_5xx_breaks_aiogram(
    fake: FakeTelegram, bot: Bot
) -> None:
    # aiogram evaluates ``"restart" in description`` for 5xx: with no description that is a
    # TypeError, not an aiogram exception at all.
    fake.misbehave_next("getMe", "bare_error", status=500)
    with pytest.raises(TypeError, match="NoneType"):
        await bot.get_me()
    status, body = await raw_call(fake, "getMe")
    assert (status, body["ok"]) == (200, True)


async def test_null_result_where_a_message_was_expected(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    fake.misbehave_next("sendMessage", "null_result")
    assert await bot.send_message(1, "sent, id unknown") is None
    assert [m.text for m in fake.bot_messages(1)] == ["sent, id unknown"]
    assert (fake.calls[-1].status, fake.calls[-1].result) == (200, None)
    assert fake.calls[-1].fault == "null_result"
    fake.misbehave_next("sendMessage", "null_result", applied=False)
    assert await bot.send_message(1, "not sent at all") is None
    assert len(fake.bot_messages(1)) == 1
    fake.misbehave_next("getMe", "null_result")
    assert await bot.get_me() is None


async def test_unsupported_methods() -> None:
    async with running(unsupported_methods={"setmycommands"}) as (fake, bot):
        assert fake.unsupported_methods == {"setMyCommands"}
        command = BotCommand(command="help", description="Help")
        with pytest.raises(TelegramNotFound) as missing:
            await bot.set_my_commands([command])
        assert missing.value.message == "Not Found: method not found"
        status, body = await raw_call(fake, "setMyCommands")
        assert (status, body) == (
            404,
            {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
        )
        fake.unsupported_answer = "no_ok"
        with pytest.raises(ClientDecodeError) as no_ok:
            await bot.set_my_commands([command])
        assert no_ok.value.data == {"error": "method not supported"}
        assert fake.commands == {}
        assert [(c.status, c.fault) for c in fake.calls] == [(404, "unsupported")] * 2 + [
            (500, "unsupported")
        ]
        fake.unsupported_methods.clear()
        assert await bot.set_my_commands([command]) is True
        assert (await bot.get_me()).id == fake.bot_id


async def test_misbehaviour_scope_count_and_order(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    fake.add_private_chat(2)
    fake.misbehave_next("sendMessage", "missing_field", field="date", count=2, chat_id=1)
    await bot.send_message(2, "other chat: a genuine answer")
    fake.block_chat(1)
    with pytest.raises(TelegramForbiddenError):
        await bot.send_message(1, "a genuine error does not use it up")
    fake.unblock_chat(1)
    fake.fail_next("sendMessage", status=400, chat_id=1)
    with pytest.raises(TelegramBadRequest, match="injected failure"):
        await bot.send_message(1, "fail_next first")
    for text in ("broken one", "broken two"):
        with pytest.raises(ClientDecodeError):
            await bot.send_message(1, text)
    assert (await bot.send_message(1, "healed")).text == "healed"
    assert [(c.status, c.fault) for c in fake.calls] == [
        (200, None),
        (403, None),
        (400, "fail_next"),
        (200, "missing_field"),
        (200, "missing_field"),
        (200, None),
    ]
    assert [m.text for m in fake.bot_messages(1)] == ["broken one", "broken two", "healed"]
    with pytest.raises(AssertionError, match=r"\[injected: missing_field\]"):
        await fake.wait_for(lambda: False, timeout=0.05)


async def test_cooldown_still_applies_to_misbehaving_calls() -> None:
    clock = ManualClock()
    async with running(clock=clock) as (fake, bot):
        fake.add_private_chat(1)
        fake.fail_next("sendMessage", retry_after=2, chat_id=1)
        fake.misbehave_next("sendMessage", "html")
        with pytest.raises(TelegramRetryAfter):
            await bot.send_message(1, "limited")
        with pytest.raises(TelegramRetryAfter):
            await bot.send_message(1, "too early: still 429, the html answer waits")
        assert len(fake.violations) == 1
        clock.now += 2
        with pytest.raises(ClientDecodeError):
            await bot.send_message(1, "proxy error")
        assert fake.bot_messages(1) == []


# --------------------------------------------------------------------------- chats


async def test_blocked_unknown_and_unstarted_chats(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(8)
    fake.block_chat(8)
    with pytest.raises(TelegramForbiddenError, match="bot was blocked by the user"):
        await bot.send_message(8, "hello?")
    with pytest.raises(TelegramForbiddenError):
        await bot.send_chat_action(8, "typing")
    fake.add_group(-100, "Gone")
    fake.block_chat(-100)
    with pytest.raises(TelegramForbiddenError, match="kicked from the supergroup chat"):
        await bot.send_message(-100, "hello?")
    fake.add_user(9, "Never started")
    with pytest.raises(TelegramForbiddenError, match="can't initiate conversation"):
        await bot.send_message(9, "hello?")
    with pytest.raises(TelegramBadRequest, match="chat not found"):
        await bot.send_message(12345, "hello?")
    with pytest.raises(TelegramBadRequest, match="chat not found"):
        await bot.get_chat(12345)
    fake.add_group(-200, "Forum", forum=True)
    forum = await bot.get_chat(-200)
    assert (forum.type, forum.is_forum, forum.title) == ("supergroup", True, "Forum")


async def test_chat_actions_and_deletes(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    assert await bot.send_chat_action(1, "typing")
    with pytest.raises(TelegramBadRequest, match="wrong parameter action"):
        await bot.send_chat_action(1, "dancing")
    fake.send_user_message(1, 1, "mine")  # id 1
    sent = await bot.send_message(1, "bot's")
    assert await bot.delete_message(1, sent.message_id)
    assert await bot.delete_message(1, 1)  # private chats: the bot may delete the user's too
    assert [m.deleted for m in fake.messages(1)] == [True, True]
    with pytest.raises(TelegramBadRequest, match="message to delete not found"):
        await bot.delete_message(1, sent.message_id)
    fake.add_group(-100, "G")
    fake.send_user_message(-100, 5, "not yours")
    with pytest.raises(TelegramBadRequest, match="message can't be deleted"):
        await bot.delete_message(-100, 1)


def _png(width: int, height: int) -> bytes:
    """A valid grey PNG of that size (signature, IHDR, one IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


async def test_send_photo_rules(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    question = fake.send_user_message(1, 1, "chart please")["message_id"]
    png = _png(400, 300)
    sent = await bot.send_photo(
        1,
        BufferedInputFile(png, "chart.png"),
        caption="<b>Tokens</b> per day",
        parse_mode="HTML",
        reply_parameters=ReplyParameters(message_id=question),
    )
    assert sent.photo is not None
    assert [(p.width, p.height) for p in sent.photo] == [(90, 68), (320, 240), (400, 300)]
    assert sent.caption == "Tokens per day"
    assert sent.caption_entities is not None and sent.caption_entities[0].type == "bold"
    stored = fake.message(1, sent.message_id)
    assert stored.photo == png
    assert stored.reply_to == question
    # a file_id the server issued is accepted again, without an upload
    again = await bot.send_photo(1, sent.photo[-1].file_id)
    assert fake.message(1, again.message_id).photo == png
    with pytest.raises(TelegramBadRequest, match="wrong file identifier"):
        await bot.send_photo(1, "no-such-file-id")
    with pytest.raises(TelegramBadRequest, match="IMAGE_PROCESS_FAILED"):
        await bot.send_photo(1, BufferedInputFile(b"GIF89a not a png", "x.png"))
    with pytest.raises(TelegramBadRequest, match="PHOTO_INVALID_DIMENSIONS"):
        await bot.send_photo(1, BufferedInputFile(_png(2100, 100), "wide.png"))
    with pytest.raises(TelegramBadRequest, match="message caption is too long"):
        await bot.send_photo(1, BufferedInputFile(png, "x.png"), caption="x" * 1025)
    status, body = await raw_call(fake, "sendPhoto", data={"chat_id": "1"})
    assert (status, body["description"]) == (400, "Bad Request: there is no photo in the request")
    form = aiohttp.FormData()
    form.add_field("chat_id", "1")
    form.add_field("photo", png, filename="direct.png")  # uploaded under its own name
    status, body = await raw_call(fake, "sendPhoto", data=form)
    assert status == 200 and body["result"]["photo"][-1]["width"] == 400


async def test_bot_commands(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.set_my_commands([BotCommand(command="start", description="Start over")])
    assert [c.command for c in await bot.get_my_commands()] == ["start"]
    for command, description in (
        ("Start", "caps"),
        ("a" * 33, "long"),
        ("ok", ""),
        ("ok", "x" * 257),
    ):
        with pytest.raises(TelegramBadRequest, match="BOT_COMMAND_INVALID"):
            await bot.set_my_commands([BotCommand(command=command, description=description)])
    assert await bot.delete_my_commands()
    assert await bot.get_my_commands() == []
    assert await bot.close()
    assert await bot.log_out()


# --------------------------------------------------------------------------- inbound content


async def test_inbound_messages_parse_in_aiogram(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_group(-300, "Basic", supergroup=False)
    fake.send_user_message(-300, 11, "/ask@replychain_bot what does @someone think?")
    fake.send_user_message(-300, 11, photo=True, caption="/cap look")
    fake.send_user_message(-300, 11, sticker=True)
    fake.send_user_message(-300, 11, voice=True)
    fake.send_user_message(-300, 11, document=True, caption="file")
    fake.send_user_message(
        -300, 11, "plain", entities=[{"type": "italic", "offset": 0, "length": 5}]
    )
    updates = await bot.get_updates()
    messages = [update.message for update in updates]
    assert all(message is not None for message in messages)
    text, photo, sticker, voice, document, explicit = (m for m in messages if m is not None)
    assert text.chat.type == "group"
    assert text.from_user is not None
    assert (text.from_user.id, text.from_user.is_bot) == (11, False)
    assert text.entities is not None
    assert [(e.type, e.offset, e.length) for e in text.entities] == [
        ("bot_command", 0, 19),
        ("mention", 30, 8),
    ]
    assert photo.photo is not None
    assert photo.photo[-1].width == 1280
    assert photo.caption == "/cap look"
    assert photo.caption_entities is not None
    assert photo.caption_entities[0].type == "bot_command"
    assert sticker.sticker is not None
    assert sticker.sticker.is_animated is False
    assert voice.voice is not None
    assert voice.voice.duration > 0
    assert document.document is not None
    assert document.document.file_name == "document.pdf"
    assert explicit.entities is not None
    assert [e.type for e in explicit.entities] == ["italic"]
    assert fake.message(-300, 2).text is None
    assert fake.message(-300, 2).caption == "/cap look"


def test_invalid_injections_are_refused() -> None:
    fake = FakeTelegram()
    fake.add_private_chat(1)
    fake.add_group(-1, "G")
    with pytest.raises(ValueError, match="private chat"):
        fake.send_user_message(1, 2, "impostor")
    with pytest.raises(ValueError, match="no topic"):
        fake.send_user_message(-1, 2, "x", thread_id=1)
    with pytest.raises(ValueError, match="not a forum"):
        fake.add_topic(-1, "T")
    with pytest.raises(ValueError, match="reply to"):
        fake.send_user_message(-1, 2, "x", reply_to=5)
    with pytest.raises(ValueError, match="caption"):
        fake.send_user_message(-1, 2, photo=True, caption=None, text="both")
    with pytest.raises(KeyError, match="unknown chat"):
        fake.send_user_message(3, 3, "x")
    with pytest.raises(ValueError, match="unknown Bot API method"):
        fake.fail_next("sendCarrierPigeon")
    with pytest.raises(ValueError, match="unknown Bot API method"):
        FakeTelegram(unsupported_methods={"sendCarrierPigeon"})


@pytest.mark.parametrize(
    ("method", "kind", "options", "reason"),
    [
        ("sendCarrierPigeon", "html", {}, "unknown Bot API method"),
        ("getMe", "teapot", {}, "unknown misbehaviour"),
        ("getMe", "html", {"count": 0}, "count"),
        ("getMe", "missing_field", {}, "field="),
        ("getMe", "html", {"field": "id"}, "field="),
        ("setMyCommands", "missing_field", {"field": "x"}, "does not answer with an object"),
        ("getMe", "extra_fields", {"applied": False}, "always applied"),
        ("getMe", "null_result", {"status": 500}, "status="),
        ("getMe", "bare_error", {"body": "{}"}, "body="),
        ("getMe", "no_ok", {"extra": {}}, "extra="),
    ],
)
def test_invalid_misbehaviours_are_refused(
    method: str, kind: Any, options: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        FakeTelegram().misbehave_next(method, kind, **options)


# --------------------------------------------------------------------------- waiting


async def test_wait_for_wakes_on_change_and_explains_timeouts(fake: FakeTelegram) -> None:
    fake.add_private_chat(1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    loop.call_soon(fake.send_user_message, 1, 1, "soon")
    await fake.wait_for(lambda: fake.pending_updates == 1, timeout=5)
    assert loop.time() - started < 1.0
    with pytest.raises(AssertionError) as error:
        await fake.wait_for(lambda: fake.pending_updates == 7, timeout=0.1)
    report = str(error.value)
    assert "condition not met within 0.1s" in report
    assert "pending_updates == 7" in report
    assert "'soon'" in report
    with pytest.raises(AssertionError, match="IndexError"):
        await fake.wait_for(lambda: fake.bot_messages(1)[0].text == "x", timeout=0.1)


async def test_re_adding_a_chat_keeps_its_history(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1, "Ann")
    fake.send_user_message(1, 1, "hi")
    fake.add_private_chat(1, "Ann B.", "annb")
    assert [m.text for m in fake.messages(1)] == ["hi"]
    assert (await bot.send_message(1, "hello")).chat.username == "annb"
    fake.add_group(-5, "Old")
    fake.send_user_message(-5, 2, "x")
    fake.add_group(-5, "New", forum=True)
    assert fake.add_topic(-5, "T") == 2
    with pytest.raises(ValueError, match="private chat"):
        fake.add_group(1, "Clash")


async def test_dispatcher_round_trip(fake: FakeTelegram, bot: Bot) -> None:
    async def echo(message: Message) -> None:
        await message.reply(f"echo: {message.text}")

    dispatcher = Dispatcher()
    dispatcher.message.register(echo)
    fake.add_private_chat(21, "Eve")
    fake.send_user_message(21, 21, "hello")
    polling = asyncio.create_task(
        dispatcher.start_polling(
            bot, handle_signals=False, close_bot_session=False, polling_timeout=1
        )
    )
    try:
        await fake.wait_for(lambda: len(fake.bot_messages(21)) == 1)
        await fake.wait_for(lambda: fake.pending_updates == 0)  # confirmed by the next poll
    finally:
        await dispatcher.stop_polling()
        await asyncio.wait_for(polling, 5)
    reply = fake.bot_messages(21)[0]
    assert (reply.text, reply.reply_to) == ("echo: hello", 1)
    assert fake.violations == []


# --------------------------------------------------------------------------- steering methods


async def test_send_document_takes_an_upload_and_refuses_what_telegram_refuses(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(1)
    sent = await bot.send_document(
        1, BufferedInputFile(b"# hi\n", filename="a.md"), caption="the file", parse_mode=None
    )
    assert sent.document is not None and sent.document.file_name == "a.md"
    assert fake.message(1, sent.message_id).document == ("a.md", b"# hi\n")
    assert sent.caption == "the file"
    with pytest.raises(TelegramBadRequest, match="file must be non-empty"):
        await bot.send_document(1, BufferedInputFile(b"", filename="e.md"))
    with pytest.raises(TelegramBadRequest, match="wrong file identifier"):
        await bot.send_document(1, "not-a-known-file-id")
    with pytest.raises(TelegramBadRequest, match="caption is too long"):
        await bot.send_document(1, BufferedInputFile(b"x", filename="x"), caption="c" * 1025)


async def test_callback_queries_are_answered_once_and_only_for_held_buttons(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(1)
    markup = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="Yes", callback_data="yes")]]
    )
    sent = await bot.send_message(1, "sure?", reply_markup=markup)
    with pytest.raises(ValueError, match="no button"):
        fake.press_button(1, sent.message_id, 1, "no")
    query = fake.press_button(1, sent.message_id, 1, "yes")
    [update] = await bot.get_updates(allowed_updates=["callback_query"])
    assert update.callback_query is not None and update.callback_query.data == "yes"
    assert await bot.answer_callback_query(query, text="done")
    assert fake.query_answers[query] == "done"
    with pytest.raises(TelegramBadRequest, match="query is too old"):
        await bot.answer_callback_query(query)


async def test_private_chat_topics_and_edit_forum_topic(fake: FakeTelegram, bot: Bot) -> None:
    fake.add_private_chat(1)
    with pytest.raises(ValueError, match="topics"):
        fake.add_topic(1, "T")
    fake.private_topics(1)
    assert (await bot.get_me()).has_topics_enabled is True
    topic = fake.add_topic(1, "New chat", implicit=True)
    created = fake.message(1, topic).raw["forum_topic_created"]
    assert created["is_name_implicit"] is True
    sent = await bot.send_message(1, "in the topic", message_thread_id=topic)
    assert sent.message_thread_id == topic and sent.is_topic_message
    assert await bot.edit_forum_topic(1, topic, name="Pancakes")
    with pytest.raises(TelegramBadRequest, match="TOPIC_TITLE_TOO_LONG"):
        await bot.edit_forum_topic(1, topic, name="x" * 129)
    with pytest.raises(TelegramBadRequest, match="thread not found"):
        await bot.edit_forum_topic(1, topic + 100, name="Other")
    with pytest.raises(TelegramBadRequest, match="thread not found"):
        await bot.send_message(1, "nowhere", message_thread_id=topic + 100)


async def test_the_bot_opens_private_topics_and_sets_the_sidebar(
    fake: FakeTelegram, bot: Bot
) -> None:
    """Bot API 9.4's createForumTopic in a private chat; 10.5's setMySettings and getMe's
    has_topic_sidebar (shown only while topics are on)."""
    fake.add_private_chat(1)
    with pytest.raises(TelegramBadRequest, match="not a forum"):
        await bot.create_forum_topic(1, "Pancakes")
    fake.private_topics(1)
    topic = await bot.create_forum_topic(1, "Pancakes")
    assert topic.name == "Pancakes"
    creation = fake.message(1, topic.message_thread_id)
    assert creation.is_bot and creation.raw["forum_topic_created"]["name"] == "Pancakes"
    assert fake.pending_updates == 0  # the bot hears nothing of its own topic
    sent = await bot.send_message(1, "in it", message_thread_id=topic.message_thread_id)
    assert sent.message_thread_id == topic.message_thread_id
    with pytest.raises(TelegramBadRequest, match="TOPIC_TITLE_EMPTY"):
        await bot.create_forum_topic(1, " ")
    fake.private_topics(1, on=False)  # the user turned topics off
    with pytest.raises(TelegramBadRequest, match="not a forum"):
        await bot.create_forum_topic(1, "Waffles")

    me = await bot.get_me()
    assert me.model_extra == {"has_topic_sidebar": False}
    assert await bot(SetMySettings(has_topic_sidebar=True))
    assert (await bot.get_me()).model_extra == {"has_topic_sidebar": True}
    fake.topics_enabled = False  # the sidebar shows only while topics are on
    assert (await bot.get_me()).model_extra == {"has_topic_sidebar": False}


# --------------------------------------------------------------------------- guest mode


def _article(text: str, **extra: Any) -> InlineQueryResultArticle:
    content = InputTextMessageContent(message_text=text, parse_mode="HTML")
    return InlineQueryResultArticle(id="1", title="Answer", input_message_content=content, **extra)


async def test_a_guest_query_is_answered_once_into_its_chat_as_the_bots_message(
    fake: FakeTelegram, bot: Bot
) -> None:
    assert (await bot.get_me()).supports_guest_queries is True
    fake.add_guest_chat(5, "group")
    with pytest.raises(ValueError, match="mentions the bot"):
        fake.summon(5, 42, "no mention here")
    update = fake.summon(5, 42, "@replychain_bot what now?")
    [pushed] = await bot.get_updates()
    assert pushed.guest_message is not None and pushed.guest_message.guest_query_id
    query = update["guest_query_id"]
    button = InlineKeyboardButton(text="b", callback_data="x:1")
    markup = InlineKeyboardMarkup(inline_keyboard=[[button]])
    sent = await bot.answer_guest_query(
        guest_query_id=query, result=_article("<b>now</b> this", reply_markup=markup)
    )
    [asked, answer] = fake.guest_messages(5)
    assert (answer.text, answer.is_bot, answer.reply_to) == ("now this", True, asked.message_id)
    assert answer.entities == [{"type": "bold", "offset": 0, "length": 3}]
    assert answer.raw["guest_bot_caller_user"]["id"] == 42
    assert answer.raw["reply_markup"] == markup.model_dump(exclude_none=True)
    with pytest.raises(TelegramBadRequest, match="query is too old"):
        await bot.answer_guest_query(guest_query_id=query, result=_article("again"))
    # the bot is not in the chat: nothing reaches it by its id
    with pytest.raises(TelegramBadRequest, match="chat not found"):
        await bot.send_message(chat_id=5, text="hello")
    # edited by inline_message_id: True, not a message
    edited = await bot.edit_message_text(inline_message_id=sent.inline_message_id, text="later")
    assert edited is True and fake.guest_answers(5)[0].text == "later"
    with pytest.raises(TelegramBadRequest, match="MESSAGE_ID_INVALID"):
        await bot.edit_message_text(inline_message_id="nope", text="x")


async def test_a_reply_to_a_guest_answer_carries_it_and_a_query_expires(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_guest_chat(5)
    first = fake.summon(5, 42, "@replychain_bot hi")["guest_query_id"]
    button = InlineKeyboardButton(text="b", callback_data="guest:1")
    result = _article("hello", reply_markup=InlineKeyboardMarkup(inline_keyboard=[[button]]))
    await bot.answer_guest_query(guest_query_id=first, result=result)
    [answer] = fake.guest_answers(5)
    reply = fake.summon(5, 42, "@replychain_bot more", reply_to=answer.message_id)
    replied = reply["reply_to_message"]
    assert replied["text"] == "hello" and replied["from"]["id"] == fake.bot_id
    assert replied["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "guest:1"
    assert "reply_to_message" not in replied
    fake.expire_guest_query(reply["guest_query_id"])
    with pytest.raises(TelegramBadRequest, match="query is too old"):
        await bot.answer_guest_query(guest_query_id=reply["guest_query_id"], result=result)
    with pytest.raises(TelegramBadRequest, match="RESULT_TITLE_EMPTY"):
        await bot.answer_guest_query(
            guest_query_id=fake.summon(5, 42, "@replychain_bot x")["guest_query_id"],
            result=_article("t").model_copy(update={"title": ""}),
        )


async def test_ephemeral_messages_reach_their_receiver_only_and_an_older_server_ignores_them(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_group(-9, "Team")
    fake.add_user(42)
    personal = EphemeralMessageParameters(receiver_user_id=42)
    sent = await bot.send_message(chat_id=-9, text="for you", ephemeral_message_parameters=personal)
    assert (sent.message_id, sent.ephemeral_message_id) == (0, 1)
    assert sent.receiver_user is not None and sent.receiver_user.id == 42
    assert not fake.messages(-9) and [m.text for m in fake.visible_to(-9, 42)] == ["for you"]
    assert fake.visible_to(-9, 7) == []
    fake.add_private_chat(42)
    with pytest.raises(TelegramBadRequest, match="only to groups"):
        await bot.send_message(chat_id=42, text="x", ephemeral_message_parameters=personal)
    # 10.2's top-level form: ignored (to everyone) and a violation, as it is deprecated
    old = await bot.send_message(chat_id=-9, text="old form", receiver_user_id=42)
    assert old.ephemeral_message_id is None and old.message_id > 0
    assert fake.violations == ["sendMessage with the deprecated parameter receiver_user_id"]
    fake.ephemeral = False
    plain = await bot.send_message(
        chat_id=-9, text="for all", ephemeral_message_parameters=personal
    )
    assert plain.ephemeral_message_id is None and plain.message_id > 0
    assert [m.text for m in fake.messages(-9)] == ["old form", "for all"]


# --------------------------------------------------------------------------- rich messages


RICH_REFUSALS = [
    ({}, "RICH_MESSAGE_EMPTY"),
    ({"html": "<p>a</p>", "markdown": "a"}, "only one of html, markdown, blocks"),
    ({"html": "   "}, "RICH_MESSAGE_EMPTY"),
    ({"html": "<p>a</b>"}, "unmatched end tag"),
    ({"html": "<p>a"}, "unclosed tag"),
    ({"html": "<span>a</span>"}, 'unsupported tag "span"'),
    ({"html": "<p class=x>a</p>"}, 'attribute "class" of "p"'),
    ({"html": "<p>a &bogus; b</p>"}, "unsupported HTML entity"),
    ({"html": "<p>a & b</p>"}, 'a bare "&"'),
    ({"html": "<p>1 < 2</p>"}, 'a bare "<"'),
    ({"html": "<b><p>block in inline</p></b>"}, 'tag "p" inside <message>'),
    ({"html": "<ul>text</ul>"}, "<ul> holds <li> only"),
    ({"html": "<table><td>x</td></table>"}, "<table> holds <caption> and <tr> only"),
    ({"html": '<code class="language-py">x</code>'}, "<pre><code> only"),
    ({"html": "<tg-math-block></tg-math-block>"}, "empty <tg-math-block>"),
    ({"html": '<p><a href="javascript:x">a</a></p>'}, "RICH_MESSAGE_URL_INVALID"),
    ({"html": "<tg-thinking>hm</tg-thinking>"}, "RICH_MESSAGE_THINKING_NOT_ALLOWED"),
    ({"html": "<p>" + "x" * 32769 + "</p>"}, "RICH_MESSAGE_TOO_LONG"),
    ({"html": "<p>" + "😀" * 16385 + "</p>"}, "RICH_MESSAGE_TOO_LONG"),  # UTF-16 units
    ({"html": "<p>x</p>" * 501}, "RICH_MESSAGE_TOO_MANY_BLOCKS"),
    ({"html": "<ul><li>" * 9 + "x" + "</li></ul>" * 9}, "RICH_MESSAGE_TOO_DEEP"),
    ({"html": "<table><tr>" + "<td>x</td>" * 21 + "</tr></table>"}, "RICH_MESSAGE_TABLE_TOO_WIDE"),
]


@pytest.mark.parametrize(("rich", "refusal"), RICH_REFUSALS)
async def test_rich_messages_are_refused_like_telegram(
    fake: FakeTelegram, rich: dict[str, Any], refusal: str
) -> None:
    fake.add_private_chat(1, "Ann")
    status, body = await raw_call(
        fake, "sendRichMessage", json={"chat_id": 1, "rich_message": rich}
    )
    assert status == 400 and body["ok"] is False and body["error_code"] == 400
    assert body["description"].startswith("Bad Request: ") and refusal in body["description"]
    assert not fake.bot_messages(1)


async def test_rich_messages_at_their_limits_are_taken_and_decode(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(1, "Ann")
    sent = await bot.send_rich_message(
        chat_id=1,
        rich_message=InputRichMessage(
            html=(
                "<h2>Title</h2><p>a <b>b</b> &amp; <tg-math>x^2</tg-math><br>c</p>"
                '<table><tr><th align="left">k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr>'
                '</table><ul><li><input type="checkbox" checked>done</li></ul>'
                '<ol start="3"><li>three</li></ol><tg-math-block>E=mc^2</tg-math-block>'
                '<pre><code class="language-py">x = 1</code></pre><blockquote><p>q</p>'
                "</blockquote><blockquote expandable>long<br>thoughts</blockquote><hr/>"
            )
        ),
    )
    assert sent.rich_message is not None
    types = [block.type for block in sent.rich_message.blocks]
    assert types == [
        "heading", "paragraph", "table", "list", "list", "mathematical_expression", "pre",
        "blockquote", "expandable_blockquote", "divider",
    ]  # fmt: skip
    stored = fake.message(1, sent.message_id)
    assert stored.text is not None and stored.text.startswith("Title\n\na b & x^2\nc")
    for html in ("<p>" + "x" * 32768 + "</p>", "<p>x</p>" * 500, "<p>" + "😀" * 16384 + "</p>"):
        await bot.send_rich_message(chat_id=1, rich_message=InputRichMessage(html=html))
    # markdown and blocks are taken too (exactly one of the three)
    await bot.send_rich_message(chat_id=1, rich_message=InputRichMessage(markdown="**md**"))
    assert fake.bot_messages(1)[-1].text == "md"


async def test_rich_drafts_edits_and_a_server_without_rich_messages(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.add_private_chat(1, "Ann")
    fake.add_group(-5, "Team")
    thinking = InputRichMessage(html="<p>[depth:2]</p><tg-thinking>hm</tg-thinking>")
    assert await bot.send_rich_message_draft(
        chat_id=1, draft_id=7, rich_message=thinking, can_stop=True, keep_on_stop=True
    )
    shown = fake.current_draft(1)
    assert shown is not None and shown.blocks_of("thinking") and shown.can_stop
    with pytest.raises(TelegramBadRequest, match="TEXTDRAFT_PEER_INVALID"):
        await bot.send_rich_message_draft(chat_id=-5, draft_id=7, rich_message=thinking)
    sent = await bot.send_message(1, "plain")
    assert fake.current_draft(1) is None  # a message replaces the draft
    rich = InputRichMessage(html="<p><b>now</b> rich</p>")
    await bot.edit_message_text(chat_id=1, message_id=sent.message_id, rich_message=rich)
    edited = fake.message(1, sent.message_id)
    assert edited.rich_message is not None and edited.text == "now rich" and edited.edits == 1
    assert "text" not in edited.raw
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text(chat_id=1, message_id=sent.message_id, rich_message=rich)
    await bot.edit_message_text("plain again", chat_id=1, message_id=sent.message_id)
    assert fake.message(1, sent.message_id).rich_message is None
    fake.unsupported_methods |= {"sendRichMessage", "sendRichMessageDraft"}
    with pytest.raises(TelegramNotFound, match="method not found"):
        await bot.send_rich_message(chat_id=1, rich_message=rich)
