"""The files a message carries, read: photos, voice notes and audio, text files.

Each kind is a *file reader* (:class:`~bot.turn.inputs.FileReader`), registered in
bot/capabilities.py. Photos are downloaded once (``getFile``), stored content-addressed
in the chat's scope (:meth:`transcript.TranscriptStore.put_blob`) and referenced from
the node as :class:`transcript.Image`; voice notes and audio are transcribed and the
transcript is the message; a text file's text, with its name, is added to it. What
cannot be read ends the turn with a clear notice (:class:`MediaError`), and nothing of
the user's is lost: a voice message that could not be transcribed is kept
(:meth:`VoiceReader.keep_unheard`), and replying to it tries again.
"""

from __future__ import annotations

import logging

from babel.numbers import format_decimal
from redis.asyncio import Redis

from transcript import Image, Node, TranscriptStore
from transcript.outage import guarded

from ..bus.inbound import Inbound, MediaRef
from ..data.keys import unheard_key
from ..i18n import N_, _, current, number
from ..model import ModelError
from ..model.transcribe import Transcriber
from ..reading.text import decode_text, is_text, suffix
from ..telegram.files import BOT_API_DOWNLOAD_LIMIT, Files, FileTooBigError, FileUnreadableError
from .inputs import MediaError, Read

log = logging.getLogger("replychain.media")

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


class Download:
    """A file's bytes from Telegram, within a limit (the operator's, and the server's)."""

    def __init__(self, files: Files) -> None:
        self.files = files

    async def __call__(self, ref: MediaRef, limit: int) -> bytes:
        """A size Telegram gave that is over either limit is refused before getFile,
        which a local Bot API server answers only once it has downloaded the whole file."""
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


class PhotoReader:
    """A photo: stored once as a blob of the chat, an image of the user's node."""

    def __init__(self, store: TranscriptStore, download: Download) -> None:
        self.store, self.download = store, download

    def takes(self, ref: MediaRef) -> bool:
        return ref.kind == "photo"

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        data = await self.download(ref, PHOTO_MAX_BYTES)
        digest = await self.store.put_blob(inbound.scope, data)
        return Read(image=Image(digest, _image_mime(data), ref.width, ref.height))


class VoiceReader:
    """A voice note or audio: its transcript. One that could not be transcribed is kept,
    and a reply to it tries again (bot/turn/attach.py)."""

    def __init__(
        self, download: Download, transcriber: Transcriber | None, redis: Redis, *,
        max_seconds: int = 600,
    ) -> None:  # fmt: skip
        self.download, self.transcriber, self.redis = download, transcriber, redis
        self.max_seconds = max_seconds

    def takes(self, ref: MediaRef) -> bool:
        return ref.kind in ("voice", "audio")

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        limit = self.max_seconds
        if ref.duration > limit:
            raise MediaError(
                _(AUDIO_TOO_LONG).format(duration=number(ref.duration), limit=number(limit))
            )
        data = await self.download(ref, limit * AUDIO_BYTES_PER_SECOND)
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
        return Read(text=text)

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


class TextFileReader:
    """A text file (.txt, .md, .py, .json, .csv …): its text, with its name."""

    def __init__(self, download: Download, *, max_bytes: int = 262144) -> None:
        self.download, self.max_bytes = download, max_bytes

    def takes(self, ref: MediaRef) -> bool:
        return ref.kind == "document" and is_text(ref.name or "file", ref.mime)

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        name = ref.name or "file"
        text = decode_text(await self.download(ref, self.max_bytes))
        if text is None:
            raise MediaError(_(UNREADABLE_TEXT).format(name=name))
        return Read(text=f"File {name}:\n{text}")


class NotReadable:
    """Every file no other reader takes: one clear line (registered last)."""

    def takes(self, ref: MediaRef) -> bool:
        return True

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        name = ref.name or "file"
        if ref.mime == "application/pdf" or suffix(name) == ".pdf":
            raise MediaError(_(PDF))
        if ref.mime.startswith("image/"):
            raise MediaError(_(IMAGE_FILE))
        raise MediaError(_(NOT_TEXT).format(name=name))


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
