"""An answer's parts: announced before they are sent, recorded once Telegram names them,
and found again when a crash lost one.

Every message of an answer is a *part*: its text in one or more messages, then its
*attachments*, the parts that are not text (its voice notes, its pictures), numbered
apart. Before a part is sent it is announced in the chat's part ledger (``rc:{S}:part``:
"turn t is about to send part n, above message id a");
once Telegram names its id it is recorded (the turn's list of parts, and the ledger
names the id in place of the announcement); the turn's final write aliases it to the
answer's node and clears the ledger. Both writes go through the turn's state
(:class:`~bot.turn.state.TurnStates`, the one writer of the turn's records). So:

* a reply to a part still being written finds it in the ledger (by its id, or as an
  announcement whose id is not known yet) and waits for its turn (:mod:`bot.turn.attach`);
* a run that finds its turn's announcement never replaced knows a part may be on screen
  unrecorded (:attr:`~bot.turn.state.TurnState.sending`): when it finishes, it notes the
  range of ids that part may have (:meth:`AnswerParts.lost_range`), and a reply to a
  bot message in such a range whose text can be that part is adopted into the answer's
  thread (:meth:`Parts.adopt`).

:class:`AnswerParts` is the writer's journal for one answer, given to the writer when it
is built; :class:`Parts` reads the chat's ledger and ranges (one per bot).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import NodeId, StoreUnavailableError, TranscriptStore
from transcript.outage import guarded

from ..bus.inbound import Inbound
from ..data import keys
from ..data.connection import Queued
from ..retry import Outage
from ..telegram.format import tagged_depth, untagged
from ..telegram.onscreen import JournalUnavailableError
from .record import TurnState
from .state import TurnStates

log = logging.getLogger("replychain.engine")

T = TypeVar("T")


class Durably(Protocol):
    """Runs a write whose loss would cost a model call or a thread, waiting while Redis
    is away (the engine's)."""

    def __call__(self, call: Callable[[], Awaitable[T]]) -> Awaitable[T]: ...


#: How long a lost part's range is kept (a reply to it comes within that, or never).
ORPHAN_TTL_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class LostPart:
    """A part an earlier run of a turn announced and never recorded: its number in the
    answer (among its attachments, for one), and the answer's depth (``0``: not known)."""

    part: int
    depth: int
    attached: bool = False

    @classmethod
    def parse(cls, part: str, depth: str) -> LostPart:
        """The part as a range notes it (``"2"``; an attachment ``"a2"``)."""
        return cls(int(part.removeprefix("a")), int(depth), part.startswith("a"))

    def __str__(self) -> str:
        return f"{'a' if self.attached else ''}{self.part}:{self.depth}"

    def shown_as(self, head: str) -> bool:
        """Whether a message whose text starts with ``head`` can be this part: the first
        part starts with the answer's ``[depth:N]`` tag; a later one shows text, untagged.
        An attachment shows no text (a voice note) or a caption (a picture's), tagged
        only when it is the answer's first message.
        """
        tagged = tagged_depth(head)
        if self.attached:
            return tagged is None or tagged == self.depth
        if self.part == 1:
            return tagged is not None and tagged == self.depth
        return bool(head) and tagged is None


def _letters(text: str) -> str:
    """The letters and digits of ``text``, case folded (markup and spacing dropped)."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def lost_part(state: TurnState) -> LostPart | None:
    """The part an earlier run of the turn announced and never recorded, as the claim
    read it (its depth not known yet); ``None``: none."""
    if state.attaching:
        return LostPart(state.attaching, 0, attached=True)
    return LostPart(state.sending, 0) if state.sending else None


def message_of(turn: str) -> int:
    """The message whose turn ``turn`` is (an edit's turn is ``<m>:e<digest>``)."""
    return int(turn.partition(":")[0])


@dataclass(frozen=True, slots=True)
class PartLedger:
    """What a chat's part ledger (``rc:{S}:part``) says right now.

    Every new answer part is announced here before it is sent, and named here
    once Telegram gave its id, until its turn's final write aliases it. So a bot
    message of a running turn is always findable: by its id, or (before its id is
    known) as an announcement of that turn.
    """

    #: Sent parts of turns still running: part message id -> turn id.
    parts: dict[int, str]
    #: Turns about to send a part whose id is not known yet: turn id -> the id the
    #: part's will be above (the newest id of the chat the turn knew).
    announced: dict[str, int]

    @classmethod
    def parse(cls, raw: dict[Any, Any]) -> PartLedger:
        parts: dict[int, str] = {}
        announced: dict[str, int] = {}
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            text = value.decode() if isinstance(value, bytes) else str(value)
            if name.startswith("~"):
                announced[name[1:]] = int(text.partition(":")[2] or 0)
            else:
                parts[int(name)] = text
        return cls(parts, announced)

    def others_in(self, turn: str, low: int, high: int) -> bool:
        """Whether a turn other than ``turn`` has a part between the ids, or announced
        one that may land there."""
        if any(low < part < high and owner != turn for part, owner in self.parts.items()):
            return True
        return any(after < high and other != turn for other, after in self.announced.items())

    def may_be_sending(self, message_id: int) -> bool:
        """Whether a turn announced a part whose id may turn out to be ``message_id``.

        A guest answer's id is known before it is posted (part ``-m`` of the turn
        answering message ``m``, bot/telegram/guest.py): it is that turn's announcement.
        """
        if message_id < 0:
            return str(-message_id) in self.announced
        return any(after < message_id for after in self.announced.values())


class AnswerParts:
    """The journal of one answer (:class:`~bot.telegram.onscreen.PartJournal`): its parts,
    announced and recorded through the turn's state.

    Every new part is announced in the chat's part ledger before it is sent, and
    recorded as soon as Telegram names its id (the final parts by the turn's final
    write, which follows at once): nothing else decides whether a part is noted.
    """

    def __init__(
        self, states: TurnStates, inbound: Inbound, state: TurnState, *,
        durably: Durably, outage: Outage,
    ) -> None:  # fmt: skip
        # Not the Turn: the turn holds the writer, which holds this journal, and a cycle
        # would keep every finished turn in memory until a full garbage collection.
        self.states, self.inbound, self.state = states, inbound, state
        self._durably, self._outage = durably, outage
        #: What the claim read: the part an earlier run announced and never recorded
        #: (:func:`lost_part`), and the parts and attachments that run recorded.
        self._lost, self._recorded = lost_part(state), (*state.parts, *state.attached)

    async def sending(
        self, count: int, *, wait: bool, again: bool = False, attached: bool = False
    ) -> None:
        states, inbound, state = self.states, self.inbound, self.state
        announced = count == (state.attaching if attached else state.sending)
        if announced and not again and states.holds(inbound):
            return  # announced already (with the answer): a persisted fact, not a clock
        # (a claim not confirmed lately announces again: that waits for a confirmation)
        if wait:
            await self._durably(lambda: states.sending(inbound, state, count, attached=attached))
            return
        try:
            await states.sending(inbound, state, count, attached=attached)
        except StoreUnavailableError as exc:
            self._outage.failed(exc, again=False)  # the wait confirms it
            raise JournalUnavailableError from exc

    async def sent(self, parts: list[int], *, last: bool = False, attached: bool = False) -> None:
        if last and self.state.answer is not None:
            return  # the turn's final write, the next thing that happens, records it
        await self._durably(
            lambda: self.states.add_part(self.inbound, self.state, parts, attached=attached)
        )

    def lost_range(self, node: NodeId, ids: list[int], *, depth: int) -> Queued | None:
        """The range where the part an earlier run announced and never recorded (read
        with the claim) may be on screen, to note with the turn's final write: above the
        parts that run recorded (text and attachments: each was recorded before the next
        was announced), below the first one sent now (``ids``: every part). Without a
        new part there is no bound, and a guest answer has no message id: no range."""
        inbound, lost, recorded = self.inbound, self._lost, self._recorded
        new = [i for i in ids if i not in recorded]
        if lost is None or not new or inbound.guest is not None:
            return None
        low, high = max([inbound.message_id, *recorded]), min(new)
        part = LostPart(lost.part, depth, lost.attached)

        def queue(pipe: Pipeline) -> None:
            key = keys.orphans_key(inbound.scope)
            pipe.hset(key, inbound.turn, f"{low}:{high}:{node.ref}:{part}")
            pipe.expire(key, ORPHAN_TTL_SECONDS)

        return queue


class Parts:
    """The chat's part ledger and lost-part ranges (one per bot)."""

    def __init__(
        self, redis: Redis, store: TranscriptStore, states: TurnStates, *, durably: Durably,
        outage: Outage,
    ) -> None:  # fmt: skip
        self._redis, self.store, self.states = redis, store, states
        self._durably, self._outage = durably, outage

    def journal(self, inbound: Inbound, state: TurnState) -> AnswerParts:
        """The journal of the answer to ``inbound``."""
        return AnswerParts(self.states, inbound, state, durably=self._durably, outage=self._outage)

    async def ledger(self, scope: str) -> PartLedger:
        """The chat's part ledger: parts of turns still running, and announced parts."""
        raw = await guarded(self._redis.hgetall(keys.pending_parts_key(scope)))
        return PartLedger.parse(raw)

    async def _can_be_part_of(self, answer: NodeId, head: str) -> bool:
        """Whether the words a message starts with (``head``, its depth tag aside) are in
        ``answer`` or the question above it, letters and digits alone compared (what
        Telegram shows has no markup). A lost part the answer stored before it was sent
        passes; one streamed by a run whose model call was lost (the answer was asked
        again) may not, and then it is nobody's: another answer's part whose records a
        failover lost shows another answer's words."""
        words = _letters(untagged(head))
        if not words:  # a voice note, a bare tag: nothing to compare
            return True
        shown = (await self.store.path(answer))[-2:]
        return words in _letters(" ".join(m.content or "" for n in shown for m in n.messages))

    async def adopt(self, scope: str, message_id: int, head: str) -> NodeId | None:
        """The node a lost part with this id belongs to, aliased to it now; ``None``
        unless it falls in a noted range, the start of its text, ``head``, can be that
        part's, and no other turn of the chat is sending parts there.

        The ids of a range are not the turn's alone: other turns of the chat send
        parts meanwhile, and a failover that loses acknowledged writes can lose their
        records too. So the text decides (an answer's first part starts with its
        ``[depth:N]`` tag, a later part with none), and the chat's part ledger must
        name no other turn's part inside the range nor another turn's announcement
        that may land there, and no other turn's lost part may be it (two turns a
        failover lost together, both run again and finished: their ranges overlap and
        the ledger is clear): a message it cannot place is nobody's, and its reply gets
        the lost-track notice, never another thread.
        """
        ranges = await guarded(self._redis.hgetall(keys.orphans_key(scope)))
        found: list[tuple[str, int, int, str]] = []  # the ranges whose part it can be
        for field, value in ranges.items():
            owner = field.decode() if isinstance(field, bytes) else str(field)
            text = value.decode() if isinstance(value, bytes) else value
            low, high, tree, rest = text.split(":", 3)
            seg, *noted = rest.split(":")
            if not int(low) < message_id < int(high):
                continue
            if noted and not LostPart.parse(noted[0], noted[1]).shown_as(head):
                continue
            found.append((f"{tree}:{seg}", int(low), int(high), owner))
        if not found:
            return None
        if len(found) > 1:  # two turns lost a part there, and its text can be either's
            log.info(
                "message %s of chat %s may be a part of %d turns: not adopted",
                message_id, scope, len(found),
            )  # fmt: skip
            return None
        [(ref, start, end, owner)] = found
        if (await self.ledger(scope)).others_in(owner, start, end):
            log.info(
                "message %s of chat %s may be another turn's part: not adopted", message_id, scope
            )
            return None
        home = NodeId.parse(scope, ref)
        if not await self._can_be_part_of(home, head):
            log.info(
                "message %s of chat %s shows words its range's answer has not: not adopted",
                message_id, scope,
            )  # fmt: skip
            return None
        log.info("adopted message %s of chat %s into its thread", message_id, scope)
        await self.store.alias(scope, [message_id], home)
        return home
