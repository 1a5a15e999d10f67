"""A strict fake of the Telegram Bot API, served over HTTP on loopback, for end-to-end tests.

Point the real aiogram client at it::

    async with FakeTelegram() as tg:
        session = AiohttpSession(api=TelegramAPIServer.from_base(tg.url))
        bot = Bot(tg.token, session=session)
        tg.add_private_chat(42, "Ann")
        tg.send_user_message(42, 42, "/start")
        ...  # run the dispatcher, in-process or as a subprocess given ``tg.url``
        await tg.wait_for(lambda: len(tg.bot_messages(42)) == 1)

It answers like Telegram does (status codes, ``{"ok": false, "error_code", "description",
"parameters": {"retry_after"}}`` bodies and Telegram's error texts) so aiogram raises the
same exceptions it would in production, and it is at least as strict as Telegram about what
it accepts: HTML/MarkdownV2 parsing, UTF-16 length limits, replies, forum topics, edits and
flood limits.  Every call is kept in :attr:`FakeTelegram.calls`; client misbehaviour that real
Telegram would punish (ignoring ``retry_after``, two pollers at once, editing too fast) is
recorded in :attr:`FakeTelegram.violations`.

It can also behave like the servers people really run.  ``fail_next`` answers with a
Telegram-shaped error status; ``misbehave_next(method, kind, ...)`` answers like a sloppy
emulator, reverse proxy or newer server (a result missing a field aiogram requires, unknown
extra fields, ``result: null``, a JSON body without ``ok``, an HTML error page, ``{"ok":
false}`` alone), with or without applying the method; ``unsupported_methods=`` makes methods
unknown to the server; ``flood_sends_per_second=``/``flood_edits_per_second=`` add per-chat
and per-message flood limits.  Injected answers are marked in ``Call.fault``.

Rich messages (Bot API 10.1-10.3): ``sendRichMessage``, ``sendRichMessageDraft`` and
``editMessageText`` with ``rich_message`` (a text message may become rich and back) take
an ``InputRichMessage`` checked as strictly as :mod:`tests.fakes.rich_messages` describes (tags,
nesting, entities, the text, block, depth and column limits); a rich message is stored
with its ``RichMessage`` (``StoredMessage.rich_message``, also in the served Message) and
its visible text as ``text``; a rich draft keeps its ``rich_message`` too. Like an older
server, ``unsupported_methods={"sendRichMessage", "sendRichMessageDraft"}`` lacks them.

Drafts (``sendMessageDraft``, Bot API 10.3) are private-chat only (a group gets Telegram's
``400 TEXTDRAFT_PEER_INVALID``), at most 4096 visible characters, an empty text being the
"Thinking…" placeholder; every draft shown is kept in :attr:`FakeTelegram.drafts`, the one
on screen is :meth:`FakeTelegram.current_draft` (a message the bot sends replaces it).
:meth:`FakeTelegram.stop_generation` is the user pressing a draft's stop button (only on a
draft shown with ``can_stop``): it queues a ``stopped_message_generation`` update.  Like an
older or self-hosted server, ``unsupported_methods={"sendMessageDraft"}`` (or adding it to
that set while running) answers ``404 Not Found: method not found``.

Guest mode (Bot API 10.0): :meth:`FakeTelegram.add_guest_chat` is a chat the bot is not
in (kept apart from the bot's own chats, even under the same id, as Telegram says it "may
not coincide" with them); :meth:`FakeTelegram.summon` is a user mentioning the bot there (a
``guest_message`` update with a ``guest_query_id``; only a text that mentions the bot is
delivered, and its ``reply_to_message`` is the message replied to as the chat shows it);
:meth:`FakeTelegram.post_in_guest_chat` is a message the bot never sees. ``answerGuestQuery``
answers a query once (again, or after :meth:`FakeTelegram.expire_guest_query`, Telegram's
"query is too old" error), takes an ``article`` result and posts it into the chat as the
bot's message (text, entities and inline keyboard as sent, ``guest_bot_caller_user`` set, a
reply to the summoning message), answering an ``inline_message_id`` with which
``editMessageText`` edits it (``True`` as the result). ``sendMessage`` never reaches a guest
chat. ``guest_mode=False`` is a bot whose guest mode is off in @BotFather (getMe
``supports_guest_queries``).

Ephemeral messages (Bot API 10.2): ``sendMessage`` with 10.3's ``ephemeral_message_parameters``
(10.2's top-level ``receiver_user_id`` is ignored, as by a server that knows only the current
form) in a group shows the message to that user only: it is kept
in :attr:`FakeTelegram.ephemerals`, not among the chat's messages, with ``message_id`` 0 and an
``ephemeral_message_id``; :meth:`FakeTelegram.visible_to` is what one user sees.
Its receiver may press its buttons (:meth:`FakeTelegram.press_ephemeral_button`) and the bot
edit it with ``editEphemeralMessageText`` (Bot API 10.3). ``ephemeral=False`` is an older
server: it ignores those parameters and sends the message to everyone, as such a server
does with any parameter it does not know.

Private chats with topics (Bot API 9.3-10.5): ``private_topics(user)`` turns them on (getMe
``has_topics_enabled``; ``on=False``: the user turned them off in that chat); ``add_topic`` is
the user opening one, ``createForumTopic`` the bot (no update for its creation message);
``setMySettings`` keeps ``has_topic_sidebar``, which getMe reports while topics are on.

Deliberately stricter than Telegram (real Telegram silently passes these through):
a bare ``&`` that does not start ``&lt;``/``&gt;``/``&amp;``/``&quot;``/``&#NN;``/``&#xHH;``
(``;`` included) and ``<a>`` without ``href`` are rejected.  Pass ``strict_html=False`` to get
Telegram's lenient behaviour for these two.

Good to know:

* The server runs on the caller's event loop: never block it (use asyncio subprocesses).
* Like Telegram it trims surrounding whitespace from texts and adds the entities it detects
  itself (``bot_command``, ``mention``, ``url``) to user *and* bot messages.
* ``messages()``/``bot_messages()`` include deleted messages (``deleted=True``).
* ``add_topic`` queues the ``forum_topic_created`` service message as an update (as Telegram
  does); pass ``queue_update=False`` to skip that.
* In groups the bot may delete only its own messages unless ``add_group(bot_is_admin=True)``.
* ``clock=`` replaces ``time.monotonic`` for retry_after/flood bookkeeping and ``Call.at``.
* A bug inside the fake is answered with HTTP 500 and its traceback kept in ``server_errors``.
* Media messages carry real files: ``getFile`` answers a ``file_path`` and
  ``GET /file/bot<token>/<file_path>`` serves the bytes (``downloads`` lists them,
  ``download_requests`` every request with its status); a file claimed over 20 MB gets
  Telegram's "file is too big". See ``send_user_message``.
* ``local_mode=True`` is ``telegram-bot-api --local``: setWebhook takes http:// URLs and
  any port (updates are POSTed to the URL itself unless ``webhook_target`` is set), and
  getFile first writes the file under ``files_dir`` (``<token with ~ for :>/voice/
  file_0.oga``, as the real server lays out its ``--dir``) and answers its absolute path,
  for files of up to 2000 MB. ``server_dir`` names that directory as a server in
  another container would (a path the bot cannot read). Like the real server it serves
  no files (``/file/...`` is 404) unless ``serve_local_files=True`` (a web server in
  front serving ``/file/bot<token>/<absolute path>``). ``local_paths`` maps file ids to
  the paths answered; a test may change one to make the server answer another path.
* ``stop()`` answers open long polls with ``[]``; ``start()`` again reuses the same port
  and keeps all state (a Telegram outage).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any, Final

from .telegram_files import _media_flags, _media_payload
from .telegram_guest import GuestMode
from .telegram_markup import _auto_entities
from .telegram_payments import Payments
from .telegram_setup import Setup
from .telegram_types import (
    JSON,
    Call,
    Checkout,
    Draft,
    Misbehaviour,
    StarCharge,
    StarPayments,
    StoredMessage,
    _Chat,
    _User,
)

__all__ = [
    "Call", "Checkout", "Draft", "FakeTelegram", "Misbehaviour", "StarCharge", "StarPayments",
    "StoredMessage",
]  # fmt: skip


_ADMIN_ID: Final = 1_000_000_001  # synthetic creator of forum topics


class FakeTelegram(GuestMode, Payments, Setup):
    """A Bot API server for one bot. See the module docstring for usage."""

    def add_user(self, user_id: int, first_name: str = "User", username: str | None = None) -> None:
        self._users[user_id] = _User(user_id, first_name, username)
        self._notify()

    def set_language(self, user_id: int, language_code: str | None) -> None:
        """The user's client language from now on (None: Telegram sends none)."""
        self._ensure_user(user_id).language_code = language_code
        self._notify()

    def add_private_chat(
        self, user_id: int, first_name: str = "User", username: str | None = None
    ) -> int:
        """The user has started the bot: a private chat whose id is the user's id."""
        self.add_user(user_id, first_name, username)
        chat = self._chats.get(user_id)
        if chat is None:
            self._chats[user_id] = _Chat(user_id, "private", first_name=first_name)
        elif chat.type != "private":
            raise ValueError(f"chat {user_id} is a {chat.type}, not a private chat")
        self._chats[user_id].first_name = first_name
        self._chats[user_id].username = username
        self._notify()
        return user_id

    def add_group(
        self,
        chat_id: int,
        title: str = "Group",
        *,
        supergroup: bool = True,
        forum: bool = False,
        bot_is_admin: bool = False,
    ) -> int:
        if forum and not supergroup:
            raise ValueError("only supergroups can be forums")
        kind = "supergroup" if supergroup else "group"
        chat = self._chats.setdefault(chat_id, _Chat(chat_id, kind))
        if chat.type == "private":
            raise ValueError(f"chat {chat_id} is a private chat")
        chat.type, chat.title, chat.is_forum, chat.bot_is_admin = kind, title, forum, bot_is_admin
        self._notify()
        return chat_id

    def add_member(self, chat_id: int, user_id: int, status: str = "member") -> None:
        """``user_id`` is in the group ``chat_id`` (``creator`` or ``member``); ``left``
        removes them."""
        if status not in ("creator", "member", "left"):
            raise ValueError(f"unsupported member status {status!r}")
        chat = self._chat(chat_id)
        if chat.type == "private":
            raise ValueError(f"chat {chat_id} is a private chat")
        self._ensure_user(user_id)
        if status == "left":
            chat.members.pop(user_id, None)
        else:
            chat.members[user_id] = status

    def add_topic(
        self,
        chat_id: int,
        name: str,
        *,
        creator_id: int | None = None,
        queue_update: bool = True,
        implicit: bool = False,
    ) -> int:
        """Create a topic: its forum_topic_created message id is the message_thread_id.

        In a forum supergroup, or in a private chat with topics (Bot API 9.3; turn
        them on with ``private_topics``): there the user creates it, and
        ``implicit`` marks a name Telegram made up (``is_name_implicit``).
        """
        chat = self._chat(chat_id)
        if not chat.has_topics:
            raise ValueError(f"chat {chat_id} is not a forum supergroup nor a chat with topics")
        if chat.type == "private":
            creator_id = chat.id
        if creator_id is None:
            creator_id = _ADMIN_ID
            self._users.setdefault(_ADMIN_ID, _User(_ADMIN_ID, "Admin", "group_admin"))
        creator = self._ensure_user(creator_id)
        thread_id = chat.next_message_id
        chat.topics[thread_id] = name
        created: JSON = {"name": name, "icon_color": 0x6FB9F0}
        if implicit:
            created["is_name_implicit"] = True
        message = self._store(
            chat,
            creator.as_dict(),
            is_bot=False,
            thread_id=thread_id,
            extra={"forum_topic_created": created},
        )
        if queue_update:
            self.push_update({"message": copy.deepcopy(message.raw)})
        return thread_id

    def private_topics(self, user_id: int, *, on: bool = True) -> None:
        """The bot has topics in private chats, and this user's chat with it shows them
        (``on=False``: the user turned them off in this chat)."""
        self.topics_enabled = True
        chat = self._chat(user_id)
        if chat.type != "private":
            raise ValueError(f"chat {user_id} is not a private chat")
        chat.private_topics = on

    def block_chat(self, chat_id: int) -> None:
        """Every send/edit/action/delete to this chat now fails with 403."""
        self._chat(chat_id).blocked = True
        self._notify()

    def unblock_chat(self, chat_id: int) -> None:
        self._chat(chat_id).blocked = False
        self._notify()

    def send_user_message(
        self,
        chat_id: int,
        from_user_id: int,
        text: str | None = None,
        *,
        reply_to: int | None = None,
        thread_id: int | None = None,
        caption: str | None = None,
        photo: bool = False,
        sticker: bool = False,
        voice: bool = False,
        document: bool = False,
        audio: bool = False,
        entities: list[dict[str, Any]] | None = None,
        photo_sizes: Sequence[tuple[int, int]] | None = None,
        data: bytes | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
        duration: int | None = None,
        file_size: int | None = None,
        media_group_id: str | None = None,
    ) -> dict[str, Any]:
        """A user writes to the bot: store the message, queue a ``message`` update.

        Media come with real files the bot can ``getFile`` and download: a photo in
        ``photo_sizes`` (width, height; by default three, the largest 1280x960), each
        size its own JPEG-signed bytes; a voice note, audio or document holds ``data``
        (default: some bytes) with ``file_name``/``mime_type``/``duration``.
        ``file_size`` claims another size than the bytes' (over 20 MB: getFile answers
        "file is too big", as Telegram does). Albums: the same ``media_group_id`` on
        several photo messages, each its own update.
        """
        chat = self._chat(chat_id)
        if chat.type == "private" and from_user_id != chat_id:
            raise ValueError("in a private chat only the chat's user can write")
        media = [kind for kind, on in _media_flags(photo, sticker, voice, document, audio) if on]
        self._check_user_content(text, caption, media)
        user = self._ensure_user(from_user_id)
        reply = self._user_reply_target(chat, reply_to)
        if thread_id is not None and not (chat.has_topics and thread_id in chat.topics):
            raise ValueError(f"no topic {thread_id} in chat {chat_id}")
        if thread_id is None and reply is not None:
            thread_id = reply.thread_id
        extra: JSON = {}
        for kind in media:
            extra.update(_media_payload(kind, chat_id, chat.next_message_id))
            self._attach_files(
                extra, kind, photo_sizes, data, file_name, mime_type, duration, file_size
            )
        if media_group_id is not None:
            extra["media_group_id"] = media_group_id
        if caption is not None:
            extra["caption"] = caption
            caption_entities = _auto_entities(caption)
            if caption_entities:
                extra["caption_entities"] = caption_entities
        if text is not None and entities is None:
            entities = _auto_entities(text)
        message = self._store(
            chat,
            user.as_dict(),
            is_bot=False,
            text=text,
            entities=entities or [],
            thread_id=thread_id,
            reply=reply,
            extra=extra,
            caption=caption,
        )
        self.push_update({"message": copy.deepcopy(message.raw)})
        return copy.deepcopy(message.raw)

    def edit_user_message(self, chat_id: int, message_id: int, text: str) -> dict[str, Any]:
        """The user edits their text message: queue an ``edited_message`` update."""
        message = self.message(chat_id, message_id)
        if message.is_bot or message.deleted or message.text is None:
            raise ValueError(f"message {message_id} in chat {chat_id} is not a live user text")
        message.history.append(message.text)
        message.text = text
        message.entities = _auto_entities(text)
        message.edits += 1
        message.edit_date = int(time.time())
        message.raw["text"] = text
        message.raw["edit_date"] = message.edit_date
        if message.entities:
            message.raw["entities"] = copy.deepcopy(message.entities)
        else:
            message.raw.pop("entities", None)
        self.push_update({"edited_message": copy.deepcopy(message.raw)})
        return copy.deepcopy(message.raw)

    def press_button(self, chat_id: int, message_id: int, user_id: int, data: str) -> str:
        """The user presses the inline button carrying ``data`` under a bot message.

        Queues a ``callback_query`` update; returns the query's id. Only data a
        button of that message holds can be pressed (Telegram sends nothing else).
        """
        message = self.message(chat_id, message_id)
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        if not message.is_bot or message.deleted or data not in held:
            raise ValueError(f"message {message_id} in chat {chat_id} has no button {data!r}")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, message_id)
        self.push_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": self._ensure_user(user_id).as_dict(),
                    "message": copy.deepcopy(message.raw),
                    "chat_instance": f"ci{abs(chat_id)}",
                    "data": data,
                }
            }
        )
        return query_id

    def current_draft(self, chat_id: int) -> Draft | None:
        """The draft the user sees in the chat now (None once a message replaced it)."""
        return self._draft_on_screen.get(chat_id)

    def drafts_in(self, chat_id: int) -> list[Draft]:
        return [draft for draft in self.drafts if draft.chat_id == chat_id]

    def stop_generation(self, chat_id: int, draft_id: int | None = None) -> int:
        """The user presses the stop button of a draft (default: the one on screen).

        Only a draft shown with ``can_stop`` has the button. Queues the
        ``stopped_message_generation`` update; returns its update_id.
        """
        shown = self.current_draft(chat_id) if draft_id is None else next(
            (d for d in reversed(self.drafts_in(chat_id)) if d.draft_id == draft_id), None
        )  # fmt: skip
        if shown is None or not shown.can_stop:
            raise ValueError(f"no draft with a stop button to press in chat {chat_id}")
        if not shown.keep_on_stop and self._draft_on_screen.get(chat_id) == shown:
            del self._draft_on_screen[chat_id]
        event: JSON = {"chat": self._chat(chat_id).as_dict(), "draft_id": shown.draft_id}
        if shown.thread_id is not None:
            event["message_thread_id"] = shown.thread_id
        return self.push_update({"stopped_message_generation": event})

    def delete_message(self, chat_id: int, message_id: int) -> None:
        """As if the user deleted the message (bots get no update for that)."""
        self.message(chat_id, message_id).deleted = True
        self._notify()
