"""The bot's set-up as the fake Telegram server keeps it: webhooks (set, described, and
updates POSTed to them), the command menus, and what getChat and getChatMember answer."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import re
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout

from .telegram_core import TelegramCore
from .telegram_types import _JSON_TYPE, JSON, _ApiError, _coerce_int, _opt_int, _truthy, _update_id

_COMMAND_NAME_RE: Final = re.compile(r"[a-z0-9_]{1,32}")
_BOT_COMMAND_SCOPES: Final = frozenset(
    {
        "default",
        "all_private_chats",
        "all_group_chats",
        "all_chat_administrators",
        "chat",
        "chat_administrators",
        "chat_member",
    }
)
_WEBHOOK_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
_WEBHOOK_PORTS: Final = frozenset({80, 88, 443, 8443})


class Setup(TelegramCore):
    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        return {
            **super()._methods(),
            "deleteWebhook": self._delete_webhook,
            "setWebhook": self._set_webhook,
            "getWebhookInfo": self._get_webhook_info,
            "setMyCommands": self._set_my_commands,
            "getMyCommands": self._get_my_commands,
            "deleteMyCommands": self._delete_my_commands,
            "getChat": self._get_chat,
            "getChatMember": self._get_chat_member,
        }

    def _delivering(self) -> asyncio.Task[None] | None:
        return asyncio.create_task(self._deliver_webhook_updates())

    def _delete_webhook(self, params: JSON) -> bool:
        self.webhook_url = ""
        if _truthy(params.get("drop_pending_updates")):
            self._updates.clear()
            self._notify()
        return True

    def _set_webhook(self, params: JSON) -> bool:
        url = params.get("url")
        if url is None:
            raise _ApiError(400, 'Bad Request: parameter "url" is required')
        url = str(url)
        if url:
            self._check_webhook_url(url)
        secret = params.get("secret_token")
        secret = "" if secret is None else str(secret)
        if secret and not _WEBHOOK_SECRET.fullmatch(secret):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        connections = _opt_int(params, "max_connections")
        if connections is not None and not 1 <= connections <= (
            100_000 if self.local_mode else 100
        ):
            raise _ApiError(400, "Bad Request: bad webhook: invalid max_connections specified")
        self._set_allowed_updates(params.get("allowed_updates"))
        self.webhook_url = url
        self.webhook_secret = secret if url else ""
        self.webhook_max_connections = connections or 40
        self._webhook_last_error = None
        if _truthy(params.get("drop_pending_updates")):
            self._updates.clear()
        self._notify()
        return True

    def _check_webhook_url(self, url: str) -> None:
        """Telegram's rules for a webhook URL; a local server takes http:// and any port."""
        if self.local_mode:
            try:
                parts = urlsplit(url)
                usable = parts.scheme.lower() in ("https", "http") and bool(parts.hostname)
                usable = usable and parts.port != 0
            except ValueError:
                usable = False
            if not usable:
                raise _ApiError(400, "Bad Request: invalid webhook URL specified")
            return
        if not url.lower().startswith("https://"):
            raise _ApiError(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        try:
            port = urlsplit(url).port or 443
        except ValueError:
            raise _ApiError(400, "Bad Request: bad webhook: Wrong port number specified") from None
        if port not in _WEBHOOK_PORTS:
            raise _ApiError(
                400, "Bad Request: bad webhook: Webhook can be set up only on ports "
                "80, 88, 443 or 8443",
            )  # fmt: skip

    def _get_webhook_info(self, _params: JSON) -> JSON:
        info: JSON = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }
        if self.webhook_url:
            info["max_connections"] = self.webhook_max_connections
            if self._allowed_updates is not None:
                info["allowed_updates"] = sorted(self._allowed_updates)
            if self._webhook_last_error is not None:
                info["last_error_date"], info["last_error_message"] = self._webhook_last_error
        return info

    async def _deliver_webhook_updates(self) -> None:
        """POST pending updates to ``webhook_target`` while a webhook is set, like Telegram.

        Up to ``max_connections`` at once; an update leaves the queue only when the
        bot answered 2xx; anything else is retried after ``webhook_retry_delay``.
        """
        sending: dict[int, asyncio.Task[None]] = {}
        retry_at: dict[int, float] = {}
        loop = asyncio.get_running_loop()
        async with ClientSession(timeout=ClientTimeout(total=60)) as http:
            try:
                while True:
                    changed = self._changed
                    target = self.webhook_target
                    if target is None and self.local_mode:  # the URL itself is reachable
                        target = self.webhook_url
                    wait = 1.0
                    if self.webhook_url and target and not self._closing:
                        for update in self._deliverable(100):
                            update_id = _update_id(update)
                            due = retry_at.get(update_id, 0.0) - loop.time()
                            if due > 0:
                                wait = min(wait, due)
                                continue
                            if update_id in sending:
                                continue
                            if len(sending) >= self.webhook_max_connections:
                                break
                            task = asyncio.create_task(
                                self._post_update(http, target, update, retry_at)
                            )
                            sending[update_id] = task
                            task.add_done_callback(
                                functools.partial(self._delivered, sending, update_id)
                            )
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(wait, 0.01)):
                            await changed.wait()
            finally:
                for task in sending.values():
                    task.cancel()

    def _delivered(self, sending: dict[int, Any], update_id: int, _task: object) -> None:
        sending.pop(update_id, None)
        self._notify()

    async def _post_update(
        self, http: ClientSession, target: str, update: JSON, retry_at: dict[int, float]
    ) -> None:
        update_id = _update_id(update)
        headers = {"Content-Type": _JSON_TYPE}
        if self.webhook_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
        status, error = 0, "Connection refused"
        try:
            async with http.post(target, data=json.dumps(update), headers=headers) as response:
                await response.read()
                status = response.status
                error = f"Wrong response from the webhook: {status} {response.reason}"
        except (ClientError, TimeoutError, OSError):
            pass
        self.webhook_deliveries.append((update_id, status))
        if 200 <= status < 300:
            self._updates = [u for u in self._updates if _update_id(u) != update_id]
            retry_at.pop(update_id, None)
        else:
            self._webhook_last_error = (int(time.time()), error)
            retry_at[update_id] = asyncio.get_running_loop().time() + self.webhook_retry_delay

    def _commands_key(self, params: JSON) -> tuple[str, str]:
        scope = params.get("scope") or {"type": "default"}
        if not isinstance(scope, dict) or scope.get("type") not in _BOT_COMMAND_SCOPES:
            raise _ApiError(400, "Bad Request: can't parse BotCommandScope JSON object")
        language = params.get("language_code") or ""
        return json.dumps(scope, sort_keys=True), str(language)

    def _set_my_commands(self, params: JSON) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _ApiError(400, "Bad Request: can't parse commands JSON object")
        if len(commands) > 100:
            raise _ApiError(400, "Bad Request: BOT_COMMANDS_TOO_MUCH")
        for command in commands:
            if not isinstance(command, dict):
                raise _ApiError(400, "Bad Request: can't parse BotCommand JSON object")
            name, description = command.get("command"), command.get("description")
            if not isinstance(name, str) or not _COMMAND_NAME_RE.fullmatch(name):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self.commands[self._commands_key(params)] = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        self._notify()
        return True

    def _get_my_commands(self, params: JSON) -> list[JSON]:
        return copy.deepcopy(self.commands.get(self._commands_key(params), []))

    def _delete_my_commands(self, params: JSON) -> bool:
        self.commands.pop(self._commands_key(params), None)
        self._notify()
        return True

    def _get_chat(self, params: JSON) -> JSON:
        chat = self._chats.get(_coerce_int(params.get("chat_id")) or 0)
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        info = chat.as_dict()
        info.update(
            {
                "accent_color_id": 0,
                "max_reaction_count": 11,
                "accepted_gift_types": {
                    "unlimited_gifts": False,
                    "limited_gifts": False,
                    "unique_gifts": False,
                    "premium_subscription": False,
                    "gifts_from_channels": False,
                },
            }
        )
        return info

    def _get_chat_member(self, params: JSON) -> JSON:
        """A chat member as Telegram answers: a group's member or creator; ``left`` for
        a known user who is not in it; 400 for an unknown chat or user."""
        chat = self._chats.get(_coerce_int(params.get("chat_id")) or 0)
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        user = self._users.get(_coerce_int(params.get("user_id")) or 0)
        if user is None:
            raise _ApiError(400, "Bad Request: user not found")
        if chat.type == "private":
            if user.id != chat.id:
                raise _ApiError(400, "Bad Request: PARTICIPANT_ID_INVALID")
            return {"status": "member", "user": user.as_dict()}
        status = chat.members.get(user.id, "left")
        member: JSON = {"status": status, "user": user.as_dict()}
        if status == "creator":
            member["is_anonymous"] = False
        return member
