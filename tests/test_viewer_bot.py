"""The viewer in the running bot: the "Open the tree" button, the server, "continue here".

End to end: the real bot against the Bot API and OpenAI test servers and real Redis.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from bot.chat.routers import HELP_TEXT
from bot.webapp.texts import CONTINUE_HERE, ERRORS, OPEN_TREE

from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import USER, BotFactory, answers_to, ask
from .viewer_data import sign_init_data

TIMEOUT = 15.0
URL = "https://viewer.example/app/"
GROUP = -1009876543210
VIEWER = {"webapp_url": URL, "webapp_listen": "127.0.0.1:0"}


async def reply_to(tg: FakeTelegram, chat: int, text: str, **kw: Any) -> StoredMessage:
    """Send ``text`` as USER; the bot's one message replying to it."""
    sent = tg.send_user_message(chat, USER, text, **kw)
    await tg.wait_for(lambda: bool(answers_to(tg, chat, sent["message_id"])), TIMEOUT)
    [reply] = answers_to(tg, chat, sent["message_id"])
    return reply


async def test_tree_and_export_answers_open_the_viewer_in_a_private_chat(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot(**VIEWER) as app:
        hello, _ = await ask(tg, app, USER, "hello there")
        answer = answers_to(tg, USER, hello)[-1].message_id
        tree = await reply_to(tg, USER, "/tree", reply_to=answer)
        export = await reply_to(tg, USER, "/export", reply_to=answer)
        for message in (tree, export):
            assert message.reply_markup == {
                "inline_keyboard": [
                    [
                        {
                            "text": OPEN_TREE,
                            "web_app": {"url": f"{URL}?tgWebAppStartParam={USER}_{answer}"},
                        }
                    ]
                ]
            }
        # what the button opens answers on WEBAPP_LISTEN (here a port picked for 0)
        assert app.viewer is not None
        init_data = sign_init_data(tg.token, USER, int(time.time()))
        base = f"http://127.0.0.1:{app.viewer.port}/app/"
        async with aiohttp.ClientSession() as http:
            async with http.get(base) as page:
                assert page.status == 200 and "viewer.js" in await page.text()
            async with http.get(
                base + "api/tree",
                params={"chat": USER, "message": answer},
                headers={"Authorization": f"tma {init_data}"},
            ) as response:
                body = await response.json()
        assert response.status == 200, body
        assert [n["t"] for n in body["nodes"]][1:] == ["hello there", "echo: hello there"]
        assert body["nodes"][body["selected"]]["m"] == answer


async def test_without_webapp_url_nothing_changes(tg: FakeTelegram, start_bot: BotFactory) -> None:
    async with start_bot() as app:
        assert app.viewer is None
        hello, _ = await ask(tg, app, USER, "hello there")
        answer = answers_to(tg, USER, hello)[-1].message_id
        tree = await reply_to(tg, USER, "/tree", reply_to=answer)
        assert tree.reply_markup is None and (tree.text or "").startswith("conversation ")
        start = await reply_to(tg, USER, f"/start reply-{answer}")
        assert start.text == HELP_TEXT


async def group_tree(tg: FakeTelegram, app: Any) -> tuple[int, StoredMessage]:
    tg.add_group(GROUP, "Team")
    asked, _ = await ask(tg, app, GROUP, f"@{tg.username} hello there")
    answer = answers_to(tg, GROUP, asked)[-1].message_id
    return answer, await reply_to(tg, GROUP, "/tree", reply_to=answer)


async def test_groups_get_the_main_mini_app_link(tg: FakeTelegram, start_bot: BotFactory) -> None:
    """web_app buttons are for private chats only (the test server refuses them
    elsewhere, as Telegram does): a group gets a t.me link to the main Mini App."""
    tg.main_web_app = True
    async with start_bot(**VIEWER) as app:
        answer, tree = await group_tree(tg, app)
        link = f"https://t.me/{tg.username}?startapp={GROUP}_{answer}"
        assert tree.reply_markup == {"inline_keyboard": [[{"text": OPEN_TREE, "url": link}]]}


async def test_groups_of_a_bot_without_a_main_mini_app_get_no_button(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot(**VIEWER) as app:
        _, tree = await group_tree(tg, app)
        assert tree.reply_markup is None and (tree.text or "").startswith("conversation ")


async def test_continue_here_quotes_the_message_to_reply_to(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot(**VIEWER) as app:
        hello, _ = await ask(tg, app, USER, "hello there")
        answer = answers_to(tg, USER, hello)[-1].message_id
        sent = tg.send_user_message(USER, USER, f"/start reply-{answer}")["message_id"]

        def note() -> list[StoredMessage]:
            return [m for m in tg.bot_messages(USER) if m.text == CONTINUE_HERE]

        await tg.wait_for(lambda: bool(note()), TIMEOUT)
        [quoting] = note()
        assert quoting.reply_to == answer and quoting.message_id > sent
        unknown = await reply_to(tg, USER, "/start reply-99999")
        assert unknown.text == ERRORS["not_found"]
        plain = await reply_to(tg, USER, "/start")
        assert plain.text == HELP_TEXT
