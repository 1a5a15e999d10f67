"""The fake Telegram server's files: the photos, documents and voice notes users send
(served by getFile and the file server, or local mode's disk) and the ones the bot sends."""

from __future__ import annotations

import copy
import hashlib
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from .telegram_markup import _reply_markup
from .telegram_messages import Messages
from .telegram_types import JSON, StoredMessage, _ApiError, _Chat, _error_response, _opt_int

# sendPhoto (core.telegram.org/bots/api#sendphoto): "The photo must be at most 10 MB in
# size. The photo's width and height must not exceed 10000 in total. Width and height
# ratio must be at most 20." Telegram keeps a scaled copy per size (longest side).
_MAX_PHOTO_BYTES: Final = 10 * 1024 * 1024

_PHOTO_SIDES: Final = (90, 320, 800, 1280, 2560)

_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"

_MAX_UPLOAD_BYTES: Final = 50 * 1024 * 1024


def _image_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG (its IHDR) or a baseline/progressive JPEG (its SOF)."""
    if data.startswith(_PNG_SIGNATURE) and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        if width and height:
            return width, height
    elif data.startswith(b"\xff\xd8"):
        pos = 2
        while pos + 9 <= len(data) and data[pos] == 0xFF:
            marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2 : pos + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
                if width and height:
                    return width, height
                break
            pos += 2 + length
    raise _ApiError(400, "Bad Request: IMAGE_PROCESS_FAILED")


def _photo_sizes(data: bytes, width: int, height: int, chat_id: int, message_id: int) -> list[JSON]:
    """The PhotoSize array Telegram returns: a scaled copy per size, the largest last."""
    stem = f"{abs(chat_id)}x{message_id}"
    longest = max(width, height)
    sides = [side for side in _PHOTO_SIDES if side < longest] + [min(longest, _PHOTO_SIDES[-1])]
    sizes = []
    for side in sides:
        scale = side / longest
        sizes.append(
            {
                "file_id": f"AgACAgIAAxkDPH{stem}-{side}",
                "file_unique_id": f"AQADPH{stem}{side}",
                "width": max(1, round(width * scale)),
                "height": max(1, round(height * scale)),
                "file_size": max(1, round(len(data) * scale * scale)),
            }
        )
    return sizes


def _media_flags(
    photo: bool, sticker: bool, voice: bool, document: bool, audio: bool = False
) -> list[tuple[str, bool]]:
    return [
        ("photo", photo), ("sticker", sticker), ("voice", voice), ("document", document),
        ("audio", audio),
    ]  # fmt: skip


#: Bots may download files of up to 20 MB (getFile answers "file is too big" above).
_DOWNLOAD_LIMIT = 20 * 1024 * 1024

#: A local server downloads files as big as Telegram keeps (2000 MB) for getFile.
_LOCAL_FILE_LIMIT = 2000 * 1024 * 1024


def _jpeg_bytes(seed: str, size: int) -> bytes:
    """Deterministic bytes with a JPEG's start and end markers."""
    block = hashlib.sha256(seed.encode()).digest()
    body = (block * (size // len(block) + 1))[:size]
    return b"\xff\xd8\xff\xe0" + body + b"\xff\xd9"


def _media_payload(kind: str, chat_id: int, message_id: int) -> JSON:
    """Plausible file objects (all fields aiogram requires) for an inbound media message."""
    stem = f"{abs(chat_id)}x{message_id}"
    file_id = f"AgACAgIAAxk{kind[:2].upper()}{stem}"
    unique = f"AQAD{kind[:1]}{stem}"
    if kind == "photo":
        sizes = [(90, 67, 1_402), (320, 240, 15_311), (1280, 960, 121_847)]
        return {
            "photo": [
                {
                    "file_id": f"{file_id}-{w}",
                    "file_unique_id": f"{unique}{w}",
                    "width": w,
                    "height": h,
                    "file_size": size,
                }
                for w, h, size in sizes
            ]
        }
    if kind == "sticker":
        return {
            "sticker": {
                "file_id": file_id,
                "file_unique_id": unique,
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "😀",
                "set_name": "FakeTelegramStickers",
                "file_size": 23_041,
            }
        }
    if kind == "voice":
        voice = {"duration": 3, "mime_type": "audio/ogg", "file_size": 9_877}
        return {"voice": {"file_id": file_id, "file_unique_id": unique, **voice}}
    if kind == "audio":
        audio = {"duration": 30, "mime_type": "audio/mpeg", "file_name": "audio.mp3"}
        return {"audio": {"file_id": file_id, "file_unique_id": unique, **audio}}
    document = {"file_name": "document.pdf", "mime_type": "application/pdf", "file_size": 54_321}
    return {"document": {"file_id": file_id, "file_unique_id": unique, **document}}


class Files(Messages):
    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)

    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        return {
            **super()._methods(),
            "sendPhoto": self._send_photo,
            "sendDocument": self._send_document,
            "sendVoice": self._send_voice,
            "getFile": self._get_file,
        }

    def _attach_files(
        self,
        extra: JSON,
        kind: str,
        photo_sizes: Sequence[tuple[int, int]] | None,
        data: bytes | None,
        file_name: str | None,
        mime_type: str | None,
        duration: int | None,
        file_size: int | None,
    ) -> None:
        """Give the media objects of ``extra`` real files (registered for getFile)."""
        if kind == "photo":
            base = extra["photo"][0]
            sizes = list(photo_sizes or [(p["width"], p["height"]) for p in extra["photo"]])
            photos = []
            for w, h in sizes:
                file_id = f"{base['file_id'].rsplit('-', 1)[0]}-{w}x{h}"
                unique = f"{base['file_unique_id']}{w}x{h}"
                body = _jpeg_bytes(f"{file_id}", max(200, w * h // 20))
                claimed = file_size if file_size is not None and (w, h) == sizes[-1] else None
                self._files[file_id] = (unique, body, claimed or len(body))
                self._file_kinds[file_id] = ("photos", ".jpg")
                photos.append(
                    {
                        "file_id": file_id,
                        "file_unique_id": unique,
                        "width": w,
                        "height": h,
                        "file_size": claimed or len(body),
                    }
                )
            extra["photo"] = photos
            return
        obj = extra[kind]
        if kind == "sticker":
            self._files[obj["file_id"]] = (obj["file_unique_id"], b"RIFF-webp", obj["file_size"])
            self._file_kinds[obj["file_id"]] = ("stickers", ".webp")
            return
        body = data if data is not None else f"{kind} of {obj['file_id']}".encode()
        obj["file_size"] = file_size if file_size is not None else len(body)
        if file_name is not None and kind in ("document", "audio"):
            obj["file_name"] = file_name
        if mime_type is not None:
            obj["mime_type"] = mime_type
        if duration is not None and kind in ("voice", "audio"):
            obj["duration"] = duration
        self._files[obj["file_id"]] = (obj["file_unique_id"], body, obj["file_size"])
        folder = {"voice": "voice", "audio": "music"}.get(kind, "documents")
        extension = {"voice": ".oga", "audio": ".mp3"}.get(kind, "")
        extension = extension or Path(obj.get("file_name", "")).suffix
        self._file_kinds[obj["file_id"]] = (folder, extension)

    def file_bytes(self, file_id: str) -> bytes:
        """The bytes of a file a user sent."""
        return self._files[file_id][1]

    def local_file(self, file_id: str) -> Path:
        """Local mode: where the file is on disk (written now, as getFile does, if not yet).

        The real server keeps a downloaded file and answers its path again, so a test
        may replace what is there (a FIFO, a directory) before the bot's getFile.
        """
        if self.files_dir is None or self.server_dir is None:
            raise RuntimeError("only a local-mode server keeps files on disk")
        folder, extension = self._file_kinds[file_id]
        relative = Path(self.token.replace(":", "~"), folder, f"file_{file_id}{extension}")
        path = self.files_dir / relative
        if file_id not in self.local_paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self._files[file_id][1])
            self.local_paths[file_id] = str(self.server_dir / relative)
        return path

    def _send_photo(self, params: JSON) -> JSON:
        """sendPhoto with an uploaded PNG or JPEG (multipart/form-data, directly or via
        ``attach://name``); a file_id this server issued is accepted too."""
        chat = self._target_chat(params)
        data = self._photo_bytes(params)
        width, height = _image_size(data)
        if width + height > 10000 or max(width, height) > 20 * min(width, height):
            raise _ApiError(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        formatted = self._format(params, caption=True)
        placed = self._placement(chat, params)
        photo = {"photo": _photo_sizes(data, width, height, chat.id, chat.next_message_id)}
        message = self._store_file_message(chat, params, photo, formatted, placed)
        message.photo = data
        return copy.deepcopy(message.raw)

    def _photo_bytes(self, params: JSON) -> bytes:
        photo = params.get("photo")
        if isinstance(photo, str) and photo.startswith("attach://"):
            photo = params.get(photo.removeprefix("attach://"))
        if isinstance(photo, dict) and isinstance(photo.get("data"), bytes):
            data: bytes = photo["data"]
            if not data:
                raise _ApiError(400, "Bad Request: file must be non-empty")
            if len(data) > _MAX_PHOTO_BYTES:
                raise _ApiError(400, "Bad Request: file is too big")
            return data
        if isinstance(photo, str) and photo:
            for chat in self._chats.values():
                for message in chat.messages.values():
                    sizes = message.raw.get("photo") or []
                    if message.photo is not None and any(s["file_id"] == photo for s in sizes):
                        return message.photo
            if photo.startswith(("http://", "https://")):
                raise _ApiError(400, "Bad Request: failed to get HTTP URL content")
            raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        raise _ApiError(400, "Bad Request: there is no photo in the request")

    def _send_document(self, params: JSON) -> JSON:
        """An uploaded file (multipart/form-data); file ids and URLs are not kept here."""
        chat = self._target_chat(params)
        document = params.get("document")
        if document is None or document == "":
            raise _ApiError(400, "Bad Request: there is no document in the request")
        if isinstance(document, str) and document.startswith("attach://"):
            # a file sent in the same multipart request under that part's name
            document = params.get(document.removeprefix("attach://"))
            if not isinstance(document, dict):
                raise _ApiError(400, "Bad Request: wrong remote file identifier specified")
        if isinstance(document, str):
            raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if not isinstance(document, dict) or not isinstance(document.get("data"), bytes):
            raise _ApiError(400, "Bad Request: wrong type of the web page content")
        data: bytes = document["data"]
        if not data:
            raise _ApiError(400, "Bad Request: file must be non-empty")
        if len(data) > _MAX_UPLOAD_BYTES:
            raise _ApiError(413, "Request Entity Too Large")
        formatted = self._format(params, caption=True)
        placed = self._placement(chat, params)
        name = str(document.get("filename") or "document")
        sent = {
            "document": {
                "file_id": f"BQACAgIAAxkDoc{abs(chat.id)}x{chat.next_message_id}",
                "file_unique_id": f"AgADoc{chat.next_message_id}",
                "file_name": name,
                "mime_type": document.get("content_type") or "application/octet-stream",
                "file_size": len(data),
            }
        }
        message = self._store_file_message(chat, params, sent, formatted, placed)
        message.document = (name, data)
        return copy.deepcopy(message.raw)

    def _send_voice(self, params: JSON) -> JSON:
        """sendVoice with an uploaded OGG/Opus file (multipart/form-data, directly or via
        ``attach://name``), or the file_id of a voice message this server holds; an empty
        upload, one over 50 MB or a file_id it never issued is refused as Telegram refuses
        it. Stricter than Telegram (which also takes MP3 and M4A, and sends other formats as
        a document): anything but OGG/Opus is refused. The message is a voice message like a
        user's: its file is registered, so ``getFile`` and the file server serve its bytes
        (``file_bytes``); ``duration`` is the one sent, else the file's own."""
        chat = self._target_chat(params)
        file_id, data = self._voice_upload(params)
        formatted = self._format(params, caption=True)
        placed = self._placement(chat, params)
        if file_id is None:
            stem = f"{abs(chat.id)}x{chat.next_message_id}"
            file_id = f"AwACAgIAAxkDVO{stem}"
            self._files[file_id] = (f"AgADVO{stem}", data, len(data))
            self._file_kinds[file_id] = ("voice", ".oga")
        duration = _opt_int(params, "duration")
        voice = {
            "file_id": file_id,
            "file_unique_id": self._files[file_id][0],
            "duration": duration if duration is not None else self._ogg_seconds(data),
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        message = self._store_file_message(chat, params, {"voice": voice}, formatted, placed)
        return copy.deepcopy(message.raw)

    def _store_file_message(
        self,
        chat: _Chat,
        params: JSON,
        extra: JSON,
        formatted: tuple[str, list[JSON], str | None, str],
        placed: tuple[int | None, StoredMessage | None],
    ) -> StoredMessage:
        """The bot's message carrying a file (``extra``: its photo, document or voice),
        with the caption as formatted and the place (thread, reply) as checked."""
        caption, entities, mode, raw_caption = formatted
        thread_id, reply = placed
        if caption:
            extra["caption"] = caption
            if entities:
                extra["caption_entities"] = copy.deepcopy(entities)
        return self._store(
            chat,
            self._bot_user(),
            is_bot=True,
            thread_id=thread_id,
            reply=reply,
            html=raw_caption or None,
            parse_mode=mode,
            reply_markup=_reply_markup(params, chat),
            extra=extra,
            caption=caption or None,
        )

    def _voice_upload(self, params: JSON) -> tuple[str | None, bytes]:
        """(the file_id of a voice message sent again, else None; the voice's bytes)."""
        voice = params.get("voice")
        if isinstance(voice, str) and voice.startswith("attach://"):
            voice = params.get(voice.removeprefix("attach://"))
        if isinstance(voice, dict) and isinstance(voice.get("data"), bytes):
            data: bytes = voice["data"]
            if not data:
                raise _ApiError(400, "Bad Request: file must be non-empty")
            if len(data) > _MAX_UPLOAD_BYTES:
                raise _ApiError(413, "Request Entity Too Large")
            if not (data.startswith(b"OggS") and data[28:36] == b"OpusHead"):
                raise _ApiError(
                    400, "Bad Request: wrong voice file type (FakeTelegram takes OGG/Opus)"
                )
            return None, data
        if isinstance(voice, str) and voice:
            if voice.startswith(("http://", "https://")):
                raise _ApiError(400, "Bad Request: failed to get HTTP URL content")
            if self._file_kinds.get(voice, ("",))[0] != "voice":
                raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
            return voice, self._files[voice][1]
        raise _ApiError(400, "Bad Request: there is no voice in the request")

    @staticmethod
    def _ogg_seconds(data: bytes) -> int:
        """An OGG/Opus file's length in whole seconds: its last page's granule position
        (48 kHz samples) less the header's pre-skip, read page by page."""
        pos, granule = 0, 0
        while data.startswith(b"OggS", pos) and pos + 27 <= len(data):
            granule = int.from_bytes(data[pos + 6 : pos + 14], "little", signed=True)
            segments = data[pos + 26]
            pos += 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        pre_skip = int.from_bytes(data[38:40], "little")
        return max(0, round((granule - pre_skip) / 48_000))

    def _get_file(self, params: JSON) -> JSON:
        file_id = params.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise _ApiError(400, "Bad Request: file_id not specified")
        found = self._files.get(file_id)
        if found is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        unique, _, size = found
        if size > (_LOCAL_FILE_LIMIT if self.local_mode else _DOWNLOAD_LIMIT):
            raise _ApiError(400, "Bad Request: file is too big")
        path = f"files/{file_id}"
        if self.local_mode:  # the server downloads the file to its disk, then answers
            self.local_file(file_id)
            path = self.local_paths[file_id]
        return {"file_id": file_id, "file_unique_id": unique, "file_size": size, "file_path": path}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """``GET /file/bot<token>/<file_path>``: the file, as Telegram's file server.

        In local mode telegram-bot-api serves no files (404); with ``serve_local_files``
        a web server in front serves the absolute paths getFile answered.
        """
        path = request.match_info["path"]
        response = self._file_response(request.match_info["token"], path)
        self.download_requests.append((path, response.status))
        if response.status == 200:
            self.downloads.append(path)
        self._notify()
        return response

    def _file_response(self, token: str, path: str) -> web.Response:
        if token != self.token or self._closing:
            return _error_response(_ApiError(401 if not self._closing else 502, "Unauthorized"))
        if self.local_mode:
            by_path = {answered: file_id for file_id, answered in self.local_paths.items()}
            file_id = by_path.get(path) if self.serve_local_files else None
        else:
            file_id = path.removeprefix("files/") if path.startswith("files/") else None
        found = self._files.get(file_id or "")
        if found is None or (not self.local_mode and found[2] > _DOWNLOAD_LIMIT):
            return _error_response(_ApiError(404, "Not Found"))
        return web.Response(body=found[1], content_type="application/octet-stream")
