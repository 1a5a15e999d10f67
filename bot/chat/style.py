"""/format: how a user's answers look, rich messages or plain ones, in every chat.

Rich messages (Bot API 10.1) show tables and formulas, but some Telegram apps (Web,
the Watch) show them as "message not supported". ``/format`` answers with two buttons
(rich, plain); ``/format rich`` and ``/format plain`` choose at once. The choice is the
user's own (:mod:`bot.data.userprefs`): it applies in every chat, through every process,
from their next answer on, and overrides RICH_MESSAGES=auto (and always); with
RICH_MESSAGES=off every answer is plain whatever is chosen. Answered locally, never sent
to the model; a reply to the answer starts a new conversation.
"""

from __future__ import annotations

import logging

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from redis.asyncio import Redis

from transcript import StoreUnavailableError

from .. import choice_texts as texts
from ..data.userprefs import FORMATS, Format, set_format, user_prefs
from ..i18n import N_, _
from ..settings import Settings
from ..telegram.format import Chunk, escape_html
from ..telegram.out import Notifier
from .messages import Checked, notice, thread_of

log = logging.getLogger("replychain.handlers")

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
#: Callback data of the buttons: "fmt:<asker>:<choice>".
_PREFIX = "fmt:"


def style_router() -> Router:
    router = Router(name="style")
    router.message.register(on_format, Command("format"))
    router.callback_query.register(on_pick, Checked(F.data.startswith(_PREFIX)))
    return router


async def on_format(
    message: Message,
    command: CommandObject,
    *,
    notifier: Notifier,
    redis: Redis,
    settings: Settings,
) -> None:
    if settings.rich_messages == "off":
        notice(notifier, message, _(ALL_PLAIN))
        return
    user = message.from_user.id if message.from_user else 0
    wanted = (command.args or "").strip().lower()
    if wanted:
        chosen = next((f for f in FORMATS if f == wanted), None)
        if chosen is None:
            notice(notifier, message, _(USAGE))
            return
        try:
            await set_format(redis, user, chosen)
        except StoreUnavailableError:
            notice(notifier, message, _(texts.CHOICE_FAILED))
            return
        log.info("user %s chose %s answers", user, chosen)
        notice(notifier, message, _(CHOSEN[chosen]))
        return
    chat = message.chat.id

    async def menu() -> int:
        try:
            current = (await user_prefs(redis, user)).format
        except StoreUnavailableError:
            current = None
        buttons = [
            InlineKeyboardButton(
                text=("✓ " if current == choice else "") + _(label),
                callback_data=f"{_PREFIX}{user}:{choice}",
            )
            for choice, label in (("rich", RICH_BUTTON), ("plain", PLAIN_BUTTON))
        ]
        return await notifier.out.send_buttons(
            chat,
            _(MENU).format(current=_(CURRENT[current])),
            InlineKeyboardMarkup(inline_keyboard=[[button] for button in buttons]),
            reply_to=message.message_id,
            thread_id=thread_of(message),
        )

    notifier.run(menu, name=f"format-menu-{chat}", chat_id=chat)


async def on_pick(query: CallbackQuery, *, notifier: Notifier, redis: Redis) -> None:
    """A button pressed: the presser's choice, once the presser is the asker."""
    asker, _sep, choice = (query.data or "").removeprefix(_PREFIX).partition(":")
    chosen: Format | None = next((f for f in FORMATS if f == choice), None)
    if chosen is None or not asker.isdigit():
        await query.answer(_(texts.MENU_EXPIRED))
        return
    if query.from_user.id != int(asker):
        await query.answer(_(texts.NOT_YOURS), show_alert=True)
        return
    try:
        await set_format(redis, query.from_user.id, chosen)
    except StoreUnavailableError:
        await query.answer(_(texts.CHOICE_FAILED), show_alert=True)
        return
    log.info("user %s chose %s answers", query.from_user.id, chosen)
    text = _(CHOSEN[chosen])
    await query.answer(text)
    message = query.message
    if isinstance(message, Message):
        await notifier.out.edit(message.chat.id, message.message_id, Chunk(escape_html(text), text))
