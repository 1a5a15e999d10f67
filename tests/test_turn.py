"""The turn's steps against real Redis: resume from every persisted state, repeat safely.

The engine runs with a recording stand-in for Telegram and a scripted model,
so a failure points at a step, not at a 40-second end-to-end run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

import pytest
from aiogram.types import InlineKeyboardMarkup
from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.bus.runner import InFlight, TurnBusy
from bot.data import keys
from bot.data.connection import connect
from bot.data.userprefs import UserPrefs
from bot.model import Answer, Media, ModelError, Usage
from bot.retry import Outage
from bot.telegram.budget import ChatBudget
from bot.telegram.format import Chunk
from bot.telegram.out import TelegramOut
from bot.telegram.writer import AnswerWriter
from bot.turn import notices
from bot.turn.context import ContextWindow
from bot.turn.engine import Engine
from bot.turn.parts import AnswerParts
from bot.turn.record import TurnState
from bot.turn.state import TurnStates
from bot.turn.values import Rules, Turn
from bot.usage.accounting import Accounting
from bot.usage.calls import day_of, utc_now
from transcript import ChatMessage, Node, StaleCacheError, StoreUnavailableError, TranscriptStore
from transcript import keys as transcript_keys

from .fakes.stub_model import StubModel
from .redis_server import RedisServer

CHAT = 77
SYSTEM = "You are a test assistant."


class RecordingTelegram(TelegramOut):
    """Accepts every call at once and remembers what was shown, by message id."""

    def __init__(self) -> None:
        self.next_id = 1000
        self.shown: dict[int, str] = {}
        self.sends = 0
        self.edits = 0
        #: (draft id, text or None for "Thinking…") of every draft shown
        self.shown_drafts: list[tuple[int, str | None]] = []

    async def send(
        self,
        chat_id: int,
        chunk: Chunk,
        *,
        reply_to: int | None,
        thread_id: int | None,
        markup: InlineKeyboardMarkup | None = None,
        part: bool = False,
    ) -> int:
        self.next_id += 1
        self.sends += 1
        self.shown[self.next_id] = chunk.plain
        return self.next_id

    def typing(
        self, chat_id: int, thread_id: int | None, interval: float
    ) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    async def edit(self, chat_id: int, message_id: int, chunk: Chunk) -> None:
        self.edits += 1
        self.shown[message_id] = chunk.plain

    async def draft(
        self, chat_id: int, draft_id: int, chunk: Chunk | None, *, thread_id: int | None
    ) -> None:
        self.shown_drafts.append((draft_id, chunk.plain if chunk is not None else None))

    async def delete(self, chat_id: int, message_id: int) -> None:
        self.shown.pop(message_id, None)


class ScriptedModel(StubModel):
    """Answers "echo: <last message>", or fails as told; counts its calls."""

    name = "scripted"

    def reply(
        self, messages: Sequence[ChatMessage], *, tools: bytes | None, media: Media
    ) -> Answer:
        text = f"echo: {messages[-1].content}"
        return Answer(text, Usage(10 * len(messages), 5), 0.0)

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer:
        raise AssertionError("no summaries in these tests")


class Rig:
    def __init__(self, redis: Redis, owner: str = "test") -> None:
        self.redis = redis
        self.store = TranscriptStore(redis)
        self.telegram = RecordingTelegram()
        self.model = ScriptedModel()
        self.states = TurnStates(redis, self.store, owner)
        accounting = Accounting(redis, clock=utc_now)
        self.engine = Engine(
            store=self.store,
            model=self.model,
            out=self.telegram,
            states=self.states,
            accounting=accounting,
            context=ContextWindow.for_budget(self.store, self.model, accounting, budget=32000),
            in_flight=InFlight(),
            redis_outage=Outage("Redis", ""),
            rules=Rules(system_prompt=SYSTEM, max_calls_per_turn=3, rich="always"),
        )

    async def state(self, message_id: int) -> dict[bytes, bytes]:
        key = keys.turn_key(str(CHAT), message_id)
        raw: dict[bytes, bytes] = await self.redis.hgetall(key)  # type: ignore[assignment]
        return raw

    async def done(self, message_id: int) -> bool:
        return (await self.states.read(inbound(message_id))).done


def inbound(message_id: int, text: str = "hello", reply_to: int | None = None) -> Inbound:
    return Inbound(CHAT, message_id, 5, text, reply_to=reply_to)


async def store_user_node(rig: Rig, message: Inbound, state: TurnState | None = None) -> Node:
    """Run the first step alone, as a run that then died would have."""
    state = state or await rig.states.begin(message)
    assert state is not None
    journal = rig.engine.parts.journal(message, state)
    writer = AnswerWriter(rig.telegram, chat_id=CHAT, reply_to=None, thread_id=None,
                          edit_interval=1.0, journal=journal)  # fmt: skip
    turn = Turn(message, state, writer, journal, lambda _pipe: None)
    return await rig.engine.attach.user_node(turn)


async def store_answer(rig: Rig, state: TurnState, user: Node, text: str) -> None:
    """Store the answer node alone, as a run that then died would have."""
    placement = await rig.states.answer_placement(state, user, text, [])
    async with rig.redis.pipeline(transaction=False) as pipe:
        rig.store.queue_place(pipe, placement)
        [reply, *_touched] = await pipe.execute()
    await rig.states.answer_placed(state, placement, reply)


@pytest.fixture
def rig(redis: Redis) -> Rig:
    return Rig(redis)


async def test_a_finished_turn_keeps_only_its_mark_and_everything_is_aliased(rig: Rig) -> None:
    await rig.engine.run(inbound(1))
    assert await rig.state(1) == {}  # only its done mark: the rest is found through aliases
    assert await rig.done(1)
    [(part, text)] = rig.telegram.shown.items()
    assert text == "[depth:2] echo: hello"
    answer = await rig.store.resolve(str(CHAT), part)
    question = await rig.store.resolve(str(CHAT), 1)
    assert answer is not None and question is not None
    assert [n.id for n in await rig.store.path(answer)][-2:] == [question, answer]
    done = keys.done_key(str(CHAT), day_of(utc_now()), "1")
    assert 2 * 24 * 3600 < await rig.redis.ttl(done) <= 3 * 24 * 3600
    assert not await rig.redis.exists(keys.lease_key(str(CHAT), 1))
    assert not await rig.redis.exists(keys.pending_parts_key(str(CHAT)))


async def test_a_finished_turn_is_freed_at_once_not_by_the_garbage_collector(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference cycle through the turn (its writer's journal held the turn) kept every
    finished turn, its message and answer in memory until a full garbage collection."""
    writers: list[weakref.ref[object]] = []
    build = rig.engine._writer

    def writer(message: Inbound, state: TurnState, mine: UserPrefs, journal: AnswerParts) -> object:
        made = build(message, state, mine, journal)
        writers.append(weakref.ref(made))
        return made

    monkeypatch.setattr(rig.engine, "_writer", writer)
    await rig.engine.run(inbound(1))
    gc.collect()
    gc.disable()
    try:
        await rig.engine.run(inbound(2, "again"))
        assert len(writers) == 2
        assert writers[1]() is None
    finally:
        gc.enable()


