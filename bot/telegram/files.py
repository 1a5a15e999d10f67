"""Files users send: ``getFile``, then one download of the file path.

The download URL carries the bot token (``<server>/file/bot<token>/<path>``), so no
error raised here names it: failures become the typed errors below, with the
HTTP status at most.

    FileTooBigError           over the Bot API's 20 MB download limit or the caller's
    FileUnreadableError       Telegram will not give this file (a 400 other than size,
                              a 4xx on the download)
    TelegramUnavailableError  5xx, network, an unreadable answer: try the turn later
"""

from __future__ import annotations

import contextlib

import aiohttp
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest

from .out import TelegramOut, TelegramUnavailableError
from .session import UnreadableResultError

#: Bots may download files of up to 20 MB through the Bot API (getFile).
BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024
DOWNLOAD_TIMEOUT = 60


class FileTooBigError(Exception):
    """The file is larger than ``limit`` bytes (``size``: as far as known)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"file of {size} bytes is over the limit of {limit}")
        self.size = size
        self.limit = limit


class FileUnreadableError(Exception):
    """Telegram refused to give the file (its description, never a URL)."""


class Files:
    """Downloads files by ``file_id``, within a byte limit, into memory."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    async def fetch(self, file_id: str, *, limit: int = BOT_API_DOWNLOAD_LIMIT) -> bytes:
        limit = min(limit, BOT_API_DOWNLOAD_LIMIT)
        try:
            file = await TelegramOut._call(self.bot.get_file(file_id))
        except TelegramBadRequest as exc:
            if "too big" in (exc.message or "").lower():
                raise FileTooBigError(BOT_API_DOWNLOAD_LIMIT + 1, limit) from None
            raise FileUnreadableError(exc.message) from None
        except UnreadableResultError as exc:
            raise TelegramUnavailableError(exc.message) from None
        if file.file_size is not None and file.file_size > limit:
            raise FileTooBigError(file.file_size, limit)
        if not file.file_path:
            # Telegram leaves the path out for files it will not serve (too big)
            raise FileTooBigError(file.file_size or BOT_API_DOWNLOAD_LIMIT + 1, limit)
        url = self.bot.session.api.file_url(self.bot.token, file.file_path)
        return await self._download(url, limit)

    async def _download(self, url: str, limit: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        try:
            stream = self.bot.session.stream_content(
                url=url, timeout=DOWNLOAD_TIMEOUT, raise_for_status=True
            )
            async with contextlib.aclosing(stream):  # a stop past the limit closes it
                async for chunk in stream:
                    total += len(chunk)
                    if total > limit:
                        raise FileTooBigError(total, limit)
                    chunks.append(chunk)
        except aiohttp.ClientResponseError as exc:
            if 400 <= exc.status < 500:  # retrying will not help (a local-mode server?)
                raise FileUnreadableError(f"download refused ({exc.status})") from None
            raise TelegramUnavailableError(f"file download failed ({exc.status})") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TelegramUnavailableError(f"file download failed ({type(exc).__name__})") from None
        return b"".join(chunks)
