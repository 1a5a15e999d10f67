"""Where a message attaches: the node a turn's user message goes below, and that node.

A message continues the node of what it replies to; everything here is the ways that
lookup can go (done once per turn, before the user's node is stored)::

    a reply to a known message           its node (the alias)
    an edit                              beside its first wording: a sibling
    /retry                               the question of the answer replied to
    a reply to an unheard voice note     that note's node, stored now (it is heard)
    a reply to a part still being        that part's turn, waited for (the part
      written                              ledger names it, bot/turn/parts.py)
    a reply to a part a crash lost       adopted from its range, when its text can be it
    a message in a private topic that    the topic's newest answer (TOPIC_THREADS;
      replies to nothing                   the topic's earlier turns waited for first)
    anything else                        a new conversation (a new topic of its own in a
                                           private chat with topics)

A reply to a bot message nothing knows gets a notice, never a silent new conversation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from transcript import ChatMessage, Node, NodeId, Placement, RecordError, TranscriptStore

from ..bus.inbound import EDIT, MESSAGE, RETRY, Inbound
from ..bus.runner import InFlight
from ..i18n import _
from ..retry import retrying
from . import notices
from .branch import Prefs
from .inputs import Inputs, MediaError, Reading
from .media import VoiceReader
from .parts import Durably, Parts, message_of
from .record import TurnState
from .state import TurnStates
from .topics import Earlier, TopicThreads
from .values import Reply, Turn, TurnEnded

log = logging.getLogger("replychain.engine")


@dataclass(frozen=True, slots=True)
class Early:
    """The user's node prepared to go with the claim, and the node it continues."""

    parent: NodeId
    placement: Placement


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message attaches, as far as its claim needs to know (:meth:`Attach.place`)."""

    #: A private topic's newest answer, which a message replying to nothing goes on from.
    follows: NodeId | None = None
    #: The user's node, ready to be written with the claim (``None``: stored after it).
    early: Early | None = None
    #: The node it continues when that is known now (the branch's reads are its).
    target: NodeId | None = None


class NothingToDo(Exception):
    """An edit that asks nothing new (unchanged wording, or a message never taken in)."""


class _StillSending(Exception):
    """The bot message replied to may be a part a running turn is still sending."""


class _LostTrack(Exception):
    """The bot message replied to is the bot's, yet no conversation knows it."""


#: How long a reply to a part of an answer still being written waits for that turn
#: (a dead process's turn is taken over within TAKEOVER_SECONDS, then finished).
PART_WAIT = 120.0


