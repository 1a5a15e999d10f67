"""Who is asking, and may they read this chat.

Every API call carries the Mini App's ``initData`` (``Authorization: tma
<initData>``). :func:`check_init_data` accepts it only when its signature is the
one the Bot API specifies for this bot's token (aiogram's
``safe_parse_webapp_init_data``), its ``auth_date`` is at most
``WEBAPP_AUTH_MAX_AGE`` seconds old (and not in the future), and it names a user.
:class:`Access` then decides whether that user may read a chat: owners
(``OWNER_USER_IDS``) any chat; a private chat only its own user; a group or
supergroup its members, asked with ``getChatMember`` and remembered for
``MEMBER_TTL`` seconds (yes and no alike); with ``ALLOWED_USER_IDS`` set, only
those users (the bot talks to no one else either).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError
from aiogram.utils.web_app import safe_parse_webapp_init_data
from cachetools import TTLCache

#: Seconds a membership answer is trusted (someone who left loses access within this).
MEMBER_TTL = 60.0
#: (chat, user) pairs remembered.
MEMBER_CACHE_SIZE = 4096
#: Seconds an ``auth_date`` may lie in the future (clocks differ a little).
CLOCK_SKEW = 60
#: Member statuses that may read a group's conversations.
_MEMBERS = frozenset({"creator", "administrator", "member"})


class AuthError(Exception):
    """A request is refused; ``key`` names its text in :data:`bot.webapp.texts.ERRORS`."""

    def __init__(self, status: int, key: str) -> None:
        super().__init__(key)
        self.status = status
        self.key = key


@dataclass(frozen=True, slots=True)
class Viewer:
    """The user a valid ``initData`` names."""

    user_id: int
    language: str | None
    #: The signed start parameter (a direct or main Mini App link), if any.
    start_param: str | None


def check_init_data(token: str, init_data: str, *, max_age: int, now: float) -> Viewer:
    """The user of a valid ``initData``; :class:`AuthError` (401) for a missing, forged,
    expired or userless one."""
    if not init_data:
        raise AuthError(401, "missing")
    try:
        data = safe_parse_webapp_init_data(token, init_data)
    except ValueError:  # a wrong hash, or fields that do not parse (pydantic's too)
        raise AuthError(401, "forged") from None
    age = now - data.auth_date.timestamp()
    if age > max_age or age < -CLOCK_SKEW:
        raise AuthError(401, "expired")
    if data.user is None:
        raise AuthError(401, "forged")
    return Viewer(data.user.id, data.user.language_code, data.start_param)


class Access:
    """Which chats a user may read in the viewer."""

    def __init__(
        self, bot: Bot, *, owners: frozenset[int], allowed: frozenset[int] = frozenset()
    ) -> None:
        self.bot = bot
        self.owners = owners
        self.allowed = allowed
        self._members: TTLCache[tuple[int, int], bool] = TTLCache(
            maxsize=MEMBER_CACHE_SIZE, ttl=MEMBER_TTL, timer=time.monotonic
        )

    async def check(self, user_id: int, chat_id: int) -> None:
        """Return when ``user_id`` may read ``chat_id``; else :class:`AuthError` (403).

        Telegram unreachable while membership is asked: the aiogram error propagates
        (the caller answers 503), and nothing is remembered.
        """
        if user_id in self.owners:
            return
        if self.allowed and user_id not in self.allowed:
            raise AuthError(403, "forbidden")
        if chat_id > 0:  # a private chat's id is its user's
            if chat_id != user_id:
                raise AuthError(403, "forbidden")
            return
        if not await self._is_member(user_id, chat_id):
            raise AuthError(403, "forbidden")

    async def _is_member(self, user_id: int, chat_id: int) -> bool:
        key = (chat_id, user_id)
        known = self._members.get(key)
        if known is not None:
            return known
        try:
            member = await self.bot.get_chat_member(chat_id=chat_id, user_id=user_id)
        except (TelegramBadRequest, TelegramForbiddenError):
            member = None  # no such chat or user here, or the bot is no longer in it
        status = getattr(member, "status", "left")
        found = status in _MEMBERS or (
            status == "restricted" and bool(getattr(member, "is_member", False))
        )
        self._members[key] = found
        return found
