"""Files users send: ``getFile``, then the bytes, read from disk or downloaded once.

Where the bytes come from follows getFile's ``file_path``. Telegram's server (and a
self-hosted one without ``--local``) answers a path relative to its file URL
(``<server>/file/bot<token>/<path>``), downloaded with a 20 MB limit on its side. A
local Bot API server (``telegram-bot-api --local``) downloads the file to its own disk
first, with no size limit, and answers that file's absolute path; TELEGRAM_LOCAL_FILES
(``local_files``) says whether the bot reads it there::

    local_files      absolute path, readable here    absolute path, not readable here
    None (detected)  read from disk                  downloaded from the file URL
                                                     (logged once: how to mount it)
    True             read from disk                  FileUnreadableError (logged)
    False            downloaded from the file URL    downloaded from the file URL

The server's own limit (``Files.server_limit``) is 20 MB for Telegram's server; a
self-hosted one's is learnt from its getFile answers, so a file over 20 MB is refused
before getFile once the server has shown that it does not run with ``--local``.

Only the exact path getFile answered is read, nothing joined from user data; it must be
absolute on this machine, without ``..``, and a regular file (a FIFO or a directory
there counts as not readable). Reading happens in a thread and stops at the caller's
limit, so a 2 GB file never reaches memory. The server's directory is named after the
bot token, so paths are logged with the token cut out.

The download URL carries the bot token too, so no error raised here names it:
failures become the typed errors below, with the HTTP status at most.

    FileTooBigError           over the caller's limit or the server's (``server``)
    FileUnreadableError       the server will not give this file (a 400 other than size,
                              a 4xx on the download), or TELEGRAM_LOCAL_FILES=true and
                              its local path is not readable here
    TelegramUnavailableError  5xx, network, an unreadable answer: try the turn later
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
from pathlib import PurePosixPath, PureWindowsPath
from urllib.parse import urlsplit

import aiohttp
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest

from ..settings import OFFICIAL_API_HOST
from .errors import OversizeFileError
from .out import TelegramOut
from .outcomes import TelegramUnavailableError
from .session import UnreadableResultError

log = logging.getLogger("replychain.files")

#: Bots may download files of up to 20 MB through the Bot API (getFile), unless the
#: server is a local one (telegram-bot-api --local), which has no such limit.
BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024
DOWNLOAD_TIMEOUT = 60


class FileTooBigError(Exception):
    """The file is larger than ``limit`` bytes (``size``: as far as known).

    ``server``: the limit is the Bot API server's download limit, not the caller's.
    """

    def __init__(self, size: int, limit: int, *, server: bool = False) -> None:
        super().__init__(f"file of {size} bytes is over the limit of {limit}")
        self.size = size
        self.limit = limit
        self.server = server


class FileUnreadableError(Exception):
    """The file cannot be had (its description, never a URL or a path)."""


class Files:
    """Reads files by ``file_id``, within a byte limit, into memory (see the module doc)."""

    def __init__(self, bot: Bot, *, local_files: bool | None = None) -> None:
        self.bot = bot
        self.local_files = local_files
        host = urlsplit(bot.session.api.file).hostname or ""
        self._official = host.rstrip(".").lower() == OFFICIAL_API_HOST
        #: The server's own download limit in bytes (None: none known). Telegram's is 20 MB;
        #: a self-hosted server's shows in its last getFile answer: 20 MB after a relative
        #: path or "file is too big", none after an absolute one (--local).
        self.server_limit: int | None = BOT_API_DOWNLOAD_LIMIT if self._official else None
        self._told: set[str] = set()  # warnings given once per process

    async def fetch(self, file_id: str, *, limit: int = BOT_API_DOWNLOAD_LIMIT) -> bytes:
        """The file's bytes, at most ``limit`` (and the server's limit) of them."""
        server = self.server_limit is not None and self.server_limit < limit
        limit = min(limit, self.server_limit or limit)
        try:
            file = await TelegramOut._call(self.bot.get_file(file_id))
        except OversizeFileError:
            self._learn(local=False)
            raise FileTooBigError(
                BOT_API_DOWNLOAD_LIMIT + 1, BOT_API_DOWNLOAD_LIMIT, server=True
            ) from None
        except TelegramBadRequest as exc:
            raise FileUnreadableError(exc.message) from None
        except UnreadableResultError as exc:
            raise TelegramUnavailableError(exc.message) from None
        if file.file_size is not None and file.file_size > limit:
            raise FileTooBigError(file.file_size, limit, server=server)
        path = file.file_path
        if not path:
            # Telegram leaves the path out for files it will not serve (too big)
            self._learn(local=False)
            size = max(file.file_size or 0, BOT_API_DOWNLOAD_LIMIT + 1)
            raise FileTooBigError(size, BOT_API_DOWNLOAD_LIMIT, server=True)
        self._learn(local=_is_local(path))
        if _is_local(path):
            data = await self._read_local(path, limit, server=server)
            if data is not None:
                return data
        elif self.local_files:
            self._tell_once(
                "relative",
                "TELEGRAM_LOCAL_FILES is true, but the Bot API server answered getFile with a "
                "relative path (it does not run with --local): downloading the file from it",
            )
        url = self.bot.session.api.file_url(self.bot.token, path)
        return await self._download(url, limit, server=server)

    async def _read_local(self, path: str, limit: int, *, server: bool) -> bytes | None:
        """The local file at ``path`` (a local server's answer); None: download it instead."""
        if self.local_files is False:
            return None
        try:
            size, data = await asyncio.to_thread(_read_regular_file, path, limit)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            reason = (exc.strerror if isinstance(exc, OSError) else None) or "not a usable path"
            shown = self._shown(path)
            if self.local_files:
                log.warning(
                    "cannot read %s, the file the local Bot API server gave (%s): mount the "
                    "server's --dir at the same path here, or unset TELEGRAM_LOCAL_FILES to "
                    "download files from the server instead",
                    shown,
                    reason,
                )
                raise FileUnreadableError("the bot cannot read the server's copy") from None
            self._tell_once(
                "unreadable",
                f"cannot read {shown}, the file the local Bot API server gave ({reason}): "
                "downloading it from the server instead, as every file not readable here. "
                "To read files from disk, mount the server's --dir at the same path here; "
                "to stop trying, set TELEGRAM_LOCAL_FILES=false",
            )
            return None
        if max(size, len(data)) > limit:
            raise FileTooBigError(max(size, len(data)), limit, server=server)
        self._tell_once("local", "reading files from the local Bot API server's disk", logging.INFO)
        return data

    def _learn(self, *, local: bool) -> None:
        """A self-hosted server's limit, as its answer just showed (--local: none)."""
        if not self._official:
            self.server_limit = None if local else BOT_API_DOWNLOAD_LIMIT

    def _shown(self, path: str) -> str:
        """``path`` for the log: the server names the bot's directory after its token."""
        token = self.bot.token
        return path.replace(token, "<token>").replace(token.replace(":", "~"), "<token>")

    def _tell_once(self, key: str, message: str, level: int = logging.WARNING) -> None:
        if key not in self._told:
            self._told.add(key)
            log.log(level, "%s", message)

    async def _download(self, url: str, limit: int, *, server: bool) -> bytes:
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
                        raise FileTooBigError(total, limit, server=server)
                    chunks.append(chunk)
        except aiohttp.ClientResponseError as exc:
            if 400 <= exc.status < 500:  # retrying will not help (a local-mode server?)
                raise FileUnreadableError(f"download refused ({exc.status})") from None
            raise TelegramUnavailableError(f"file download failed ({exc.status})") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TelegramUnavailableError(f"file download failed ({type(exc).__name__})") from None
        return b"".join(chunks)


def _is_local(path: str) -> bool:
    """Whether getFile answered a path on the server's disk (it runs with --local)."""
    return PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()


def _read_regular_file(path: str, limit: int) -> tuple[int, bytes]:
    """(size, bytes) of the regular file at ``path``; no bytes when it is over ``limit``,
    never more than ``limit`` + 1. Blocking: run it in a thread."""
    if not os.path.isabs(path):
        raise OSError(errno.EINVAL, "not an absolute path on this machine")
    if ".." in PurePosixPath(path).parts:
        raise OSError(errno.EINVAL, "a path through ..")
    # O_NONBLOCK: opening a FIFO placed there must not wait for a writer
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_size > limit:
            return info.st_size, b""
        return info.st_size, file.read(limit + 1)  # it may have grown since fstat