async def test_running_a_finished_turn_again_is_a_no_op(rig: Rig) -> None:
    await rig.engine.run(inbound(1))
    before = (rig.telegram.sends, rig.telegram.edits, rig.model.calls, await rig.redis.dbsize())
    await rig.engine.run(inbound(1))
    await Rig(rig.redis).engine.run(inbound(1))  # another process, too
    after = (rig.telegram.sends, rig.telegram.edits, rig.model.calls, await rig.redis.dbsize())
    assert after == before


async def test_resume_with_the_user_node_stored_asks_once_and_stores_once(rig: Rig) -> None:
    state = await rig.states.begin(inbound(1))
    assert state is not None
    user = await store_user_node(rig, inbound(1), state)
    again = await store_user_node(rig, inbound(1), await rig.states.read(inbound(1)))
    assert again.id == user.id  # the step run twice stored one node
    fresh = Rig(rig.redis)
    await fresh.engine.run(inbound(1))  # a restarted process finishes it
    assert await rig.store.resolve(str(CHAT), 1) == user.id
    assert fresh.model.calls == 1
    [(part, _)] = fresh.telegram.shown.items()
    answer = await rig.store.resolve(str(CHAT), part)
    assert answer is not None
    history = await rig.store.history(answer)
    assert [m.role for m in history.messages] == ["system", "user", "assistant"]


