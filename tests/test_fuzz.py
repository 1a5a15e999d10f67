"""Fuzzing the real running bot with thousands of generated Telegram updates.

The storm (``test_update_storm_keeps_chats_apart``) feeds a few thousand updates,
generated from a fixed seed, through the Bot API test server to the bot running
in this event loop: private chats, a supergroup, a basic group and a forum with
topics; normal and blank texts, 100 KB texts, unusual Unicode, random and
malformed (but schema-valid) entities, replies to ids of other chats and to ids
that never existed, edits, channel posts, service messages, update types from
the future, messages of other bots and of chats (``sender_chat`` and no
``from``), commands for other bots, media, redelivered updates and deletions.

It runs in rounds; each round ends with one sentinel message per chat and waits
until every sentinel is answered and nothing is in flight, so the next round can
reply to the answers of the previous ones (continuing and branching
conversations). Every text carries its chat's marker (``zz<chat id>zz``), so a
text that crosses chats is visible in the model requests, in the bot's messages
and in the transcripts in Redis. Then it checks that

* the bot is alive (answers ``[depth:2] echo: ...`` and continues at depth 4),
  the test server saw no bug of its own and no protocol violation;
* every bot message replies, in its own chat, to a user message of that chat
  (and stays in that message's forum topic);
* every model request and every stored transcript holds one chat's text only,
  and a transcript's length is the ``[depth:N]`` of the answer it belongs to;
* a 100 KB text gets a "too long" answer and never reaches the model;
* messages the bot must answer are answered (at most once), messages it must
  not answer (group chatter, service messages, other bots' commands) are not;
* nothing from the bot's own code logged an exception.

The tests after it pin bugs the fuzzing found (each named after its bug); the
storm stays clear of their triggers (see the comments in ``Storm``).
"""

from __future__ import annotations

import enum
import logging
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.app import App
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI
from .fakes.rich_messages import blocks_text
from .fakes.telegram import Call, FakeTelegram, StoredMessage
from .harness import OTHER_USER, USER, BotFactory, answers_to, ask

JSON = dict[str, Any]

SEED = 20_240_611
ROUNDS = 6
UPDATES_PER_ROUND = 500
STORM_TIMEOUT = 60.0
LONG_TEXT = 100_000
MAX_INPUT_CHARS = 16_000  # the bot's default MAX_INPUT_CHARS
BOT_USERNAME = "replychain_bot"

SUPERGROUP = -1_001_601
BASIC_GROUP = -1602
FORUM = -1_001_603
CHANNEL = -1_001_700
PRIVATE_CHATS = (USER, OTHER_USER, 2003, 2004)
MEMBERS = (3001, 3002, 3003, 3004)
OTHER_BOT: JSON = {"id": 4001, "is_bot": True, "first_name": "Helper", "username": "helper_bot"}
#: Raw (pushed) messages get ids no chat of the test server ever allocates, and
#: distinct per chat, so a reply into the wrong chat cannot hit a valid id there.
RAW_ID_BASE = 10_000_000

MARKER = re.compile(r"zz(\d+)zz")
WORDS = ["alpha", "beta", "gamma", "delta", "kilo", "lima", "tango", "hello", "what", "why",
         "how", "much", "many", "please", "thanks", "code", "list", "table", "item", "story",
         "poem", "answer", "question", "idea", "plan", "draft", "fix", "bug", "test"]  # fmt: skip
#: Markdown-ish and HTML-ish characters (no "z": markers stay unambiguous).
MARKUP = ["*", "**", "_", "__", "`", "```", "~~", "[", "](", ")", "<", ">", "&", "&amp;",
          "#", "# ", "- ", "1. ", "> ", "|", "\\", "<b>", "</i>", "<a href=", "\n", "\n\n",
          "    ", "\t", "---", "==", "!", "[x](http://e.com)", "<tg-spoiler>", "&#0;"]  # fmt: skip
UNICODE = [
    "\u200f", "\u200e", "\u202e", "\u202d", "\u2066", "\u2069", "\u061c",  # bidi marks
    "\u200d", "\u200c", "\u200b", "\u2060", "\ufeff",  # zero-width joiners, BOM
    "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇦🇯🇵", "👍🏽", "🧑🏿‍🚀", "❤️‍🔥", "1️⃣", "🫠",  # emoji sequences
    "e\u0301\u0302\u0303\u0304", "a\u0338", "Z\u0351\u0352\u0353\u035c\u0361",  # combining
    "\x00", "a\x00b", "\x01\x07\x1b[31m\x7f", "\r\n", "\u2028\u2029", "\x85",  # controls
    "\ufffd", "\ufffe", "\uffff", "\U0010ffff", "\U0001d54f\U0001d538",  # odd code points
    "مرحبا بالعالم", "שלום עולם", "你好，世界", "こんにちは", "Привет", "ﷺ", "𒐫",
    "Ω≈ç√∫˜µ≤≥÷", "ﬁﬂ", "İı", "ß", "\u3000", "\xa0",
]  # fmt: skip
BLANKS = (" ", "  \n\t ", "\u3000", "\xa0\xa0", "\n\n\n")
ENTITY_TYPES = (
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number",
    "bold", "italic", "underline", "strikethrough", "spoiler", "blockquote",
    "expandable_blockquote", "code", "pre", "text_link", "text_mention", "custom_emoji",
    "date_time", "future_entity", "", "MENTION",
)  # fmt: skip
COMMANDS_ANSWERED = ("/start", "/help", "/start deep-link-payload", "/help@replychain_bot")
COMMANDS_SILENT = ("/help@helper_bot", "/start@helper_bot", "/foo@helper_bot", "/gpt@other_ai_bot")
COMMANDS_UNKNOWN = ("/foo", "/settings", "/x_y_z1", "/" + "a" * 40, "/stop now", "/HELP")


