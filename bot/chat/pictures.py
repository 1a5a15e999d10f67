"""/image: a picture, made as a turn.

``/image <prompt>`` goes into the durable intake like a message (an :class:`Inbound` of
kind :data:`~bot.bus.inbound.IMAGE`), so it is answered once, by one worker, its picture
aliased like any answer (bot/turn/pictures.py). As a reply to a picture (the bot's or a
user's photo) it changes that picture; as a reply to anything else the thread above it
goes with the prompt. Without IMAGE_MODEL, or without a prompt, one line answers it.
"""

from __future__ import annotations

import asyncio

from aiogram import Bot, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message

from ..bus.inbound import IMAGE, IMAGE_COMMAND
from ..bus.intake import Intake
from ..i18n import N_, _
from ..settings import Settings
from ..telegram.notifier import Notifier
from .messages import inbound_of, notice

#: The menu's entry for the command (a message id).
COMMANDS = (("image", N_("Draw a picture; as a reply to a picture: change it")),)
USAGE = N_(
    "Send /image and what to draw, e.g. /image a lighthouse at dusk. As a reply to a "
    "picture, /image and what to change makes a new picture from it."
)
NO_IMAGES = N_("This bot does not draw pictures: no image model is set up (IMAGE_MODEL).")


def pictures_router() -> Router:
    router = Router(name="pictures")
    router.message.register(on_image, Command("image"))
    return router


async def on_image(
    message: Message,
    command: CommandObject,
    *,
    notifier: Notifier,
    intake: Intake,
    stopping: asyncio.Event,
    bot: Bot,
    settings: Settings,
) -> None:
    if settings.image_model is None:
        notice(notifier, message, _(NO_IMAGES))
        return
    prompt = (command.args or "").strip()
    if not prompt:
        notice(notifier, message, _(USAGE), personal=True)
        return
    me = await bot.me()
    inbound = inbound_of(message, IMAGE, text=IMAGE_COMMAND + prompt, bot_id=me.id)
    if not await intake.record(inbound, stopping):
        await asyncio.Event().wait()  # stopping before it was stored: never confirm it
