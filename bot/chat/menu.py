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
from ..telegram.errors import UnknownMethodError
from .routers import command_menu

log = logging.getLogger("replychain.telegram")
T = TypeVar("T")


def wanted(*, payments: bool = False) -> dict[str | None, list[BotCommand]]:
    """Each menu the bot should have, by ``language_code`` (None: the default); an
    empty list: none for that language. ``payments``: /buy and /balance in them."""
    forced = i18n.forced()
    with i18n.I18N.use_locale(forced or i18n.DEFAULT):
        menus: dict[str | None, list[BotCommand]] = {None: command_menu(payments=payments)}
    for locale in i18n.languages():
        # Telegram's language_code is two letters: a regional catalogue (pt_BR) is
        # reached only through its language's menu
        if locale == i18n.DEFAULT or len(locale) != 2:
            continue
        with i18n.I18N.passing(locale):
            menus[locale] = [] if forced else command_menu(payments=payments)
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


async def sync_menu(bot: Bot, *, payments: bool = False) -> int:
    """Bring Telegram's menus in line with :func:`wanted`; the number changed.

    The default menu goes first, alone: a server that lacks the methods (or fails them)
    says so once, not once per language. A server that cannot read menus
    (``getMyCommands`` unknown) has each one set.
    """
    menus = wanted(payments=payments)
    codes = list(menus)
    try:
        current: list[list[BotCommand] | None] = [await bot.get_my_commands()]
        current += await _every([bot.get_my_commands(language_code=c) for c in codes[1:]])
    except UnknownMethodError:
        current = [None] * len(codes)
    changes = [
        code
        for code, now in zip(codes, current, strict=True)
        if now is None or not _same(now, menus[code])
    ]

    def change(code: str | None) -> Coroutine[Any, Any, bool]:
        if menus[code]:
            return bot.set_my_commands(menus[code], language_code=code)
        return bot.delete_my_commands(language_code=code)

    if changes and changes[0] is None:
        await change(None)  # the default menu first: a server without menus says so once
    await _every([change(code) for code in changes if code is not None])
    if changes:
        log.info("command menu set for %d language(s)", len(changes))
    return len(changes)
