"""The checks of the chaos soak (``bench/soak.py``): pure functions over what was sent,
what the Bot API test server holds at the end, and what the model was asked.

See the docstring of ``bench/soak.py`` for the rules; this module implements them.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.crc import key_slot

from bot.data.keys import INTAKE_STREAM
from bot.payments import texts as payment_texts
from bot.retry import WHILE_AWAY
from bot.turn import notices
from tests.fakes.telegram import StoredMessage
from transcript.keys import scope_prefix

#: Every user text carries one marker ``c<chat index>m<number>``; model replies echo it.
MARKER_RE = re.compile(r"\bc(\d+)m(\d+)\b")
DEPTH_RE = re.compile(r"^\[depth:(\d+)\]")
NOTICE = "⚠️"
LONG_EVERY = 40  # about one reply in 40 is long enough to be split in two messages

Kind = Literal["new", "part", "own"]


def chat_of(marker: str) -> int:
    """The chat index a marker belongs to."""
    match = MARKER_RE.fullmatch(marker)
    if match is None:
        raise ValueError(f"not a marker: {marker!r}")
    return int(match.group(1))


def reply_text(key: str, seed: int) -> str:
    """The model's (deterministic) reply to the user message carrying ``key``."""
    h = zlib.crc32(f"{seed}:{key}".encode())
    words = 1000 if h % LONG_EVERY == 0 else 4 + (h >> 8) % 40
    return f"echo {key} " + " ".join(f"w{(h >> 16) % 50 + i}" for i in range(words))


def squash(text: str) -> str:
    return "".join(text.split())


@dataclass
class Sent:
    """One user message of the soak (every one is addressed to the bot)."""

    key: str
    chat_idx: int
    chat_id: int
    message_id: int
    user_id: int
    at: float  # seconds since the soak started
    kind: Kind  # new conversation, reply to a bot answer part, reply to the user's own message
    target: int | None = None  # the message id replied to
    target_live: bool = False  # the replied-to answer was still being written
    #: Sent before the bot got Telegram's answer naming the replied-to part.
    target_unrecorded: bool = False
    in_flood: bool = False  # sent while the chat was under flood control
    redeliveries: int = 0


@dataclass
class Copy:
    """One answer the bot gave to a user message (its parts, in message id order)."""

    parts: list[StoredMessage]

    @property
    def text(self) -> str:
        return "\n".join(p.text or "" for p in self.parts)

    @property
    def notice(self) -> bool:
        return NOTICE in self.text or self.text.startswith(_PLAIN_NOTICES)

    @property
    def depth(self) -> int | None:
        match = DEPTH_RE.match(self.parts[0].text or "")
        return int(match.group(1)) if match else None

    @property
    def lost_track(self) -> bool:
        """The notice for a reply to a bot message no conversation knows (the message is
        stored as a new conversation: a reply to the notice goes on from it)."""
        return self.text.startswith(_LOST_TRACK)

    @property
    def notice_kind(self) -> str:
        text = self.text
        for kind, start in _NOTICE_KINDS:
            if start in text:
                return kind
        return "other"

    @property
    def repeats(self) -> list[StoredMessage]:
        """Parts after the first shown again later: a part sent again because a crash
        left the first one unrecorded (what it shows begins a later part's text)."""
        found = []
        for i, part in enumerate(self.parts[1:], start=1):
            mine = squash(part.text or "")
            if mine and any(squash(p.text or "").startswith(mine) for p in self.parts[i + 1 :]):
                found.append(part)
        return found

    def complete(self, reply: str) -> bool:
        """Finished: a notice, or the whole reply is shown (a repeated part once)."""
        repeated = {p.message_id for p in self.repeats}
        shown = "".join(squash(p.text or "") for p in self.parts if p.message_id not in repeated)
        return self.notice or shown.endswith(squash(reply))


_LOST_TRACK = notices.LOST_TRACK[:60]
#: Notices without the warning sign: nothing left to spend (with the /buy button), as a
#: user who asks before their first payment is credited meets it.
_NO_CREDIT = (payment_texts.NO_CREDIT[:40], payment_texts.NO_CREDIT_PAID_ONLY[:30])
_PLAIN_NOTICES = _NO_CREDIT
_NOTICE_KINDS = (
    ("lost track", _LOST_TRACK),
    ("damaged history", notices.DAMAGED_HISTORY[:40]),
    ("gave up", notices.GAVE_UP[:40]),
    *(("no credit", start) for start in _NO_CREDIT),
)


