"""The tool rounds of one turn, each step persisted before the next.

A round: the model answered with tool calls -> the assistant message (its
``tool_calls``) is noted in the turn's state -> the calls run in parallel, each
result noted as it arrives -> one node holding the assistant message and one
``tool`` message per call is appended below the previous step (the user's node
first) -> the model is asked again. The answer node hangs below the last step.
A call and its results therefore always share one node: every view of the
chain (branches, after a restart, after a fold, which cuts at node boundaries
only) holds both or neither. Every note and node goes through the turn's state
(:class:`bot.turn.state.TurnStates`), which owns the fields they live in.

A turn resumed after a crash appends the rounds already stored, then, for a
noted round whose node is missing, reuses every noted result, runs again only
calls of tools marked read-only or idempotent, and tells the model that any
other call was interrupted: a stored result is never run again, and a tool that
may have had an effect is never run twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from transcript import ChatMessage, Node, ToolCall, TranscriptStore

from ..bus.inbound import Inbound
from ..i18n import _
from ..model import Answer, Media
from ..tools.box import Toolbox, ToolCallContext, ToolResult
from .record import TurnState
from .state import TurnStates

log = logging.getLogger("replychain.tools")

T = TypeVar("T")
ERROR_MARK = "[tool error] "
INTERRUPTED = (
    ERROR_MARK + "this call was interrupted (the bot restarted) and was not run again, "
    "because the tool may have had an effect; it may or may not have completed."
)


class ToolModel(Protocol):
    """The model edge as the loop needs it: a streamed answer with tools offered."""

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        *,
        tools: bytes | None = None,
        media: Media = None,
    ) -> Answer: ...


class ToolLoop:
    """Runs and persists tool rounds; one per bot, shared by every turn."""

    def __init__(
        self,
        box: Toolbox,
        model: ToolModel,
        store: TranscriptStore,
        states: TurnStates,
        *,
        max_rounds: int = 8,
        in_groups: bool = False,
        max_result_chars: int = 100_000,
    ) -> None:
        self.box = box
        self.model = model
        self.store = store
        self.states = states
        self.max_rounds = max_rounds
        self.in_groups = in_groups
        self.max_result_chars = max_result_chars

    def offered(self, inbound: Inbound) -> bytes | None:
        """The ``tools`` array for this turn's calls, or ``None`` (no tools here)."""
        if inbound.is_group and not self.in_groups:
            return None
        return self.box.spec_bytes

    async def ask(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        tools: bytes,
        *,
        media: Media = None,
        model: ToolModel | None = None,
    ) -> Answer:
        """The model's answer with tools offered (``model``: the branch's, else the bot's)."""
        return await (model or self.model).stream(messages, on_text, tools=tools, media=media)

    @staticmethod
    def rounds(state: TurnState) -> int:
        """How many rounds of this turn are stored as nodes."""
        return len(state.tool_steps)

    async def leaf(self, state: TurnState, user: Node) -> Node:
        """The last stored step of the turn (the user's node when there is none)."""
        if not state.tool_steps:
            return user
        return await self.store.node(state.tool_steps[-1])

    async def resume(
        self,
        state: TurnState,
        leaf: Node,
        progress: Callable[[str], None],
        durably: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
        *,
        inbound: Inbound,
    ) -> Node:
        """Finish a round an earlier run noted but did not store; the new leaf."""
        if state.noted_round is None:
            return leaf
        k, assistant = state.noted_round
        if k != self.rounds(state) + 1:
            return leaf  # that round's node is stored
        done: dict[int, ChatMessage] = {}
        for i, call in enumerate(assistant.tool_calls):
            result = state.noted_results.get(i)
            if result is not None:
                done[i] = result
            elif not self.box.idempotent(call.name):
                log.info("tool call %s of an interrupted turn is not run again", call.name)
                done[i] = ChatMessage("tool", INTERRUPTED, tool_call_id=call.id)
        log.info("resuming tool round %d of a turn: %d call(s) settled", k, len(done))
        context = ToolCallContext(inbound, leaf)
        results = await self._run(
            state, k, assistant.tool_calls, done=done, progress=progress, durably=durably,
            context=context,
        )  # fmt: skip
        return await self._store(state, leaf, (k, assistant, results), durably)

    async def round(
        self,
        state: TurnState,
        *,
        leaf: Node,
        answer: Answer,
        progress: Callable[[str], None],
        durably: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
        inbound: Inbound,
    ) -> Node:
        """Run the calls of ``answer`` and store the step; the new leaf."""
        k = self.rounds(state) + 1
        assistant = ChatMessage("assistant", answer.text or None, answer.tool_calls)
        await durably(lambda: self.states.note_tool_round(state, k, assistant))
        results = await self._run(
            state, k, answer.tool_calls, done={}, progress=progress, durably=durably,
            context=ToolCallContext(inbound, leaf),
        )  # fmt: skip
        return await self._store(state, leaf, (k, assistant, results), durably)

    async def count_call(self, state: TurnState) -> None:
        """One more model call of this turn (the turn guard counts the whole loop)."""
        await self.states.count_call(state)

    async def _run(
        self,
        state: TurnState,
        k: int,
        calls: Sequence[ToolCall],
        *,
        done: dict[int, ChatMessage],
        progress: Callable[[str], None],
        durably: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
        context: ToolCallContext,
    ) -> list[ChatMessage]:
        todo = [i for i in range(len(calls)) if i not in done]
        if todo:
            names = ", ".join(dict.fromkeys(self._label(calls[i].name) for i in todo))
            progress(_("🔧 Using {names}…").format(names=names))

        async def one(i: int) -> None:
            call = calls[i]
            result = await self.box.call(call.name, call.arguments, context)
            message = self._message(call, result, share=len(calls))
            await durably(lambda: self.states.note_tool_result(state, k, i, message))
            done[i] = message

        await asyncio.gather(*(one(i) for i in todo))
        return [done[i] for i in range(len(calls))]

    def _label(self, name: str) -> str:
        return self.box.label(name)

    def _message(self, call: ToolCall, result: ToolResult, *, share: int) -> ChatMessage:
        """The ``tool`` message of a result; a round's results together stay within
        ``max_result_chars`` (each is cut to its share, with a note saying so)."""
        text, most = result.text, self.max_result_chars // max(1, share)
        if len(text) > most:
            text = text[:most] + f"\n[cut: {len(result.text)} characters in all]"
        return ChatMessage(
            "tool",
            (ERROR_MARK + text) if result.error else text,
            tool_call_id=call.id,
            images=result.images,
        )

    async def _store(
        self,
        state: TurnState,
        leaf: Node,
        step: tuple[int, ChatMessage, list[ChatMessage]],
        durably: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
    ) -> Node:
        k, assistant, results = step
        node: Node = await durably(
            lambda: self.states.store_tool_step(state, k, leaf, [assistant, *results])
        )
        return node
