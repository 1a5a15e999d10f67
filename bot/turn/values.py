"""What a turn is made of: its rules, the reply it ends with, one run of it, and the
outputs an answer sends after its text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aiogram.types import InlineKeyboardMarkup

from transcript import Image, NodeId

from ..bus.inbound import Inbound
from ..bus.runner import Ack
from ..data.userprefs import UserPrefs
from ..model import Model
from ..payments import Allowance
from ..telegram.guest import GuestWriter
from ..telegram.writer import AnswerWriter
from .branch import Branch, Prefs
from .parts import AnswerParts
from .record import TurnState


@dataclass(frozen=True, slots=True)
class Rules:
    """The operator's rules for every turn: the root prompt, and what one message and
    one user may cost (0 = unlimited where it applies)."""

    system_prompt: str
    max_input_chars: int = 16000
    user_daily_tokens: int = 0
    max_calls_per_turn: int = 3
    max_tokens_per_turn: int = 0
    #: Show a reasoning model's thoughts, collapsed, in the final message (SHOW_REASONING).
    show_reasoning: bool = False
    #: Dollars one user may spend per UTC day (USER_DAILY_BUDGET_USD; 0: no budget).
    user_daily_dollars: float = 0.0
    #: When answers are rich messages (RICH_MESSAGES: auto, always, off); each user's
    #: /format choice overrides it (:func:`~bot.telegram.rendering.answer_style`).
    rich: str = "auto"


@dataclass(frozen=True, slots=True)
class Drawn:
    """A picture an answer shows: the image (a blob of the chat) and its caption."""

    image: Image
    caption: str


@dataclass(frozen=True, slots=True)
class Reply:
    """What the user is shown, and the node a reply to it continues from.

    A notice is shown after any partial answer already on screen; ``node`` is
    ``None`` when replying to it should start a new conversation.
    """

    text: str
    node: NodeId | None
    notice: bool = False
    #: Thoughts shown collapsed with the answer (only with SHOW_REASONING).
    reasoning: str = ""
    #: A notice for the asker alone: in a group, an ephemeral message (Bot API 10.2).
    personal: bool = False
    #: The pictures the answer shows, sent after its text (bot/turn/pictures.py).
    pictures: tuple[Drawn, ...] = ()
    #: The text is the pictures' caption, not a message of its own (``/image``).
    captioned: bool = False
    #: Buttons under a notice sent as a new message (the /buy button).
    markup: InlineKeyboardMarkup | None = None


class TurnEnded(Exception):
    """A step ends the turn with a notice instead of an answer."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.text)
        self.reply = reply


@dataclass(slots=True)
class Turn:
    """One run of a turn: the message, its persisted state, and its answer's writer."""

    inbound: Inbound
    state: TurnState
    writer: Writer
    #: Where the answer's parts are announced and recorded (the writer's journal).
    journal: AnswerParts
    #: Queues the bus's acknowledgement on the turn's final write.
    ack: Ack
    #: The answer's depth, its first part's ``[depth:N]`` (0 until the user's node is known).
    depth: int = 0
    #: The message ids of an album's photos (the user's node is aliased to each).
    album: tuple[int, ...] = ()
    #: The user's defaults (read with the claim).
    prefs: Prefs = field(default_factory=Prefs)
    #: The asker's own settings: /format, /voice (read with the claim).
    mine: UserPrefs = field(default_factory=UserPrefs)
    #: The model and personas answering (resolved once the user's node is known).
    branch: Branch | None = None
    #: A message replying to nothing in a private chat's topic goes on from here: the
    #: topic's newest answer (``None``: it starts a new conversation).
    follows: NodeId | None = None
    #: Lines for the user above the answer from reading the message ("read pages 1–42
    #: of 130"; only on the run that read it).
    notes: tuple[str, ...] = ()
    #: With payments: what the asker may still spend, read with the claim (for the
    #: first model call's check; ``None`` once used).
    allowance: Allowance | None = None

    @property
    def model(self) -> Model:
        assert self.branch is not None
        return self.branch.model


#: An answer's writer: streaming into a chat of the bot's, or one guest answer.
Writer = AnswerWriter | GuestWriter


@dataclass(frozen=True, slots=True)
class Sent:
    """What an :class:`Output` did: the number its next attachment takes, and a line to
    show under the answer's text instead of what it could not send ("": nothing)."""

    next: int
    line: str = ""


class Output(Protocol):
    """A capability that sends something after an answer's text, as the answer's
    *attachments* (its pictures, its voice notes): registered in ``bot/capabilities.py``,
    run in that order by the engine's last step.

    Attachments are numbered from 1 across the outputs of one answer; an output sends
    the ones numbered ``first`` on, skipping those already on screen (``number <=
    len(writer.attached)``: an earlier run of the turn sent them), each announced in the
    part ledger before it is sent (:class:`~bot.telegram.onscreen.OnScreen`). A run again
    after a crash numbers them the same way, so its numbering must follow from the
    answer alone.
    """

    def wanted(self, turn: Turn, reply: Reply) -> bool:
        """Whether this answer gets anything from this output."""
        ...

    async def send(
        self, turn: Turn, writer: AnswerWriter, reply: Reply, *, text: str, first: int
    ) -> Sent:
        """Send this output's attachments of ``reply`` (whose text as shown is ``text``)
        from number ``first`` on."""
        ...
