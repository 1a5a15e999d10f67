"""The command menu in every language the bot speaks, set only where Telegram's differs.

Telegram keeps one menu per ``language_code`` and shows a user the one of their
language, else the default (no ``language_code``). At start-up the bot reads each
(``getMyCommands``) and sets (``setMyCommands``) only those that differ, so a
restart with nothing changed sets nothing. With ``BOT_LANGUAGE`` the default menu is
in that language and the per-language ones are deleted: everyone sees the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from aiogram import Bot
from aiogram.types import BotCommand

from .. import i18n
from .routers import command_menu

log = logging.getLogger("replychain.telegram")
T = TypeVar("T")


def wanted() -> dict[str | None, list[BotCommand]]:
    """Each menu the bot should have, by ``language_code`` (None: the default); an
    empty list: none for that language."""
    forced = i18n.forced()
    with i18n.I18N.use_locale(forced or i18n.DEFAULT):
        menus: dict[str | None, list[BotCommand]] = {None: command_menu()}
    for locale in i18n.languages():
        # Telegram's language_code is two letters: a regional catalogue (pt_BR) is
        # reached only through its language's menu
        if locale == i18n.DEFAULT or len(locale) != 2:
            continue
        with i18n.I18N.passing(locale):
            menus[locale] = [] if forced else command_menu()
    return menus


def _same(current: list[BotCommand], menu: list[BotCommand]) -> bool:
    return [(c.command, c.description) for c in current] == [
        (c.command, c.description) for c in menu
    ]


async def _every(calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of ``calls`` made at once; the first failure is raised only once all
    have ended, so none is left running (on a session about to close)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], results)


async def sync_menu(bot: Bot) -> int:
    """Bring Telegram's menus in line with :func:`wanted`; the number changed."""
    menus = wanted()
    codes = list(menus)
    current = await _every([bot.get_my_commands(language_code=c) for c in codes])
    changes: list[Coroutine[Any, Any, bool]] = []
    for code, now in zip(codes, current, strict=True):
        menu = menus[code]
        if _same(now, menu):
            continue
        if menu:
            changes.append(bot.set_my_commands(menu, language_code=code))
        else:
            changes.append(bot.delete_my_commands(language_code=code))
    await _every(changes)
    if changes:
        log.info("command menu set for %d language(s)", len(changes))
    return len(changes)
