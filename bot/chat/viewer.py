"""The thread viewer's Telegram side: the "Open the tree" button and "continue here".

In a private chat the button is a ``web_app`` button opening ``WEBAPP_URL``
with the conversation named in ``tgWebAppStartParam`` (``<chat>_<message>``).
``web_app`` buttons work only in private chats, so in groups it is a link to
the bot's main Mini App (``t.me/<bot>?startapp=<chat>_<message>``: Telegram
signs the start parameter into ``initData``), offered only when the bot has one
(``getMe``'s ``has_main_web_app``; set in @BotFather). The viewer's "continue
here" link opens the private chat with ``/start reply-<message>``: the bot
answers with a note quoting that message, to be replied to (Telegram has no
links to messages of private chats).
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from aiogram import BaseMiddleware, Bot, F, Router
from aiogram.enums import ChatType
from aiogram.filters import CommandObject, CommandStart
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, Message, WebAppInfo

from transcript import StoreUnavailableError, TranscriptStore

from ..i18n import _, current
from ..settings import Settings
from ..telegram.notifier import Notifier
from ..webapp.texts import CONTINUE_HERE, OPEN_TREE, error_text
from .messages import Checked

log = logging.getLogger("replychain.handlers")

#: The ``/start`` payload of the viewer's "continue here" link.
CONTINUE_PREFIX = "reply-"


def start_param(chat_id: int, message_id: int) -> str:
    """The viewer's start parameter for a message of a chat (``-100123_45``)."""
    return f"{chat_id}_{message_id}"


async def open_tree_markup(
    bot: Bot, settings: Settings, message: Message, target: int
) -> InlineKeyboardMarkup | None:
    """The "Open the tree" button for an answer about ``target``, or None (no
    WEBAPP_URL; a group of a bot without a main Mini App)."""
    if settings.webapp_url is None:
        return None
    param = start_param(message.chat.id, target)
    if message.chat.type == ChatType.PRIVATE:
        url = f"{settings.webapp_url}?{urlencode({'tgWebAppStartParam': param})}"
        button = InlineKeyboardButton(text=_(OPEN_TREE), web_app=WebAppInfo(url=url))
    else:
        me = await bot.me()
        if not (me.has_main_web_app and me.username):
            return None
        link = f"https://t.me/{me.username}?{urlencode({'startapp': param})}"
        button = InlineKeyboardButton(text=_(OPEN_TREE), url=link)
    return InlineKeyboardMarkup(inline_keyboard=[[button]])


def continue_router(access: BaseMiddleware) -> Router:
    """``/start reply-<message>`` in a private chat (include it before ``/start``'s
    own handler); ``access`` is the bot's access control."""
    router = Router(name="viewer")
    router.message.middleware(access)
    router.message.register(
        on_continue,
        CommandStart(deep_link=True, magic=F.args.regexp(rf"^{CONTINUE_PREFIX}\d{{1,12}}$")),
        Checked(F.chat.type == ChatType.PRIVATE),
    )
    return router


async def on_continue(
    message: Message, command: CommandObject, *, notifier: Notifier, store: TranscriptStore
) -> None:
    """A note quoting the message to continue from (or why there is none)."""
    target = int((command.args or "").removeprefix(CONTINUE_PREFIX))
    chat = message.chat.id
    try:
        known = await store.resolve(str(chat), target) is not None
    except StoreUnavailableError:
        log.warning("chat %s: /start %s%s not answered: Redis is unreachable", chat,
                    CONTINUE_PREFIX, target)  # fmt: skip
        return
    if known:
        notifier.say(chat, _(CONTINUE_HERE), reply_to=target, thread_id=None)
    else:
        notifier.say(
            chat, error_text("not_found", current()), reply_to=message.message_id, thread_id=None
        )
