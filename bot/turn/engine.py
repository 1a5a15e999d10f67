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
    -> ask the model, streaming into Telegram (or end with a notice); ``/image``: make
       the picture (bot/turn/pictures.py)
    -> store the answer node
    -> finish sending (the text, then its attachments: pictures, voice notes), alias
       every part, mark the turn done

A payment (a ``successful_payment`` in Telegram Stars) is a turn of its own kind: its
one step, after the claim, credits it and replies with the confirmation
(:mod:`bot.turn.paying`); it finishes as every turn does.

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

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from transcript import (
    Node,
    NodeId,
    RecordError,
    StoreUnavailableError,
    TranscriptStore,
)

from ..bus.albums import Albums
from ..bus.inbound import PAYMENT, RETRY, Inbound
from ..bus.runner import Ack, InFlight, TurnBusy
from ..data.connection import Queued
from ..data.userprefs import UserPrefs, UserReads
from ..i18n import _, speaking
from ..metrics import Metrics
from ..model import Model
from ..payments import SpendReads, Stars
from ..retry import Outage
from ..telegram.budget import ChatBudget
from ..telegram.drafts import StopButtons
from ..telegram.format import depth_tag
from ..telegram.guest import GuestWriter
from ..telegram.out import TelegramOut
from ..telegram.outcomes import AnswerRejectedError, ChatUnavailableError
from ..telegram.rendering import answer_style
from ..telegram.writer import TYPING_EVERY, AnswerWriter
from ..usage.accounting import Accounting
from . import notices
from .asking import Asking
from .attach import Attach, NothingToDo, Place
from .branch import Branch, Branches, Prefs
from .context import ContextWindow
from .giving_up import give_up
from .inputs import Inputs
from .limits import Limits
from .media import VoiceReader, voice_quote
from .parts import AnswerParts, Parts
from .paying import Paying
from .pictures import Pictures, asks_for_picture, drawn
from .record import ClaimReads, TurnState
from .state import TurnStates
from .topics import TopicThreads, TopicTitles
from .values import Drawn, Output, Reply, Rules, Turn, TurnEnded, Writer

if TYPE_CHECKING:
    from .tools import ToolLoop

log = logging.getLogger("replychain.engine")

T = TypeVar("T")

