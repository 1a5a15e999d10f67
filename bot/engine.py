"""The turn flow, in one place: route, assemble, ask the model, answer, store.

A turn flows one way::

    inbound message -> route (alias lookup) -> assemble the chain -> store the
    user's node -> stream the model's answer into Telegram -> store the answer
    node with every part's message id as alias

It knows Telegram only through :class:`~bot.telegram.TelegramOut` and the model
only through the :class:`Model` protocol, so tests and benchmarks can drive it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from transcript import ChatMessage, NodeId, TranscriptError, TranscriptStore

from .answer import AnswerWriter
from .model import Answer, ModelError
from .telegram import ChatUnavailableError, TelegramOut

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
STORE_NOTICE = (
    "⚠️ I could not reach my conversation store, so I did not answer. "
    "Please send your message again in a minute."
)
RECORD_NOTICE = (
    "⚠️ This conversation's stored history is damaged ({ref}), so I will not answer "
    "from a partial transcript. Start a new conversation by sending a message that "
    "replies to nothing."
)


class Model(Protocol):
    """What the turn flow needs from a model (:class:`~bot.model.ModelClient`)."""

    async def stream(
        self, messages: Sequence[ChatMessage], on_text: Callable[[str], None]
    ) -> Answer: ...


@dataclass(frozen=True, slots=True)
class Inbound:
    """A user's text message, stripped of everything Telegram-specific but ids."""

    chat_id: int
    message_id: int
    user_id: int
    text: str
    reply_to: int | None = None
    thread_id: int | None = None
    is_group: bool = False

    @property
    def scope(self) -> str:
        return str(self.chat_id)


@dataclass(frozen=True, slots=True)
class TurnResult:
    user_node: NodeId
    answer_node: NodeId | None
    depth: int
    message_ids: tuple[int, ...]


class Engine:
    """Runs turns: the one function that carries a message to its answer."""

    def __init__(
        self,
        store: TranscriptStore,
        model: Model,
        out: TelegramOut,
        *,
        system_prompt: str,
        max_input_chars: int,
    ) -> None:
        self.store = store
        self.model = model
        self.out = out
        self.system_prompt = system_prompt
        self.max_input_chars = max_input_chars

    async def turn(self, inbound: Inbound) -> TurnResult | None:
        """Answer one message; user-facing failures end in a clear notice."""
        try:
            return await self._turn(inbound)
        except ChatUnavailableError as exc:
            log.info("chat %s is unavailable (%s); dropping its answer", inbound.chat_id, exc)
        except TranscriptError as exc:
            log.error("turn in chat %s failed: %s", inbound.chat_id, exc)
            await self._notify(inbound, _store_notice(exc))
        return None

    async def _turn(self, inbound: Inbound) -> TurnResult:
        scope = inbound.scope
        parent = None
        if inbound.reply_to is not None:
            parent = await self.store.resolve(scope, inbound.reply_to)
        if parent is None:
            root = await self.store.start(
                scope,
                [ChatMessage("system", self.system_prompt)],
                idem=f"root:{inbound.message_id}",
            )
            parent = root.id
        history = await self.store.active(parent)
        user_message = ChatMessage("user", inbound.text)
        user_node = await self.store.append(
            parent,
            [user_message],
            idem=f"in:{inbound.message_id}",
            aliases=[inbound.message_id],
        )
        depth = user_node.depth + 1
        writer = AnswerWriter(
            self.out,
            chat_id=inbound.chat_id,
            reply_to=inbound.message_id,
            thread_id=inbound.thread_id,
            prefix=f"[depth:{depth}] ",
            edit_interval=GROUP_EDIT_INTERVAL if inbound.is_group else PRIVATE_EDIT_INTERVAL,
        )
        if len(inbound.text) > self.max_input_chars:
            notice = (
                f"Your message is too long ({len(inbound.text)} characters; the limit is "
                f"{self.max_input_chars}). Please send a shorter one."
            )
            ids = await writer.fail(notice)
            await self.store.alias(scope, ids, user_node.id)
            return TurnResult(user_node.id, None, user_node.depth, tuple(ids))
        writer.start()
        try:
            answer = await self.model.stream([*history.messages, user_message], writer.update)
        except ModelError as exc:
            log.warning("model call for chat %s failed: %s", inbound.chat_id, exc)
            notice = f"⚠️ {MODEL_ERROR_NOTICES[exc.kind]} {RETRY_HINT}"
            ids = await writer.fail(notice)
            # replying to the notice continues from the user's message: a retry
            await self.store.alias(scope, ids, user_node.id)
            return TurnResult(user_node.id, None, user_node.depth, tuple(ids))
        except BaseException:
            await writer.close()
            raise
        text = answer.text if answer.text.strip() else "(the model returned an empty answer)"
        ids = await writer.finish(text)
        answer_node = await self.store.append(
            user_node.id,
            [ChatMessage("assistant", answer.text)],
            idem=f"answer:{user_node.id.ref}",
            aliases=ids,
        )
        return TurnResult(user_node.id, answer_node.id, answer_node.depth, tuple(ids))

    async def _notify(self, inbound: Inbound, text: str) -> None:
        try:
            await self.out.send_text(
                inbound.chat_id, text, reply_to=inbound.message_id, thread_id=inbound.thread_id
            )
        except Exception as exc:  # the notice is best effort; the log has the cause
            log.warning("could not tell chat %s: %s", inbound.chat_id, type(exc).__name__)


def _store_notice(exc: TranscriptError) -> str:
    ref = getattr(exc, "ref", None)
    return RECORD_NOTICE.format(ref=ref) if ref else STORE_NOTICE
