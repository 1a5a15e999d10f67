"""Voice answers: an answer read aloud, after its text, as voice notes of the answer.

Whether a turn's answer is spoken is the asker's ``/voice`` (bot/chat/voice.py): ``on``,
``off``, or ``auto`` (the default): a voice note in gets a voice note out. The text
answer goes out as always; then what it reads aloud as (:func:`~bot.model.speech.spoken_parts`:
code, tables and formulas said in one short phrase) is spoken part by part, each at most
4,096 characters, and each sent as a reply to the question with ``sendVoice``: an
*attachment* of the answer (bot/telegram/onscreen.py), announced in the part ledger before
it is sent and recorded once Telegram names it, aliased to the answer's node by the
turn's final write. A run again after a crash sends only the parts not on screen yet.

Each part is priced by its characters (``price_per_1m_chars``) and recorded against the
answer's node (the text read aloud). A day already spent (the budget or the token limit)
or a failing speech call leaves the text answer alone, with one line under it; the text
is never lost to the voice.
"""

from __future__ import annotations

import logging

from redis.asyncio.client import Pipeline

from transcript import NodeId

from ..catalogue import Prices
from ..data.connection import Queued
from ..i18n import _
from ..media_texts import SPEECH_FAILED, SPOKEN_CODE, SPOKEN_FORMULA, SPOKEN_TABLE, VOICE_BUDGET
from ..model import ModelError, Usage
from ..model.speech import Speaker, Unread, spoken_parts
from ..telegram.outcomes import AnswerRejectedError
from ..telegram.uploads import Attachment
from ..telegram.writer import AnswerWriter
from ..usage.accounting import Accounting
from ..usage.calls import CallRecord
from ..usage.costs import speech_cost
from .limits import Spending
from .state import TurnStates
from .values import Reply, Sent, Turn

log = logging.getLogger("replychain.voice")

#: The audit's view of a speech call (a chat call's is the window it sent).
SPEECH_VIEW = "speech"


class VoiceAnswers:
    """Reads answers aloud (one per bot; TTS_MODEL): an
    :class:`~bot.turn.values.Output`, after the answer's pictures."""

    def __init__(
        self, speaker: Speaker, *, accounting: Accounting, prices: Prices, spending: Spending
    ) -> None:
        self.speaker, self.accounting = speaker, accounting
        self.prices, self.spending = prices, spending

    def wanted(self, turn: Turn, reply: Reply) -> bool:
        """Whether this turn's answer is spoken: the asker's ``/voice``, and by default
        (``auto``) when the question was a voice note; never a picture's caption."""
        if reply.captioned:
            return False
        choice = turn.mine.voice
        if choice is not None and choice != "auto":
            return choice == "on"
        return any(ref.kind == "voice" for ref in turn.inbound.media)

    async def send(
        self, turn: Turn, writer: AnswerWriter, reply: Reply, *, text: str, first: int
    ) -> Sent:
        """Send ``text`` read aloud as the answer's attachments from number ``first`` on
        (those before are its pictures), with the line to show under the text instead of
        what could not be sent ("" when nothing is missing)."""
        inbound, node = turn.inbound, reply.node
        assert node is not None  # (the engine sends attachments of answers only)
        parts = spoken_parts(text, Unread(_(SPOKEN_CODE), _(SPOKEN_TABLE), _(SPOKEN_FORMULA)))
        after = Sent(first + len(parts))
        for number, part in enumerate(parts, first):
            if number <= len(writer.attached):
                continue  # on screen: an earlier run of this turn sent it
            if await self.spending.spent(inbound.user_id):  # (no read without a limit)
                log.info("no voice note in chat %s: the user's day is spent", inbound.chat_id)
                return Sent(after.next, _(VOICE_BUDGET))
            try:
                speech = await self.speaker.speak(part)
            except ModelError as exc:
                log.warning("speech for chat %s failed: %s", inbound.chat_id, exc.kind)
                failed = self._call(turn, node, exc.latency, cost=0, error=exc.kind)
                await self.accounting.record(failed)
                return Sent(after.next, _(SPEECH_FAILED))
            cost = speech_cost(self.prices, speech.characters)
            call = self._call(turn, node, speech.latency, cost=cost)
            # the voice note is announced on the same round trip as its cost
            await self.accounting.record(call, with_writes=announce(turn, number))
            turn.state.sending, turn.state.attaching = 0, number
            try:
                await writer.attach(number, Attachment("voice", speech.audio))
            except AnswerRejectedError as exc:  # (a user who takes no voice messages, say)
                log.warning("Telegram refused a voice note in chat %s: %s", inbound.chat_id, exc)
                return after
        return after

    def _call(
        self, turn: Turn, node: NodeId, latency: float, *, cost: int, error: str | None = None
    ) -> CallRecord:
        """The record of one speech call, against the answer it read aloud."""
        inbound = turn.inbound
        return CallRecord(
            inbound.chat_id, inbound.user_id, inbound.message_id, node, self.speaker.name,
            Usage(0, 0), latency, error=error, view=SPEECH_VIEW, cost=cost,
        )  # fmt: skip


def announce(turn: Turn, number: int) -> Queued:
    """Attachment ``number`` of the turn's answer announced in the part ledger, queued on
    a round trip the turn makes anyway (set the state's ``attaching`` once it went)."""

    def queue(pipe: Pipeline) -> None:
        TurnStates.queue_sending(pipe, turn.inbound, turn.state, number, attached=True)

    return queue
