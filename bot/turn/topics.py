"""Titles for private-chat topics whose name Telegram made up.

In a private chat with topics (Bot API 9.3+), a topic created without a name
arrives as a ``forum_topic_created`` service message with ``is_name_implicit``;
the update handler notes it (:meth:`TopicTitles.note`). After the topic's first
answer the turn asks the model for a short title (one small call, recorded in
the usage like any other) and renames the topic with ``editForumTopic``. A topic
its creator named is never noted, so never renamed. Titling is best effort: the
note is taken before the call (one title per topic, even with several
processes), and a failure is logged, never retried and never shown.
"""

from __future__ import annotations

import logging

from aiogram.exceptions import TelegramAPIError
from redis.asyncio import Redis

from transcript import ChatMessage, NodeId, StoreUnavailableError, TranscriptStore

from ..bus.inbound import Inbound
from ..data import keys
from ..data.connection import guarded
from ..model import Model, ModelError
from ..telegram.out import TelegramOut, TelegramUnavailableError
from ..usage.accounting import Accounting
from ..usage.calls import TITLE_VIEW, CallRecord

log = logging.getLogger("replychain.topics")

TITLE_INSTRUCTIONS = (
    "Give a short title, at most six words, for the conversation below, in its language. "
    "Write only the title: no quotes, no final full stop."
)
TITLE_MAX_TOKENS = 24
#: Characters of the question and of the answer shown to the title call.
_EXCERPT = 1000
#: Telegram's longest topic name.
NAME_LIMIT = 128
_IMPLICIT = "implicit"


class TopicTitles:
    """Notes topics waiting for a title and titles them after their first answer."""

    def __init__(
        self,
        redis: Redis,
        *,
        store: TranscriptStore,
        model: Model,
        out: TelegramOut,
        accounting: Accounting,
        enabled: bool,
    ) -> None:
        self.redis, self.store, self.model = redis, store, model
        self.out, self.accounting, self.enabled = out, accounting, enabled

    async def note(self, chat_id: int, thread_id: int) -> None:
        """A topic of a private chat got a made-up name: title it after its first answer."""
        if self.enabled:
            await guarded(self.redis.hset(keys.topics_key(str(chat_id)), str(thread_id), _IMPLICIT))

    async def answered(self, inbound: Inbound, answer: NodeId, model: Model | None = None) -> None:
        """After an answer: title the topic if it waits for one (never raises);
        ``model``: the branch's summary model (default: the bot's)."""
        thread = inbound.thread_id
        if not self.enabled or thread is None or inbound.is_group:
            return
        try:
            await self._title(inbound, thread, answer, model or self.model)
        except (
            StoreUnavailableError,
            TelegramAPIError,
            ModelError,
            TelegramUnavailableError,
        ) as exc:
            log.warning(
                "titling a topic of chat %s failed: %s", inbound.chat_id, type(exc).__name__
            )
        except Exception:  # a title is never worth failing a finished turn
            log.exception("titling a topic of chat %s failed", inbound.chat_id)

    async def _title(self, inbound: Inbound, thread: int, answer_id: NodeId, model: Model) -> None:
        key = keys.topics_key(inbound.scope)
        if not await guarded(self.redis.hdel(key, str(thread))):
            return  # named by its creator, or titled already
        nodes = await self.store.path(answer_id)
        question = nodes[-2].messages[-1].content if len(nodes) > 2 else ""
        answer = nodes[-1].messages[-1].content if nodes[-1].messages else ""
        request = [
            ChatMessage("system", TITLE_INSTRUCTIONS),
            ChatMessage(
                "user",
                f"User: {(question or '')[:_EXCERPT]}\n\nAssistant: {(answer or '')[:_EXCERPT]}",
            ),
        ]
        try:
            reply = await model.complete(request, max_tokens=TITLE_MAX_TOKENS)
        except ModelError as exc:
            await self.accounting.record(
                CallRecord.of(
                    inbound, nodes[0].id, model=model.name, usage=exc.usage,
                    latency=exc.latency, error=exc.kind, view=TITLE_VIEW,
                )
            )  # fmt: skip
            raise
        await self.accounting.record(
            CallRecord.of(
                inbound, nodes[0].id, model=model.name, usage=reply.usage,
                latency=reply.latency, error=None, view=TITLE_VIEW,
            )
        )  # fmt: skip
        title = clean_title(reply.text)
        if title:
            await self.out.rename_topic(inbound.chat_id, thread, title)
            log.info("titled topic %s of chat %s", thread, inbound.chat_id)


def clean_title(text: str) -> str:
    """One line, no wrapping quotes or final full stop, at most Telegram's 128 characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = line.strip("\"'`*#“”«» ").removeprefix("Title:").strip().rstrip(".")
    return line[:NAME_LIMIT].strip()