class Expect(enum.Enum):
    ANSWER = "answer"  # the bot must reply to this message
    SILENT = "silent"  # the bot must not reply to it
    ANY = "any"  # either is fine (the message must only not break anything)


@dataclass
class Chat:
    id: int
    kind: str  # "private", "supergroup" or "group"
    title: str
    raw_base: int
    topics: list[int] = field(default_factory=list)
    raw_next: int = 0

    @property
    def marker(self) -> str:
        return f"zz{abs(self.id)}zz"

    @property
    def is_group(self) -> bool:
        return self.kind != "private"

    def as_dict(self) -> JSON:
        if self.kind == "private":
            return {"id": self.id, "type": "private", "first_name": self.title}
        chat: JSON = {"id": self.id, "type": self.kind, "title": self.title}
        if self.id == FORUM:
            chat["is_forum"] = True
        return chat

    def next_raw_id(self) -> int:
        self.raw_next += 1
        return self.raw_base + self.raw_next


@dataclass(frozen=True)
class Fed:
    """A message update the storm fed, and what the bot must do with it."""

    chat: int
    message_id: int
    expect: Expect
    case: str


def user_dict(user_id: int) -> JSON:
    return {"id": user_id, "is_bot": False, "first_name": f"User{user_id}", "language_code": "en"}


def bot_dict(tg: FakeTelegram) -> JSON:
    return {"id": tg.bot_id, "is_bot": True, "first_name": tg.first_name, "username": tg.username}


