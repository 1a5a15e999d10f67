"""The fake Telegram server's message methods: send, edit, delete, drafts, rich
messages, forum topics, callback answers and chat actions."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from typing import Any, Final

from .rich_messages import Rich, RichError, parse_rich
from .telegram_core import TelegramCore
from .telegram_markup import (
    _auto_entities,
    _canonical_entities,
    _entity,
    _entity_sort_key,
    _explicit_entities,
    _HtmlParser,
    _MarkdownParser,
    _MarkdownV2Parser,
    _reply_markup,
    _strip_formatted,
    _u16,
    _visible_markup,
)
from .telegram_types import (
    JSON,
    Draft,
    StoredMessage,
    _ApiError,
    _Chat,
    _coerce_int,
    _EntityError,
    _opt_int,
    _set_or_drop,
    _truthy,
    _User,
)

_NOT_MODIFIED: Final = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)

_MAX_TEXT_UNITS: Final = 4096

_MAX_CAPTION_UNITS: Final = 1024

_DRAFT_PEER_INVALID: Final = "Bad Request: TEXTDRAFT_PEER_INVALID"  # a draft outside a DM

_CHAT_ACTIONS: Final = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)


class Messages(TelegramCore):
    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        return {
            **super()._methods(),
            "sendMessage": self._send_message,
            "editMessageText": self._edit_message_text,
            "sendChatAction": self._send_chat_action,
            "deleteMessage": self._delete_message_call,
            "answerCallbackQuery": self._answer_callback_query,
            "editForumTopic": self._edit_forum_topic,
            "sendMessageDraft": self._send_message_draft,
            "sendRichMessage": self._send_rich_message,
            "sendRichMessageDraft": self._send_rich_message_draft,
            "createForumTopic": self._create_forum_topic,
            "setMySettings": self._set_my_settings,
        }

    def _target_chat(self, params: JSON) -> _Chat:
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: chat_id is empty")
        chat_id = _coerce_int(raw)
        chat = self._chats.get(chat_id) if chat_id is not None else None
        if chat is None:
            if chat_id in self._users:
                raise _ApiError(403, "Forbidden: bot can't initiate conversation with a user")
            raise _ApiError(400, "Bad Request: chat not found")
        if chat.blocked:
            raise _ApiError(403, chat.blocked_description())
        return chat

    def _check_thread(self, chat: _Chat, thread_id: int | None) -> None:
        if thread_id is not None and not (chat.has_topics and thread_id in chat.topics):
            raise _ApiError(400, "Bad Request: message thread not found")

    def _format(
        self, params: JSON, *, caption: bool = False
    ) -> tuple[str, list[JSON], str | None, str]:
        """Parse text + parse_mode/entities like Telegram: (text, entities, parse_mode, raw).

        ``caption``: a media caption instead (caption_entities, at most 1024 characters,
        may be empty: then the text is "").
        """
        raw = params.get("caption" if caption else "text")
        if caption and raw in (None, ""):
            return "", [], None, ""
        if caption:
            params = {**params, "entities": params.get("caption_entities")}
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: message text is empty")
        raw = raw if isinstance(raw, str) else json.dumps(raw)
        mode = params.get("parse_mode")
        mode_name = mode.lower() if isinstance(mode, str) else ""
        try:
            if mode_name in ("", "none"):
                text, entities = raw, _explicit_entities(params.get("entities"))
            elif mode_name == "html":
                text, entities = _HtmlParser(raw, strict=self.strict_html).parse()
            elif mode_name == "markdownv2":
                text, entities = _MarkdownV2Parser(raw).parse()
            elif mode_name == "markdown":
                text, entities = _MarkdownParser(raw).parse()
            else:
                raise _ApiError(400, "Bad Request: unsupported parse_mode")
        except _EntityError as exc:
            raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        text, entities = _strip_formatted(text, entities)
        if caption and _u16(text) > _MAX_CAPTION_UNITS:
            raise _ApiError(400, "Bad Request: message caption is too long")
        if not text and not caption:
            raise _ApiError(400, "Bad Request: message text is empty")
        if _u16(text) > _MAX_TEXT_UNITS:
            raise _ApiError(400, "Bad Request: message is too long")
        entities = [self._resolve_mention(entity) for entity in entities]
        entities = sorted(entities + _auto_entities(text, entities), key=_entity_sort_key)
        return text, entities, mode if mode_name not in ("", "none") else None, raw

    def _resolve_mention(self, entity: JSON) -> JSON:
        """tg://user?id=N links become text_mention entities for users the fake knows."""
        match = re.fullmatch(r"tg://user\?id=(\d+)", str(entity.get("url", "")))
        user = self._users.get(int(match.group(1))) if match else None
        if user is None:
            return entity
        return _entity("text_mention", entity["offset"], entity["length"], user=user.as_dict())

    def _reply_request(self, params: JSON) -> tuple[int | None, bool, int | str | None]:
        reply = params.get("reply_parameters")
        if reply is not None:
            if not isinstance(reply, dict):
                raise _ApiError(400, "Bad Request: can't parse reply parameters JSON object")
            message_id = _coerce_int(reply.get("message_id"))
            if message_id is None:
                raise _ApiError(400, "Bad Request: message to be replied not found")
            reply_chat = reply.get("chat_id")
            chat_ref = _coerce_int(reply_chat) if reply_chat is not None else None
            allow = _truthy(reply.get("allow_sending_without_reply"))
            return message_id, allow, chat_ref if chat_ref is not None else reply_chat
        message_id = _opt_int(params, "reply_to_message_id")
        allow = _truthy(params.get("allow_sending_without_reply"))
        return (message_id or None), allow, None

    def _placement(self, chat: _Chat, params: JSON) -> tuple[int | None, StoredMessage | None]:
        """Where a bot message lands: (message_thread_id, replied message)."""
        reply_id, allow, reply_chat = self._reply_request(params)
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        target: StoredMessage | None = None
        if reply_id is not None:
            if reply_chat is not None and reply_chat != chat.id:
                raise _ApiError(
                    400, "Bad Request: replies to other chats are not supported by FakeTelegram"
                )
            candidate = chat.messages.get(reply_id)
            if (
                candidate is not None
                and not candidate.deleted
                and (thread_id is None or candidate.thread_id == thread_id)
            ):
                target = candidate
            elif not allow:
                raise _ApiError(400, "Bad Request: message to be replied not found")
        if thread_id is None and target is not None:
            thread_id = target.thread_id
        return thread_id, target

    def _send_message(self, params: JSON) -> JSON:
        chat = self._target_chat(params)
        text, entities, mode, raw_text = self._format(params)
        thread_id, reply = self._placement(chat, params)
        markup = _reply_markup(params, chat)
        receiver = self._ephemeral_receiver(chat, params)
        self._draft_on_screen.pop(chat.id, None)  # a message the bot sends replaces its draft
        next_id = chat.next_message_id
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            text=text,
            entities=entities,
            thread_id=thread_id,
            reply=reply,
            html=raw_text,
            parse_mode=mode,
            reply_markup=markup,
        )
        if receiver is not None:
            # shown to one user only: no message id of the chat, an ephemeral one instead
            del chat.messages[message.message_id]
            chat.next_message_id = next_id
            message.message_id = message.raw["message_id"] = 0
            message.raw["ephemeral_message_id"] = len(self.ephemerals) + 1
            message.raw["receiver_user"] = receiver.as_dict()
            self.ephemerals.append(message)
        return copy.deepcopy(message.raw)

    def _ephemeral_receiver(self, chat: _Chat, params: JSON) -> _User | None:
        """The receiver of an ephemeral message (None: an ordinary one, or a server that
        knows no ephemeral messages and ignores the parameters). Like a server that knows
        only Bot API 10.3's form, ``ephemeral_message_parameters``: 10.2's top-level
        ``receiver_user_id`` is ignored (the message goes to everyone)."""
        nested = params.get("ephemeral_message_parameters")
        raw = nested.get("receiver_user_id") if isinstance(nested, dict) else None
        if raw is None or not self.ephemeral:
            return None
        if chat.type not in ("group", "supergroup"):
            raise _ApiError(400, "Bad Request: ephemeral messages can be sent only to groups")
        user = self._users.get(_coerce_int(raw) or 0)
        if user is None:
            raise _ApiError(400, "Bad Request: user not found")
        return user

    def _send_message_draft(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if chat.type != "private":
            raise _ApiError(400, _DRAFT_PEER_INVALID)
        draft_id = _opt_int(params, "draft_id")
        if draft_id is None:
            raise _ApiError(400, 'Bad Request: parameter "draft_id" is required')
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        raw = params.get("text")
        text: str | None = None
        html: str | None = None
        if raw not in (None, ""):  # an empty text is the "Thinking…" placeholder
            text, _entities, _mode, html = self._format(params)
        draft = Draft(
            chat.id, draft_id, text, html, thread_id, _truthy(params.get("can_stop")),
            _truthy(params.get("keep_on_stop")), self._clock(),
        )  # fmt: skip
        self.drafts.append(draft)
        self._draft_on_screen[chat.id] = draft
        self._notify()
        return True

    def _rich(self, params: JSON, *, draft: bool = False) -> tuple[Rich, str]:
        """The ``rich_message`` parameter as Telegram takes it, and its source."""
        value = params.get("rich_message")
        if value is None or value == "":
            raise _ApiError(400, 'Bad Request: parameter "rich_message" is required')
        try:
            rich = parse_rich(value, draft=draft)
        except RichError as exc:
            raise _ApiError(400, f"Bad Request: {exc}") from None
        source = value.get("html") or value.get("markdown") or json.dumps(value.get("blocks"))
        return rich, str(source)

    def _send_rich_message(self, params: JSON) -> JSON:
        chat = self._target_chat(params)
        rich, source = self._rich(params)
        thread_id, reply = self._placement(chat, params)
        markup = _reply_markup(params)
        self._draft_on_screen.pop(chat.id, None)  # a message the bot sends replaces its draft
        message = self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=source,
            reply_markup=markup,
            extra={"rich_message": rich.message},
        )
        message.text, message.rich_message = rich.text, rich.message
        return copy.deepcopy(message.raw)

    def _send_rich_message_draft(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if chat.type != "private":
            raise _ApiError(400, _DRAFT_PEER_INVALID)
        draft_id = _opt_int(params, "draft_id")
        if draft_id is None:
            raise _ApiError(400, 'Bad Request: parameter "draft_id" is required')
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        thread_id = _opt_int(params, "message_thread_id")
        self._check_thread(chat, thread_id)
        rich, source = self._rich(params, draft=True)
        draft = Draft(
            chat.id, draft_id, rich.text, source, thread_id, _truthy(params.get("can_stop")),
            _truthy(params.get("keep_on_stop")), self._clock(), rich.message,
        )  # fmt: skip
        self.drafts.append(draft)
        self._draft_on_screen[chat.id] = draft
        self._notify()
        return True

    def _edit_message_text(self, params: JSON) -> JSON | bool:
        inline = params.get("inline_message_id")
        if inline:
            # an inline message (a guest answer): no chat_id, and True as the result
            where = self._inline.get(str(inline))
            if where is None:
                raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
            posted = self._guest_chats[where[0]].messages[where[1]]
            if posted.deleted:
                raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
            self._apply_edit(posted, params)
            return True
        chat = self._target_chat(params)
        message_id = _opt_int(params, "message_id")
        if message_id is None:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        message = chat.messages.get(message_id)
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if not message.is_bot or message.text is None:
            raise _ApiError(400, "Bad Request: message can't be edited")
        self._apply_edit(message, params)
        return copy.deepcopy(message.raw)

    def _apply_edit(self, message: StoredMessage, params: JSON) -> None:
        if params.get("rich_message") is not None and params.get("text") not in (None, ""):
            raise _ApiError(400, "Bad Request: text and rich_message can't be specified together")
        rich: Rich | None = None
        entities: list[JSON] = []
        if params.get("rich_message") is not None:  # a text or rich message becomes rich
            rich, raw_text = self._rich(params)
            text, mode = rich.text, None
        else:
            text, entities, mode, raw_text = self._format(params)
        markup = _reply_markup(params)
        if (
            text == message.text
            and _canonical_entities(entities) == _canonical_entities(message.entities)
            and (rich.message if rich else None) == message.rich_message
            and markup == message.reply_markup
        ):
            raise _ApiError(400, _NOT_MODIFIED)
        message.history.append(message.text)
        message.text, message.entities = text, entities
        message.html, message.parse_mode = raw_text, mode
        message.rich_message = rich.message if rich else None
        message.reply_markup = markup
        message.edits += 1
        message.edit_date = int(time.time())
        raw = message.raw
        raw["edit_date"] = message.edit_date
        _set_or_drop(raw, "text", None if rich else text)
        _set_or_drop(raw, "rich_message", copy.deepcopy(rich.message) if rich else None)
        _set_or_drop(raw, "entities", copy.deepcopy(entities) or None)
        _set_or_drop(raw, "reply_markup", _visible_markup(markup))
        self._notify()

    def _create_forum_topic(self, params: JSON) -> JSON:
        """A new topic (Bot API 9.4: also in a private chat with topics, by the bot): its
        ``ForumTopic``. Its creation message is the bot's and reaches no update."""
        chat = self._target_chat(params)
        if chat.type == "private":
            if not (self.topics_enabled and chat.private_topics):
                raise _ApiError(400, "Bad Request: the chat is not a forum")
        elif not chat.is_forum:
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        elif not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: not enough rights to create a topic")
        name = str(params.get("name") or "")
        if not name.strip():
            raise _ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY")
        if len(name) > 128:
            raise _ApiError(400, "Bad Request: TOPIC_TITLE_TOO_LONG")
        thread_id = chat.next_message_id
        chat.topics[thread_id] = name
        created: JSON = {"name": name, "icon_color": 0x6FB9F0}
        self._store(
            chat, self._bot_user(), is_bot=True, thread_id=thread_id,
            extra={"forum_topic_created": created},
        )  # fmt: skip
        return {"message_thread_id": thread_id, **created}

    def _set_my_settings(self, params: JSON) -> bool:
        """Bot API 10.5's settings; this server keeps the topic ones."""
        for name in ("has_topics_enabled", "has_topic_sidebar"):
            value = params.get(name)
            if value is not None and not isinstance(value, bool):
                raise _ApiError(400, f'Bad Request: field "{name}" must be of type Boolean')
        if params.get("has_topics_enabled") is not None:
            self.topics_enabled = params["has_topics_enabled"]
        if params.get("has_topic_sidebar") is not None:
            self.topic_sidebar = params["has_topic_sidebar"]
        return True

    def _edit_forum_topic(self, params: JSON) -> bool:
        """Rename a topic: the bot in a private chat with topics, or a forum's admin."""
        chat = self._target_chat(params)
        if not chat.has_topics:
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        thread_id = _opt_int(params, "message_thread_id")
        if thread_id is None or thread_id not in chat.topics:
            raise _ApiError(400, "Bad Request: message thread not found")
        if chat.type != "private" and not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: not enough rights to manage topics")
        name = params.get("name")
        if name is not None:
            name = str(name)
            if not name.strip():
                raise _ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY")
            if len(name) > 128:
                raise _ApiError(400, "Bad Request: TOPIC_TITLE_TOO_LONG")
            if name == chat.topics[thread_id]:
                raise _ApiError(400, "Bad Request: TOPIC_NOT_MODIFIED")
            chat.topics[thread_id] = name
            self._store(
                chat,
                self._bot_user(),
                is_bot=True,
                thread_id=thread_id,
                extra={"forum_topic_edited": {"name": name}},
            )
        return True

    def _answer_callback_query(self, params: JSON) -> bool:
        query_id = params.get("callback_query_id")
        if not query_id:
            raise _ApiError(400, "Bad Request: QUERY_ID_INVALID")
        if str(query_id) not in self.open_queries:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        text = params.get("text")
        if text is not None and len(str(text)) > 200:
            raise _ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        del self.open_queries[str(query_id)]
        self.query_answers[str(query_id)] = None if text is None else str(text)
        return True

    def _send_chat_action(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        if params.get("action") not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        self._check_thread(chat, _opt_int(params, "message_thread_id"))
        return True

    def _delete_message_call(self, params: JSON) -> bool:
        chat = self._target_chat(params)
        message_id = _opt_int(params, "message_id")
        if message_id is None:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        message = chat.messages.get(message_id)
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to delete not found")
        own = message.is_bot and message.from_id == self.bot_id
        if chat.type != "private" and not own and not chat.bot_is_admin:
            raise _ApiError(400, "Bad Request: message can't be deleted")
        message.deleted = True
        self._notify()
        return True
