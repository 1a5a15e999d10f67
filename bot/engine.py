"""The turn flow, in one place: route, assemble, ask the model, answer, store.

A turn flows one way::

    inbound message -> route (alias lookup) -> assemble the chain -> store the
    user's node -> stream the model's answer into Telegram -> store the answer
    node with every part's message id as alias

It knows Telegram only through :class:`~bot.telegram.TelegramOut` and the model
only through the :class:`Model` protocol, so tests and benchmarks can drive it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from transcript import (
    ChatMessage,
    Node,
    NodeId,
    RecordError,
    StoreUnavailableError,
    TranscriptStore,
)

from .accounting import Accounting, CallRecord, next_reset
from .answer import AnswerWriter
from .context import ContextWindow, MessageTooLargeError
from .journal import Journal, TurnState, answer_idem, root_idem, user_idem
from .model import ModelError
from .telegram import (
    AnswerRejectedError,
    ChatUnavailableError,
    TelegramOut,
    TelegramUnavailableError,
)
from .turn import Inbound, Model

log = logging.getLogger("replychain.engine")

PRIVATE_EDIT_INTERVAL = 1.0
GROUP_EDIT_INTERVAL = 3.0

MODEL_ERROR_NOTICES = {
    "rate_limited": "The model is busy right now (rate limited).",
    "unavailable": "The model is not reachable right now.",
    "timeout": "The model took too long to answer.",
    "too_long": "This conversation is too long for the model. Start a new one by sending a "
    "message that replies to nothing.",
    "rejected": "The model rejected this request.",
    "config": "The bot cannot use its model (check OPENAI_API_KEY, OPENAI_BASE_URL and "
    "OPENAI_MODEL).",
}
RETRY_HINT = "Your message is kept: reply to it again to retry."
EMPTY_ANSWER = "(the model returned an empty answer)"
DAILY_LIMIT_NOTICE = (
    "You have used your {limit} tokens for today. The limit resets at {reset} "
    "(in {wait}); your message is kept: reply to it then to get an answer."
)
TOO_LONG_NOTICE = (
    "Your message is too long ({length} characters; the limit is {limit}). Please send a "
    "shorter one, or reply to this message to continue the conversation without it."
)
TOO_LARGE_NOTICE = (
    "Your message is too large for me to answer: it does not fit in the {budget} tokens one "
    "request may use (CONTEXT_TOKEN_BUDGET). Please send a shorter one."
)
TURN_GUARD_NOTICE = (
    "⚠️ I stopped trying to answer this message: it already used the most model calls "
    "or tokens one message may use. Please rephrase it in a new message."
)
#: Turns whose progress is carried in memory while Redis or Telegram is away.
MAX_UNFINISHED = 10_000
#: How long a reply to a part of an answer still being written waits for it.
PART_WAIT = 120.0
RECORD_NOTICE = (
    "⚠️ This conversation's stored history is damaged ({ref}), so I will not answer "
    "from a partial transcript. Start a new conversation by sending a message that "
    "replies to nothing."
)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one message and one user may cost (0 = unlimited where it applies)."""

    max_input_chars: int = 16000
    user_daily_tokens: int = 0
    max_calls_per_turn: int = 3
    max_tokens_per_turn: int = 0