def starts_answer(message: StoredMessage, seen_depth: bool) -> bool:
    text = message.text or ""
    notice = text.startswith(NOTICE) or text.startswith(_PLAIN_NOTICES)
    return text.startswith("[depth:") or (notice and not seen_depth)


def copies(parts: Iterable[StoredMessage]) -> tuple[list[Copy], list[StoredMessage]]:
    """Group the bot's live replies to one message into answers; also the unexpected ones."""
    found: list[Copy] = []
    other: list[StoredMessage] = []
    seen_depth = False
    for part in sorted(parts, key=lambda m: m.message_id):
        if part.deleted:
            continue
        if starts_answer(part, seen_depth):
            seen_depth = seen_depth or (part.text or "").startswith("[depth:")
            found.append(Copy([part]))
        elif found:
            found[-1].parts.append(part)
        else:
            other.append(part)
    return found, other


@dataclass(frozen=True)
class Observed:
    """A model request reduced to what the checks need: (role, marker, assistant text ok)."""

    key: str  # the marker of the last user message: the message being answered
    items: tuple[tuple[str, str | None, bool], ...]
    foreign: tuple[str, ...]  # markers of other chats


def observe(messages: Sequence[dict[str, Any]], seed: int) -> Observed | None:
    """None for requests that do not end with a soak user message (e.g. summaries)."""
    items: list[tuple[str, str | None, bool]] = []
    markers: list[str] = []
    for i, message in enumerate(messages):
        role = str(message.get("role"))
        content = message.get("content")
        text = content if isinstance(content, str) else str(content)
        found = [m.group(0) for m in MARKER_RE.finditer(text)]
        markers += found
        if role == "system" and i == 0:
            continue
        marker = found[0] if found else None
        ok = len(found) <= 1
        if role == "assistant" and marker is not None:
            ok = ok and text.strip() == reply_text(marker, seed).strip()
        items.append((role, marker, ok))
    if not items or items[-1][0] != "user" or items[-1][1] is None:
        return None
    key = items[-1][1]
    chat = chat_of(key)
    foreign = tuple(sorted({m for m in markers if chat_of(m) != chat}))
    return Observed(key, tuple(items), foreign)


@dataclass(frozen=True)
class Failover:
    """A Redis Cluster master SIGKILLed (its replica promoted), on the soak's clock."""

    at: float
    port: int
    slots: tuple[tuple[int, int], ...]
    #: Seconds until the replica reported itself master (None: not within the wait).
    promoted_after: float | None
    #: The master's replication offset read right before the kill minus the offset
    #: its replica had when promoted: bytes of acknowledged writes the cluster lost
    #: (a lower bound: a write between the read and the kill is not seen).
    lost_bytes: int | None

    def covers(self, chat_id: int) -> bool:
        """Whether the killed master served the chat's keys (they share one slot)."""
        return self.serves(slot_of(chat_id))

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


#: The Redis Cluster slot of the intake stream (INTAKE_SHARDS=1).
INTAKE_SLOT = key_slot(INTAKE_STREAM.encode())


def slot_of(chat_id: int) -> int:
    """The Redis Cluster slot of every key of the chat (its hash tag)."""
    return key_slot(scope_prefix(str(chat_id)).encode())


#: Writes a failover can lose were acknowledged just before it: a turn records a part
#: milliseconds after Telegram accepted it. An anomaly is put down to a failover of its
#: chat's master only when that master died within this long after the message the lost
#: write recorded (else it is a failure).
FAILOVER_WINDOW = 2.0


@dataclass
class Problem:
    key: str
    chat_id: int
    message_id: int
    at: float
    what: str


