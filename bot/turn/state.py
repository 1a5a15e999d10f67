"""The persisted state of a turn: every fact that decides what a run does, in one place.

This module defines every field of a turn's Redis records and is the only code
that writes them; each step of a turn is one idempotent method here, so a turn
run again (after a crash, a redelivery, an outage, a takeover) continues where
it stopped. Nothing a later run relies on is kept in memory. The records (key
shapes in :mod:`bot.data.keys`):

* **the turn's hash** ``rc:{S}:turn:<turn>`` while it runs::

      r, u, a   refs of the root, user and answer nodes, each written by the
                transcript store's append in the same atomic step as its node
                (so storing a node twice is impossible: a retry finds the ref)
      t<k>      ref of tool round k's step node (the same way)
      q         msgpack [k, message]: tool round k's assistant message, noted
                before its calls run
      q<k>.<i>  msgpack message: the result of call i of round k, as it arrives
      p         ids of the answer parts Telegram accepted, in order
      m         ids of the answer's attachments Telegram accepted (its parts that are
                not text: voice notes, pictures), in order
      c         model calls counted (the per-turn guard)
      x         unexpected failures (the runner parks the turn after too many)
      l         "1": the message replied to a bot message nothing knows; it is
                answered with a notice
      o         the topic this new conversation opened in a private chat (0: none
                could be; it is answered in place), noted right after Telegram
                created it, so a run again answers in it and creates no other
      b         a payment's turn: the credit its confirmation shows, noted after the
                payment was credited and before the confirmation is sent, so a run
                again confirms with the same numbers (bot/turn/paying.py)

* **the claim** ``rc:{S}:lease:<turn>``: the worker running the turn (renewed by its
  heartbeat; another worker may take the turn once it lapses);
* **the done mark**: the finished turn's id in the chat's set of the UTC day
  (``rc:{S}:done:<day>``); its hash is deleted then;
* **the chat's part ledger** ``rc:{S}:part``: every part of a running turn is
  announced there before it is sent (``~<turn>`` -> ``<number>:<after>``, an attachment
  ``a<number>:<after>``: its id will be above ``after``, the newest id of the chat the
  turn knows) and named there
  once Telegram gave its id (``<id>`` -> turn), until the final write aliases it;
  a reply to a part still being written finds it here. An announcement a run
  never replaced means a part may be on screen unrecorded (:attr:`TurnState.sending`);
* **lost-part ranges** ``rc:{S}:orphans``: where such a part's id may lie, noted with
  the final write of the run that finished the turn (bot/turn/parts.py, which reads
  the ledger and the ranges);
* **the topic's queue** ``rc:{S}:queue:<t>`` (TOPIC_THREADS, bot/turn/topics.py): a turn
  of a private chat's topic leaves it when it is done (or given up).

The crash windows these close, and the tests that pin them, are listed in
docs/architecture.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgpack
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import (
    ChatMessage,
    Node,
    NodeId,
    Placement,
    StoreUnavailableError,
    TranscriptStore,
)
from transcript.codec import encode_message
from transcript.outage import guarded

from ..bus.inbound import Inbound
from ..bus.intake import join_topic
from ..data import keys
from ..data.connection import Queued, replica_ack, run_kept, run_together
from ..usage.calls import Clock, day_of, utc_now
from . import record as lua
from .claims import ClaimUnconfirmedError, Confirmations
from .record import ClaimReads, TurnState

#: A finished turn is recognised as done at least this long (Telegram keeps an update
#: 24 hours). Its mark is in the done set of its UTC day, read on that day and the
#: next two, and kept one day longer than this after the set's last write.
DONE_TTL_SECONDS = 2 * 24 * 3600
#: The days whose done sets are read: today and the two before.
DONE_DAYS = DONE_TTL_SECONDS // (24 * 3600) + 1
#: A worker's claim on a turn, by default; its heartbeat renews it while the turn
#: runs (:meth:`TurnStates.renew`), so it only lapses when the worker is gone.
LEASE_MS = 24 * 1000


class TurnStates:
    """The turns' persisted state in Redis: claims, steps, parts, done marks."""

    def __init__(
        self,
        redis: Redis,
        store: TranscriptStore,
        owner: str,
        *,
        lease_ms: int = LEASE_MS,
        clock: Clock = utc_now,
    ) -> None:
        self._redis = redis
        #: (bot/turn/parts.py reads the chat's part ledger and ranges through it)
        self.redis = redis
        self.store = store
        self.owner = owner
        self.lease_ms = lease_ms
        #: Whose UTC day a finished turn's mark is filed under.
        self.clock = clock
        self._renew = redis.register_script(lua.RENEW_LUA)
        self._failed = redis.register_script(lua.FAILED_LUA)
        self._read = redis.register_script(lua.READ_LUA)
        #: Replica acknowledgement of its parts' records, its end and the renewals of its
        #: claims (Redis Cluster only).
        self.replicas = replica_ack(redis)
        #: When each running turn's claim was last confirmed (the claim, or a renewal
        #: that returned), by (scope, turn): see :meth:`holds`.
        self._confirmed = Confirmations(lease_ms)

    # ------------------------------------------------------------ the claim

    async def begin(self, inbound: Inbound, reads: Sequence[ClaimReads] = ()) -> TurnState | None:
        """Claim the turn and read its state in one round trip (with ``reads``).

        ``None`` when another worker runs it. One model call is counted while
        no answer is stored, so resumes can never call the model more often
        than the per-turn guard allows.
        """
        return await self._begin(inbound, None, reads)

    async def early_user(self, inbound: Inbound, parent: NodeId, message: ChatMessage) -> Placement:
        """The user's node below ``parent``, prepared to go with the claim
        (:meth:`begin_with_user`): written only while this worker holds the claim,
        and only once."""
        return await self.store.child(
            parent,
            [message],
            record_in=(keys.turn_key(inbound.scope, inbound.turn), "u"),
            aliases=[inbound.message_id],
            only_while=(keys.lease_key(inbound.scope, inbound.turn), self.owner),
        )

    async def begin_with_user(
        self, inbound: Inbound, user: Placement, reads: Sequence[ClaimReads] = ()
    ) -> TurnState | None:
        """:meth:`begin` and the user's node (:meth:`early_user`) in one round trip."""
        return await self._begin(inbound, user, reads)

    async def _begin(
        self, inbound: Inbound, user: Placement | None, reads: Sequence[ClaimReads]
    ) -> TurnState | None:
        scope, turn = inbound.scope, inbound.turn
        key = keys.turn_key(scope, turn)
        found = [keys.lease_key(scope, turn), key]
        found += [keys.pending_parts_key(scope), *self._done_keys(inbound)]
        args: list[str | int] = [self.owner, self.lease_ms, turn]

        def claim(pipe: Pipeline) -> None:
            # EVAL with the text: a pipeline cannot count on the script cache
            pipe.eval(lua.BEGIN_LUA, len(found), *found, *args)

        queues: list[Queued] = [claim]
        if user is not None:
            queues.append(lambda pipe: self.store.queue_place(pipe, user))
        queues += [read.queue for read in reads]
        [flat], *more = await run_together(self._redis, *queues)
        placed = more.pop(0)[0] if user is not None else None
        for read, replies in zip(reads, more, strict=True):
            read.read(replies)
        state = None if flat is None else TurnState.parse(key, scope, flat)
        if state is not None and not state.done:
            self._confirmed.confirm((scope, turn))
        if user is not None and state is not None and not state.done and state.user is None:
            state.user = (await self.store.placed(user, placed)).id  # placed just now
        return state

    async def renew(self, running: Sequence[Inbound]) -> list[bool]:
        """Heartbeat: extend this worker's claims on the running turns.

        ``False`` for a turn whose claim another worker holds now, or that another
        worker finished (this process was away longer than the lease, and the turn was
        taken over); a turn this process has not claimed yet or has finished, or whose
        claim lapsed with nobody taking it, counts as kept. On a Redis Cluster each
        renewal returns once a replica holds it (a failover that loses it is a renewal
        that never returned); a renewal that returned confirms the claim (:meth:`holds`).
        """

        async def one(inbound: Inbound) -> bool:
            key = keys.lease_key(inbound.scope, inbound.turn)
            found = [key, *self._done_keys(inbound)]
            args: list[str | int] = [self.owner, self.lease_ms, inbound.turn]
            if self.replicas is None:
                return bool(await self._renew(keys=found, args=args))
            [reply] = await self.replicas.write(
                key, lambda pipe: pipe.eval(lua.RENEW_LUA, len(found), *found, *args)
            )
            return bool(reply)

        # only the claims this process holds (a turn it finished is done, not taken)
        mine = [(inbound.scope, inbound.turn) in self._confirmed for inbound in running]
        claimed = [inbound for inbound, held in zip(running, mine, strict=True) if held]
        renewed = iter(await guarded(asyncio.gather(*(one(inbound) for inbound in claimed))))
        kept = [next(renewed) if held else True for held in mine]
        for inbound, held, ok in zip(running, mine, kept, strict=True):
            if held and ok:
                self._confirmed.confirm((inbound.scope, inbound.turn))
        return kept

    def holds(self, inbound: Inbound) -> bool:
        """Whether this worker's claim on the turn was confirmed recently: within
        :data:`HOLD_SHARE` of the lease. A holder whose renewals do not come back (Redis
        away, a failover that lost them) may have lost the turn to another worker that
        took it over: it sends nothing new until a renewal comes back (the heartbeat's,
        every sixth of the takeover time) or it learns the turn was taken."""
        return self._confirmed.recent((inbound.scope, inbound.turn))

    async def read(self, inbound: Inbound) -> TurnState:
        """The state as it is, without claiming the turn."""
        key = keys.turn_key(inbound.scope, inbound.turn)
        found = [key, keys.pending_parts_key(inbound.scope), *self._done_keys(inbound)]
        flat = await guarded(self._read(keys=found, args=[inbound.turn]))
        return TurnState.parse(key, inbound.scope, flat)

    # ----------------------------------------------------------- the nodes

    async def store_user(
        self, state: TurnState, parent: NodeId | None, message: ChatMessage, *, system: str,
        aliases: Sequence[int] = (),
    ) -> Node:  # fmt: skip
        """The user's node below ``parent``; below a new root holding ``system`` when
        ``parent`` is ``None`` (a new conversation). Each is stored once."""
        if parent is None:
            root = await self._placed(
                self.store.root(
                    state.scope, [ChatMessage("system", system)], record_in=(state.key, "r")
                )
            )
            parent = state.root = root.id
        user = await self._placed(
            await self.store.child(parent, [message], record_in=(state.key, "u"), aliases=aliases)
        )
        state.user = user.id
        return user

    async def _placed(self, placement: Placement) -> Node:
        """One node, placed on the round trip :func:`run_together` sends (the store's own
        goes through redis-py's single-command path, which costs more CPU)."""
        [[reply, *_index]] = await run_together(
            self._redis, lambda pipe: self.store.queue_place(pipe, placement)
        )
        return await self.store.placed(placement, reply)

    async def set_user(self, state: TurnState, node: NodeId) -> None:
        """Record an existing node as the turn's question (a /retry asks it again)."""
        await guarded(self._redis.hset(state.key, "u", node.ref))
        state.user = node

    async def answer_placement(
        self, state: TurnState, parent: Node, text: str | ChatMessage, parts: Sequence[int]
    ) -> Placement:
        """The answer's node below ``parent`` (the user's node or the last tool step, as
        the turn read it: placed only if Redis still holds it), prepared to go on a round
        trip with the call's usage (:meth:`answer_placed`); ``text``, or the whole
        message (a picture's)."""
        message = text if isinstance(text, ChatMessage) else ChatMessage("assistant", text)
        return await self.store.child(parent, [message], record_in=(state.key, "a"), aliases=parts)

    async def answer_placed(self, state: TurnState, placement: Placement, reply: Any) -> Node:
        """The answer's node, from the append's reply."""
        node = await self.store.placed(placement, reply)
        state.answer = node.id
        return node

    async def store_tool_step(
        self, state: TurnState, k: int, leaf: Node, messages: Sequence[ChatMessage]
    ) -> Node:
        """Tool round ``k``'s step node (its assistant message and every result) below
        ``leaf`` (as the turn read it), once."""
        node = await self._placed(
            await self.store.child(leaf, messages, record_in=(state.key, f"t{k}"))
        )
        del state.tool_steps[k - 1 :]
        state.tool_steps.append(node.id)
        return node

    async def note_tool_round(self, state: TurnState, k: int, assistant: ChatMessage) -> None:
        """Round ``k``'s calls, noted before they run (a resumed run knows what ran)."""
        noted = msgpack.packb([k, encode_message(assistant)], use_bin_type=True)
        await guarded(self._redis.hset(state.key, "q", noted))
        state.noted_round, state.noted_results = (k, assistant), {}

    async def note_tool_result(
        self, state: TurnState, k: int, i: int, message: ChatMessage
    ) -> None:
        """The result of call ``i`` of round ``k``, as it arrives."""
        data = msgpack.packb(encode_message(message), use_bin_type=True)
        await guarded(self._redis.hset(state.key, f"q{k}.{i}", data))
        state.noted_results[i] = message

    # -------------------------------------------------------- counters, marks

    async def count_call(self, state: TurnState, *, with_writes: Queued | None = None) -> None:
        """One more model call of this turn (the per-turn guard counts them all);
        ``with_writes`` go in the same transaction (keys of the chat's slot only)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if with_writes is not None:
                with_writes(pipe)
            pipe.hincrby(state.key, "c", 1)
            *_, calls = await guarded(pipe.execute())
        state.calls = int(calls)

    async def failed(self, inbound: Inbound) -> int:
        """One more unexpected failure of the turn; returns the count (0 once it is done:
        a later run finds it done and does nothing)."""
        key = keys.turn_key(inbound.scope, inbound.turn)
        found = self._failed(keys=[key, *self._done_keys(inbound)], args=[inbound.turn])
        return int(await guarded(found))

    async def opened_topic(
        self, inbound: Inbound, state: TurnState, topic: int, *, with_writes: Queued
    ) -> None:
        """The topic this turn's new conversation opened (0: none could be). Noted as
        soon as Telegram created it: a run again answers in it, and creates no other.
        In the same transaction the turn joins the topic's queue (a message sent into
        the new topic waits for this answer), with ``with_writes`` (keys of the chat's
        slot) that go with an opened topic."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(state.key, "o", topic)
            if topic:
                join_topic(pipe, inbound, topic)
                with_writes(pipe)
            await guarded(pipe.execute())
        state.topic = topic

    async def paid(self, state: TurnState, balance: int) -> None:
        """A payment's turn credited it: the credit its confirmation shows, noted before
        the confirmation is sent (a run again shows the same numbers)."""
        await guarded(self._redis.hset(state.key, "b", balance))
        state.paid_balance = balance

    async def lost_track(self, state: TurnState) -> None:
        """The message replied to a bot message no conversation knows (before its node
        is stored: a later run answers it with the notice too)."""
        await guarded(self._redis.hset(state.key, "l", 1))
        state.lost_track = True

    # --------------------------------------------------- the answer's parts

    async def sending(
        self, inbound: Inbound, state: TurnState, count: int, *, attached: bool = False
    ) -> None:
        """Part number ``count`` is about to be sent (its id is recorded by :meth:`add_part`);
        ``attached``: attachment number ``count`` (a part that is not text, numbered apart).

        The announcement is in the chat's part ledger, where a reply to that part
        finds it before its id is known (Telegram may deliver the reply before it
        answers the send), and where a later run of this turn finds that a part may
        be on screen unrecorded. Nothing is announced, so nothing is sent, while this
        worker's claim is not confirmed (:meth:`holds`: :class:`ClaimUnconfirmedError`).
        """
        if not self.holds(inbound):
            raise ClaimUnconfirmedError(
                f"the claim on message {inbound.message_id} of chat {inbound.chat_id} was "
                "not confirmed lately (Redis did not answer the renewals)"
            )
        async with self._redis.pipeline(transaction=False) as pipe:
            self.queue_sending(pipe, inbound, state, count, attached=attached)
            await guarded(pipe.execute())
        state.sending, state.attaching = (0, count) if attached else (count, 0)

    @staticmethod
    def queue_sending(
        pipe: Pipeline, inbound: Inbound, state: TurnState, count: int, *, attached: bool = False
    ) -> None:
        """:meth:`sending` queued on a caller's round trip (set ``state.sending`` once it
        went through)."""
        # the part's id will be higher than every id the turn knows
        after = max([inbound.message_id, *state.parts, *state.attached])
        ledger = keys.pending_parts_key(inbound.scope)
        number = f"a{count}" if attached else str(count)
        pipe.hset(ledger, _announced(inbound.turn), f"{number}:{after}")

    async def add_part(
        self, inbound: Inbound, state: TurnState, parts: list[int], *, attached: bool = False
    ) -> None:
        """Record the parts sent so far (the last one is new): in the turn's state, and in
        the chat's part ledger in place of its announcement (one script). Like the
        turn's end, kept by a replica on a Redis Cluster: the part is on screen.
        ``attached``: ``parts`` are the answer's attachments."""
        ledger = keys.pending_parts_key(inbound.scope)
        listed, new, turn = ",".join(map(str, parts)), str(parts[-1]), inbound.turn
        field = "m" if attached else "p"

        def record(pipe: Pipeline) -> None:
            # EVAL with the text: a pipeline cannot count on the script cache
            pipe.eval(
                lua.ADD_PART_LUA, 2, state.key, ledger, listed, new, turn, _announced(turn), field
            )

        await run_kept(self._redis, self.replicas, state.key, record)
        if attached:
            state.attached = list(parts)
        else:
            state.parts = list(parts)
        state.sending = state.attaching = 0

    # ------------------------------------------------------------ the end

    async def finish(
        self,
        inbound: Inbound,
        state: TurnState,
        parts: list[int],
        *,
        with_writes: Sequence[Queued] = (),
        holding: NodeId | None = None,
    ) -> None:
        """Mark the turn done and let go of its claim.

        A done turn keeps only its mark, for redeliveries, until it expires: its
        id in the chat's done set of the day (its hash is deleted; its nodes and
        parts are found through their aliases from then on). ``with_writes`` go on
        the same round trip, before it (the parts' aliases, the topic's newest answer,
        the intake's acknowledgement). The turn's own keys change in one script (one
        slot, the chat's; a topic's turn leaves the topic's queue there too); the other
        writes are idempotent and may be in other slots, so the round trip is a
        pipeline, not a transaction.

        On a Redis Cluster it returns once a replica of the chat's master holds the
        turn's end (:class:`~bot.data.connection.ReplicaAck`): the answer is on screen
        already, and a failover that lost that write would run the turn again and show
        the answer twice. A master killed before its replica had it fails the write,
        which the caller makes again on the promoted replica.

        ``holding``: the node the parts are aliased to. An end made again after an
        attempt met Redis away first checks that Redis still holds it: a failover (or
        a restart from an AOF missing its last second) may have lost it, and aliases
        to a lost node would leave the thread damaged. Then nothing is written and
        :class:`~transcript.StaleCacheError` runs the turn again from Redis.
        """
        turn_keys = [
            self._done_keys(inbound)[0],
            state.key,
            keys.lease_key(inbound.scope, inbound.turn),
            keys.pending_parts_key(inbound.scope),
        ]
        if inbound.private_topic is not None:
            turn_keys.append(keys.topic_queue_key(inbound.scope, inbound.private_topic))

        def done(pipe: Pipeline) -> None:
            # EVAL with the text: a pipeline cannot count on the script cache (see
            # bot/data/connection.run_together)
            pipe.eval(
                lua.FINISH_LUA,
                len(turn_keys),
                *turn_keys,
                inbound.turn,
                DONE_TTL_SECONDS + 24 * 3600,
                *map(str, parts),
            )

        if state.end_failed and holding is not None:
            await self.store.verify(holding)
        # the parts' aliases first: a reader that finds them gone from the ledger
        # finds their aliases (the commands run in order)
        try:
            await run_kept(self._redis, self.replicas, state.key, *with_writes, done)
        except StoreUnavailableError:
            state.end_failed = True
            raise
        state.done = True
        self._confirmed.forget((inbound.scope, inbound.turn))

    async def release(self, inbound: Inbound, parts: list[int]) -> None:
        """Let go of an unfinished turn (it was given up): its parts, and the later turns
        of its topic, no longer wait."""
        self._confirmed.forget((inbound.scope, inbound.turn))
        ledger = keys.pending_parts_key(inbound.scope)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.lease_key(inbound.scope, inbound.turn))
            pipe.hdel(ledger, _announced(inbound.turn), *map(str, parts))
            if inbound.private_topic is not None:
                pipe.zrem(keys.topic_queue_key(inbound.scope, inbound.private_topic), inbound.turn)
            await guarded(pipe.execute())

    def _done_keys(self, inbound: Inbound) -> list[str]:
        """The done sets a finished mark of this turn may be in, today's first."""
        now: datetime = self.clock()
        days = [day_of(now - timedelta(days=back)) for back in range(DONE_DAYS)]
        return [keys.done_key(inbound.scope, day, inbound.turn) for day in days]


def _announced(turn: str) -> str:
    """The ledger's field announcing the next part of ``turn``."""
    return "~" + turn
