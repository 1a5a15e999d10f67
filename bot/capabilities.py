"""What the bot can read, do and send besides text: every capability registered here.

A capability is a module that implements one small interface of the turn:

    an input reader   bot/turn/inputs.py: FileReader (a file a message carries),
                      MessageReader (what its text points at)
    a built-in tool   bot/tools/box.py: BuiltinTool, offered to tool-capable models in
                      the per-node tool loop beside MCP_CONFIG's tools

Adding one touches its module, its line here, its texts and its tests; the turn's
steps and persistence stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from transcript import TranscriptStore

from .model.transcribe import Transcriber
from .settings import Settings
from .telegram.files import Files
from .tools.box import BuiltinTool
from .turn.inputs import FileReader, Inputs, MessageReader
from .turn.media import Download, NotReadable, PhotoReader, TextFileReader, VoiceReader


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The readers a turn uses, as registered for these settings."""

    inputs: Inputs
    #: The voice reader: a reply to a voice note it could not transcribe retries it.
    voice: VoiceReader
    #: Tools the bot itself offers tool-capable models (beside MCP_CONFIG's).
    tools: tuple[BuiltinTool, ...] = ()


def capabilities(
    settings: Settings, *, store: TranscriptStore, files: Files, transcriber: Transcriber,
    redis: Redis,
) -> Capabilities:  # fmt: skip
    """Every capability these settings turn on, in the order the turn asks them."""
    download = Download(files)
    voice = VoiceReader(download, transcriber, redis, max_seconds=settings.audio_max_seconds)
    readers: list[FileReader] = [
        PhotoReader(store, download),
        voice,
        TextFileReader(download, max_bytes=settings.text_file_max_bytes),
        NotReadable(),  # last: whatever no reader takes gets one clear line
    ]
    message_readers: list[MessageReader] = []
    tools: list[BuiltinTool] = []
    return Capabilities(Inputs(readers, message_readers), voice, tuple(tools))
