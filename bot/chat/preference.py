"""A user's own choice with a command and buttons: ``/format`` and ``/voice`` alike.

``/<command> <choice>`` chooses at once; ``/<command>`` alone answers with one button per
choice (the current one ticked), made out to the asker: a button pressed by anyone else
is refused. The choice is kept per user (:mod:`bot.data.userprefs`), in every chat,
through every process. A setting can switch the command off (the bot then says why).
Answered locally, never sent to the model; a reply to the answer starts a new
conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from redis.asyncio import Redis

from transcript import StoreUnavailableError

from .. import choice_texts as texts
from ..data.userprefs import UserPrefs, user_prefs
from ..i18n import _
from ..settings import Settings
from ..telegram.format import Chunk, escape_html
from ..telegram.notifier import Notifier
from .messages import Checked, notice, thread_of

log = logging.getLogger("replychain.handlers")


@dataclass(frozen=True, slots=True)
class Preference:
    """One choice: its command, its texts (message ids) and where it is kept."""

    command: str
    #: Callback data of its buttons: "<prefix><asker>:<choice>".
    prefix: str
    #: Each choice and its button's label, in the buttons' order.
    buttons: Mapping[str, str]
    #: The menu's question, with ``{current}``.
    menu: str
    #: What the menu says of the current choice (``None``: nothing chosen yet).
    current: Mapping[str | None, str]
    #: What the bot says once a choice is kept.
    chosen: Mapping[str, str]
    usage: str
    #: The user's current choice among their preferences.
    read: Callable[[UserPrefs], str | None]
    save: Callable[[Redis, int, str], Awaitable[None]]
    #: Why the command does nothing with these settings, or ``None``.
    off: Callable[[Settings], str | None]

    def router(self) -> Router:
        router = Router(name=self.command)
        router.message.register(self._on_command, Command(self.command))
        router.callback_query.register(self._on_pick, Checked(F.data.startswith(self.prefix)))
        return router

    async def _on_command(
        self,
        message: Message,
        command: CommandObject,
        *,
        notifier: Notifier,
        redis: Redis,
        settings: Settings,
    ) -> None:
        why = self.off(settings)
        if why is not None:
            notice(notifier, message, _(why))
            return
        user = message.from_user.id if message.from_user else 0
        wanted = (command.args or "").strip().lower()
        if wanted:
            if wanted not in self.buttons:
                notice(notifier, message, _(self.usage))
                return
            try:
                await self.save(redis, user, wanted)
            except StoreUnavailableError:
                notice(notifier, message, _(texts.CHOICE_FAILED))
                return
            log.info("user %s chose %s %s", user, self.command, wanted)
            notice(notifier, message, _(self.chosen[wanted]))
            return
        chat = message.chat.id

        async def menu() -> int:
            try:
                current = self.read(await user_prefs(redis, user))
            except StoreUnavailableError:
                current = self.read(UserPrefs())
            buttons = [
                InlineKeyboardButton(
                    text=("✓ " if current == choice else "") + _(label),
                    callback_data=f"{self.prefix}{user}:{choice}",
                )
                for choice, label in self.buttons.items()
            ]
            return await notifier.out.send_buttons(
                chat,
                _(self.menu).format(current=_(self.current[current])),
                InlineKeyboardMarkup(inline_keyboard=[[button] for button in buttons]),
                reply_to=message.message_id,
                thread_id=thread_of(message),
            )

        notifier.run(menu, name=f"{self.command}-menu-{chat}", chat_id=chat)

    async def _on_pick(self, query: CallbackQuery, *, notifier: Notifier, redis: Redis) -> None:
        """A button pressed: the presser's choice, once the presser is the asker."""
        asker, _sep, choice = (query.data or "").removeprefix(self.prefix).partition(":")
        if choice not in self.buttons or not asker.isdigit():
            await query.answer(_(texts.MENU_EXPIRED))
            return
        if query.from_user.id != int(asker):
            await query.answer(_(texts.NOT_YOURS), show_alert=True)
            return
        try:
            await self.save(redis, query.from_user.id, choice)
        except StoreUnavailableError:
            await query.answer(_(texts.CHOICE_FAILED), show_alert=True)
            return
        log.info("user %s chose %s %s", query.from_user.id, self.command, choice)
        text = _(self.chosen[choice])
        await query.answer(text)
        message = query.message
        if isinstance(message, Message):
            chunk = Chunk(escape_html(text), text)
            await notifier.out.edit(message.chat.id, message.message_id, chunk)
