"""The topic sidebar (Bot API 10.5): a bot's topics in private chats, listed beside them.

With TOPIC_THREADS every conversation of a private chat with topics has a topic of its
own (bot/turn/topics.py); the sidebar lists them, so a person sees their conversations
side by side. At start-up, when ``getMe`` says the bot has topics in private chats and
its sidebar is not on, the bot turns it on with ``setMySettings``; a restart that finds
it on asks nothing. A server without the method is one line of the session's, and
nothing else changes.
"""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.methods import TelegramMethod

log = logging.getLogger("replychain.telegram")


class SetMySettings(TelegramMethod[bool]):
    """Change the bot's settings; those not given stay as they are (Bot API 10.5
    ``setMySettings``, which aiogram 3.31 does not have yet). Only the field the bot
    sets is declared."""

    __returning__ = bool
    __api_method__ = "setMySettings"

    has_topic_sidebar: bool | None = None
    """Pass True to list the bot's topics in private chats in a sidebar."""


async def show_topic_sidebar(bot: Bot) -> bool:
    """Turn the topic sidebar on where the bot has topics in private chats and the
    sidebar is off; whether it was asked. ``getMe`` (aiogram keeps start-up's answer)
    tells both: ``has_topics_enabled``, and 10.5's ``has_topic_sidebar``, which aiogram
    3.31 keeps among the fields it does not know."""
    me = await bot.me()
    if not me.has_topics_enabled or (me.model_extra or {}).get("has_topic_sidebar") is True:
        return False
    await bot(SetMySettings(has_topic_sidebar=True))
    log.info("topics in private chats are listed in the sidebar now")
    return True
