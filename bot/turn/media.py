"""A message's files become the content of the user's node.

Photos are downloaded once (``getFile``), stored content-addressed in the
chat's scope (:meth:`transcript.TranscriptStore.put_blob`) and referenced from
the node as :class:`transcript.Image`; voice notes and audio are transcribed
and the transcript is the message; a text file's text, with its name and the
caption, is the message. What cannot be read ends the turn with a clear notice
(:class:`MediaError`), and nothing of the user's is lost: a message whose
voice could not be transcribed is kept (:meth:`MediaReader.keep_unheard`), and
replying to it tries again.
"""

from __future__ import annotations

import codecs
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath

from babel.numbers import format_decimal
from redis.asyncio import Redis

from transcript import ChatMessage, Image, Node, TranscriptStore

from ..bus.inbound import Inbound, MediaRef
from ..data.connection import guarded
from ..data.keys import unheard_key
from ..i18n import N_, _, current, number
from ..model import ModelError
from ..model.transcribe import Transcriber
from ..telegram.files import BOT_API_DOWNLOAD_LIMIT, Files, FileTooBigError, FileUnreadableError

log = logging.getLogger("replychain.media")

#: Extensions read as text whatever MIME type the client gave.
TEXT_EXTENSIONS = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".py",
        ".pyi",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".json",
        ".jsonl",
        ".csv",
        ".tsv",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".log",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".sql",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".bat",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".java",
        ".kt",
        ".go",
        ".rs",
        ".rb",
        ".php",
        ".pl",
        ".lua",
        ".r",
        ".swift",
        ".m",
        ".scala",
        ".hs",
        ".ex",
        ".exs",
        ".erl",
        ".clj",
        ".dart",
        ".vue",
        ".svelte",
        ".tex",
        ".srt",
        ".vtt",
        ".env",
        ".properties",
        ".gradle",
        ".dockerfile",
        ".makefile",
        ".diff",
        ".patch",
    ]
)
TEXT_MIME_TYPES = frozenset(
    (
        "application/json", "application/xml", "application/x-yaml", "application/yaml",
        "application/toml", "application/javascript", "application/x-sh", "application/sql",
        "application/x-python", "application/x-ndjson",
    )
)  # fmt: skip
#: Largest photo read: Telegram's photos are far smaller (they are sent at most 10 MB).
PHOTO_MAX_BYTES = BOT_API_DOWNLOAD_LIMIT
#: Bytes read per second of AUDIO_MAX_SECONDS: uncompressed 48 kHz 16-bit stereo, more
#: than any recording of that length needs. A local Bot API server passes files of up
#: to 2 GB; this keeps a mislabelled one out of memory.
AUDIO_BYTES_PER_SECOND = 192_000
#: Seconds kept for a voice message that could not be transcribed (replying retries it).
UNHEARD_TTL = 7 * 24 * 3600
#: Longest quote of what was heard shown above the answer.
HEARD_QUOTE = 120

TOO_BIG = N_(
    "This file is too big for me to read ({size} MB; bots can download at most "
    "{limit} MB). Please send a smaller one, or paste the part that matters."
)
TEXT_TOO_BIG = N_(
    "This text file is too big for me ({size} KB; the limit is {limit} KB). Please send a "
    "smaller one, or paste the part that matters."
)
UNREADABLE_FILE = N_("I could not get this file from Telegram ({reason}). Please send it again.")
UNREADABLE_TEXT = N_(
    "I could not read {name} as text (it is not UTF-8 or UTF-16, or it is binary). "
    "Please send it as UTF-8 text."
)
PDF = N_("I cannot read PDF files. Please send the text instead (copy it, or save it as .txt).")
NOT_TEXT = N_(
    "I can read photos, voice notes, audio and text files (.txt, .md, .py, .json, .csv …), "
    "but not {name}. Please send its text instead."
)
IMAGE_FILE = N_("To show me a picture, send it as a photo (not as a file): then I can see it.")
AUDIO_TOO_BIG = N_(
    "This recording is too big for me ({size} MB; the limit is {limit} MB). Please "
    "send a shorter one, or a compressed one (a voice note, MP3 or Ogg)."
)
AUDIO_TOO_LONG = N_(
    "This recording is too long for me ({duration}s; the limit is {limit}s). Please send a "
    "shorter one."
)
UNHEARD = N_(
    "⚠️ I could not transcribe your voice message ({reason}). It is kept: reply to it "
    "(with anything) to try again."
)


