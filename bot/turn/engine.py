"""The turn, in one place: one inbound message carried to its answer.

A turn is a short, linear sequence of steps. Each step is idempotent against
the turn's persisted :class:`~bot.turn.state.TurnState` and records its result
there before the next one runs, so running a turn again after a crash, a
redelivery or an outage continues it instead of repeating it::

    claim and read the state                (a text reply to a known message:
                                            its node goes with the claim)
    -> route (alias lookup) and store the user's node (unless it went along)
    -> check the input and the limits       (or end with a notice)
    -> build the context window             (or end with a notice)
    -> ask the model, streaming into Telegram (or end with a notice)
    -> store the answer node
    -> finish sending, alias every part, mark the turn done

A step that ends the turn early raises :class:`TurnEnded` with the notice to
show; the turn then finishes in one place, :meth:`Engine._deliver`, whatever
the reply. Failures no step foresaw go to the runner (:mod:`bot.bus.runner`),
which retries the turn and in the end calls :meth:`Engine.give_up`: never is a
message recorded as answered when it was not.

It knows Telegram only through :class:`~bot.telegram.out.TelegramOut` and the
model only through :class:`~bot.model.Model`, so tests and benchmarks can
drive it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from redis.asyncio.client import Pipeline

from transcript import (
    ChatMessage,
    Node,
    NodeId,
    Placement,
    RecordError,
    StoreUnavailableError,
    TranscriptStore,
)

from .. import choice_texts
from ..bus.albums import Albums
from ..bus.inbound import EDIT, MESSAGE, RETRY, Inbound
from ..bus.runner import Ack, InFlight, TurnBusy
from ..data.connection import Queued
from ..data.userprefs import UserPrefs, UserReads
from ..i18n import _, clock_time, dollars, number, speaking
from ..metrics import Metrics
from ..model import Answer, Model, ModelError
from ..retry import Outage, retrying
from ..telegram.drafts import StopButtons
from ..telegram.format import Chunk, depth_tag, escape_html
from ..telegram.guest import GuestWriter, part_of
from ..telegram.guest import post as post_guest
from ..telegram.out import AnswerRejectedError, ChatUnavailableError, TelegramOut
from ..telegram.writer import AnswerWriter, ChatBudget, JournalUnavailableError, answer_style
from ..usage.accounting import Accounting
from ..usage.calls import CallRecord, next_reset
from . import notices
from .branch import Branch, Branches, Prefs
from .context import ContextWindow, MessageTooLargeError, Window
from .media import MediaError, MediaReader, voice_quote
from .state import ClaimReads, LostPart, TurnState, TurnStates, message_of
from .topics import Earlier, TopicThreads, TopicTitles

if TYPE_CHECKING:
    from .tools import ToolLoop

log = logging.getLogger("replychain.engine")

T = TypeVar("T")

PRIVATE_EDIT_INTERVAL = 1.0
GROUP_EDIT_INTERVAL = 3.0
#: How long a reply to a part of an answer still being written waits for that turn
#: (a dead process's turn is taken over within TAKEOVER_SECONDS, then finished).
PART_WAIT = 120.0


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
    #: /format choice overrides it (:func:`~bot.telegram.writer.answer_style`).
    rich: str = "auto"


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
    #: Queues the bus's acknowledgement on the turn's final write.
    ack: Ack
    #: An earlier run may have left a part on screen unrecorded: it announced this part
    #: (its number; 0: none) in the chat's part ledger and never recorded it (read with
    #: the claim).
    lost_part: int = 0
    #: The answer's depth, its first part's ``[depth:N]`` (0 until the user's node is known).
    depth: int = 0
    #: The message ids of an album's photos (the user's node is aliased to each).
    album: tuple[int, ...] = ()
    #: The user's defaults (read with the claim).
    prefs: Prefs = field(default_factory=Prefs)
    #: The model and personas answering (resolved once the user's node is known).
    branch: Branch | None = None
    #: A message replying to nothing in a private chat's topic goes on from here: the
    #: topic's newest answer (``None``: it starts a new conversation).
    follows: NodeId | None = None

    @property
    def model(self) -> Model:
        assert self.branch is not None
        return self.branch.model


@dataclass(frozen=True, slots=True)
class _Early:
    """The user's node prepared to go with the claim, and the node it continues."""

    parent: NodeId
    placement: Placement


