"""The fake Telegram server's guest mode (Bot API 10.0) and ephemeral messages (10.2):
chats the bot is not in, queries answered once, messages one user sees."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

from .telegram_files import Files, _media_payload
from .telegram_markup import _auto_entities, _reply_markup
from .telegram_types import JSON, StoredMessage, _ApiError, _Chat, _GuestQuery, _opt_int


class GuestMode(Files):
    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        return {
            **super()._methods(),
            "answerGuestQuery": self._answer_guest_query,
            "editEphemeralMessageText": self._edit_ephemeral_message_text,
        }

    def add_guest_chat(self, chat_id: int, kind: str = "private", *, title: str = "Friends") -> int:
        """A chat the bot is not a member of, where users may summon it (Bot API 10.0).

        Kept apart from the bot's own chats: ``chat_id`` may equal one of theirs.
        """
        if kind not in ("private", "group", "supergroup"):
            raise ValueError("guest bots are summoned in private chats, groups and supergroups")
        chat = _Chat(chat_id, kind, title=None if kind == "private" else title)
        if kind == "private":
            chat.first_name = "Friend"
        self._guest_chats[chat_id] = chat
        return chat_id

    def summon(
        self,
        chat_id: int,
        from_user_id: int,
        text: str,
        *,
        reply_to: int | None = None,
        photo: bool = False,
    ) -> dict[str, Any]:
        """A user mentions the bot in guest chat ``chat_id``: a ``guest_message`` update.

        Telegram delivers nothing unless the text (``photo``: a photo's caption) mentions
        the bot. ``reply_to`` is any message of that chat (the bot's guest answers
        included); the update carries it as ``reply_to_message`` as the chat shows it now.
        """
        chat = self._guest_chats[chat_id]
        entities = _auto_entities(text)
        extra: JSON = {}
        if photo:  # a real file the bot can getFile, as send_user_message's
            extra = _media_payload("photo", -chat_id - 10**13, chat.next_message_id)
            self._attach_files(extra, "photo", None, None, None, None, None, None)
            extra.update(caption=text, caption_entities=entities)
        mention = f"@{self.username}".lower()
        if not any(
            e["type"] == "mention"
            and text[e["offset"] : e["offset"] + e["length"]].lower() == mention
            for e in entities
        ):
            raise ValueError("a guest message reaches the bot only when it mentions the bot")
        message = self._store(
            chat,
            self._ensure_user(from_user_id).as_dict(),
            is_bot=False,
            text=None if photo else text,
            entities=[] if photo else entities,
            reply=self._user_reply_target(chat, reply_to),
            extra=extra,
            caption=text if photo else None,
        )
        query_id = str(7_000_000_000_000 + len(self.guest_queries))
        self.guest_queries[query_id] = _GuestQuery(
            chat_id, message.message_id, self._ensure_user(from_user_id).as_dict()
        )
        update = copy.deepcopy(message.raw)
        update["guest_query_id"] = query_id
        self.push_update({"guest_message": update})
        return update

    def post_in_guest_chat(self, chat_id: int, from_user_id: int, text: str) -> int:
        """Somebody writes in the guest chat without mentioning the bot: it sees nothing."""
        chat = self._guest_chats[chat_id]
        user = self._ensure_user(from_user_id).as_dict()
        return self._store(
            chat, user, is_bot=False, text=text, entities=_auto_entities(text)
        ).message_id

    def press_guest_button(self, chat_id: int, message_id: int, user_id: int, data: str) -> str:
        """A user presses a button of the bot's guest answer: a ``callback_query`` with
        the answer's ``inline_message_id`` and no message (an inline message's)."""
        message = self._guest_chats[chat_id].messages[message_id]
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        inline = next(
            (i for i, where in self._inline.items() if where == (chat_id, message_id)), None
        )
        if inline is None or data not in held:
            raise ValueError(f"guest message {message_id} in chat {chat_id} has no button {data!r}")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, message_id)
        callback = {
            "id": query_id,
            "from": self._ensure_user(user_id).as_dict(),
            "inline_message_id": inline,
            "chat_instance": f"gi{abs(chat_id)}",
            "data": data,
        }
        self.push_update({"callback_query": callback})
        return query_id

    def press_ephemeral_button(
        self, chat_id: int, ephemeral_id: int, user_id: int, data: str
    ) -> str:
        """The receiver of an ephemeral message presses one of its buttons (nobody else
        sees it): a ``callback_query`` carrying the message."""
        message = self._ephemeral(chat_id, ephemeral_id)
        markup = message.reply_markup or {}
        held = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        if message.raw["receiver_user"]["id"] != user_id or data not in held:
            raise ValueError(f"user {user_id} sees no button {data!r} of that message")
        query_id = str(4_000_000_000_000 + len(self.open_queries) + len(self.query_answers))
        self.open_queries[query_id] = (chat_id, 0)
        callback = {
            "id": query_id,
            "from": self._ensure_user(user_id).as_dict(),
            "message": copy.deepcopy(message.raw),
            "chat_instance": f"ci{abs(chat_id)}",
            "data": data,
        }
        self.push_update({"callback_query": callback})
        return query_id

    def _ephemeral(self, chat_id: int, ephemeral_id: int) -> StoredMessage:
        for message in self.ephemerals:
            if message.chat_id == chat_id and message.raw["ephemeral_message_id"] == ephemeral_id:
                return message
        raise KeyError(f"no ephemeral message {ephemeral_id} in chat {chat_id}")

    def expire_guest_query(self, query_id: str) -> None:
        """The query can no longer be answered (Telegram's "query is too old")."""
        self.guest_queries[query_id].expired = True

    def guest_messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of guest chat ``chat_id``, in id order."""
        return sorted(self._guest_chats[chat_id].messages.values(), key=lambda m: m.message_id)

    def guest_answers(self, chat_id: int) -> list[StoredMessage]:
        """The bot's answers posted into guest chat ``chat_id``."""
        return [m for m in self.guest_messages(chat_id) if m.is_bot]

    def visible_to(self, chat_id: int, user_id: int) -> list[StoredMessage]:
        """What ``user_id`` sees in the chat: its messages and the ephemeral ones sent to them."""
        mine = [m for m in self.ephemerals
                if m.chat_id == chat_id and m.raw["receiver_user"]["id"] == user_id]  # fmt: skip
        return [*self.messages(chat_id), *mine]

    def _answer_guest_query(self, params: JSON) -> JSON:
        query = self.guest_queries.get(str(params.get("guest_query_id") or ""))
        if query is None or query.answered is not None or query.expired:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        result = params.get("result")
        if not isinstance(result, dict):
            raise _ApiError(400, "Bad Request: can't parse inline query result JSON object")
        if result.get("type") != "article":
            raise _ApiError(400, "Bad Request: only article results are supported by FakeTelegram")
        if not 1 <= len(str(result.get("id") or "").encode()) <= 64:
            raise _ApiError(400, "Bad Request: RESULT_ID_INVALID")
        if not result.get("title"):
            raise _ApiError(400, "Bad Request: RESULT_TITLE_EMPTY")
        content = result.get("input_message_content")
        if not isinstance(content, dict) or "message_text" not in content:
            raise _ApiError(400, "Bad Request: can't parse input message content")
        text, entities, mode, raw_text = self._format(
            {
                "text": content["message_text"],
                "parse_mode": content.get("parse_mode"),
                "entities": content.get("entities"),
            }
        )
        markup = _reply_markup({"reply_markup": result.get("reply_markup")})
        if markup is not None and "inline_keyboard" not in markup:
            raise _ApiError(400, "Bad Request: REPLY_MARKUP_INVALID")
        chat = self._guest_chats[query.chat_id]
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            text=text,
            entities=entities,
            reply=chat.messages[query.message_id],
            html=raw_text,
            parse_mode=mode,
            reply_markup=markup,
            extra={"guest_bot_caller_user": copy.deepcopy(query.caller)},
        )
        inline = hashlib.sha256(f"{query.chat_id}:{message.message_id}".encode()).hexdigest()[:27]
        query.answered = inline
        self._inline[inline] = (chat.id, message.message_id)
        return {"inline_message_id": inline}

    def _edit_ephemeral_message_text(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        try:
            message = self._ephemeral(chat.id, _opt_int(params, "ephemeral_message_id") or 0)
        except KeyError:
            raise _ApiError(400, "Bad Request: message to edit not found") from None
        if message.raw["receiver_user"]["id"] != _opt_int(params, "receiver_user_id"):
            raise _ApiError(400, "Bad Request: message to edit not found")
        self._apply_edit(message, params)
        return True