#: Why a voice message could not be transcribed, by the model error's kind.
_SPEECH_FAILURES = {
    "rate_limited": N_("the speech service is busy"),
    "unavailable": N_("the speech service is not reachable"),
    "timeout": N_("the speech service took too long"),
    "config": N_("the speech service refused the request"),
}
_SPEECH_REJECTED = N_("the speech service rejected it")


class MediaError(Exception):
    """The message's files cannot be read: ``text`` tells the user why."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class MediaLimits:
    audio_max_seconds: int = 600
    text_file_max_bytes: int = 262144


class MediaReader:
    """Turns an :class:`Inbound`'s files into the user's :class:`ChatMessage`."""

    def __init__(
        self,
        store: TranscriptStore,
        *,
        files: Files,
        transcriber: Transcriber | None,
        redis: Redis,
        limits: MediaLimits = MediaLimits(),
    ) -> None:
        self.store = store
        self.files = files
        self.transcriber = transcriber
        self.redis = redis
        self.limits = limits

    async def message(self, inbound: Inbound) -> ChatMessage:
        """The user's message: text, images, a transcript or a file's text."""
        if not inbound.media:
            return ChatMessage("user", inbound.text)
        images: list[Image] = []
        texts: list[str] = []
        for ref in inbound.media:  # several for an album (of photos, files or audio)
            if ref.kind == "photo":
                images.append(await self._image(inbound, ref))
            elif ref.kind in ("voice", "audio"):
                texts.append(await self._heard(inbound, ref))
            else:
                texts.append(await self._text_file(ref))
        if not texts:
            return ChatMessage("user", inbound.text, images=tuple(images))
        caption = inbound.text.strip()
        content = "\n\n".join([caption, *texts] if caption else texts)
        return ChatMessage("user", content, images=tuple(images))

    async def _fetch(self, ref: MediaRef, limit: int) -> bytes:
        """The file's bytes, within ``limit`` (the operator's) and the server's own limit.

        A size Telegram gave that is over either is refused before getFile, which a
        local Bot API server answers only once it has downloaded the whole file.
        """
        server = self.files.server_limit
        if server is not None and server < limit and ref.size > server:
            raise MediaError(_too_big(ref.size, server))
        if ref.size > limit:
            raise MediaError(_over_limit(ref, ref.size, limit))
        try:
            return await self.files.fetch(ref.file_id, limit=limit)
        except FileTooBigError as exc:
            size = max(exc.size, ref.size)
            if exc.server:
                raise MediaError(_too_big(size, exc.limit)) from None
            raise MediaError(_over_limit(ref, size, exc.limit)) from None
        except FileUnreadableError as exc:
            raise MediaError(_(UNREADABLE_FILE).format(reason=str(exc) or "refused")) from None

    async def _image(self, inbound: Inbound, ref: MediaRef) -> Image:
        data = await self._fetch(ref, PHOTO_MAX_BYTES)
        digest = await self.store.put_blob(inbound.scope, data)
        return Image(digest, _image_mime(data), ref.width, ref.height)

    async def _heard(self, inbound: Inbound, ref: MediaRef) -> str:
        limit = self.limits.audio_max_seconds
        if ref.duration > limit:
            raise MediaError(
                _(AUDIO_TOO_LONG).format(duration=number(ref.duration), limit=number(limit))
            )
        data = await self._fetch(ref, limit * AUDIO_BYTES_PER_SECOND)
        if self.transcriber is None:
            raise MediaError(_(UNHEARD).format(reason=_("no transcription is set up")))
        name = ref.name or ("voice.ogg" if ref.kind == "voice" else "audio.mp3")
        mime = ref.mime or ("audio/ogg" if ref.kind == "voice" else "audio/mpeg")
        try:
            text = await self.transcriber.transcribe(data, name=name, mime=mime)
        except ModelError as exc:
            log.warning("transcribing in chat %s failed: %s", inbound.chat_id, exc.kind)
            await self.keep_unheard(inbound)
            raise MediaError(_(UNHEARD).format(reason=_reason(exc))) from None
        if not text:
            await self.keep_unheard(inbound)
            raise MediaError(_(UNHEARD).format(reason=_("no speech was heard")))
        return text

    async def _text_file(self, ref: MediaRef) -> str:
        name = ref.name or "file"
        suffix = PurePosixPath(name.lower()).suffix
        if ref.mime == "application/pdf" or suffix == ".pdf":
            raise MediaError(_(PDF))
        if ref.mime.startswith("image/"):
            raise MediaError(_(IMAGE_FILE))
        if not (ref.mime.startswith("text/") or ref.mime in TEXT_MIME_TYPES) and (
            suffix not in TEXT_EXTENSIONS
        ):
            raise MediaError(_(NOT_TEXT).format(name=name))
        text = _decode_text(await self._fetch(ref, self.limits.text_file_max_bytes))
        if text is None:
            raise MediaError(_(UNREADABLE_TEXT).format(name=name))
        return f"File {name}:\n{text}"

    # ---------------------------------------------------------- voice kept for a retry

    async def keep_unheard(self, inbound: Inbound) -> None:
        """Keep a voice message that could not be transcribed: a reply to it retries."""
        key = unheard_key(inbound.scope, inbound.message_id)
        await guarded(self.redis.set(key, inbound.encode(), ex=UNHEARD_TTL))

    async def unheard(self, scope: str, message_id: int) -> Inbound | None:
        """The kept voice message replied to, if it is one."""
        data = await guarded(self.redis.get(unheard_key(scope, message_id)))
        return Inbound.decode(data) if isinstance(data, bytes) else None

    async def heard(self, scope: str, message_id: int) -> None:
        await guarded(self.redis.delete(unheard_key(scope, message_id)))


def voice_quote(inbound: Inbound, user: Node) -> str:
    """What was heard, quoted above the answer to a voice message ("" otherwise)."""
    if not inbound.media or inbound.media[0].kind not in ("voice", "audio"):
        return ""
    heard = " ".join((user.messages[-1].content or "").split())
    caption = " ".join(inbound.text.split())
    if caption and heard.startswith(caption):  # the caption came first: quote the speech
        heard = heard[len(caption) :].strip()
    if len(heard) > HEARD_QUOTE:
        heard = heard[: HEARD_QUOTE - 1] + "…"
    return f"🎙 “{heard}”\n"


def _reason(exc: ModelError) -> str:
    return _(_SPEECH_FAILURES.get(exc.kind, _SPEECH_REJECTED))


def _too_big(size: int, limit: int) -> str:
    """Over the Bot API server's download limit (or a photo over PHOTO_MAX_BYTES)."""
    return _(TOO_BIG).format(size=_megabytes(size, 1), limit=_megabytes(limit, 0))


def _over_limit(ref: MediaRef, size: int, limit: int) -> str:
    """Over the operator's limit for this kind of file."""
    if ref.kind in ("voice", "audio"):
        return _(AUDIO_TOO_BIG).format(size=_megabytes(size, 1), limit=_megabytes(limit, 0))
    if ref.kind == "photo":
        return _too_big(size, limit)
    return _(TEXT_TOO_BIG).format(size=number(max(1, size // 1024)), limit=number(limit // 1024))


def _megabytes(size: int, places: int) -> str:
    """``size`` bytes in MB to ``places`` decimals, in the current language's digits."""
    return format_decimal(
        round(size / 1048576, places), format=f"#,##0.{'0' * places}" if places else "#,##0",
        locale=current(),
    )  # fmt: skip


def _image_mime(data: bytes) -> str:
    """Telegram sends photos as JPEG; trust the bytes' signature over that."""
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    return "image/jpeg"


def _decode_text(data: bytes) -> str | None:
    """UTF-8 (a BOM allowed) or UTF-16 with a BOM; ``None`` for anything else or binary."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    return text