class Attach:
    """Routes messages and stores their user nodes (one per bot)."""

    def __init__(  # noqa: PLR0913 - the lookups a route may need, each by name
        self, *, store: TranscriptStore, states: TurnStates, parts: Parts, in_flight: InFlight,
        durably: Durably, system_prompt: str, root_prompt: Callable[[Prefs], str],
        inputs: Inputs | None = None, voice: VoiceReader | None = None,
        threads: TopicThreads | None = None,
    ) -> None:  # fmt: skip
        self.store, self.states, self.parts = store, states, parts
        self.in_flight, self._durably = in_flight, durably
        #: A new conversation's system prompt without a persona, and with the user's.
        self.system_prompt, self.root_prompt = system_prompt, root_prompt
        #: The input readers (bot/capabilities.py); the voice reader keeps unheard notes.
        self.inputs, self.voice = inputs, voice
        #: Private chats' topics as threads (TOPIC_THREADS), else ``None``.
        self.threads = threads

    async def place(self, inbound: Inbound, *, target: bool = False) -> Place:
        """Where ``inbound`` attaches, found before its turn is claimed: the topic's newest
        answer it follows, its user node when that can go with the claim, and (``target``:
        the branch's reads need it) the node it continues when its alias is known."""
        follows = await self._follows(inbound)
        early = await self._early(inbound, follows)
        if early is not None:
            return Place(follows, early, early.parent)
        known = await self._known_target(inbound, follows) if target else None
        return Place(follows, None, known)

    async def _follows(self, inbound: Inbound) -> NodeId | None:
        """In a private chat's topic (TOPIC_THREADS): wait for the topic's turns taken in
        before this one, so its messages are answered in order, then the node a message
        replying to nothing goes on from: the topic's newest answer (``None``: none, or
        not such a message).

        Each earlier turn is waited for until it ends when it runs in this process, else
        by polling the topic's queue (another process runs it, or it has not begun), at
        most :data:`PART_WAIT` seconds in all (a dead process's turn is taken over and
        finished within that); then it is taken out of the queue and this turn goes on.
        """
        threads = self.threads
        if threads is None or inbound.private_topic is None:
            return None
        scope, deadline = inbound.scope, time.monotonic() + PART_WAIT
        waited: Earlier | None = None

        async def settled() -> NodeId | None:
            nonlocal waited
            while True:
                waited, head = await threads.earlier(inbound)
                if waited is None:
                    return head
                left = deadline - time.monotonic()
                if left <= 0 or not await self.in_flight.wait((scope, waited.message_id), left):
                    raise _StillSending  # its turn runs in another process

        try:
            head = await retrying(settled, on=(_StillSending,), within=PART_WAIT)
        except _StillSending:
            assert waited is not None
            log.warning(
                "message %s of chat %s waited %.0f s for message %s of its topic; going on",
                inbound.message_id, inbound.chat_id, PART_WAIT, waited.message_id,
            )  # fmt: skip
            await threads.overdue(inbound, waited)
            _, head = await threads.earlier(inbound)
        return head if inbound.kind == MESSAGE and inbound.reply_to is None else None

    async def in_own_topic(self, inbound: Inbound, state: TurnState) -> Inbound:
        """A new conversation outside topics in a private chat with topics opens a topic
        of its own and is answered there (TOPIC_THREADS); where none can be opened it is
        answered in place. Asked once per turn: the state notes the topic (or that none
        could be) before anything is sent, so a run again answers where the first did."""
        threads = self.threads
        if state.topic is None:
            if threads is None or not await threads.opens(inbound):
                return inbound
            topic = await threads.open(inbound)
            await self._durably(
                lambda: self.states.opened_topic(
                    inbound, state, topic, with_writes=threads.queue_opened(inbound, topic)
                )
            )
        return replace(inbound, thread_id=state.topic) if state.topic else inbound

    async def _known_target(self, inbound: Inbound, follows: NodeId | None) -> NodeId | None:
        """The node the message will route to, when its alias is known: an edit's first
        wording, else the message replied to (the lookup the route repeats, cached), else
        the topic's newest answer ``follows``."""
        target = inbound.message_id if inbound.kind == EDIT else inbound.reply_to
        if target is None:
            return follows
        try:
            return await self.store.resolve(inbound.scope, target)
        except RecordError:
            return None  # the steps meet it again, and answer with their notice

    async def _early(self, inbound: Inbound, follows: NodeId | None) -> Early | None:
        """The user's node, prepared to be written with the turn's claim (one round trip
        less), when storing it needs nothing but the message: a text replying to a
        message whose node is known, or going on from its topic's newest answer
        (``follows``). It is written only if the claim is this run's, and only once
        (:meth:`user_node` finds it in the state).
        """
        if inbound.kind != MESSAGE or (self.inputs is not None and self.inputs.wants(inbound)):
            return None
        try:
            parent = follows
            if inbound.reply_to is not None:
                parent = await self.store.resolve(inbound.scope, inbound.reply_to)
            if parent is None:  # routing it may wait, or adopt a part: after the claim
                return None
            message = ChatMessage("user", inbound.text)  # text only: nothing to read
            return Early(parent, await self.states.early_user(inbound, parent, message))
        except RecordError:
            return None  # the steps meet it again, and answer with their notice

    async def user_node(self, turn: Turn) -> Node:
        """Route the message and store it as a node (once: the state records it)."""
        inbound, state = turn.inbound, turn.state
        if state.user is not None:
            return await self.store.node(state.user)
        if inbound.kind == RETRY:
            return await self._retried(turn)
        parent: NodeId | None
        try:
            if inbound.kind == EDIT:
                parent = await self._edited(inbound)
            elif inbound.reply_to is None:
                parent = turn.follows  # a topic goes on; else a new conversation
            else:
                parent = await self.route(inbound)
        except _LostTrack:
            log.warning(
                "message %s of chat %s replies to a message of the bot's that no conversation "
                "knows; answering with a notice", inbound.message_id, inbound.chat_id,
            )  # fmt: skip
            await self._durably(lambda: self.states.lost_track(state))
            parent = None
        reading = await self.message(inbound, parent)
        turn.notes = reading.notes
        message = reading.message
        aliases = [inbound.message_id, *(m for m in turn.album if m != inbound.message_id)]
        return await self.states.store_user(
            state, parent, message, system=self.root_prompt(turn.prefs),
            aliases=[] if inbound.kind == EDIT else aliases,
        )  # fmt: skip

    async def _retried(self, turn: Turn) -> Node:
        """/retry: the question of the answer replied to, asked again as it was."""
        try:
            node_id = await self.route(turn.inbound)
        except _LostTrack:
            node_id = None
        nodes = await self.store.path(node_id) if node_id is not None else []
        role = nodes[-1].messages[-1].role if nodes and nodes[-1].messages else None
        if role == "assistant" and len(nodes) > 2:
            user = nodes[-2]
        elif role == "user":
            user = nodes[-1]  # the question itself: one more answer to it
        else:
            raise TurnEnded(Reply(_(notices.RETRY_NOT_AN_ANSWER), None, notice=True))
        await self._durably(lambda: self.states.set_user(turn.state, user.id))
        return user

    async def _edited(self, inbound: Inbound) -> NodeId:
        """An edit: the parent of the message's first wording, or nothing to do.

        The edited wording becomes a sibling of the first; an edit of a message
        never taken in, or one leaving its text as it was, asks nothing new.
        """
        first = await self.store.resolve(inbound.scope, inbound.message_id)
        if first is None:
            raise NothingToDo
        nodes = await self.store.path(first)
        node = nodes[-1]
        if len(nodes) < 2 or not node.messages or node.messages[0].role != "user":
            raise NothingToDo
        if node.messages[0].content == inbound.text:
            raise NothingToDo
        return nodes[-2].id

    async def message(self, inbound: Inbound, parent: NodeId | None) -> Reading:
        """The message as the input readers read it; what cannot be read ends the turn
        with a notice, and replying to that continues from ``parent``."""
        if self.inputs is None or not self.inputs.wants(inbound):
            return Reading(ChatMessage("user", inbound.text))
        try:
            return await self.inputs.read(inbound)
        except MediaError as exc:
            raise TurnEnded(Reply(exc.text, parent, notice=True)) from None

    async def _unheard(self, inbound: Inbound) -> NodeId | None:
        """A reply to a voice message that could not be transcribed: that message's
        node, stored now (replying to it retries), or ``None`` if it is not one."""
        if self.voice is None or inbound.reply_to is None:
            return None
        earlier = await self.voice.unheard(inbound.scope, inbound.reply_to)
        if earlier is None:
            return None
        try:
            parent = await self.route(earlier)
        except _LostTrack:
            parent = None
        message = (await self.message(earlier, parent)).message
        if parent is None:
            root = await self.store.start(
                earlier.scope, [ChatMessage("system", self.system_prompt)]
            )
            parent = root.id
        node = await self.store.append(parent, [message], aliases=[earlier.message_id])
        await self.voice.heard(earlier.scope, earlier.message_id)
        return await self.store.resolve(earlier.scope, earlier.message_id) or node.id

    async def route(self, inbound: Inbound) -> NodeId | None:
        """The node the message continues, or ``None`` for a new conversation.

        A reply to a part of an answer that is still being written waits for
        that turn to finish, so it continues the answer, not a part of it. A reply
        to a message of the bot's that no conversation, running turn or lost-part
        range knows raises :class:`_LostTrack`: it must not start a new
        conversation silently.
        """
        if inbound.reply_to is None:
            return None
        scope, target = inbound.scope, inbound.reply_to
        node = await self.store.resolve(scope, target)
        if node is not None:
            return node
        node = await self._unheard(inbound)
        if node is not None:
            return node
        if inbound.reply_to_bot and await self.store.known(scope, target):
            # a message of no conversation (a command's answer, say), or a part whose
            # turn aliased it since the lookup above
            return await self.store.resolve(scope, target)
        node = await self._written(inbound)
        if node is not None or not inbound.reply_to_bot:
            return node
        # maybe a part an earlier run sent but died before recording: adopt it
        home = await self.parts.adopt(scope, target, inbound.reply_head)
        if home is not None:
            return home
        if await self.store.known(scope, target):
            # its turn ended meanwhile: aliased to its node, or to none (a notice)
            return await self.store.resolve(scope, target)
        raise _LostTrack

    async def _written(self, inbound: Inbound) -> NodeId | None:
        """The node of a bot message replied to that a running turn of the chat is
        still writing, once that turn recorded it (``None``: no such message).

        The chat's part ledger names every part of a running turn, by its id once
        Telegram named it, and before that as the turn's announcement (Telegram may
        deliver the reply before it answers the send). So while the ledger names the
        message, or (for a reply to the bot) while a turn announced a part whose id is
        not known yet and may be that message's (it will be above the newest id the
        turn knew), the reply waits: for that turn to end when it runs in this
        process, else polling the ledger, at most :data:`PART_WAIT` seconds (a dead
        process's turn is taken over and finished within that).
        """
        scope, target = inbound.scope, inbound.reply_to
        assert target is not None
        waiting = False
        if target >= inbound.message_id:
            return None  # no message of the bot's: a reply comes after what it replies to

        async def settled() -> None:
            nonlocal waiting
            ledger = await self.parts.ledger(scope)
            owner = ledger.parts.get(target)
            if owner is not None:
                waiting = True
                if not await self.in_flight.wait((scope, message_of(owner)), PART_WAIT):
                    raise _StillSending  # its turn runs in another process
            elif inbound.reply_to_bot and ledger.may_be_sending(target):
                waiting = True
                raise _StillSending

        try:
            await retrying(settled, on=(_StillSending,), within=PART_WAIT)
        except _StillSending:
            log.warning("message %s of chat %s is still unsettled", target, scope)
        return await self.store.resolve(scope, target) if waiting else None