async def test_resume_with_the_answer_stored_shows_it_without_the_model(rig: Rig) -> None:
    state = await rig.states.begin(inbound(1))
    assert state is not None
    user = await store_user_node(rig, inbound(1), state)
    await store_answer(rig, state, user, "stored before the crash")
    fresh = Rig(rig.redis)
    await fresh.engine.run(inbound(1))
    assert fresh.model.calls == 0
    assert list(fresh.telegram.shown.values()) == ["[depth:2] stored before the crash"]


async def test_resume_with_a_part_sent_edits_it_instead_of_sending_again(rig: Rig) -> None:
    state = await rig.states.begin(inbound(1))
    assert state is not None
    await store_user_node(rig, inbound(1), state)
    await rig.states.add_part(inbound(1), state, [555])  # the crash came after the part
    fresh = Rig(rig.redis)
    await fresh.engine.run(inbound(1))
    assert fresh.telegram.sends == 0
    assert fresh.telegram.shown == {555: "[depth:2] echo: hello"}
    assert await fresh.store.resolve(str(CHAT), 555) is not None


async def test_another_workers_claim_is_respected(redis: Redis) -> None:
    mine, theirs = Rig(redis, "one"), Rig(redis, "two")
    assert await mine.states.begin(inbound(1)) is not None
    assert await theirs.states.begin(inbound(1)) is None
    with pytest.raises(TurnBusy):
        await theirs.engine.run(inbound(1))
    assert theirs.model.calls == 0 and theirs.telegram.sends == 0
    assert await mine.states.begin(inbound(1)) is not None  # its own claim, re-taken


async def answered_reply(rig: Rig) -> tuple[Inbound, int]:
    """Turn 1, then a reply to its answer (whose node goes with the turn's claim);
    the reply and the id of its answer."""
    await rig.engine.run(inbound(1))
    [first] = rig.telegram.shown
    reply = inbound(3, "and then?", reply_to=first)
    assert await rig.engine.run(reply) is True
    return reply, max(rig.telegram.shown)


async def test_a_reply_stores_its_node_with_the_claim_once_on_its_chain(rig: Rig) -> None:
    reply, answer = await answered_reply(rig)
    assert rig.telegram.shown[answer] == "[depth:4] echo: and then?"
    node = await TranscriptStore(rig.redis).resolve(str(CHAT), answer)
    assert node is not None
    history = await TranscriptStore(rig.redis).history(node)
    assert [m.content for m in history.messages[1:]] == [
        "hello", "echo: hello", "and then?", "echo: and then?",
    ]  # fmt: skip
    tree = transcript_keys.tree_key(str(CHAT), node.tree)
    before = (rig.telegram.sends, rig.model.calls, await rig.redis.dbsize())
    nodes = await rig.redis.hgetall(tree)
    for run in (rig, Rig(rig.redis), Rig(rig.redis, "other")):  # redelivered when done
        assert await run.engine.run(reply) is False
    assert (rig.telegram.sends, rig.model.calls, await rig.redis.dbsize()) == before
    assert await rig.redis.hgetall(tree) == nodes  # no second node


async def test_a_reply_whose_turn_another_worker_holds_writes_no_node(redis: Redis) -> None:
    mine, theirs = Rig(redis, "one"), Rig(redis, "two")
    await mine.engine.run(inbound(1))
    [first] = mine.telegram.shown
    reply = inbound(3, "and then?", reply_to=first)
    assert await mine.states.begin(reply) is not None  # claimed, then busy elsewhere
    tree = await redis.hgetall(transcript_keys.tree_key(str(CHAT), 1))
    with pytest.raises(TurnBusy):
        await theirs.engine.run(reply)
    assert await redis.hgetall(transcript_keys.tree_key(str(CHAT), 1)) == tree
    assert await redis.hget(transcript_keys.alias_key(str(CHAT)), "3") is None
    assert theirs.model.calls == 0
    await mine.engine.run(reply)  # the claim's holder answers it, once
    assert mine.model.calls == 2
    assert list(mine.telegram.shown.values())[-1] == "[depth:4] echo: and then?"