PRIVATE_EDIT_INTERVAL = 1.0
GROUP_EDIT_INTERVAL = 3.0


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
        inputs: Inputs | None = None,
        voice: VoiceReader | None = None,
        albums: Albums | None = None,
        branches: Branches | None = None,
        topics: TopicTitles | None = None,
        threads: TopicThreads | None = None,
        tools: ToolLoop | None = None,
        outputs: Sequence[Output] = (),
        pictures: Pictures | None = None,
        stars: Stars | None = None,
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
        #: Titles private-chat topics after their first answer.
        self.topics = topics
        #: A private chat's topic is one conversation (TOPIC_THREADS), else ``None``.
        self.threads = threads
        self.albums = albums
        #: The catalogue's models and personas per branch (``None``: ``model`` answers
        #: every turn, as it does for a bot with one model and no personas).
        self.branches = branches
        #: The answers' parts: their journals, the chat's part ledger, lost parts.
        self.parts = Parts(states.redis, store, states, durably=self._durably, outage=redis_outage)
        #: What a turn and a user may cost, checked before each model call.
        self.limits = Limits(
            rules, store=store, accounting=accounting, tool_rounds=tools.max_rounds if tools else 0,
            stars=stars,
        )  # fmt: skip
        #: A payment's turn: credited once, confirmed once (STARS_USD).
        self.paying = Paying(
            states.redis, states, spending=stars.spending if stars else None,
            durably=self._durably,
        )  # fmt: skip
        #: The model step: the window, the call and its tool rounds, the answer stored.
        self.asking = Asking(
            store=store, states=states, accounting=accounting, context=context,
            limits=self.limits, durably=self._durably, tools=tools,
        )  # fmt: skip
        #: Where each message attaches, and its user node.
        self.attach = Attach(
            store=store, states=states, parts=self.parts, in_flight=in_flight,
            durably=self._durably, system_prompt=rules.system_prompt,
            root_prompt=self._root_prompt, inputs=inputs, voice=voice, threads=threads,
        )  # fmt: skip
        #: What answers send after their text, in order (bot/capabilities.py).
        self.outputs = tuple(outputs)
        #: Pictures made and changed (IMAGE_MODEL), else ``None``.
        self.pictures = pictures
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
        place = await self._place(inbound)
        state, prefs, mine, spend = await self._claim_reading(inbound, place)
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
        inbound = await self.attach.in_own_topic(inbound, state)
        journal = self.parts.journal(inbound, state)
        writer = self._writer(inbound, state, mine, journal)
        turn = Turn(
            inbound, state, writer, journal, ack, album=tuple(album), prefs=prefs, mine=mine,
            follows=place.follows,
            allowance=spend.allowance if spend else None,
        )  # fmt: skip
        try:
            try:
                reply = await self._steps(turn)
            except NothingToDo:
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
            await self.states.finish(inbound, state, writer.every_id, with_writes=[ack])
            self.metrics.turn("chat_unavailable", started)
        except AnswerRejectedError as exc:
            log.warning("Telegram refused the answer in chat %s: %s", inbound.chat_id, exc)
            ids, shown = writer.every_id, state.answer or state.user
            writes: list[Queued] = [ack]
            if shown is not None:  # a reply to what is on screen goes on from there
                writes.append(lambda pipe: self.store.queue_alias(pipe, inbound.scope, ids, shown))
            await self.states.finish(inbound, state, ids, with_writes=writes)
            self.metrics.turn("rejected", started)
        finally:
            await writer.close()  # after a failure nothing more is sent; a later run resumes
        return True

    def _writer(
        self, inbound: Inbound, state: TurnState, mine: UserPrefs, journal: AnswerParts
    ) -> Writer:
        if inbound.guest is not None:  # one message, posted once (bot/telegram/guest.py)
            return GuestWriter(
                self.out, query_id=inbound.guest, message_id=inbound.message_id,
                existing=state.parts, journal=journal,
            )  # fmt: skip
        return AnswerWriter(
            self.out,
            journal=journal,
            chat_id=inbound.chat_id,
            # the question is outside the topic its answer opened: no reply across topics
            reply_to=None if state.topic else inbound.message_id,
            thread_id=inbound.thread_id,
            edit_interval=GROUP_EDIT_INTERVAL if inbound.is_group else PRIVATE_EDIT_INTERVAL,
            existing=state.parts,
            attached=state.attached,
            # drafts (with a stop button) exist in private chats only
            draft_of=None if inbound.is_group else inbound.message_id,
            budget=self.group_budget if inbound.is_group else None,
            style=answer_style(self.rules.rich, mine.format),  # the asker's choice (/format)
        )

    async def _steps(self, turn: Turn) -> Reply:
        if turn.inbound.kind == PAYMENT:  # no model, no conversation: credited, confirmed
            return await self.paying.confirmation(turn)
        user = await self.attach.user_node(turn)
        turn.depth = user.depth + 1
        notes = "".join(f"{note}\n" for note in turn.notes)
        turn.writer.prefix = depth_tag(turn.depth) + voice_quote(turn.inbound, user) + notes
        if turn.state.lost_track:  # replying to the notice goes on from the message
            raise TurnEnded(Reply(_(notices.LOST_TRACK), user.id, notice=True))
        if turn.state.answer is not None:  # an earlier run stored it: show it
            stored = await self.store.current(turn.state.answer)
            message = stored.messages[-1]
            text = message.content or ""
            pictures = await self._drawn(turn, stored.id, own=bool(message.images))
            footer = await self._footer(turn, stored.id, text)
            return Reply(
                text + footer, stored.id, pictures=pictures, captioned=bool(message.images)
            )
        if self.pictures is not None and asks_for_picture(turn.inbound, user):
            await self.limits.guard(turn, user)
            await self.limits.spend(turn, user)  # payments: the allowance or the credit left
            inbound = turn.inbound  # a picture takes a while: "typing…" meanwhile
            async with self.out.typing(inbound.chat_id, inbound.thread_id, TYPING_EVERY):
                return await self.pictures.answer(turn, user, self.states)
        turn.branch = await self._branch(turn, user)
        turn.writer.prefix += turn.branch.note
        await self.limits.check_input(turn, user)
        await self.limits.check(turn, user)
        inbound = turn.inbound
        # the stop button shows from the first (empty) draft on
        with self.stops.watching(inbound.chat_id, inbound.message_id) as stop:
            await turn.writer.start()
            leaf, tools = user, None
            loop = self.asking.tools
            if loop is not None:
                tools = loop.offered(turn.inbound, turn.branch)
                leaf = await loop.leaf(turn.state, user)
                leaf = await loop.resume(
                    turn.state, leaf, turn.writer.update, self._durably, inbound=turn.inbound
                )
            while True:
                window = await self.asking.window(turn, leaf)
                answer = await self.asking.ask(turn, leaf, window, tools, stop=stop)
                if not (answer.tool_calls and tools) or answer.stopped:
                    break
                leaf = await self.asking.tool_round(turn, user, leaf, (window, answer))
        turn.writer.ended()
        shown = answer.text + await self._footer(turn, leaf.id, answer.text)
        shown = f"{shown}\n\n{_(notices.STOPPED)}" if answer.stopped else shown
        thoughts = answer.reasoning if self.rules.show_reasoning else ""
        # the final text's first new part (if any) is announced with the answer
        final = shown if shown.strip() else _(notices.EMPTY_ANSWER)
        try:
            first_new = turn.writer.next_new_part(final, thoughts)
        except Exception:  # met again when it is shown, once the answer is stored
            first_new = 0  # (failing here would ask the model again on the next try)
        node = await self.asking.store_answer(turn, leaf, (window, answer), announce=first_new)
        return Reply(shown, node, reasoning=thoughts, pictures=await self._drawn(turn, node))

    async def _drawn(self, turn: Turn, node: NodeId, *, own: bool = False) -> tuple[Drawn, ...]:
        """The pictures an answer shows: its own (``own``: an ``/image`` answer), or those
        its tool rounds made (none elsewhere: nothing to read)."""
        if not (own or (self.pictures is not None and turn.state.tool_steps)):
            return ()
        return drawn(await self.store.path(node))

    async def _footer(self, turn: Turn, upto: NodeId, text: str) -> str:
        """Under the answer, in its message, never stored: what its tool rounds brought
        (the sources it cites; :meth:`bot.turn.tools.ToolLoop.footer`)."""
        loop = self.asking.tools
        return await loop.footer(turn.state, upto, text) if loop is not None else ""

    async def _deliver(self, turn: Turn, reply: Reply) -> None:
        """The one place a turn finishes: show the reply, then one write records it all.

        That write marks the turn done, records and aliases every part, acknowledges the
        intake entry and, in a private chat's topic, notes the topic's newest answer.
        """
        inbound, node = turn.inbound, reply.node
        if reply.notice:
            personal = await self._personal(turn, reply) if reply.personal else None
            if personal is None:
                ids = await turn.writer.fail(reply.text, markup=reply.markup)
            else:
                ids = personal
        else:
            text = reply.text if reply.text.strip() else _(notices.EMPTY_ANSWER)
            if not reply.captioned:
                ids = await turn.writer.finish(text, reasoning=reply.reasoning)
            ids = await self._attachments(turn, reply, text)
        writes: list[Queued] = [turn.ack, self.accounting.queue_settled(inbound.scope)]
        newest = self.threads.queue_newest(inbound, node) if self.threads else None
        if newest is not None:  # before the end, which lets the topic's next turn go on
            writes.insert(0, newest)
        if node is None:  # a reply to it starts a new conversation
            writes.append(lambda pipe: self.store.queue_unthreaded(pipe, inbound.scope, ids))
        else:
            writes.append(lambda pipe: self.store.queue_alias(pipe, inbound.scope, ids, node))
            lost = turn.journal.lost_range(node, ids, depth=turn.depth)
            if lost is not None:  # a part an earlier run sent may be on screen unrecorded
                writes.append(lost)
        await self._durably(
            lambda: self.states.finish(inbound, turn.state, ids, with_writes=writes, holding=node)
        )

    async def _attachments(self, turn: Turn, reply: Reply, text: str) -> list[int]:
        """After the answer's text, its attachments: what each registered output sends
        (:class:`~bot.turn.values.Output`: its pictures, then the text read aloud), and
        the lines they leave under the text for what they could not send; every part's
        id."""
        writer = turn.writer
        if not isinstance(writer, AnswerWriter) or reply.node is None:
            return writer.every_id  # (a guest answer is one message of text)
        outputs = [output for output in self.outputs if output.wanted(turn, reply)]
        if outputs:
            await writer.settle()  # before an attachment is announced
        first, lines = 1, []
        for output in outputs:
            sent = await output.send(turn, writer, reply, text=text, first=first)
            first = sent.next
            lines += [sent.line] if sent.line else []
        if lines:  # the text answer stands, with those lines under it
            await writer.finish("\n\n".join([text, *lines]), reasoning=reply.reasoning)
        return writer.every_id

    async def _personal(self, turn: Turn, reply: Reply) -> list[int] | None:
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
            inbound.chat_id, reply.text, receiver=inbound.user_id, reply_to=inbound.message_id,
            thread_id=inbound.thread_id, markup=reply.markup,
        )  # fmt: skip
        return [sent] if sent else []

    # ----------------------------------------------------------------- the steps

    async def _place(self, inbound: Inbound) -> Place:
        """Where the message attaches, before the claim (the branch's node when the
        catalogue's reads need it)."""
        return await self.attach.place(inbound, target=self.branches is not None)

    async def _claim_reading(
        self, inbound: Inbound, place: Place
    ) -> tuple[TurnState | None, Prefs, UserPrefs, SpendReads | None]:
        """Claim the turn and read its state (``None``: another worker has it); the
        user's node goes along when it can (``place.early``), and so do the
        reads that resolve the branch's model (:class:`~bot.turn.branch.BranchReads`):
        the tree's choices, fresh on every turn, and the user's defaults; the asker's
        own settings (:class:`~bot.data.userprefs.UserReads`); and with payments, the
        asker's spend settled (:class:`~bot.payments.SpendReads`)."""
        early = place.early
        mine = UserReads(inbound.user_id)
        reads: list[ClaimReads] = [mine]
        spend = self.limits.reads(inbound.user_id) if inbound.kind != PAYMENT else None
        if spend is not None:
            reads.append(spend)
        branch = None
        if self.branches is not None:
            branch = self.branches.reads(inbound, place.target)
            reads.append(branch)
        if early is None:
            state = await self.states.begin(inbound, reads)
        else:
            state = await self.states.begin_with_user(inbound, early.placement, reads)
        return state, branch.prefs if branch is not None else Prefs(), mine.prefs, spend

    async def _branch(self, turn: Turn, user: Node) -> Branch:
        """The model and personas of this turn's branch (/retry <model>: that model)."""
        if self.branches is None:
            return Branch(self.model)
        inbound = turn.inbound
        override = inbound.text.strip() if inbound.kind == RETRY else ""
        return await self.branches.resolve(user.id, turn.prefs, override=override or None)

    def _root_prompt(self, prefs: Prefs) -> str:
        """The system prompt of a new conversation (the user's default persona's)."""
        if self.branches is None:
            return self.rules.system_prompt
        return self.branches.root_prompt(prefs)

    async def _durably(self, call: Callable[[], Awaitable[T]]) -> T:
        """A write whose loss would cost a model call or a thread: waits while Redis is away."""
        return await self.redis_outage.guard(call, on=(StoreUnavailableError,))

    # ------------------------------------------------------------- failures

    async def failed(self, inbound: Inbound) -> int:
        return await self.states.failed(inbound)

    async def give_up(self, inbound: Inbound, error: BaseException) -> None:
        """After the last failed attempt: keep the thread usable and tell the user once
        (:func:`bot.turn.giving_up.give_up`)."""
        await give_up(self.states, self.store, self.out, inbound)
