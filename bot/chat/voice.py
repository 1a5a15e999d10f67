"""/voice: whether a user's answers also come read aloud, as voice notes, in every chat.

``/voice on`` (every answer), ``/voice off`` (text only) or ``/voice auto`` (the default:
a voice note gets a voice note back, with the text); ``/voice`` alone answers with three
buttons. The choice is the user's own (:mod:`bot.data.userprefs`), read with each turn's
claim, through every process, from their next answer on (bot/turn/speaking.py). Without
TTS_MODEL the bot reads nothing aloud and says so. Answered locally, never sent to the
model; a reply to the answer starts a new conversation. Mirrors /format
(bot/chat/style.py).
"""

from __future__ import annotations

import logging

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from redis.asyncio import Redis

from transcript import StoreUnavailableError

from .. import choice_texts as texts
from ..data.userprefs import VOICES, Voice, set_voice, user_prefs
from ..i18n import N_, _
from ..settings import Settings
from ..telegram.format import Chunk, escape_html
from ..telegram.out import Notifier
from .messages import Checked, notice, thread_of

log = logging.getLogger("replychain.handlers")

#: The menu's entry for the command (a message id).
COMMANDS = (("voice", N_("Voice answers: on, off, or auto (a voice note for a voice note)")),)
MENU = N_("When should I also read my answers aloud, as voice notes (now: {current})?")
BUTTONS = {
    "on": N_("Always"),
    "auto": N_("When you send a voice note"),
    "off": N_("Never: text only"),
}
CURRENT = {
    "on": N_("always"),
    "off": N_("never"),
    "auto": N_("when you send a voice note"),
}
CHOSEN = {
    "on": N_("Every answer now comes read aloud too, as voice notes under the text."),
    "off": N_("Your answers come as text only."),
    "auto": N_("A voice note of yours gets its answer read aloud too; text gets text."),
}
USAGE = N_("Send /voice on, /voice off or /voice auto, or /voice alone to choose with buttons.")
NO_SPEECH = N_("This bot does not read answers aloud: no speech model is set up (TTS_MODEL).")
#: Callback data of the buttons: "vox:<asker>:<choice>".
_PREFIX = "vox:"


def voice_router() -> Router:
    router = Router(name="voice")
    router.message.register(on_voice, Command("voice"))
    router.callback_query.register(on_pick, Checked(F.data.startswith(_PREFIX)))
    return router


async def on_voice(
    message: Message,
    command: CommandObject,
    *,
    notifier: Notifier,
    redis: Redis,
    settings: Settings,
) -> None:
    if settings.tts_model is None:
        notice(notifier, message, _(NO_SPEECH))
        return
    user = message.from_user.id if message.from_user else 0
    wanted = (command.args or "").strip().lower()
    if wanted:
        chosen = next((v for v in VOICES if v == wanted), None)
        if chosen is None:
            notice(notifier, message, _(USAGE))
            return
        await _choose(notifier, message, redis, (user, chosen))
        return
    chat = message.chat.id

    async def menu() -> int:
        try:
            current = (await user_prefs(redis, user)).voice or "auto"
        except StoreUnavailableError:
            current = "auto"
        buttons = [
            InlineKeyboardButton(
                text=("✓ " if current == choice else "") + _(label),
                callback_data=f"{_PREFIX}{user}:{choice}",
            )
            for choice, label in BUTTONS.items()
        ]
        return await notifier.out.send_buttons(
            chat,
            _(MENU).format(current=_(CURRENT[current])),
            InlineKeyboardMarkup(inline_keyboard=[[button] for button in buttons]),
            reply_to=message.message_id,
            thread_id=thread_of(message),
        )

    notifier.run(menu, name=f"voice-menu-{chat}", chat_id=chat)


async def _choose(
    notifier: Notifier, message: Message, redis: Redis, choice: tuple[int, Voice]
) -> None:
    """Keep ``choice`` (the user, what they chose) and say so."""
    user, chosen = choice
    try:
        await set_voice(redis, user, chosen)
    except StoreUnavailableError:
        notice(notifier, message, _(texts.CHOICE_FAILED))
        return
    log.info("user %s chose voice answers %s", user, chosen)
    notice(notifier, message, _(CHOSEN[chosen]))


async def on_pick(query: CallbackQuery, *, notifier: Notifier, redis: Redis) -> None:
    """A button pressed: the presser's choice, once the presser is the asker."""
    asker, _sep, choice = (query.data or "").removeprefix(_PREFIX).partition(":")
    chosen: Voice | None = next((v for v in VOICES if v == choice), None)
    if chosen is None or not asker.isdigit():
        await query.answer(_(texts.MENU_EXPIRED))
        return
    if query.from_user.id != int(asker):
        await query.answer(_(texts.NOT_YOURS), show_alert=True)
        return
    try:
        await set_voice(redis, query.from_user.id, chosen)
    except StoreUnavailableError:
        await query.answer(_(texts.CHOICE_FAILED), show_alert=True)
        return
    log.info("user %s chose voice answers %s", query.from_user.id, chosen)
    text = _(CHOSEN[chosen])
    await query.answer(text)
    message = query.message
    if isinstance(message, Message):
        await notifier.out.edit(message.chat.id, message.message_id, Chunk(escape_html(text), text))