async def test_a_reply_resumed_after_its_claim_and_node_asks_once_and_stores_once(
    rig: Rig,
) -> None:
    await rig.engine.run(inbound(1))
    [first] = rig.telegram.shown
    reply = inbound(3, "and then?", reply_to=first)
    engine = rig.engine  # the run died right after its first write, the claim:
    state, *_ = await engine._claim_reading(reply, await engine._place(reply))
    assert state is not None and state.user is not None
    fresh = Rig(rig.redis)
    fresh.telegram.next_id = 2000  # a later message id than the first answer's
    await fresh.engine.run(reply)
    assert fresh.model.calls == 1
    assert await TranscriptStore(rig.redis).resolve(str(CHAT), 3) == state.user
    [(part, text)] = fresh.telegram.shown.items()
    assert text == "[depth:4] echo: and then?"
    answer = await TranscriptStore(rig.redis).resolve(str(CHAT), part)
    assert answer is not None
    path = await TranscriptStore(rig.redis).path(answer)
    assert [n.id for n in path][-2] == state.user  # the one node, asked once


async def test_each_resume_counts_a_call_until_the_guard_ends_the_turn(rig: Rig) -> None:
    rig.model.fail = ModelError("unavailable", "down")
    for _ in range(3):  # three runs that each died in the model call
        state = await rig.states.begin(inbound(1))
        assert state is not None
    await rig.engine.run(inbound(1))  # the fourth may not call the model any more
    assert rig.model.calls == 0
    assert list(rig.telegram.shown.values()) == [notices.TURN_GUARD]
    assert await rig.done(1)


async def test_a_model_failure_ends_with_a_notice_that_continues_from_the_question(
    rig: Rig,
) -> None:
    rig.model.fail = ModelError("rate_limited", "busy")
    await rig.engine.run(inbound(1))
    [(notice_id, text)] = rig.telegram.shown.items()
    assert text == f"⚠️ {notices.MODEL_ERRORS['rate_limited']} {notices.RETRY_HINT}"
    assert await rig.store.resolve(str(CHAT), notice_id) == await rig.store.resolve(str(CHAT), 1)


async def test_giving_up_aliases_what_was_sent_and_tells_the_user_once(rig: Rig) -> None:
    state = await rig.states.begin(inbound(1))
    assert state is not None
    user = await store_user_node(rig, inbound(1), state)
    await rig.states.add_part(inbound(1), state, [555])
    assert await rig.engine.failed(inbound(1)) == 1
    assert await rig.engine.failed(inbound(1)) == 2
    await rig.engine.give_up(inbound(1), RuntimeError("boom"))
    [(notice_id, text)] = rig.telegram.shown.items()
    assert text == notices.GAVE_UP
    for part in (555, notice_id):  # replies to either continue the thread
        assert await rig.store.resolve(str(CHAT), part) == user.id
    assert not await rig.done(1)  # never recorded as answered
    assert not await rig.redis.hexists(keys.pending_parts_key(str(CHAT)), "555")


async def answered_after_losing_the_first_part(rig: Rig) -> tuple[Rig, int]:
    """Message 1's turn announced its first part, Telegram took it, and the run died
    before recording its id; a fresh process answers anew. That process, and the lost
    id (in the range it notes)."""
    state = await rig.states.begin(inbound(1))
    assert state is not None
    await store_user_node(rig, inbound(1), state)
    await rig.states.sending(inbound(1), state, 1)  # part 1 announced, sent... then a crash
    lost = rig.telegram.next_id + 1  # the id Telegram gave it, never recorded
    fresh = Rig(rig.redis)
    fresh.telegram.next_id = lost
    await fresh.engine.run(inbound(1))
    [(replacement, text)] = fresh.telegram.shown.items()
    assert text == "[depth:2] echo: hello" and replacement > lost
    return fresh, lost


async def test_a_part_lost_between_sending_and_recording_is_adopted_by_a_reply(
    rig: Rig,
) -> None:
    """The crash window the journal cannot close: a reply to that lost part continues."""
    fresh, lost = await answered_after_losing_the_first_part(rig)
    replacement = fresh.telegram.next_id
    answer = await fresh.store.resolve(str(CHAT), replacement)
    # a reply to the lost message (it is the bot's, and shows the answer's first part)
    # continues the same thread
    head = "[depth:2] echo: hello"
    reply = Inbound(CHAT, 2, 5, "more", reply_to=lost, reply_to_bot=True, reply_head=head)
    await fresh.engine.run(reply)
    assert await fresh.store.resolve(str(CHAT), lost) == answer
    assert fresh.telegram.shown[fresh.telegram.next_id] == "[depth:4] echo: more"
    # a reply to an unknown message of the user's own starts over, as always
    await fresh.engine.run(Inbound(CHAT, 3, 5, "new", reply_to=lost - 5))
    assert fresh.telegram.shown[fresh.telegram.next_id] == "[depth:2] echo: new"


