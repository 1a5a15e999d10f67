"""The user's message, read from what it carries: where input readers plug in.

A *file reader* reads one file a message carries (a photo, a voice note, a text file, a
document) into text the model reads or an image it sees; a *message reader* adds to the
whole message (the pages its links point at). The bot's readers are registered in one
place, :func:`bot.capabilities.inputs`, in order: the first file reader that takes a
file reads it. A reader that cannot read what it took raises :class:`MediaError` with
one line for the user; the turn then ends with that notice, before any model call, and
nothing the user sent is lost (replying to the notice goes on from the conversation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from transcript import ChatMessage, Image

from ..bus.inbound import Inbound, MediaRef


class MediaError(Exception):
    """What the message carries cannot be read: ``text`` tells the user why."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class Read:
    """What a reader made of a file, or of the message: text for the model (a
    transcript, a quoted document), an image, and a line for the user shown above the
    answer ("read pages 1–42 of 130"), each optional."""

    text: str = ""
    image: Image | None = None
    note: str = ""


class FileReader(Protocol):
    """Reads one kind of file a message carries."""

    def takes(self, ref: MediaRef) -> bool:
        """Whether this reader reads ``ref`` (the first that takes a file reads it)."""

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        """The file, read; raises :class:`MediaError` when it cannot be."""


class MessageReader(Protocol):
    """Adds to a message from its text (the pages its links point at)."""

    def wants(self, inbound: Inbound) -> bool:
        """Whether there is anything to read in ``inbound`` (cheap: no I/O)."""

    async def read(self, inbound: Inbound) -> Read:
        """What to add."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The user's message as read, and the lines for the user above the answer."""

    message: ChatMessage
    notes: tuple[str, ...] = ()


class Inputs:
    """The registered readers (one set per bot)."""

    def __init__(self, files: Sequence[FileReader], messages: Sequence[MessageReader] = ()) -> None:
        self.files, self.messages = tuple(files), tuple(messages)

    def wants(self, inbound: Inbound) -> bool:
        """Whether ``inbound`` is more than its text: files, or what a reader reads."""
        return bool(inbound.media) or any(r.wants(inbound) for r in self.messages)

    async def read(self, inbound: Inbound) -> Reading:
        """The user's message: its text (or caption), then what each file and each
        message reader that wants it made of it."""
        images: list[Image] = []
        texts: list[str] = []
        notes: list[str] = []
        reads = [await self._file(inbound, ref) for ref in inbound.media]
        reads += [await reader.read(inbound) for reader in self.messages if reader.wants(inbound)]
        for read in reads:
            if read.image is not None:
                images.append(read.image)
            if read.text:
                texts.append(read.text)
            if read.note:
                notes.append(read.note)
        caption = inbound.text.strip()
        content = "\n\n".join([caption, *texts] if caption else texts) if texts else inbound.text
        return Reading(ChatMessage("user", content, images=tuple(images)), tuple(notes))

    async def _file(self, inbound: Inbound, ref: MediaRef) -> Read:
        reader = next((r for r in self.files if r.takes(ref)), None)
        if reader is None:
            raise MediaError("")  # (the registration ends with a reader that takes any)
        return await reader.read(inbound, ref)
