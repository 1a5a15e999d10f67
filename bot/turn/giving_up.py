"""Giving up a turn after its last failed attempt: the thread stays usable and the
user is told once (the runner's dead letter keeps the turn)."""

from __future__ import annotations

import logging
from dataclasses import replace

from transcript import TranscriptStore

from ..bus.inbound import Inbound
from ..i18n import _, speaking
from ..telegram.format import Chunk, escape_html
from ..telegram.guest import part_of
from ..telegram.guest import post as post_guest
from ..telegram.out import TelegramOut
from . import notices
from .state import TurnStates

log = logging.getLogger("replychain.engine")


async def give_up(
    states: TurnStates, store: TranscriptStore, out: TelegramOut, inbound: Inbound
) -> None:
    """After the last failed attempt: keep the thread usable and tell the user once.

    The parts already on screen are aliased to the thread (replies to them
    continue after the answer, or the question when no answer was stored),
    and one notice says to reply to retry: replying to it asks the question
    again. No second copy of an answer is sent.
    """
    state = await states.read(inbound)
    if state.topic:  # its parts, and the notice, are in the topic it opened
        inbound = replace(inbound, thread_id=state.topic)
    shown, parts = state.answer or state.user, [*state.parts, *state.attached]
    if shown is not None and parts:
        await store.alias(inbound.scope, parts, shown)
    with speaking(inbound.language):
        text = _(notices.GAVE_UP)
    try:
        if inbound.guest is not None:
            chunk = Chunk(escape_html(text), text)
            await post_guest(out, inbound.guest, chunk, name=inbound.message_id)
            notice = part_of(inbound.message_id)
        else:
            notice = await out.send_text(
                inbound.chat_id, text, reply_to=inbound.message_id,
                thread_id=inbound.thread_id,
            )  # fmt: skip
    except Exception as exc:  # the chat may be gone too; the dead letter has the turn
        log.warning("could not tell chat %s: %s", inbound.chat_id, type(exc).__name__)
    else:
        if state.user is not None:
            await store.alias(inbound.scope, [notice], state.user)
        else:
            await store.unthreaded(inbound.scope, [notice])
    await states.release(inbound, parts)