async def test_a_lost_part_range_never_adopts_another_answers_part(rig: Rig) -> None:
    """Regression (lossy failover soak, seed 3908): the range of a turn whose first part
    was lost held another turn's part whose record a failover had lost too; a reply to
    it went on with the wrong thread. A message the range cannot place gets the notice."""
    # the id in the range is another answer's first part, its record lost
    fresh, other = await answered_after_losing_the_first_part(rig)
    for message, head in ((2, "[depth:6] echo: elsewhere"), (3, ""), (4, "echo: hello")):
        await fresh.engine.run(
            Inbound(CHAT, message, 5, "more", reply_to=other, reply_to_bot=True, reply_head=head)
        )
        assert fresh.telegram.shown[fresh.telegram.next_id] == notices.LOST_TRACK
    assert await fresh.store.resolve(str(CHAT), other) is None
    assert fresh.model.calls == 1  # the answer to message 1 only: nothing asked on a guess


async def test_a_lost_later_part_is_adopted_by_its_untagged_text(rig: Rig) -> None:
    long = "word\n\n" * 600  # two parts (a rich message holds 500 blocks): the first tagged
    state = await rig.states.begin(inbound(1, long))
    assert state is not None
    await store_user_node(rig, inbound(1, long), state)
    await rig.states.add_part(inbound(1, long), state, [555])
    await rig.states.sending(inbound(1, long), state, 2)  # part 2 announced... then lost
    lost = 600
    fresh = Rig(rig.redis)
    fresh.telegram.next_id = 700
    await fresh.engine.run(inbound(1, long))
    answer = await fresh.store.resolve(str(CHAT), 555)
    assert answer is not None and fresh.telegram.sends == 1  # part 1 edited, part 2 anew
    tagged = Inbound(CHAT, 2, 5, "a", reply_to=lost, reply_to_bot=True, reply_head="[depth:2] word")
    await fresh.engine.run(tagged)  # an answer's first part: not this lost second one
    assert fresh.telegram.shown[fresh.telegram.next_id] == notices.LOST_TRACK
    untagged = Inbound(CHAT, 3, 5, "b", reply_to=lost, reply_to_bot=True, reply_head="word")
    await fresh.engine.run(untagged)
    assert await fresh.store.resolve(str(CHAT), lost) == answer
    assert fresh.telegram.shown[fresh.telegram.next_id] == "[depth:4] echo: b"


async def test_an_end_made_again_after_losing_the_answer_runs_the_turn_again(
    private_redis: RedisServer,
) -> None:
    """The turn's end met Redis away (a failover under way); by the time it was made
    again, Redis had lost the answer's node (a failover that lost the master's last
    writes). Aliasing the parts to it would leave the thread damaged: nothing is
    written, and the turn runs again from Redis."""
    redis = connect(private_redis.url)
    rig = Rig(redis)
    message = inbound(1)
    state = await rig.states.begin(message)
    assert state is not None
    user = await store_user_node(rig, message, state)
    await store_answer(rig, state, user, "the answer")
    assert state.answer is not None
    aliases = lambda pipe: rig.store.queue_alias(pipe, str(CHAT), [555], state.answer)  # noqa: E731
    private_redis.stop()
    with pytest.raises(StoreUnavailableError):
        await rig.states.finish(message, state, [555], with_writes=[aliases], holding=state.answer)
    private_redis.start_same_port()
    tree = transcript_keys.tree_key(str(CHAT), state.answer.tree)
    await redis.hdel(tree, transcript_keys.node_field(state.answer.seg, state.answer.idx))
    with pytest.raises(StaleCacheError):
        await rig.states.finish(message, state, [555], with_writes=[aliases], holding=state.answer)
    assert not await rig.done(1) and not state.done
    assert await redis.hget(transcript_keys.alias_key(str(CHAT)), "555") is None
    await redis.aclose()


