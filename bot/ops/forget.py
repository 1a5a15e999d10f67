"""Erasing everything stored about one chat (``/forget``).

What a chat leaves in Redis, found by its key shapes (:mod:`transcript.keys`,
:mod:`bot.data.keys`):

* every key with the chat's hash tag ``rc:{<chat>}:*``: conversation trees (every
  message, fold summaries), aliases, turn states, leases, answer parts, orphan
  ranges, the chat's usage detail and audit records (``rc:{<chat>}:u:*``), and
  anything later kept per chat under the tag (media blobs). Only the
  tree counter ``rc:{<chat>}:seq`` stays: a number without text, kept so a tree id
  is never reused (another process's cache may still hold nodes of an erased tree),
  and so do the usage numbers still on their way to the user's totals
  (``rc:{<chat>}:u:p``, usually absent), and the ids of the messages that were
  aliased, now marked as belonging to no conversation (numbers without text): a
  reply to an erased answer starts a new conversation instead of a notice that the
  thread is unknown;
* entries of that chat in the intake stream and the dead-letter stream (they hold
  the message text).

The per-user and per-day totals hold no text and no chat, and stay.

Nothing of another chat is touched: every pattern ends at the chat id's colon or
closing brace.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from transcript import TranscriptStore, keys
from transcript.outage import guarded

from ..bus.inbound import Inbound
from ..data import keys as bot_keys
from ..i18n import _, ngettext, number

_BATCH = 500


@dataclass(frozen=True, slots=True)
class Erased:
    """What one erase removed."""

    conversations: int
    messages: int
    turn_records: int
    queued: int
    usage_records: int

    def summary(self) -> str:
        """What was erased, for the user, in the current language."""
        counts = {
            "conversations": ngettext(
                "{count} conversation", "{count} conversations", self.conversations
            ).format(count=number(self.conversations)),
            "messages": ngettext(
                "{count} message id", "{count} message ids", self.messages
            ).format(count=number(self.messages)),
            "turns": ngettext(
                "{count} turn record", "{count} turn records", self.turn_records
            ).format(count=number(self.turn_records)),
            "queued": ngettext(
                "{count} queued or parked message", "{count} queued or parked messages", self.queued
            ).format(count=number(self.queued)),
            "usage": ngettext(
                "{count} usage and audit record", "{count} usage and audit records",
                self.usage_records,
            ).format(count=number(self.usage_records)),
        }  # fmt: skip
        return _(
            "Erased everything I stored about this chat: {conversations} with {messages}, "
            "{turns}, {queued}, and {usage}. Your token totals (numbers without text) stay. "
            "A new message starts a fresh conversation."
        ).format(**counts)


async def forget_chat(
    redis: Redis, store: TranscriptStore, chat_id: int, *, intake_shards: int = 1
) -> Erased:
    """Erase what is stored about ``chat_id`` (see the module docstring)."""
    scope = str(chat_id)
    tagged = [name async for name in redis.scan_iter(match=_glob(keys.scope_prefix(scope)) + "*")]
    kept = {keys.seq_key(scope).encode(), bot_keys.chat_usage_key(chat_id, "p").encode()}
    tagged = [n for n in tagged if _bytes(n) not in kept]
    trees = sum(_bytes(n).startswith(keys.tree_key_prefix(scope).encode()) for n in tagged)
    aliased = await guarded(redis.hkeys(keys.alias_key(scope)))
    aliases = len(aliased)
    usage_prefix = bot_keys.chat_usage_key(chat_id, "").encode()
    usage_detail = sum(_bytes(n).startswith(usage_prefix) for n in tagged)
    other = len(tagged) - trees - (1 if aliases else 0) - usage_detail
    await _delete(redis, tagged)
    store.cache.forget_scope(scope)
    await store.unthreaded(scope, [_bytes(m).decode() for m in aliased])

    intake = bot_keys.intake_stream(bot_keys.intake_shard(chat_id, intake_shards))
    queued = await _drop_entries(redis, intake, chat_id, ack=True)
    queued += await _drop_entries(redis, bot_keys.DEAD_LETTER_STREAM, chat_id, ack=False)
    return Erased(trees, aliases, other, queued, usage_detail)


async def _drop_entries(redis: Redis, stream: str, chat_id: int, *, ack: bool) -> int:
    """Delete the stream's entries of that chat (acknowledged first in the intake)."""
    found: Any = await guarded(redis.xrange(stream))
    ids = []
    for entry_id, fields in found or []:
        raw = (fields or {}).get(b"m")
        inbound = Inbound.decode(raw) if isinstance(raw, bytes) else None
        if inbound is not None and inbound.chat_id == chat_id:
            ids.append(entry_id)
    for start in range(0, len(ids), _BATCH):
        batch = ids[start : start + _BATCH]
        async with redis.pipeline(transaction=False) as pipe:
            if ack:
                pipe.xack(stream, bot_keys.INTAKE_GROUP, *batch)
            pipe.xdel(stream, *batch)
            await guarded(pipe.execute())
    return len(ids)


async def _delete(redis: Redis, names: list[Any]) -> None:
    for start in range(0, len(names), _BATCH):
        await _run(redis.unlink(*names[start : start + _BATCH]))


async def _run(call: Awaitable[Any]) -> Any:
    return await guarded(call)


def _glob(literal: str) -> str:
    """``literal`` as a SCAN pattern matching itself only."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in literal)


def _bytes(name: Any) -> bytes:
    return name if isinstance(name, bytes) else str(name).encode()