@dataclass
class Result:
    sent: int = 0
    once: int = 0
    once_notice: int = 0
    duplicated: int = 0
    #: Duplicates whose first copy Telegram accepted just before a SIGKILL: the one
    #: window the README names (a part accepted, the bot killed before recording it).
    crash_window_duplicates: int = 0
    #: Answers showing one of their later parts twice, its first copy in that window.
    crash_window_parts: int = 0
    lost: int = 0
    wrong_depth: int = 0
    #: Of them, those whose parent message was on its right chain (the others inherit
    #: a mistake by continuing a wrong chain).
    wrong_depth_first: int = 0
    wrong_history: int = 0
    wrong_content: int = 0
    wrong_chat_messages: int = 0
    wrong_chat_requests: int = 0
    unknown_chain: int = 0
    unexpected_replies: int = 0
    stray_bot_messages: int = 0
    #: Replies to a bot answer part; of them to answers still being written, sent
    #: before the bot knew the part's id, sent during a flood window.
    part_replies: int = 0
    live_targets: int = 0
    unrecorded_targets: int = 0
    flood_replies: int = 0
    #: Answered with a lost-track notice: right after a failover of the chat's master
    #: (an alias the failover lost: acceptable), or not (a failure).
    lost_track_failover: int = 0
    lost_track: int = 0
    #: Answered twice (or one of its parts shown twice) because a failover lost the
    #: write recording the first.
    failover_duplicates: int = 0
    notices: dict[str, int] = field(default_factory=dict)
    redelivered: int = 0
    requests_checked: int = 0
    deepest: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def mixed(self) -> int:
        return (
            self.wrong_depth
            + self.wrong_history
            + self.wrong_content
            + self.wrong_chat_messages
            + self.wrong_chat_requests
        )

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.mixed or self.lost_track)


Chain = list[tuple[str, bool]]  # (marker, answered) of the ancestors' user messages


#: A duplicate counts as the documented crash window only when its first copy was
#: accepted at most this long before the SIGKILL (sending to recording takes ms).
CRASH_WINDOW = 0.25