def test_intake_entries_round_trip_and_a_damaged_one_decodes_to_none() -> None:
    import msgpack  # noqa: PLC0415

    entry = Inbound(
        CHAT, 9, 5, "now", reply_to=3, reply_to_bot=True, reply_head="[depth:2] hi",
        links=("https://example.org/a",),
    )  # fmt: skip
    assert Inbound.decode(entry.encode()) == entry
    assert Inbound.decode(b"\x93garbage") is None
    fields = msgpack.unpackb(entry.encode())
    # an entry written before the links behind a message's words were kept reads without
    older = Inbound.decode(msgpack.packb(fields[:14]))
    assert older == Inbound(
        CHAT, 9, 5, "now", reply_to=3, reply_to_bot=True, reply_head="[depth:2] hi"
    )
    # an entry written before the reply's head was kept reads with an empty one
    older = Inbound.decode(msgpack.packb(fields[:13]))
    assert older == Inbound(CHAT, 9, 5, "now", reply_to=3, reply_to_bot=True)
    assert Inbound.decode(msgpack.packb(fields[:12])) is None  # a field missing
    # a later version's entry (a field more) still reads
    assert Inbound.decode(msgpack.packb([*fields, "later"])) == entry


async def test_a_resume_that_sends_nothing_new_notes_no_unbounded_range(rig: Rig) -> None:
    """Regression (soak): a range without an upper bound swallowed another turn's lost part."""
    state = await rig.states.begin(inbound(1))
    assert state is not None
    user = await store_user_node(rig, inbound(1), state)
    await rig.states.add_part(inbound(1), state, [555])
    await store_answer(rig, state, user, "stored")
    fresh = Rig(rig.redis)
    await fresh.engine.run(inbound(1))  # edits part 555, sends nothing new
    assert fresh.telegram.sends == 0
    assert not await rig.redis.exists(keys.orphans_key(str(CHAT)))
    # a reply to another (unknown) bot message is not pulled into this thread, nor
    # silently into a new one: a notice says so, and replying to it goes on from "hi"
    await fresh.engine.run(Inbound(CHAT, 2, 5, "hi", reply_to=600, reply_to_bot=True))
    notice = fresh.telegram.next_id
    assert fresh.telegram.shown[notice] == notices.LOST_TRACK
    assert fresh.model.calls == 0
    await fresh.engine.run(Inbound(CHAT, 3, 5, "go on", reply_to=notice, reply_to_bot=True))
    assert fresh.telegram.shown[fresh.telegram.next_id] == "[depth:3] echo: go on"


class DraftingTelegram(RecordingTelegram):
    """Also says when a draft was shown."""

    def __init__(self) -> None:
        super().__init__()
        self.drafted = asyncio.Event()

    async def draft(
        self, chat_id: int, draft_id: int, chunk: Chunk | None, *, thread_id: int | None
    ) -> None:
        await super().draft(chat_id, draft_id, chunk, thread_id=thread_id)
        self.drafted.set()


async def test_text_complete_before_the_first_draft_goes_out_as_the_message_alone() -> None:
    telegram = DraftingTelegram()

    async def answer(text: str, *, streamed: bool) -> list[int]:
        writer = AnswerWriter(telegram, chat_id=CHAT, reply_to=1, thread_id=None,
                              edit_interval=1.0, draft_of=1)  # fmt: skip
        await writer.start()
        writer.update(text)
        if streamed:  # more text is coming: the draft goes out meanwhile
            await asyncio.wait_for(telegram.drafted.wait(), 5)
        writer.ended()
        for _ in range(5):  # storing the answer: a few turns of the loop for the writer
            await asyncio.sleep(0)
        return await writer.finish(text)

    [part] = await answer("all at once", streamed=False)
    assert telegram.shown_drafts == [] and telegram.shown[part] == "all at once"
    [part] = await answer("while streaming", streamed=True)
    assert [text for _, text in telegram.shown_drafts] == ["while streaming"]
    assert telegram.shown[part] == "while streaming"


def test_a_groups_budget_lets_a_burst_through_then_one_message_per_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("bot.telegram.budget.time.monotonic", lambda: now[0])
    budget = ChatBudget(per_minute=20, burst=3)  # one message per 3 s
    for _ in range(3):
        assert budget.wait(-5) == 0.0
        budget.take(-5)
    assert budget.wait(-5) == pytest.approx(3.0)
    assert budget.wait(-6) == 0.0  # another chat has its own
    now[0] += 1.5
    assert budget.wait(-5) == pytest.approx(1.5)
    now[0] += 1.5
    assert budget.wait(-5) == 0.0
    now[0] += 60
    for _ in range(3):  # refilled up to the burst, no further
        budget.take(-5)
    assert budget.wait(-5) > 0