class Storm:
    """Generates and feeds the updates; remembers what the bot must do with each."""

    def __init__(self, tg: FakeTelegram, rng: random.Random, chats: list[Chat]) -> None:
        self.tg = tg
        self.rng = rng
        self.chats = chats
        self.by_id = {chat.id: chat for chat in chats}
        self.fed: list[Fed] = []
        self.cases: Counter[str] = Counter()
        self.updates = 0
        self.raw_ids: dict[int, set[int]] = defaultdict(set)
        self.long_ids: set[tuple[int, int]] = set()
        self.long_related: set[tuple[int, int]] = set()  # long texts and their notices
        self.sentinels: dict[tuple[int, int], str] = {}
        self.redeliverable: list[JSON] = []
        #: Edits to a new wording of a message (each may be answered as a sibling).
        self.edited: Counter[tuple[int, int]] = Counter()
        # reply targets: the chat's live messages when the round started
        self.snapshot: dict[int, list[StoredMessage]] = {}
        weighted: list[tuple[Callable[[Chat], None], float]] = [
            (self.text, 30), (self.unicode_text, 10), (self.blank, 4), (self.long, 1.5),
            (self.entities, 8), (self.command, 6), (self.media, 6), (self.raw_reply, 8),
            (self.raw_misc, 4), (self.raw_empty, 1), (self.other_bot, 3),
            (self.sender_chat, 3), (self.service, 5), (self.new_topic, 0.4), (self.edit, 3),
            (self.channel_post, 2), (self.unknown_update, 2), (self.redeliver, 2),
            (self.delete, 1),
        ]  # fmt: skip
        self.case_makers = [maker for maker, _ in weighted]
        self.case_weights = [weight for _, weight in weighted]

    # ------------------------------------------------------------ rounds

    def start_round(self) -> None:
        # Only messages of finished rounds are reply targets or deleted: deleting
        # an answer while it streams is a known bug (test_deleting_an_answer_...).
        self.snapshot = {
            chat.id: [m for m in self.tg.messages(chat.id) if not m.deleted] for chat in self.chats
        }
        # A reply to a too-long text or to its notice sends the over-long text to
        # the model (test_retrying_a_too_long_message_...): never reply to those.
        self.long_related = set(self.long_ids) | {
            (m.chat_id, m.message_id)
            for messages in self.snapshot.values()
            for m in messages
            if (m.chat_id, m.reply_to or 0) in self.long_ids
        }

    def step(self) -> None:
        chat = self.rng.choice(self.chats)
        make = self.rng.choices(self.case_makers, self.case_weights)[0]
        make(chat)

    def sentinel(self, chat: Chat, round_no: int) -> None:
        body = f"{chat.marker} sentinel of round {round_no}"
        text = f"@{BOT_USERNAME} {body}" if chat.is_group else body
        thread = self.rng.choice([None, *chat.topics]) if chat.topics else None
        message = self.send(chat, "sentinel", Expect.ANSWER, text, thread_id=thread)
        self.sentinels[(chat.id, message["message_id"])] = f"[depth:2] echo: {body}"

    # ------------------------------------------------------------ feeding

    def send(self, chat: Chat, case: str, expect: Expect, text: str | None, **kw: Any) -> JSON:
        sender = chat.id if not chat.is_group else self.rng.choice(MEMBERS)
        message = self.tg.send_user_message(chat.id, sender, text, **kw)
        self.updates += 1
        self.cases[case] += 1
        self.fed.append(Fed(chat.id, message["message_id"], expect, case))
        return message

    def push(self, case: str, update: JSON, expect: Expect | None = None) -> None:
        """Push a raw update; a message in one of our chats is recorded with ``expect``."""
        self.tg.push_update(update)
        self.updates += 1
        self.cases[case] += 1
        message = update.get("message")
        if expect is not None and message is not None:
            chat_id, message_id = message["chat"]["id"], message["message_id"]
            self.raw_ids[chat_id].add(message_id)
            self.fed.append(Fed(chat_id, message_id, expect, case))

    def raw_message(self, chat: Chat, text: str | None, **extra: Any) -> JSON:
        sender = chat.id if not chat.is_group else self.rng.choice(MEMBERS)
        message: JSON = {
            "message_id": chat.next_raw_id(),
            "from": user_dict(sender),
            "chat": chat.as_dict(),
            "date": int(time.time()),
        }
        if text is not None:
            message["text"] = text
            at = text.lower().find(f"@{BOT_USERNAME}")
            if at >= 0:  # Telegram marks the mention, as the test server does
                offset = len(text[:at].encode("utf-16-le")) // 2
                mention = {"type": "mention", "offset": offset, "length": len(BOT_USERNAME) + 1}
                message["entities"] = [mention]
        message.update(extra)
        return message

    # ------------------------------------------------------------ text pieces

    def words(self, low: int = 1, high: int = 12) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(low, high)))

    def markup(self) -> str:
        pieces = [self.rng.choice(MARKUP + list(WORDS)) for _ in range(self.rng.randint(1, 20))]
        return "".join(p if self.rng.random() < 0.5 else f"{p} " for p in pieces)

    def unicode(self) -> str:
        pieces = [self.rng.choice([*UNICODE, *WORDS]) for _ in range(self.rng.randint(1, 16))]
        return "".join(pieces)

    def address(self, chat: Chat, body: str, *, replying_to_bot: bool = False) -> tuple[str, bool]:
        """The text as sent, and whether it is addressed to the bot."""
        if not chat.is_group:
            return body, True
        roll = self.rng.random()
        if roll < 0.4:
            return f"@{BOT_USERNAME} {body}", True
        if roll < 0.5:
            return f"{body} @ReplyChain_Bot", True
        return body, replying_to_bot

    def pick(self, chat: Chat, *, bot: bool | None = None) -> StoredMessage | None:
        """A live message of the chat from an earlier round (a reply target)."""
        candidates = [
            m
            for m in self.snapshot.get(chat.id, [])
            if not m.deleted
            and (bot is None or m.is_bot == bot)
            and (m.chat_id, m.message_id) not in self.long_related
        ]
        return self.rng.choice(candidates) if candidates else None

    def thread(self, chat: Chat) -> int | None:
        return self.rng.choice([None, *chat.topics]) if chat.topics else None

    # ------------------------------------------------------------ cases

    def _text_case(self, chat: Chat, case: str, body: str) -> None:
        target = self.pick(chat) if self.rng.random() < 0.4 else None
        text, addressed = self.address(
            chat, body, replying_to_bot=target is not None and target.is_bot
        )
        expect = Expect.ANSWER if addressed else Expect.SILENT
        if target is not None:
            self.send(chat, case, expect, text, reply_to=target.message_id)
        else:
            self.send(chat, case, expect, text, thread_id=self.thread(chat))

    def text(self, chat: Chat) -> None:
        body = self.words() if self.rng.random() < 0.6 else self.markup()
        self._text_case(chat, "text", f"{chat.marker} {body}")

    def unicode_text(self, chat: Chat) -> None:
        self._text_case(chat, "unicode", f"{chat.marker} {self.unicode()}")

    def blank(self, chat: Chat) -> None:
        blank = self.rng.choice(BLANKS)
        if chat.is_group and self.rng.random() < 0.5:
            self.send(chat, "blank", Expect.ANSWER, f"@{BOT_USERNAME}{blank}")
        else:
            expect = Expect.SILENT if chat.is_group else Expect.ANSWER
            self.send(chat, "blank", expect, blank, thread_id=self.thread(chat))

    def long(self, chat: Chat) -> None:
        body = f"{chat.marker} " + "".join(self.rng.choice("abc ") for _ in range(LONG_TEXT))
        text = f"@{BOT_USERNAME} {body}" if chat.is_group else body
        message = self.send(chat, "long", Expect.ANSWER, text, thread_id=self.thread(chat))
        self.long_ids.add((chat.id, message["message_id"]))

    def entities(self, chat: Chat) -> None:
        text, _ = self.address(chat, f"{chat.marker} {self.words(0, 8)} {self.unicode()}")
        size = len(text.encode("utf-16-le")) // 2
        entities = [self.entity(size) for _ in range(self.rng.randint(1, 6))]
        if text.startswith("@") and self.rng.random() < 0.5:
            entities.append({"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1})
        self.rng.shuffle(entities)
        expect = Expect.ANSWER if not chat.is_group else Expect.ANY
        self.send(chat, "entities", expect, text, entities=entities, thread_id=self.thread(chat))

    def entity(self, size: int) -> JSON:
        kind = self.rng.choice(ENTITY_TYPES)
        offset = self.rng.choice([0, self.rng.randint(0, size), size, size + 7, -3, 2**31 - 1])
        length = self.rng.choice([1, self.rng.randint(0, size + 5), size * 3, 0, -2, 10**9])
        entity: JSON = {"type": kind, "offset": offset, "length": length}
        if kind == "text_link":
            entity["url"] = self.rng.choice(["https://example.com/x", "not a url", "tg://x"])
        elif kind == "text_mention":
            entity["user"] = user_dict(self.rng.choice(MEMBERS))
        elif kind == "pre":
            entity["language"] = self.rng.choice(["python", "", "<script>"])
        elif kind == "custom_emoji":
            entity["custom_emoji_id"] = "5368324170671202286"
        return entity

    def command(self, chat: Chat) -> None:
        roll = self.rng.random()
        if roll < 0.4:
            text, expect = self.rng.choice(COMMANDS_ANSWERED), Expect.ANSWER
        elif roll < 0.7:
            text, expect = self.rng.choice(COMMANDS_SILENT), Expect.SILENT
        else:
            text = self.rng.choice(COMMANDS_UNKNOWN)
            expect = Expect.SILENT if chat.is_group else Expect.ANSWER
        self.send(chat, "command", expect, f"{text} {chat.marker}", thread_id=self.thread(chat))

    def media(self, chat: Chat) -> None:
        kind = self.rng.choice(["sticker", "photo", "voice", "document"])
        kw: dict[str, Any] = {kind: True}
        addressed = not chat.is_group
        if kind == "voice":  # what the fake transcribes: the chat's marker, heard
            kw["data"] = f"{chat.marker} {self.words()}".encode()
        if kind != "sticker" and self.rng.random() < 0.5:
            caption, mentioned = self.address(chat, f"{chat.marker} {self.words()}")
            kw["caption"] = caption
            addressed = addressed or mentioned
        target = self.pick(chat, bot=True) if self.rng.random() < 0.3 else None
        if target is not None:
            kw["reply_to"] = target.message_id
            addressed = True
        else:
            kw["thread_id"] = self.thread(chat)
        self.send(chat, "media", Expect.ANSWER if addressed else Expect.SILENT, None, **kw)

    def raw_reply(self, chat: Chat) -> None:
        """A reply to an id of another chat, or to an id that never existed."""
        # ids of other chats' answers; in this chat such an id is a message of an
        # earlier round (ids are allocated in order), never a long text's notice
        known = max((m.message_id for m in self.snapshot.get(chat.id, [])), default=0)
        foreign = [
            m
            for c in self.chats
            if c.id != chat.id
            for m in self.snapshot.get(c.id, [])
            if m.is_bot
            and m.message_id <= known
            and (chat.id, m.message_id) not in self.long_related
        ]
        if foreign and self.rng.random() < 0.6:
            origin = self.rng.choice(foreign)
            target_id, case = origin.message_id, "reply-foreign"
            target_chat = self.by_id[origin.chat_id] if self.rng.random() < 0.3 else chat
        else:
            target_id = self.rng.choice([999_999_999, 0, -5, chat.raw_base - 1, 2**31 - 1])
            target_chat, case = chat, "reply-missing"
        replied: JSON = {
            "message_id": target_id,
            "from": bot_dict(self.tg),
            "chat": target_chat.as_dict(),
            "date": int(time.time()) - 60,
            "text": "[depth:2] echo: an earlier answer",
        }
        body = self.words() if self.rng.random() < 0.7 else self.unicode()
        text, _ = self.address(chat, f"{chat.marker} {body}")
        message = self.raw_message(chat, text, reply_to_message=replied)
        update = {"message": message}
        self.redeliverable.append(update)
        self.push(case, update, Expect.ANSWER)

    def raw_misc(self, chat: Chat) -> None:
        """Schema-valid oddities: forwards, fields from the future, quotes, via_bot."""
        text, addressed = self.address(chat, f"{chat.marker} {self.words()}")
        extra: JSON = self.rng.choice(
            [
                {"forward_origin": {"type": "user", "date": 1, "sender_user": user_dict(3001)}},
                {"forward_origin": {"type": "hidden_user", "date": 1, "sender_user_name": "X"}},
                {"future_field": {"nested": [1, "two", None]}, "another_new_flag": True},
                {"via_bot": OTHER_BOT, "has_protected_content": True},
                {"link_preview_options": {"is_disabled": True}, "effect_id": "123"},
                {"quote": {"text": "quoted", "position": 0}, "is_from_offline": True},
                {"author_signature": "Anon", "media_group_id": "77"},
            ]
        )
        update = {"message": self.raw_message(chat, text, **extra)}
        self.redeliverable.append(update)
        self.push("raw-misc", update, Expect.ANSWER if addressed else Expect.SILENT)

    def raw_empty(self, chat: Chat) -> None:
        self.push("raw-empty", {"message": self.raw_message(chat, "")}, Expect.ANY)

    def a_group(self, chat: Chat) -> Chat:
        """Bots and chats write only in groups: move a private chat's turn to a group."""
        return chat if chat.is_group else self.rng.choice([c for c in self.chats if c.is_group])

    def other_bot(self, chat: Chat) -> None:
        chat = self.a_group(chat)
        text, _ = self.address(chat, f"{chat.marker} {self.words()}")
        message = self.raw_message(chat, text)
        message["from"] = OTHER_BOT
        self.push("other-bot", {"message": message}, Expect.ANY)

    def sender_chat(self, chat: Chat) -> None:
        chat = self.a_group(chat)
        text, _ = self.address(chat, f"{chat.marker} {self.words()}")
        message = self.raw_message(chat, text)
        del message["from"]
        channel = {"id": CHANNEL, "type": "channel", "title": "News"}
        message["sender_chat"] = self.rng.choice([chat.as_dict(), channel])
        if message["sender_chat"] is channel:
            message["is_automatic_forward"] = True
        self.push("sender-chat", {"message": message}, Expect.ANY)

    def service(self, chat: Chat) -> None:
        pinned = self.pick(chat)
        options: list[JSON] = [
            {"pinned_message": {"message_id": 1, "date": 0, "chat": chat.as_dict()}},
        ]
        if pinned is not None:
            inner = {k: v for k, v in pinned.raw.items() if k != "reply_to_message"}
            options.append({"pinned_message": inner})
        if chat.is_group:
            options += [
                {"new_chat_members": [user_dict(3005), bot_dict(self.tg), OTHER_BOT]},
                {"left_chat_member": user_dict(self.rng.choice(MEMBERS))},
                {"new_chat_title": f"{chat.title} {self.unicode()}"},
                {"group_chat_created": True},
                {"video_chat_started": {}},
            ]
        if chat.id == FORUM:
            options += [
                {"forum_topic_closed": {}},
                {"forum_topic_reopened": {}},
                {"forum_topic_edited": {"name": "renamed"}},
                {"general_forum_topic_hidden": {}},
            ]
        message = self.raw_message(chat, None, **self.rng.choice(options))
        self.push("service", {"message": message}, Expect.SILENT)

    def new_topic(self, chat: Chat) -> None:
        if chat.id != FORUM or len(chat.topics) >= 8:
            return
        chat.topics.append(self.tg.add_topic(FORUM, f"Topic {len(chat.topics)} {self.unicode()}"))
        self.updates += 1
        self.cases["topic-created"] += 1

    def edit(self, chat: Chat) -> None:
        own = [m for m in self.snapshot.get(chat.id, []) if not m.is_bot and m.text]
        if own and self.rng.random() < 0.6:
            target = self.rng.choice(own)
            self.tg.edit_user_message(chat.id, target.message_id, f"{chat.marker} {self.words()}")
            self.edited[(chat.id, target.message_id)] += 1
        else:
            message = self.raw_message(chat, f"{chat.marker} edited", edit_date=int(time.time()))
            self.tg.push_update({"edited_message": message})
        self.updates += 1
        self.cases["edited"] += 1

    def channel_post(self, chat: Chat) -> None:
        post = {
            "message_id": self.rng.randint(1, 10**6),
            "sender_chat": {"id": CHANNEL, "type": "channel", "title": "News"},
            "chat": {"id": CHANNEL, "type": "channel", "title": "News"},
            "date": int(time.time()),
            "text": f"@{BOT_USERNAME} {chat.marker} channel news",
        }
        kind = self.rng.choice(["channel_post", "edited_channel_post"])
        self.push("channel-post", {kind: post})

    def unknown_update(self, chat: Chat) -> None:
        options: list[JSON] = [
            {"future_thing": {"id": 1, "chat": chat.as_dict(), "payload": [1, 2, {}]}},
            {"stopped_message_generation": {"chat": chat.as_dict()}},
            {"message_reaction": {"chat": chat.as_dict(), "message_id": 1, "date": 1,
                                  "old_reaction": [], "new_reaction": []}},
            {"callback_query": {"id": "1", "from": user_dict(3001), "chat_instance": "c"}},
        ]  # fmt: skip
        self.push("unknown-update", self.rng.choice(options))

    def redeliver(self, chat: Chat) -> None:
        """Telegram delivering a message a second time (new update id, same message)."""
        if self.redeliverable:
            update = self.rng.choice(self.redeliverable)
            self.tg.push_update({"message": update["message"]})
            self.updates += 1
            self.cases["redelivered"] += 1

    def delete(self, chat: Chat) -> None:
        """A user deletes a message of an earlier round (bots get no update for that)."""
        target = self.pick(chat)
        if target is not None:
            self.tg.delete_message(chat.id, target.message_id)
            target.deleted = True
            self.cases["deleted (no update)"] += 1


# ---------------------------------------------------------------------- checks


def sent_messages(tg: FakeTelegram) -> list[Call]:
    """The bot's messages as sent: sendMessage and sendRichMessage calls Telegram took."""
    calls = tg.calls_to("sendMessage") + tg.calls_to("sendRichMessage")
    return sorted((c for c in calls if c.status == 200), key=lambda c: c.at)


def first_text(call: Call) -> str:
    """The text a message had when it was sent (a rich message's visible text)."""
    rich = call.result.get("rich_message")
    return blocks_text(rich["blocks"]) if rich else str(call.result["text"])


def replies_by_target(tg: FakeTelegram) -> dict[tuple[int, int], list[str]]:
    """(chat, replied message id) -> first texts of the bot's messages replying to it."""
    replies: dict[tuple[int, int], list[str]] = defaultdict(list)
    for call in sent_messages(tg):
        reply = call.params.get("reply_parameters")
        assert isinstance(reply, dict), f"the bot spoke without replying: {call.params}"
        chat_id = int(call.params["chat_id"])
        assert reply.get("chat_id") in (None, chat_id), f"cross-chat reply: {call.params}"
        replies[(chat_id, int(reply["message_id"]))].append(first_text(call))
    return replies


def markers(text: str) -> set[str]:
    return set(MARKER.findall(text))


def check_replies_stay_in_chat(tg: FakeTelegram, storm: Storm) -> None:
    replies = replies_by_target(tg)
    for chat in storm.chats:
        messages = {m.message_id: m for m in tg.messages(chat.id)}
        users = {i for i, m in messages.items() if not m.is_bot} | storm.raw_ids[chat.id]
        for chat_id, target in replies:
            if chat_id == chat.id:
                assert target in users, f"chat {chat_id}: reply to {target}, not a user message"
        own = {str(abs(chat.id))}
        for m in tg.bot_messages(chat.id):
            assert markers(m.text or "") <= own, f"chat {chat.id} got {m.text!r}"
            if m.reply_to is not None:
                replied = messages[m.reply_to]
                assert not replied.is_bot
                assert replied.thread_id == m.thread_id, f"answer left topic: {m.raw}"


def text_of(content: Any) -> str:
    """A message's text: the string, or its text parts joined."""
    if not isinstance(content, list):
        return str(content)
    return "".join(p["text"] for p in content if p.get("type") == "text")


def check_model_requests(llm: FakeOpenAI) -> None:
    for request in llm.requests:
        seen: set[str] = set()
        for message in request.messages:
            if message["role"] == "system":
                continue
            parts = message["content"] if isinstance(message["content"], list) else []
            content = text_of(message["content"])  # the text, not an image's data URL
            found = markers(content)
            if message["role"] == "user":
                image_only = bool(parts) and not content  # a photo without a caption
                assert found or image_only, (
                    f"a user message without its chat's marker: {content[:200]!r}"
                )
                assert len(content) <= MAX_INPUT_CHARS, "an over-long text reached the model"
            seen |= found
        assert len(seen) <= 1, f"one model request mixes chats {seen}: {request.messages}"


def check_expectations(tg: FakeTelegram, storm: Storm) -> None:
    replies = replies_by_target(tg)
    for fed in storm.fed:
        texts = replies.get((fed.chat, fed.message_id), [])
        where = f"{fed.case} #{fed.message_id} in chat {fed.chat}"
        if fed.expect is Expect.ANSWER:
            assert texts, f"no answer to {where}"
        elif fed.expect is Expect.SILENT:
            assert not texts, f"the bot answered {where}, which it must not: {texts}"
        answers = [t for t in texts if t.startswith("[depth:")]
        wordings = 1 + storm.edited[(fed.chat, fed.message_id)]  # an edit asks anew
        assert len(answers) <= wordings, f"{where} answered {len(answers)} times"
    for key in storm.long_ids:
        assert any("too long" in t for t in replies[key]), f"long text {key}: {replies[key]}"
    for (chat_id, message_id), expected in storm.sentinels.items():
        parts = answers_to(tg, chat_id, message_id)
        shown = "".join(p.text or "" for p in parts)
        if storm.edited[(chat_id, message_id)]:  # edited later: its first answer comes first
            assert shown.startswith(expected)
        else:
            assert shown == expected


async def check_transcripts(tg: FakeTelegram, storm: Storm, store: TranscriptStore) -> int:
    """Every answer's stored transcript: one chat's text, as long as its depth says."""
    checked = 0
    for chat in storm.chats:
        for m in tg.bot_messages(chat.id):
            depth = re.match(r"\[depth:(\d+)\] ", m.text or "")
            if depth is None:
                continue
            node = await store.resolve(str(chat.id), m.message_id)
            assert node is not None, f"answer {m.message_id} in chat {chat.id} has no alias"
            history = await store.history(node)
            said = [h for h in history.messages if h.role in ("user", "assistant")]
            assert len(said) == int(depth.group(1)), f"depth of {m.text!r} vs {said}"
            found = set().union(*(markers(h.content or "") for h in said))
            assert found <= {str(abs(chat.id))}, f"chat {chat.id} transcript holds {found}"
            checked += 1
    return checked


def exceptions_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if (r.name.startswith("replychain") and r.exc_info)
        or (r.name == "aiogram.event" and r.levelno >= logging.ERROR)
        # a batch aiogram cannot parse is retried forever (test_schema_invalid_...)
        or (r.name == "aiogram.dispatcher" and "Failed to fetch updates" in r.getMessage())
    ]


def make_chats(tg: FakeTelegram) -> list[Chat]:
    chats = []
    for i, user in enumerate(PRIVATE_CHATS):
        tg.add_private_chat(user, f"Private{i}")
        chats.append(Chat(user, "private", f"Private{i}", RAW_ID_BASE * (i + 1)))
    groups = ((SUPERGROUP, "supergroup", "Team"), (BASIC_GROUP, "group", "Old group"))
    for j, (chat_id, kind, title) in enumerate(groups, start=len(chats) + 1):
        tg.add_group(chat_id, title, supergroup=kind == "supergroup")
        chats.append(Chat(chat_id, kind, title, RAW_ID_BASE * j))
    tg.add_group(FORUM, "Forum", forum=True)
    forum = Chat(FORUM, "supergroup", "Forum", RAW_ID_BASE * (len(chats) + 1))
    forum.topics = [tg.add_topic(FORUM, "Ideas"), tg.add_topic(FORUM, "Ошибки 🐞")]
    chats.append(forum)
    return chats


async def run_round(tg: FakeTelegram, app: App, storm: Storm, round_no: int) -> None:
    storm.start_round()
    for _ in range(UPDATES_PER_ROUND):
        storm.step()
    for chat in storm.chats:
        storm.sentinel(chat, round_no)
    keys = list(storm.sentinels)

    def sentinels_answered() -> bool:
        return all(answers_to(tg, chat_id, message_id) for chat_id, message_id in keys)

    await tg.wait_for(sentinels_answered, STORM_TIMEOUT, what=f"sentinels of round {round_no}")
    await tg.wait_for(
        lambda: app.runner.in_flight_count == 0 and tg.pending_updates == 0,
        STORM_TIMEOUT,
        what=f"turns of round {round_no} finished",
    )


# ---------------------------------------------------------------------- the storm


@pytest.mark.filterwarnings("ignore:Detected unknown update type:RuntimeWarning")
async def test_update_storm_keeps_chats_apart(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    start_bot: BotFactory,
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    tg.flood_edits_per_second = 1.0  # edits beyond Telegram's pace count as violations
    started = time.monotonic()
    storm = Storm(tg, random.Random(SEED), make_chats(tg))
    async with start_bot(rich_messages="auto") as app:  # the production default
        for round_no in range(1, ROUNDS + 1):
            await run_round(tg, app, storm, round_no)
        turns = app.runner.completed
        # still alive and still threading correctly
        first, text = await ask(tg, app, USER, f"zz{USER}zz still there?")
        assert text == f"[depth:2] echo: zz{USER}zz still there?"
        [answer] = answers_to(tg, USER, first)
        _, text = await ask(tg, app, USER, f"zz{USER}zz go on", reply_to=answer.message_id)
        assert text == f"[depth:4] echo: zz{USER}zz go on"

    assert not tg.server_errors
    assert not tg.violations
    assert exceptions_logged(caplog) == []
    check_replies_stay_in_chat(tg, storm)
    check_model_requests(llm)
    check_expectations(tg, storm)
    transcripts = await check_transcripts(tg, storm, TranscriptStore(redis))
    sent = len(sent_messages(tg))
    print(
        f"\nfuzz: {storm.updates} updates fed, {turns} turns finished, {sent} messages sent, "
        f"{len(llm.requests)} model requests, {transcripts} transcripts checked, "
        f"{time.monotonic() - started:.1f}s; cases: {dict(sorted(storm.cases.items()))}"
    )
    assert storm.updates >= ROUNDS * UPDATES_PER_ROUND * 0.9


# ---------------------------------------------------------------------- bugs found
# Each test fails with AssertionError for the bug it describes; anything else it
# needs on the way is checked with require(), whose RuntimeError is a real failure.


def require(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"the scenario did not happen as described: {what}")


def _message(chat: JSON, message_id: int, text: str, **extra: Any) -> JSON:
    return {
        "message_id": message_id,
        "from": user_dict(USER if chat["type"] == "private" else MEMBERS[0]),
        "chat": chat,
        "date": int(time.time()),
        "text": text,
        **extra,
    }


PRIVATE: JSON = {"id": USER, "type": "private", "first_name": "Ada"}
#: Updates that break aiogram's schema; the first two are what Telegram really sent
#: (aiogram issues #1840 and #1587), the third is a message origin from the future.
SCHEMA_INVALID = {
    "hidden-user-forward-without-name": _message(
        PRIVATE, 9_000_001, "fwd", forward_origin={"type": "hidden_user", "date": 1422450181}
    ),
    "external-reply-with-empty-story": _message(
        PRIVATE,
        9_000_002,
        "story reply",
        external_reply={
            "origin": {"type": "hidden_user", "date": 1, "sender_user_name": "A"},
            "story": {},
        },
    ),
    "forward-origin-of-a-future-type": _message(
        PRIVATE, 9_000_003, "fwd", forward_origin={"type": "future_origin", "date": 1}
    ),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_INVALID))
async def test_schema_invalid_update_no_longer_blocks_polling(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    start_bot: BotFactory,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    caplog.set_level(logging.WARNING)
    async with start_bot():
        tg.push_update({"message": SCHEMA_INVALID[case]})
        later = tg.send_user_message(USER, USER, "zz1001zz a normal message after it")
        try:
            await tg.wait_for(lambda: bool(answers_to(tg, USER, later["message_id"])), timeout=5)
        except AssertionError:
            fetch_failures = [
                r
                for r in caplog.records
                if "Failed to fetch updates - ClientDecodeError" in r.message
            ]
            require(len(fetch_failures) >= 2, "getUpdates failed to decode, again and again")
            require(tg.pending_updates == 2, "both updates are still unconfirmed")
            raise


async def test_retrying_a_too_long_message_leaves_it_out_of_the_model_call(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        long_id, text = await ask(tg, app, USER, "zz1001zz " + "x" * LONG_TEXT)
        require("too long" in text and not llm.requests, "the long text got its notice")
        [notice] = answers_to(tg, USER, long_id)
        await ask(tg, app, USER, "zz1001zz try again", reply_to=notice.message_id)
    sizes = [len(str(m["content"])) for r in llm.requests for m in r.messages]
    assert max(sizes) <= MAX_INPUT_CHARS


async def test_answering_into_a_vanished_forum_topic_answers_in_the_chat(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    tg.add_group(FORUM, "Forum", forum=True)
    forum: JSON = {"id": FORUM, "type": "supergroup", "title": "Forum", "is_forum": True}
    text = f"@{BOT_USERNAME} zz{abs(FORUM)}zz hello"
    mention = {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}
    gone = _message(
        forum, 500, text, message_thread_id=77, is_topic_message=True, entities=[mention]
    )
    async with start_bot() as app:
        tg.push_update({"message": gone})
        await tg.wait_for(lambda: app.runner.completed >= 1)
    refused = [c.description for c in tg.calls_to("sendMessage") if c.status != 200]
    require(refused == ["Bad Request: message thread not found"], f"sends refused: {refused}")
    delivered = [m for m in tg.bot_messages(FORUM) if (m.text or "").startswith("[depth:2] ")]
    assert len(delivered) == 1
    assert delivered[0].thread_id is None  # the topic is gone: answered in the chat
    assert exceptions_logged(caplog) == []


async def test_deleting_an_answer_while_it_streams_sends_it_anew(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    llm.responder = lambda _messages: " ".join(f"w{i}" for i in range(300))
    llm.chunk_chars = 20
    llm.chunk_delay = 0.05  # about 3.5 s of streaming
    tg.unsupported_methods.add("sendMessageDraft")  # a part on screen while streaming: edits
    async with start_bot() as app:
        asked = tg.send_user_message(USER, USER, "zz1001zz stream please")
        await tg.wait_for(lambda: bool(answers_to(tg, USER, asked["message_id"])))
        [part] = answers_to(tg, USER, asked["message_id"])
        require(not llm.requests[-1].completed, "the answer was still streaming")
        tg.delete_message(USER, part.message_id)
        await tg.wait_for(lambda: app.runner.completed >= 1, timeout=30)
    edits = [c for c in tg.calls_to("editMessageText") if c.params["message_id"] == part.message_id]
    assert len(edits) <= 6, f"{len(edits)} edits of one message in about 3.5 s"
    words = " ".join(f"w{i}" for i in range(300))
    resent = [m for m in answers_to(tg, USER, asked["message_id"]) if not m.deleted]
    assert [m.text for m in resent] == [f"[depth:2] {words}"]
    assert exceptions_logged(caplog) == []
