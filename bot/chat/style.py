"""/format: how a user's answers look, rich messages or plain ones, in every chat.

Rich messages (Bot API 10.1) show tables and formulas, but some Telegram apps (Web,
the Watch) show them as "message not supported". ``/format`` answers with two buttons
(rich, plain); ``/format rich`` and ``/format plain`` choose at once. The choice is the
user's own (:mod:`bot.data.userprefs`): it applies in every chat, through every process,
from their next answer on, and overrides RICH_MESSAGES=auto (and always); with
RICH_MESSAGES=off every answer is plain whatever is chosen. Answered locally, never sent
to the model; a reply to the answer starts a new conversation (bot/chat/preference.py,
as /voice).
"""

from __future__ import annotations

from aiogram import Router
from redis.asyncio import Redis

from ..data.userprefs import FORMATS, UserPrefs, set_format
from ..i18n import N_
from ..settings import Settings
from .preference import Preference

#: The menu's entry for the command (a message id).
COMMANDS = (("format", N_("How answers look: rich (tables, math) or plain")),)
MENU = N_(
    "How should my answers look (now: {current})?\n"
    "Rich messages show tables and math; some Telegram apps (Web, Apple Watch) cannot "
    "show them. Plain messages work in every Telegram app."
)
RICH_BUTTON = N_("Rich: tables and math")
PLAIN_BUTTON = N_("Plain: every Telegram app")
CURRENT = {
    "rich": N_("rich"),
    "plain": N_("plain"),
    None: N_("rich where it adds something"),
}
CHOSEN = {
    "rich": N_(
        "Your answers are rich messages where they add something: tables, math, long answers."
    ),
    "plain": N_(
        "Your answers are plain messages, shown by every Telegram app (tables as aligned text)."
    ),
}
USAGE = N_("Send /format rich or /format plain, or /format alone to choose with buttons.")
ALL_PLAIN = N_("This bot sends plain messages only: every Telegram app shows them.")


async def _save(redis: Redis, user: int, choice: str) -> None:
    await set_format(redis, user, next(f for f in FORMATS if f == choice))


def _off(settings: Settings) -> str | None:
    return ALL_PLAIN if settings.rich_messages == "off" else None


def _read(prefs: UserPrefs) -> str | None:
    return prefs.format


FORMAT = Preference(
    "format", "fmt:", {"rich": RICH_BUTTON, "plain": PLAIN_BUTTON}, MENU, CURRENT, CHOSEN,
    USAGE, read=_read, save=_save, off=_off,
)  # fmt: skip


def style_router() -> Router:
    return FORMAT.router()
