"""Asking the model: the context window, the streamed call (and its tool rounds), the
answer stored with its call's usage.

The model's answer streams into the turn's writer as it comes; a failure ends the turn
with a notice (its cost recorded); an image the model cannot read is set aside and the
question asked again without it, once. The answer node is placed with the call's usage
in one round trip, and the first part the final text will send is announced on it.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio.client import Pipeline

from transcript import Node, NodeId, TranscriptStore

from ..i18n import _, number
from ..model import Answer, ModelError
from ..usage.accounting import Accounting
from ..usage.calls import CallRecord
from . import notices
from .context import ContextWindow, MessageTooLargeError
from .limits import Limits
from .parts import Durably
from .state import TurnStates
from .tools import ToolLoop
from .values import Reply, Turn, TurnEnded
from .window import Window

log = logging.getLogger("replychain.engine")


class Asking:
    """The model step of every turn (one per bot)."""

    def __init__(
        self, *, store: TranscriptStore, states: TurnStates, accounting: Accounting,
        context: ContextWindow, limits: Limits, durably: Durably, tools: ToolLoop | None = None,
    ) -> None:  # fmt: skip
        self.store, self.states, self.accounting = store, states, accounting
        self.context, self.limits, self._durably = context, limits, durably
        #: The tool loop (MCP_CONFIG), else ``None``.
        self.tools = tools

    async def window(self, turn: Turn, leaf: Node) -> Window:
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

    async def ask(
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
            call = self.call(turn, user.id, window, exc)
            await self.accounting.record(call)
            aside = (
                context.set_aside(inbound, turn.state, window, exc, model=turn.model.name)
                if exc.kind == "bad_image"
                else None
            )
            if aside is not None:
                # answer at once without that image: one more call, under the turn guard
                await self.states.count_call(turn.state, with_writes=aside)
                await self.limits.check(turn, user)
                if _(notices.IMAGE_SET_ASIDE) not in turn.writer.prefix:
                    turn.writer.prefix += _(notices.IMAGE_SET_ASIDE)
                without = await self.window(turn, user)
                answer = await self.ask(turn, user, without, tools, stop=stop)
                await context.answered(inbound, turn.state)
                return answer
            text = notices.model_error(exc.kind)
            raise TurnEnded(Reply(text, user.id, notice=True)) from None
        if answer.stopped and not answer.text.strip():
            # stopped before any text: nothing to keep but what the call cost
            call = self.call(turn, user.id, window, answer)
            await self.accounting.record(call)
            raise TurnEnded(Reply(_(notices.STOPPED_EARLY), user.id, notice=True))
        context.learn(window.messages, answer.usage, tools=tools is not None)
        return answer

    async def tool_round(
        self, turn: Turn, user: Node, leaf: Node, asked: tuple[Window, Answer]
    ) -> Node:
        """The model asked for tools: run them, store the step, count the next call."""
        assert self.tools is not None
        state = turn.state
        window, answer = asked
        call = self.call(turn, leaf.id, window, answer)
        await self.accounting.record(call)
        if self.tools.rounds(state) >= self.tools.max_rounds:
            text = _(notices.TOOL_ROUNDS).format(rounds=self.tools.max_rounds)
            raise TurnEnded(Reply(text, leaf.id, notice=True))
        leaf = await self.tools.round(
            state, leaf=leaf, answer=answer, progress=turn.writer.update, durably=self._durably,
            inbound=turn.inbound,
        )  # fmt: skip
        await self.tools.count_call(state)
        await self.limits.check(turn, user)
        return leaf

    async def store_answer(
        self, turn: Turn, user: Node, asked: tuple[Window, Answer], *, announce: int
    ) -> NodeId:
        """Store the answer node and the call's usage; both wait for Redis if it is away.

        ``user`` is the node the answer hangs below (the last tool step, if any).
        ``announce``: the number of the part the final text sends first (0: none), noted
        in the chat's part ledger on the same round trip, so that part needs no round
        trip of its own before it is sent.
        """
        window, answer = asked
        call = self.call(turn, user.id, window, answer)
        inbound, state, parts = turn.inbound, turn.state, turn.writer.message_ids
        placement = await self._durably(
            lambda: self.states.answer_placement(state, user, answer.text, parts)
        )
        settle = self.limits.settle(inbound.user_id)

        def writes(pipe: Pipeline) -> None:
            # independent idempotent writes, one round trip with the call's usage
            self.store.queue_place(pipe, placement)
            if announce:
                TurnStates.queue_sending(pipe, inbound, state, announce)
            if settle is not None:  # payments: the call's cost drawn now, after its totals
                settle(pipe)

        [reply, *_others] = await self.accounting.record(call, with_writes=writes)
        if announce:
            state.sending = announce
        node = await self._durably(lambda: self.states.answer_placed(state, placement, reply))
        return node.id

    def call(
        self, turn: Turn, sent: NodeId, window: Window, result: Answer | ModelError
    ) -> CallRecord:
        """The record of one model call: the request ``window`` up to ``sent``, and its
        answer or its failure."""
        error = result.kind if isinstance(result, ModelError) else None
        return CallRecord.of(
            turn.inbound, sent, model=turn.model.name, usage=result.usage,
            latency=result.latency, error=error, view=window.view,
        )  # fmt: skip