#: An answer's writer: streaming into a chat of the bot's, or one guest answer.
Writer = AnswerWriter | GuestWriter


class _NothingToDo(Exception):
    """An edit that asks nothing new (unchanged wording, or a message never taken in)."""


class _StillSending(Exception):
    """The bot message replied to may be a part a running turn is still sending."""


class _LostTrack(Exception):
    """The bot message replied to is the bot's, yet no conversation knows it."""


class _Parts:
    """The answer writer's journal: the turn's state, written through the engine.

    Every new part is announced in the chat's part ledger before it is sent, and
    recorded as soon as Telegram names its id (the final parts by the turn's final
    write, which follows at once): nothing else decides whether a part is noted.
    """

    def __init__(self, engine: Engine, inbound: Inbound, state: TurnState) -> None:
        # Not the Turn: the turn holds the writer, which holds this journal, and a cycle
        # would keep every finished turn in memory until a full garbage collection.
        self.engine, self.inbound, self.state = engine, inbound, state

    async def sending(self, count: int, *, wait: bool, again: bool = False) -> None:
        states = self.engine.states
        if count == self.state.sending and not again:
            return  # announced already (with the answer): a persisted fact, not a clock
        if wait:
            await self.engine._durably(lambda: states.sending(self.inbound, self.state, count))
            return
        try:
            await states.sending(self.inbound, self.state, count)
        except StoreUnavailableError as exc:
            self.engine.redis_outage.failed(exc, again=False)  # the wait confirms it
            raise JournalUnavailableError from exc

    async def sent(self, parts: list[int], *, last: bool = False) -> None:
        states = self.engine.states
        if last and self.state.answer is not None:
            return  # the turn's final write, the next thing that happens, records it
        await self.engine._durably(lambda: states.add_part(self.inbound, self.state, parts))


