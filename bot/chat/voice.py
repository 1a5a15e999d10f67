"""/voice: whether a user's answers also come read aloud, as voice notes, in every chat.

``/voice on`` (every answer), ``/voice off`` (text only) or ``/voice auto`` (the default:
a voice note gets a voice note back, with the text); ``/voice`` alone answers with three
buttons. The choice is the user's own (:mod:`bot.data.userprefs`), read with each turn's
claim, through every process, from their next answer on (bot/turn/speaking.py). Without
TTS_MODEL the bot reads nothing aloud and says so. Answered locally, never sent to the
model; a reply to the answer starts a new conversation (bot/chat/preference.py, as
/format).
"""

from __future__ import annotations

from aiogram import Router
from redis.asyncio import Redis

from ..data.userprefs import VOICES, UserPrefs, set_voice
from ..i18n import N_
from ..settings import Settings
from .preference import Preference

#: The menu's entry for the command (a message id).
COMMANDS = (("voice", N_("Voice answers: on, off, or auto (a voice note for a voice note)")),)
MENU = N_("When should I also read my answers aloud, as voice notes (now: {current})?")
BUTTONS = {
    "on": N_("Always"),
    "auto": N_("When you send a voice note"),
    "off": N_("Never: text only"),
}
CURRENT: dict[str | None, str] = {
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


async def _save(redis: Redis, user: int, choice: str) -> None:
    await set_voice(redis, user, next(v for v in VOICES if v == choice))


def _off(settings: Settings) -> str | None:
    return NO_SPEECH if settings.tts_model is None else None


def _read(prefs: UserPrefs) -> str:
    return prefs.voice or "auto"


VOICE = Preference(
    "voice", "vox:", BUTTONS, MENU, CURRENT, CHOSEN, USAGE, read=_read, save=_save, off=_off
)


def voice_router() -> Router:
    return VOICE.router()