class Checker:
    """Everything the soak checks, from the final state of the servers."""

    def __init__(
        self,
        sent: Sequence[Sent],
        bot_messages: dict[int, list[StoredMessage]],
        observed: Sequence[Observed],
        seed: int,
        *,
        sent_at: dict[tuple[int, int], float] | None = None,
        requested_at: dict[tuple[int, int], float] | None = None,
        kill_times: Sequence[float] = (),
        failovers: Sequence[Failover] = (),
        store_outages: Sequence[tuple[float, float]] = (),
    ) -> None:
        self.sent = sent
        #: When the bot got Telegram's answer to each of its messages (the soak may hold
        #: it, as a slow network would), when that request arrived, and when a bot
        #: process was SIGKILLed (all on the soak's clock).
        self.sent_at = sent_at or {}
        self.requested_at = requested_at or {}
        self.kill_times = sorted(kill_times)
        #: (gone, back) of each time the one redis-server was down: a part accepted
        #: just before it went cannot be recorded until it is back, so a bot killed
        #: meanwhile lost it as if killed at the moment Redis went.
        self.store_outages = store_outages
        self.failovers = failovers
        self.seed = seed
        self.observed = observed
        self.by_id = {(s.chat_id, s.message_id): s for s in sent}
        self.by_key = {s.key: s for s in sent}
        self.bot_messages = bot_messages
        self.replies: dict[tuple[int, int], list[StoredMessage]] = {}
        self.bot_by_id: dict[tuple[int, int], StoredMessage] = {}
        for chat_id, messages in bot_messages.items():
            for message in messages:
                self.bot_by_id[(chat_id, message.message_id)] = message
                if message.reply_to is not None:
                    self.replies.setdefault((chat_id, message.reply_to), []).append(message)
        self.result = Result(sent=len(sent))
        self._wrong: set[str] = set()  # markers of messages answered on a wrong chain

    def _killed_after(self, chat_id: int, found: list[Copy]) -> float | None:
        """How long before a SIGKILL the bot got Telegram's answer to the first copy's
        last part (negative: after it, a request the killed bot had sent: it never got
        the answer), if that is within :data:`CRASH_WINDOW` and the next copy came after
        that kill (else None)."""
        last = (chat_id, found[0].parts[-1].message_id)
        first, asked = self.sent_at.get(last), self.requested_at.get(last)
        second = self.sent_at.get((chat_id, found[1].parts[0].message_id))
        if first is None or second is None:
            return None
        for end, killed in self._record_ends():
            sent_before = asked < killed if asked is not None else first <= killed + CRASH_WINDOW
            if sent_before and end - CRASH_WINDOW <= first and killed < second:
                return end - first
        return None

    def _record_ends(self) -> list[tuple[float, float]]:
        """(from when nothing more could be recorded, when the bot died) for every
        SIGKILL: the kill itself, or when Redis went if the bot died before it was
        back (a part announced before Redis went and accepted meanwhile cannot be
        recorded: the same window, as long as the outage and until the bot's next try
        once Redis is back, at most :data:`~bot.retry.WHILE_AWAY`'s longest wait)."""
        ends = [(kill, kill) for kill in self.kill_times]
        for gone, back in self.store_outages:
            until = back + WHILE_AWAY.maximum
            ends += [(gone, kill) for kill in self.kill_times if gone <= kill <= until]
        return ends

    def _failover_after(self, chat_id: int, first: float | None, last: float | None) -> bool:
        """Whether the chat's master failed over while (or just after) a message
        accepted between ``first`` and ``last`` was recorded."""
        if first is None or last is None:
            return False
        return any(
            f.covers(chat_id) and first - FAILOVER_WINDOW <= f.at <= last + FAILOVER_WINDOW
            for f in self.failovers
        )

    def _copy_times(self, chat_id: int, copy: Copy) -> tuple[float | None, float | None]:
        return (
            self.sent_at.get((chat_id, copy.parts[0].message_id)),
            self.sent_at.get((chat_id, copy.parts[-1].message_id)),
        )

    def _intake_failover(self, s: Sent) -> str:
        """A note when the intake's master failed over, losing writes, just after ``s``
        was sent (its entry may be among them)."""
        for f in self.failovers:
            if f.lost_bytes and f.serves(INTAKE_SLOT) and s.at - 1 <= f.at <= s.at + 5:
                return f" (the intake's master failed over {f.at - s.at:.1f}s later, losing writes)"
        return ""

    def _lost_by_failover(self, s: Sent) -> bool:
        """A reply answered with the lost-track notice: the part it replied to was
        recorded just before a failover of its chat's master (the alias was lost)."""
        if s.kind != "part" or s.target is None:
            return False
        part = self.bot_by_id.get((s.chat_id, s.target))
        parent = self.by_id.get((s.chat_id, part.reply_to or 0)) if part else None
        if part is None or parent is None:
            return False
        for copy in self.answers(parent):
            if any(p.message_id == part.message_id for p in copy.parts):
                return self._failover_after(s.chat_id, *self._copy_times(s.chat_id, copy))
        return False

    def _duplicated_by_failover(self, chat_id: int, found: list[Copy]) -> bool:
        """The first copy was recorded just before a failover of the chat's master that
        lost that write, and the next copy came after it."""
        _first, last = self._copy_times(chat_id, found[0])
        second, _ = self._copy_times(chat_id, found[1])
        if last is None or second is None:
            return False
        return any(
            f.covers(chat_id) and last - 0.05 <= f.at <= last + FAILOVER_WINDOW and f.at < second
            for f in self.failovers
        )

    def accepted(self, chat_id: int, found: list[Copy]) -> str:
        """When Telegram accepted each copy's first part (the soak's clock)."""
        times = [self.sent_at.get((chat_id, c.parts[0].message_id)) for c in found]
        return ", ".join("?" if t is None else f"{t:.3f}s" for t in times)

    def answers(self, s: Sent) -> list[Copy]:
        return copies(self.replies.get((s.chat_id, s.message_id), []))[0]

    def _parent(self, s: Sent) -> tuple[Sent, bool] | None:
        """The message whose node ``s`` continues and whether it was answered."""
        if s.target is None:
            return None
        if s.kind == "own":
            return self.by_id[(s.chat_id, s.target)], False
        part = self.bot_by_id.get((s.chat_id, s.target))
        if part is None or part.reply_to is None:
            raise LookupError(f"the replied-to message {s.target} is not an answer")
        parent = self.by_id.get((s.chat_id, part.reply_to))
        if parent is None:
            raise LookupError(f"message {s.target} answers no soak message")
        for copy in self.answers(parent):
            if any(p.message_id == part.message_id for p in copy.parts):
                if not copy.complete(reply_text(parent.key, self.seed)):
                    raise LookupError(f"the answer {s.target} replied to never finished")
                if copy.notice_kind == "damaged history":
                    # the notice says the stored history is incomplete and asks for a
                    # new conversation: a reply to it starts one (a failover lost writes)
                    return None
                return parent, not copy.notice
        raise LookupError(f"message {s.target} belongs to no answer of {parent.key}")

    def _restarted(self, s: Sent) -> bool:
        """``s`` was answered with the lost-track notice: it was stored as the first
        message of a new conversation."""
        found = self.answers(s)
        return len(found) == 1 and found[0].lost_track

    def chain(self, s: Sent) -> Chain:
        """(marker, answered) of every earlier user message on the chain of ``s``."""
        entries: Chain = []
        current = s
        while not self._restarted(current) and (step := self._parent(current)) is not None:
            parent, answered = step
            entries.append((parent.key, answered))
            current = parent
            if len(entries) > len(self.sent):
                raise LookupError("the reply chain loops")
        entries.reverse()
        return entries

    def run(self) -> Result:
        for s in self.sent:
            self._check_message(s)
        self._check_requests()
        self._check_chats()
        return self.result

    def _problem(self, s: Sent, what: str) -> None:
        self.result.problems.append(Problem(s.key, s.chat_id, s.message_id, s.at, what))

    def _check_message(self, s: Sent) -> None:
        result = self.result
        if s.kind == "part":
            result.part_replies += 1
            result.live_targets += s.target_live
            result.unrecorded_targets += s.target_unrecorded
            result.flood_replies += s.in_flood
        result.redelivered += s.redeliveries
        found, other = copies(self.replies.get((s.chat_id, s.message_id), []))
        result.unexpected_replies += len(other)
        if not found:
            result.lost += 1
            self._problem(s, "lost: never answered" + self._intake_failover(s))
            return
        if len(found) > 1:
            self._check_copies(s, found)
            return
        [copy] = found
        if copy.repeats and not self._check_repeats(s, copy):
            return
        result.once += 1
        result.once_notice += copy.notice
        if copy.notice:
            kind = copy.notice_kind
            result.notices[kind] = result.notices.get(kind, 0) + 1
        if copy.lost_track:
            if self._lost_by_failover(s):
                result.lost_track_failover += 1
                self._problem(s, "(failover: the replied-to part's record was lost) notice")
            else:
                result.lost_track += 1
                self._problem(s, "lost track: a notice, no failover lost the part replied to")
            return
        reply = reply_text(s.key, self.seed)
        if not copy.complete(reply) or any(
            m.group(0) != s.key for m in MARKER_RE.finditer(copy.text)
        ):
            result.wrong_content += 1
            self._problem(s, f"wrong content: {copy.text[:100]!r}")
        if copy.depth is not None:
            self._check_depth(s, copy.depth)

    def _check_copies(self, s: Sent, found: list[Copy]) -> None:
        """More than one answer: the crash window, a write a failover lost, or a duplicate."""
        result = self.result
        texts = [c.text[:60] for c in found]
        gap = self._killed_after(s.chat_id, found)
        if gap is not None:
            result.crash_window_duplicates += 1
            self._problem(
                s, f"(crash window: the first copy was accepted {gap * 1000:.0f} ms "
                f"before a SIGKILL, or before Redis went away until one) {len(found)} "
                f"answers {texts}",
            )  # fmt: skip
            return
        when = self.accepted(s.chat_id, found)
        if len(found) == 2 and self._duplicated_by_failover(s.chat_id, found):
            result.failover_duplicates += 1
            self._problem(
                s, f"(failover: the write recording the first answer was lost) "
                f"2 answers (accepted at {when}) {texts}",
            )  # fmt: skip
            return
        result.duplicated += 1
        self._problem(s, f"duplicated: {len(found)} answers (accepted at {when}) {texts}")

    def _check_repeats(self, s: Sent, copy: Copy) -> bool:
        """A part shown twice within one answer: the crash window (``True``: the answer
        counts as once, the part on its own line), else a duplicate."""
        for part in copy.repeats:
            again = next(
                p
                for p in copy.parts
                if p.message_id > part.message_id
                and squash(p.text or "").startswith(squash(part.text or ""))
            )
            pair = [Copy([part]), Copy([again])]
            gap = self._killed_after(s.chat_id, pair)
            if gap is None and self._duplicated_by_failover(s.chat_id, pair):
                self.result.failover_duplicates += 1
                self._problem(
                    s, f"(failover: the write recording part {part.message_id} was lost) "
                    f"sent again as {again.message_id}",
                )  # fmt: skip
                continue
            if gap is None:
                self.result.duplicated += 1
                self._problem(
                    s, f"duplicated: part {part.message_id} shown again as {again.message_id}"
                )
                return False
            self.result.crash_window_parts += 1
            self._problem(
                s, f"(crash window: part {part.message_id} accepted {gap * 1000:.0f} ms before "
                f"a SIGKILL, sent again as {again.message_id})",
            )  # fmt: skip
        return True

    def _check_depth(self, s: Sent, depth: int) -> None:
        result = self.result
        try:
            chain = self.chain(s)
        except LookupError as exc:
            result.unknown_chain += 1
            self._problem(s, f"(not checkable: {exc})")
            return
        expected = sum(2 if answered else 1 for _, answered in chain) + 2
        result.deepest = max(result.deepest, depth)
        if depth != expected:
            result.wrong_depth += 1
            self._wrong.add(s.key)
            result.wrong_depth_first += not chain or chain[-1][0] not in self._wrong
            live = " (replied while the target was still being written)" if s.target_live else ""
            if s.target_unrecorded:
                live = " (replied before the bot had Telegram's answer naming the part)"
            self._problem(s, f"wrong chain: [depth:{depth}], expected [depth:{expected}]{live}")

    def expected_items(self, s: Sent) -> list[tuple[str, str]]:
        return _items(self.chain(s), s.key)

    def _items_before_the_loss(self, s: Sent) -> list[tuple[str, str]] | None:
        """For a reply answered with the lost-track notice after a failover lost the
        record of the part it replied to: the chain of that part, which a run before
        the loss was known may have asked the model with (then met the lost write and
        ran again)."""
        if not (self._restarted(s) and self._lost_by_failover(s)):
            return None
        step = self._parent(s)
        if step is None:
            return None
        parent, answered = step
        return _items([*self.chain(parent), (parent.key, answered)], s.key)

    def _check_requests(self) -> None:
        result = self.result
        flagged: set[str] = set()
        for obs in self.observed:
            s = self.by_key.get(obs.key)
            if s is None:
                continue
            if obs.foreign:
                result.wrong_chat_requests += 1
                self._problem(s, f"model request holds other chats' messages {obs.foreign}")
                continue
            try:
                expected = self.expected_items(s)
            except LookupError:
                continue
            result.requests_checked += 1
            seen = [(role, marker or "?") for role, marker, _ in obs.items]
            if seen != expected and seen == self._items_before_the_loss(s):
                expected = seen
            wrong = seen != expected or not all(ok for _, _, ok in obs.items)
            if wrong and obs.key not in flagged:
                flagged.add(obs.key)
                result.wrong_history += 1
                self._problem(s, f"model history {_short(seen)}, expected {_short(expected)}")

    def _check_chats(self) -> None:
        by_chat_idx = {s.chat_id: s.chat_idx for s in self.sent}
        for chat_id, messages in self.bot_messages.items():
            idx = by_chat_idx.get(chat_id)
            for message in messages:
                if message.deleted:
                    continue
                owner = self.by_id.get((chat_id, message.reply_to or 0))
                if owner is None:
                    self.result.stray_bot_messages += 1
                markers = {m.group(0) for m in MARKER_RE.finditer(message.text or "")}
                if idx is not None and any(chat_of(m) != idx for m in markers):
                    self.result.wrong_chat_messages += 1
                    s = owner or Sent("?", idx, chat_id, message.message_id, 0, 0.0, "new")
                    self._problem(s, f"bot message {message.message_id} shows {sorted(markers)}")


def _short(items: Sequence[tuple[str, str]]) -> str:
    return " ".join(("U" if role == "user" else "A") + ":" + marker for role, marker in items)


def _items(chain: Chain, key: str) -> list[tuple[str, str]]:
    """(role, marker) of a model request for message ``key`` continuing ``chain``."""
    items: list[tuple[str, str]] = []
    for ancestor, answered in chain:
        items.append(("user", ancestor))
        if answered:
            items.append(("assistant", ancestor))
    items.append(("user", key))
    return items