class Engine:
    """Runs turns (the :class:`~bot.bus.runner.TurnHandler` of the runner)."""

    def __init__(  # noqa: PLR0913 - the turn's collaborators, each injected by name
        self,
        *,
        store: TranscriptStore,
        model: Model,
        out: TelegramOut,
        states: TurnStates,
        accounting: Accounting,
        context: ContextWindow,
        in_flight: InFlight,
        redis_outage: Outage,
        rules: Rules,
        media: MediaReader | None = None,
        albums: Albums | None = None,
        branches: Branches | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.out = out
        self.states = states
        self.accounting = accounting
        self.context = context
        self.in_flight = in_flight
        self.redis_outage = redis_outage
        self.rules = rules
        #: The bot's metrics: the registry its accounting records model calls in.
        self.metrics: Metrics = accounting.metrics
        #: Titles private-chat topics after their first answer (set by the app).
        self.topics: TopicTitles | None = None
        #: A private chat's topic is one conversation (set by the app: TOPIC_THREADS).
        self.threads: TopicThreads | None = None
        #: The tool loop (set by the app when MCP_CONFIG is set), else ``None``.
        self.tools: ToolLoop | None = None
        self.media = media
        self.albums = albums
        #: The catalogue's models and personas per branch (``None``: ``model`` answers
        #: every turn, as it does for a bot with one model and no personas).
        self.branches = branches
        #: Answers being generated now, for Telegram's stop button.
        self.stops = StopButtons()
        #: What this process may still send to each group (Telegram's per-minute limit).
        self.group_budget = ChatBudget()

    # ------------------------------------------------------------------ the turn

    async def run(self, inbound: Inbound, ack: Ack = lambda _pipe: None) -> bool:
        """Answer one message, or finish answering it; a no-op once it is done.

        ``True`` when this run finished the turn (``ack`` was queued on its final
        write), ``False`` when it was finished before; :class:`TurnBusy` when
        another worker runs it. Everything it says is in the sender's language.
        """
        with speaking(inbound.language):
            return await self._run(inbound, ack)

    async def _run(self, inbound: Inbound, ack: Ack) -> bool:
        started = time.monotonic()
        follows = await self._follows(inbound)
        state, prefs, mine = await self._claim_reading(inbound, follows)
        if state is None:
            raise TurnBusy
        if state.done:
            return False
        album: list[int] = []
        if inbound.group is not None and self.albums is not None and state.user is None:
            gathered = await self.albums.gather(inbound)
            if gathered is None:  # a photo of an album another turn answers
                await self.states.finish(inbound, state, [], with_writes=[ack])
                return True
            inbound, album = gathered
        inbound = await self._in_own_topic(inbound, state)
        writer = self._writer(inbound, state, mine)
        turn = Turn(
            inbound, state, writer, ack, lost_part=state.sending, album=tuple(album),
            prefs=prefs, follows=follows,
        )  # fmt: skip
        writer.journal = _Parts(self, inbound, state)
        try:
            try:
                reply = await self._steps(turn)
            except _NothingToDo:
                await self.states.finish(inbound, state, [], with_writes=[ack])
                return True
            except TurnEnded as ended:
                reply = ended.reply
            except RecordError as exc:
                log.error("turn in chat %s failed: %s", inbound.chat_id, exc)
                reply = Reply(_(notices.DAMAGED_HISTORY).format(ref=exc.ref), None, notice=True)
            await self._deliver(turn, reply)
            self.metrics.turn("notice" if reply.notice else "answer", started)
            self.metrics.first_text(started, writer.first_shown_at)
            if self.topics is not None and reply.node is not None and not reply.notice:
                titler = turn.branch.summariser if turn.branch is not None else None
                await self.topics.answered(inbound, reply.node, titler)  # a topic's first answer
        except ChatUnavailableError as exc:
            log.info("chat %s is unavailable (%s); dropping its answer", inbound.chat_id, exc)
            await self.states.finish(inbound, state, writer.message_ids, with_writes=[ack])
            self.metrics.turn("chat_unavailable", started)
        except AnswerRejectedError as exc:
            log.warning("Telegram refused the answer in chat %s: %s", inbound.chat_id, exc)
            ids, shown = writer.message_ids, state.answer or state.user
            writes: list[Queued] = [ack]
            if shown is not None:  # a reply to what is on screen goes on from there
                writes.append(lambda pipe: self.store.queue_alias(pipe, inbound.scope, ids, shown))
            await self.states.finish(inbound, state, ids, with_writes=writes)
            self.metrics.turn("rejected", started)
        finally:
            await writer.close()  # after a failure nothing more is sent; a later run resumes
        return True

    def _writer(self, inbound: Inbound, state: TurnState, mine: UserPrefs) -> Writer:
        if inbound.guest is not None:  # one message, posted once (bot/telegram/guest.py)
            return GuestWriter(
                self.out, query_id=inbound.guest, message_id=inbound.message_id,
                existing=state.parts,
            )  # fmt: skip
        return AnswerWriter(
            self.out,
            chat_id=inbound.chat_id,
            # the question is outside the topic its answer opened: no reply across topics
            reply_to=None if state.topic else inbound.message_id,
            thread_id=inbound.thread_id,
            edit_interval=GROUP_EDIT_INTERVAL if inbound.is_group else PRIVATE_EDIT_INTERVAL,
            existing=state.parts,
            # drafts (with a stop button) exist in private chats only
            draft_of=None if inbound.is_group else inbound.message_id,
            budget=self.group_budget if inbound.is_group else None,
            style=answer_style(self.rules.rich, mine.format),  # the asker's choice (/format)
        )

    async def _steps(self, turn: Turn) -> Reply:
        user = await self._store_user_node(turn)
        turn.depth = user.depth + 1
        turn.writer.prefix = depth_tag(turn.depth) + voice_quote(turn.inbound, user)
        if turn.state.lost_track:  # replying to the notice goes on from the message
            raise TurnEnded(Reply(_(notices.LOST_TRACK), user.id, notice=True))
        if turn.state.answer is not None:  # an earlier run stored it: show it
            stored = await self.store.current(turn.state.answer)
            return Reply(stored.messages[-1].content or "", stored.id)
        turn.branch = await self._branch(turn, user)
        turn.writer.prefix += turn.branch.note
        await self._check_input(turn, user)
        await self._check_limits(turn, user)
        inbound = turn.inbound
        # the stop button shows from the first (empty) draft on
        with self.stops.watching(inbound.chat_id, inbound.message_id) as stop:
            await turn.writer.start()
            leaf, tools = user, None
            if self.tools is not None:
                tools = self.tools.offered(turn.inbound)
                leaf = await self.tools.leaf(turn.state, user)
                leaf = await self.tools.resume(turn.state, leaf, turn.writer.update, self._durably)
            while True:
                window = await self._window(turn, leaf)
                answer = await self._ask(turn, leaf, window, tools, stop=stop)
                if not (answer.tool_calls and tools) or answer.stopped:
                    break
                leaf = await self._tool_round(turn, user, leaf, (window, answer))
        turn.writer.ended()
        shown = f"{answer.text}\n\n{_(notices.STOPPED)}" if answer.stopped else answer.text
        thoughts = answer.reasoning if self.rules.show_reasoning else ""
        # the final text's first new part (if any) is announced with the answer
        final = shown if shown.strip() else _(notices.EMPTY_ANSWER)
        try:
            first_new = turn.writer.next_new_part(final, thoughts)
        except Exception:  # met again when it is shown, once the answer is stored
            first_new = 0  # (failing here would ask the model again on the next try)
        node = await self._store_answer(turn, leaf, (window, answer), announce=first_new)
        return Reply(shown, node, reasoning=thoughts)

    async def _tool_round(
        self, turn: Turn, user: Node, leaf: Node, asked: tuple[Window, Answer]
    ) -> Node:
        """The model asked for tools: run them, store the step, count the next call."""
        assert self.tools is not None
        state = turn.state
        window, answer = asked
        call = self._call(turn, leaf.id, window, answer)
        await self.accounting.record(call)
        if self.tools.rounds(state) >= self.tools.max_rounds:
            text = _(notices.TOOL_ROUNDS).format(rounds=self.tools.max_rounds)
            raise TurnEnded(Reply(text, leaf.id, notice=True))
        leaf = await self.tools.round(
            state, leaf=leaf, answer=answer, progress=turn.writer.update, durably=self._durably
        )
        await self.tools.count_call(state)
        await self._check_limits(turn, user)
        return leaf

    async def _deliver(self, turn: Turn, reply: Reply) -> None:
        """The one place a turn finishes: show the reply, then one write records it all.

        That write marks the turn done, records and aliases every part, acknowledges the
        intake entry and, in a private chat's topic, notes the topic's newest answer.
        """
        inbound, node = turn.inbound, reply.node
        if reply.notice:
            personal = await self._personal(turn, reply.text) if reply.personal else None
            ids = await turn.writer.fail(reply.text) if personal is None else personal
        else:
            text = reply.text if reply.text.strip() else _(notices.EMPTY_ANSWER)
            ids = await turn.writer.finish(text, reasoning=reply.reasoning)
        writes: list[Queued] = [turn.ack, self.accounting.queue_settled(inbound.scope)]
        newest = self.threads.queue_newest(inbound, node) if self.threads else None
        if newest is not None:  # before the end, which lets the topic's next turn go on
            writes.insert(0, newest)
        if node is None:  # a reply to it starts a new conversation
            writes.append(lambda pipe: self.store.queue_unthreaded(pipe, inbound.scope, ids))
        else:
            writes.append(lambda pipe: self.store.queue_alias(pipe, inbound.scope, ids, node))
            new = [i for i in ids if i not in turn.writer.existing]
            if turn.lost_part and new and inbound.guest is None:
                # an earlier run may have died between sending a part and recording
                # it: that message lies after the parts it recorded and before the
                # first one sent now (without a new one there is no bound: no range)
                low = max([inbound.message_id, *turn.writer.existing])
                high = min(new)
                lost = LostPart(turn.lost_part, turn.depth)
                writes.append(
                    lambda pipe: TurnStates.queue_orphans(
                        pipe, inbound, node, low=low, high=high, lost=lost
                    )
                )
        await self._durably(
            lambda: self.states.finish(inbound, turn.state, ids, with_writes=writes, holding=node)
        )

    async def _personal(self, turn: Turn, text: str) -> list[int] | None:
        """A notice for the asker alone, as an ephemeral message of a group where the
        server has them (nothing to alias: it has no message id); ``None``: not here (a
        private or guest chat, an answer on screen, a server without them)."""
        inbound = turn.inbound
        if (
            not (inbound.is_group and self.out.ephemeral)
            or inbound.guest
            or turn.writer.message_ids
        ):
            return None
        sent = await self.out.send_personal(
            inbound.chat_id, text, receiver=inbound.user_id, reply_to=inbound.message_id,
            thread_id=inbound.thread_id,
        )  # fmt: skip
        return [sent] if sent else []

    # ----------------------------------------------------------------- the steps

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

    async def _in_own_topic(self, inbound: Inbound, state: TurnState) -> Inbound:
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

    async def _claim(self, inbound: Inbound) -> TurnState | None:
        """Claim the turn and read its state (``None``: another worker has it)."""
        return (await self._claim_reading(inbound))[0]

    async def _claim_reading(
        self, inbound: Inbound, follows: NodeId | None = None
    ) -> tuple[TurnState | None, Prefs, UserPrefs]:
        """Claim the turn and read its state (``None``: another worker has it); the
        user's node goes along when it can (:meth:`_early_user_node`), and so do the
        reads that resolve the branch's model (:class:`~bot.turn.branch.BranchReads`):
        the tree's choices, fresh on every turn, and the user's defaults; and the
        asker's own settings (:class:`~bot.data.userprefs.UserReads`)."""
        early = await self._early_user_node(inbound, follows)
        mine = UserReads(inbound.user_id)
        reads: list[ClaimReads] = [mine]
        branch = None
        if self.branches is not None:
            node = early.parent if early is not None else await self._known_target(inbound, follows)
            branch = self.branches.reads(inbound, node)
            reads.append(branch)
        if early is None:
            state = await self.states.begin(inbound, reads)
        else:
            state = await self.states.begin_with_user(inbound, early.placement, reads)
        return state, branch.prefs if branch is not None else Prefs(), mine.prefs

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

    async def _branch(self, turn: Turn, user: Node) -> Branch:
        """The model and personas of this turn's branch (/retry <model>: that model)."""
        if self.branches is None:
            return Branch(self.model)
        inbound = turn.inbound
        override = inbound.text.strip() if inbound.kind == RETRY else ""
        return await self.branches.resolve(user.id, turn.prefs, override=override or None)

    async def _early_user_node(self, inbound: Inbound, follows: NodeId | None) -> _Early | None:
        """The user's node, prepared to be written with the turn's claim (one round trip
        less), when storing it needs nothing but the message: a text replying to a
        message whose node is known, or going on from its topic's newest answer
        (``follows``). It is written only if the claim is this run's, and only once
        (:meth:`_store_user_node` finds it in the state).
        """
        if inbound.kind != MESSAGE or inbound.media:
            return None
        try:
            parent = follows
            if inbound.reply_to is not None:
                parent = await self.store.resolve(inbound.scope, inbound.reply_to)
            if parent is None:  # routing it may wait, or adopt a part: after the claim
                return None
            message = await self._user_message(inbound, parent)  # text only: nothing to read
            return _Early(parent, await self.states.early_user(inbound, parent, message))
        except RecordError:
            return None  # the steps meet it again, and answer with their notice

    async def _store_user_node(self, turn: Turn) -> Node:
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
                parent = await self._route(inbound)
        except _LostTrack:
            log.warning(
                "message %s of chat %s replies to a message of the bot's that no conversation "
                "knows; answering with a notice", inbound.message_id, inbound.chat_id,
            )  # fmt: skip
            await self._durably(lambda: self.states.lost_track(state))
            parent = None
        message = await self._user_message(inbound, parent)
        aliases = [inbound.message_id, *(m for m in turn.album if m != inbound.message_id)]
        return await self.states.store_user(
            state, parent, message, system=self._root_prompt(turn.prefs),
            aliases=[] if inbound.kind == EDIT else aliases,
        )  # fmt: skip

    def _root_prompt(self, prefs: Prefs) -> str:
        """The system prompt of a new conversation (the user's default persona's)."""
        if self.branches is None:
            return self.rules.system_prompt
        return self.branches.root_prompt(prefs)

    async def _retried(self, turn: Turn) -> Node:
        """/retry: the question of the answer replied to, asked again as it was."""
        try:
            node_id = await self._route(turn.inbound)
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
            raise _NothingToDo
        nodes = await self.store.path(first)
        node = nodes[-1]
        if len(nodes) < 2 or not node.messages or node.messages[0].role != "user":
            raise _NothingToDo
        if node.messages[0].content == inbound.text:
            raise _NothingToDo
        return nodes[-2].id

    async def _user_message(self, inbound: Inbound, parent: NodeId | None) -> ChatMessage:
        """The message with its files read; what cannot be read ends the turn with a
        notice, and replying to that continues from ``parent``."""
        if self.media is None or not inbound.media:
            return ChatMessage("user", inbound.text)
        try:
            return await self.media.message(inbound)
        except MediaError as exc:
            raise TurnEnded(Reply(exc.text, parent, notice=True)) from None

    async def _unheard(self, inbound: Inbound) -> NodeId | None:
        """A reply to a voice message that could not be transcribed: that message's
        node, stored now (replying to it retries), or ``None`` if it is not one."""
        if self.media is None or inbound.reply_to is None:
            return None
        earlier = await self.media.unheard(inbound.scope, inbound.reply_to)
        if earlier is None:
            return None
        try:
            parent = await self._route(earlier)
        except _LostTrack:
            parent = None
        message = await self._user_message(earlier, parent)
        if parent is None:
            root = await self.store.start(
                earlier.scope, [ChatMessage("system", self.rules.system_prompt)]
            )
            parent = root.id
        node = await self.store.append(parent, [message], aliases=[earlier.message_id])
        await self.media.heard(earlier.scope, earlier.message_id)
        return await self.store.resolve(earlier.scope, earlier.message_id) or node.id

    async def _route(self, inbound: Inbound) -> NodeId | None:
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
        home = await self.states.orphan_home(scope, target, inbound.reply_head)
        if home is not None:
            log.info("adopted message %s of chat %s into its thread", target, scope)
            await self.store.alias(scope, [target], home)
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
            ledger = await self.states.ledger(scope)
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

    async def _check_input(self, turn: Turn, user: Node) -> None:
        inbound, limit = turn.inbound, self.rules.max_input_chars
        if len(inbound.text) > limit:
            # kept, but replying to the notice continues without the over-long message
            parent = (await self.store.path(user.id))[-2]
            text = _(notices.TOO_LONG).format(length=number(len(inbound.text)), limit=number(limit))
            raise TurnEnded(Reply(text, parent.id, notice=True))

    async def _check_limits(self, turn: Turn, user: Node) -> None:
        """The per-turn guard and the user's daily limit: no model call past them."""
        inbound, state, rules = turn.inbound, turn.state, self.rules
        spent = 0
        if rules.max_tokens_per_turn:
            spent = (await self.accounting.turn(inbound.scope, inbound.message_id)).tokens
        max_calls = rules.max_calls_per_turn + (self.tools.max_rounds if self.tools else 0)
        if state.calls > max_calls or (
            rules.max_tokens_per_turn and spent >= rules.max_tokens_per_turn
        ):
            log.warning(
                "turn for message %s in chat %s stopped: %d model calls, %d tokens",
                inbound.message_id, inbound.chat_id, state.calls - 1, spent,
            )  # fmt: skip
            raise TurnEnded(Reply(_(notices.TURN_GUARD), user.id, notice=True))
        daily, budget = rules.user_daily_tokens, rules.user_daily_dollars
        if daily or budget:
            today = await self.accounting.user_today(inbound.user_id)
            if daily and today.tokens >= daily:
                text = notices.daily_limit(daily, self.accounting.clock())
                raise TurnEnded(Reply(text, user.id, notice=True, personal=True))
            if budget and today.dollars >= budget:
                reset = clock_time(next_reset(self.accounting.clock()))  # as the token limit's
                text = _(choice_texts.BUDGET_REACHED).format(budget=dollars(budget, 2), reset=reset)
                raise TurnEnded(Reply(text, user.id, notice=True, personal=True))

    async def _window(self, turn: Turn, leaf: Node) -> Window:
        try:
            return await self.context.prepare(turn.inbound, leaf.id, turn.branch)
        except MessageTooLargeError:
            # kept, but replying to the notice continues without the user's message (a
            # long text file must not make every later turn of the thread too large too)
            from_user = bool(leaf.messages) and leaf.messages[0].role == "user"
            parent = (await self.store.path(leaf.id))[-2] if from_user else leaf
            budget = self.context.for_branch(turn.branch).budget
            text = _(notices.TOO_LARGE).format(budget=number(budget))
            raise TurnEnded(Reply(text, parent.id if from_user else leaf.id, notice=True)) from None

    async def _ask(
        self,
        turn: Turn,
        user: Node,
        window: Window,
        tools: bytes | None = None,
        *,
        stop: asyncio.Event | None = None,
    ) -> Answer:
        """Stream the model's answer into Telegram; a failure ends the turn with a notice.

        ``user`` is the node the request ends with (a tool step's, in the tool loop).
        The user's stop button (``stop``) ends the call and keeps what it said so far.
        """
        inbound, context = turn.inbound, self.context.for_branch(turn.branch)
        try:
            if tools is not None and self.tools is not None:
                client = turn.branch.client if turn.branch is not None else None
                answer = await self.tools.ask(
                    window.messages, turn.writer.update, tools, media=window.media, model=client
                )
            else:
                answer = await turn.model.stream(
                    window.messages, turn.writer.update, media=window.media, stop=stop,
                    on_thoughts=turn.writer.think,
                )  # fmt: skip
        except ModelError as exc:
            if exc.kind == "no_images":
                await context.text_only(turn.model.name)
            log.warning("model call for chat %s failed: %s", inbound.chat_id, exc)
            call = self._call(turn, user.id, window, exc)
            await self.accounting.record(call)
            aside = (
                context.set_aside(inbound, turn.state, window, exc, model=turn.model.name)
                if exc.kind == "bad_image"
                else None
            )
            if aside is not None:
                # answer at once without that image: one more call, under the turn guard
                await self.states.count_call(turn.state, with_writes=aside)
                await self._check_limits(turn, user)
                if _(notices.IMAGE_SET_ASIDE) not in turn.writer.prefix:
                    turn.writer.prefix += _(notices.IMAGE_SET_ASIDE)
                without = await self._window(turn, user)
                answer = await self._ask(turn, user, without, tools, stop=stop)
                await context.answered(inbound, turn.state)
                return answer
            text = notices.model_error(exc.kind)
            raise TurnEnded(Reply(text, user.id, notice=True)) from None
        if answer.stopped and not answer.text.strip():
            # stopped before any text: nothing to keep but what the call cost
            call = self._call(turn, user.id, window, answer)
            await self.accounting.record(call)
            raise TurnEnded(Reply(_(notices.STOPPED_EARLY), user.id, notice=True))
        context.learn(window.messages, answer.usage, tools=tools is not None)
        return answer

    async def _store_answer(
        self, turn: Turn, user: Node, asked: tuple[Window, Answer], *, announce: int
    ) -> NodeId:
        """Store the answer node and the call's usage; both wait for Redis if it is away.

        ``user`` is the node the answer hangs below (the last tool step, if any).
        ``announce``: the number of the part the final text sends first (0: none), noted
        in the chat's part ledger on the same round trip, so that part needs no round
        trip of its own before it is sent.
        """
        window, answer = asked
        call = self._call(turn, user.id, window, answer)
        inbound, state, parts = turn.inbound, turn.state, turn.writer.message_ids
        placement = await self._durably(
            lambda: self.states.answer_placement(state, user, answer.text, parts)
        )

        def writes(pipe: Pipeline) -> None:
            # independent idempotent writes, one round trip with the call's usage
            self.store.queue_place(pipe, placement)
            if announce:
                TurnStates.queue_sending(pipe, inbound, state, announce)

        [reply, *_others] = await self.accounting.record(call, with_writes=writes)
        if announce:
            state.sending = announce
        node = await self._durably(lambda: self.states.answer_placed(state, placement, reply))
        return node.id

    def _call(
        self, turn: Turn, sent: NodeId, window: Window, result: Answer | ModelError
    ) -> CallRecord:
        """The record of one model call: the request ``window`` up to ``sent``, and its
        answer or its failure."""
        error = result.kind if isinstance(result, ModelError) else None
        return CallRecord.of(
            turn.inbound, sent, model=turn.model.name, usage=result.usage,
            latency=result.latency, error=error, view=window.view,
        )  # fmt: skip

    async def _durably(self, call: Callable[[], Awaitable[T]]) -> T:
        """A write whose loss would cost a model call or a thread: waits while Redis is away."""
        return await self.redis_outage.guard(call, on=(StoreUnavailableError,))

    # ------------------------------------------------------------- failures

    async def failed(self, inbound: Inbound) -> int:
        return await self.states.failed(inbound)

    async def give_up(self, inbound: Inbound, error: BaseException) -> None:
        """After the last failed attempt: keep the thread usable and tell the user once.

        The parts already on screen are aliased to the thread (replies to them
        continue after the answer, or the question when no answer was stored),
        and one notice says to reply to retry: replying to it asks the question
        again. No second copy of an answer is sent.
        """
        state = await self.states.read(inbound)
        if state.topic:  # its parts, and the notice, are in the topic it opened
            inbound = replace(inbound, thread_id=state.topic)
        shown = state.answer or state.user
        if shown is not None and state.parts:
            await self.store.alias(inbound.scope, state.parts, shown)
        with speaking(inbound.language):
            text = _(notices.GAVE_UP)
        try:
            if inbound.guest is not None:
                chunk = Chunk(escape_html(text), text)
                await post_guest(self.out, inbound.guest, chunk, name=inbound.message_id)
                notice = part_of(inbound.message_id)
            else:
                notice = await self.out.send_text(
                    inbound.chat_id, text, reply_to=inbound.message_id,
                    thread_id=inbound.thread_id,
                )  # fmt: skip
        except Exception as exc:  # the chat may be gone too; the dead letter has the turn
            log.warning("could not tell chat %s: %s", inbound.chat_id, type(exc).__name__)
        else:
            if state.user is not None:
                await self.store.alias(inbound.scope, [notice], state.user)
            else:
                await self.store.unthreaded(inbound.scope, [notice])
        await self.states.release(inbound, state.parts)
