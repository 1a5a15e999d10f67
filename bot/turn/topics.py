"""Private-chat topics (Bot API 9.3+): each one a conversation, and its title.

**A topic is a thread** (:class:`TopicThreads`, TOPIC_THREADS). A message in a topic
that replies to nothing continues the topic's conversation from its newest answer; a
reply branches as anywhere, and its answer is the topic's newest from then on. The
newest answer is a persisted fact, ``rc:{S}:heads`` (topic -> node), written by the
final write of each turn of the topic, never derived from a clock. So that a turn finds
the answer of the message sent before it, a topic's turns run one after another: the
intake's append puts each message of a topic into the topic's queue
(``rc:{S}:queue:<t>``, in the order the updates were taken in), the turn's end takes it
out (after writing the newest answer, in the same round trip), and a turn first waits,
bounded, for those of its topic before it: for their end when they run in this process,
else polling the queue (another process runs them). A message outside topics that
replies to nothing opens a topic of its own (``createForumTopic``, named after the
question's first words, titled after its first answer as below) and is answered there;
when that fails (no such method on the server, topics turned off, any refusal) it is
answered in place, at once. The topic is noted in the turn's state right after
Telegram created it, so a run again answers in it and creates no other. Groups' forum
topics keep the reply-chain rules.

**Titles** (:class:`TopicTitles`). A topic created without a name arrives as a
``forum_topic_created`` service message with ``is_name_implicit``; the update handler
notes it (:meth:`TopicTitles.note`), as a topic the bot opened is noted. After the
topic's first answer the turn asks the model for a short title (one small call,
recorded in the usage like any other) and renames the topic with ``editForumTopic``. A
topic its creator named is never noted, so never renamed. Titling is best effort: the
note is taken before the call (one title per topic, even with several processes), and
a failure is logged, never retried and never shown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiogram.exceptions import TelegramAPIError
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import ChatMessage, NodeId, StoreUnavailableError, TranscriptStore
from transcript.outage import guarded

from ..bus.inbound import MESSAGE, Inbound
from ..data import keys
from ..data.connection import Queued, run_together
from ..model import Model, ModelError
from ..telegram.errors import UnknownMethodError
from ..telegram.out import TelegramOut
from ..telegram.outcomes import ChatUnavailableError, TelegramUnavailableError
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
            async with self.redis.pipeline(transaction=False) as pipe:
                self.queue_note(pipe, str(chat_id), thread_id)
                await guarded(pipe.execute())

    def queue_note(self, pipe: Pipeline, scope: str, thread_id: int) -> None:
        """:meth:`note`, queued on a caller's round trip."""
        if self.enabled:
            pipe.hset(keys.topics_key(scope), str(thread_id), _IMPLICIT)

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


#: How many of the question's words name a topic the bot opens (until its title).
NAME_WORDS = 6
#: Names a topic opened by a message without text gets (until its title).
_MEDIA_NAMES = {"photo": "🖼️", "voice": "🎙️", "audio": "🎵", "document": "📄"}


def topic_name(inbound: Inbound) -> str:
    """The name of the topic a new conversation opens: the question's first words (or
    its file's kind, as an emoji), renamed by its title after the first answer."""
    words = inbound.text.split()
    name = " ".join(words[:NAME_WORDS]) + ("…" if len(words) > NAME_WORDS else "")
    if len(name) > NAME_LIMIT:
        name = name[: NAME_LIMIT - 1].rstrip() + "…"
    if not name:
        name = _MEDIA_NAMES.get(inbound.media[0].kind, "💬") if inbound.media else "💬"
    return name


@dataclass(frozen=True, slots=True)
class Earlier:
    """A turn of the same topic taken in before this one and not finished."""

    turn: str
    message_id: int


class TopicThreads:
    """In a private chat with topics, a topic is one conversation (see the module text)."""

    def __init__(self, redis: Redis, *, out: TelegramOut, titles: TopicTitles) -> None:
        self.redis, self.out, self.titles = redis, out, titles
        #: The Bot API server has no ``createForumTopic``: none is asked for any more.
        self.lacking = False

    async def earlier(self, inbound: Inbound) -> tuple[Earlier | None, NodeId | None]:
        """The first turn of ``inbound``'s topic before it that is not finished (``None``:
        none), and the topic's newest answer, in one round trip. A turn's end writes the
        answer before it leaves the queue, so without an earlier turn the answer is its."""
        topic = inbound.private_topic
        assert topic is not None
        queue = keys.topic_queue_key(inbound.scope, topic)

        def reads(pipe: Pipeline) -> None:
            pipe.zrangebyscore(queue, "-inf", f"({inbound.message_id}", 0, 1, withscores=True)
            pipe.hget(keys.topic_heads_key(inbound.scope), str(topic))

        [[first, head]] = await run_together(self.redis, reads)
        earlier = Earlier(_text(first[0][0]), int(first[0][1])) if first else None
        return earlier, NodeId.parse(inbound.scope, head) if head else None

    async def overdue(self, inbound: Inbound, earlier: Earlier) -> None:
        """An earlier turn of the topic was waited for as long as it may be: it is taken
        out of the queue (it may never come: an intake entry lost with a failover), so
        the topic's later turns do not each wait for it again."""
        topic = inbound.private_topic
        assert topic is not None
        await guarded(self.redis.zrem(keys.topic_queue_key(inbound.scope, topic), earlier.turn))

    def queue_newest(self, inbound: Inbound, node: NodeId | None) -> Queued | None:
        """The topic's newest answer, for its turn's final write (``None``: not a topic's
        turn): what a reply to the bot's newest message in the topic continues from,
        ``node`` (``None``: nothing: the topic's next message starts a new conversation)."""
        topic = inbound.private_topic
        if topic is None:
            return None
        key = keys.topic_heads_key(inbound.scope)
        if node is None:
            return lambda pipe: pipe.hdel(key, str(topic))
        return lambda pipe: pipe.hset(key, str(topic), node.ref)

    async def opens(self, inbound: Inbound) -> bool:
        """Whether ``inbound`` starts a new conversation outside topics in a private
        chat of a bot that has topics there (getMe ``has_topics_enabled``): it opens a
        topic of its own."""
        if (
            self.lacking
            or inbound.is_group
            or inbound.guest is not None
            or inbound.thread_id is not None
            or inbound.reply_to is not None
            or inbound.kind != MESSAGE
        ):
            return False
        me = await self.out.bot.me()  # aiogram keeps the answer of start-up's getMe
        return bool(me.has_topics_enabled)

    async def open(self, inbound: Inbound) -> int:
        """Create the topic ``inbound``'s conversation opens; 0 when it cannot be (it is
        then answered in place, at once)."""
        try:
            return await self.out.open_topic(inbound.chat_id, topic_name(inbound))
        except UnknownMethodError:  # said once, by the session or by open_topic
            self.lacking = True
        except (TelegramAPIError, ChatUnavailableError, TelegramUnavailableError) as exc:
            detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.info(
                "no topic for a new conversation in chat %s (%s); answering in place",
                inbound.chat_id, detail,
            )  # fmt: skip
        return 0

    def queue_opened(self, inbound: Inbound, topic: int) -> Queued:
        """What goes with the note of an opened topic: it waits for its title (named
        after the question's first words, titled after its first answer)."""
        return lambda pipe: self.titles.queue_note(pipe, inbound.scope, topic)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