def _duration(delta: timedelta) -> str:
    minutes = max(1, int(delta.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"


@dataclass(frozen=True, slots=True)
class TurnResult:
    user_node: NodeId
    answer_node: NodeId | None
    depth: int
    message_ids: tuple[int, ...]


class Engine:
    """Runs turns: the one function that carries a message to its answer.

    Every step is idempotent or journaled, so running a turn again after a crash
    or a redelivery finishes it instead of repeating it.
    """

    def __init__(
        self,
        store: TranscriptStore,
        model: Model,
        out: TelegramOut,
        journal: Journal,
        accounting: Accounting,
        context: ContextWindow,
        *,
        system_prompt: str,
        limits: Limits,
    ) -> None:
        self.store = store
        self.model = model
        self.out = out
        self.journal = journal
        self.accounting = accounting
        self.context = context
        #: Turns that failed for want of Redis or Telegram, with what they had done.
        self._unfinished: dict[tuple[int, int], TurnState] = {}
        self.system_prompt = system_prompt
        self.limits = limits

    async def turn(self, inbound: Inbound) -> TurnResult | None:
        """Answer one message (or finish answering it); ``None`` if already answered.

        User-facing failures end in a clear notice; Redis being unreachable
        raises :class:`~transcript.StoreUnavailableError` so the caller retries.
        """
        scope, message_id = inbound.scope, inbound.message_id
        state = await self.journal.load(scope, message_id)
        carried = self._unfinished.pop((inbound.chat_id, message_id), None)
        if carried is not None:
            state.carry(carried)
        if state.done:
            return None
        try:
            return await self._turn(inbound, state)
        except (StoreUnavailableError, TelegramUnavailableError):
            # the runner retries this turn: keep what Redis could not take meanwhile
            if len(self._unfinished) < MAX_UNFINISHED:
                self._unfinished[(inbound.chat_id, message_id)] = state
            raise
        except ChatUnavailableError as exc:
            log.info("chat %s is unavailable (%s); dropping its answer", inbound.chat_id, exc)
        except AnswerRejectedError as exc:
            log.warning("Telegram refused the answer in chat %s: %s", inbound.chat_id, exc)
        except RecordError as exc:
            log.error("turn in chat %s failed: %s", inbound.chat_id, exc)
            await self._notify(inbound, RECORD_NOTICE.format(ref=exc.ref))
        await self.journal.finish(scope, message_id, state.parts)
        return None

    async def _turn(self, inbound: Inbound, state: TurnState) -> TurnResult:
        scope, message_id = inbound.scope, inbound.message_id
        if state.user is not None:
            user_node = await self.store.node(state.user)
        else:
            user_node = await self._store_user_message(inbound)

        async def journal_parts(parts: list[int]) -> None:
            state.parts = parts
            await self.journal.add_part(scope, message_id, parts)

        writer = AnswerWriter(
            self.out,
            chat_id=inbound.chat_id,
            reply_to=message_id,
            thread_id=inbound.thread_id,
            prefix=f"[depth:{user_node.depth + 1}] ",
            edit_interval=GROUP_EDIT_INTERVAL if inbound.is_group else PRIVATE_EDIT_INTERVAL,
            existing=state.parts,
            on_part=journal_parts,
        )
        try:
            return await self._answer(inbound, state, user_node, writer)
        except BaseException:
            await writer.close()  # nothing more is sent; a later run resumes
            raise

    async def _answer(
        self,
        inbound: Inbound,
        state: TurnState,
        user_node: Node,
        writer: AnswerWriter,
    ) -> TurnResult:
        scope, message_id = inbound.scope, inbound.message_id
        if state.answer is not None:
            answer_node = await self.store.node(state.answer)
            text = answer_node.messages[-1].content or ""
        else:
            if state.answer_text is None:
                ended = await self._ask(inbound, state, user_node, writer)
                if ended is not None:
                    return ended
            await self.accounting.flush()
            text = state.answer_text or ""
            answer_node = await self.store.append(
                user_node.id, [ChatMessage("assistant", text)], idem=answer_idem(message_id)
            )
        ids = await writer.finish(text if text.strip() else EMPTY_ANSWER)
        await self.store.alias(scope, ids, answer_node.id)
        await self.journal.finish(scope, message_id, ids)
        return TurnResult(user_node.id, answer_node.id, answer_node.depth, tuple(ids))

    async def _ask(
        self, inbound: Inbound, state: TurnState, user_node: Node, writer: AnswerWriter
    ) -> TurnResult | None:
        """Ask the model (``state.answer_text``), or end the turn with a notice instead."""
        if len(inbound.text) > self.limits.max_input_chars:
            notice = TOO_LONG_NOTICE.format(
                length=len(inbound.text), limit=self.limits.max_input_chars
            )
            ids = await writer.fail(notice)
            # kept, but replying to the notice retries without the over-long message
            parent = (await self.store.path(user_node.id))[-2]
            return await self._end_without_answer(inbound, parent.id, ids)
        refusal = await self._refusal(inbound, state)
        if refusal is not None:
            return await self._end_without_answer(inbound, user_node.id, await writer.fail(refusal))
        writer.start()
        try:
            window = await self.context.prepare(inbound, user_node.id)
        except MessageTooLargeError:
            ids = await writer.fail(TOO_LARGE_NOTICE.format(budget=self.context.budget))
            return await self._end_without_answer(inbound, user_node.id, ids)
        await self.journal.count_call(inbound.scope, inbound.message_id)
        try:
            answer = await self.model.stream(window.messages, writer.update)
        except ModelError as exc:
            log.warning("model call for chat %s failed: %s", inbound.chat_id, exc)
            await self.accounting.record(
                CallRecord.of(
                    inbound, user_node.id, self.model.name, exc.usage, exc.latency,
                    error=exc.kind, view=window.view,
                )
            )  # fmt: skip
            notice = f"⚠️ {MODEL_ERROR_NOTICES[exc.kind]} {RETRY_HINT}"
            ids = await writer.fail(notice)
            return await self._end_without_answer(inbound, user_node.id, ids)
        # kept in memory first: if Redis fails from here on, a retry needs no new call
        state.answer_text = answer.text
        self.context.learn(window.messages, answer.usage)
        await self.accounting.record(
            CallRecord.of(
                inbound, user_node.id, self.model.name, answer.usage, answer.latency,
                error=None, view=window.view,
            )
        )  # fmt: skip
        return None

    async def _refusal(self, inbound: Inbound, state: TurnState) -> str | None:
        """Why no model call may be made for this turn, or ``None``."""
        calls, spent = state.calls, 0
        if self.limits.max_tokens_per_turn:
            spent = (await self.accounting.turn(inbound.chat_id, inbound.message_id)).tokens
        if calls >= self.limits.max_calls_per_turn or (
            self.limits.max_tokens_per_turn and spent >= self.limits.max_tokens_per_turn
        ):
            log.warning(
                "turn for message %s in chat %s stopped: %d model calls, %d tokens",
                inbound.message_id, inbound.chat_id, calls, spent,
            )  # fmt: skip
            return TURN_GUARD_NOTICE
        daily = self.limits.user_daily_tokens
        if daily and (await self.accounting.user_today(inbound.user_id)).tokens >= daily:
            now = self.accounting.clock()
            reset = next_reset(now)
            return DAILY_LIMIT_NOTICE.format(
                limit=daily, reset=reset.strftime("%H:%M UTC"), wait=_duration(reset - now)
            )
        return None

    async def _store_user_message(self, inbound: Inbound) -> Node:
        scope = inbound.scope
        parent = await self._route(inbound)
        if parent is None:
            root = await self.store.start(
                scope,
                [ChatMessage("system", self.system_prompt)],
                idem=root_idem(inbound.message_id),
            )
            parent = root.id
        user_node = await self.store.append(
            parent,
            [ChatMessage("user", inbound.text)],
            idem=user_idem(inbound.message_id),
            aliases=[inbound.message_id],
        )
        return user_node

    async def _route(self, inbound: Inbound) -> NodeId | None:
        """The node the message continues, or ``None`` for a new conversation.

        A reply to a part of an answer that is still being written waits for
        that turn to store its answer, so it continues the answer, not a stub.
        """
        if inbound.reply_to is None:
            return None
        scope, target = inbound.scope, inbound.reply_to
        node = await self.store.resolve(scope, target)
        deadline = time.monotonic() + PART_WAIT
        while node is None and time.monotonic() < deadline:
            if await self.journal.turn_of_part(scope, target) is None:
                break
            await asyncio.sleep(0.2)
            node = await self.store.resolve(scope, target)
        return node

    async def _end_without_answer(
        self, inbound: Inbound, user_node: NodeId, ids: list[int]
    ) -> TurnResult:
        """A notice instead of an answer: replying to it continues from ``user_node``."""
        await self.store.alias(inbound.scope, ids, user_node)
        await self.journal.finish(inbound.scope, inbound.message_id, ids)
        node = await self.store.node(user_node)
        return TurnResult(user_node, None, node.depth, tuple(ids))

    async def _notify(self, inbound: Inbound, text: str) -> None:
        try:
            await self.out.send_text(
                inbound.chat_id, text, reply_to=inbound.message_id, thread_id=inbound.thread_id
            )
        except Exception as exc:  # the notice is best effort; the log has the cause
            log.warning("could not tell chat %s: %s", inbound.chat_id, type(exc).__name__)
