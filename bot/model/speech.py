"""Text to speech: an answer read aloud as voice notes.

Two halves. :func:`spoken_parts` is pure: it turns an answer's Markdown into what is
read aloud (its words, without the markup; a code block, a table or a display formula
is not read but named in one short phrase of the user's language, :class:`Unread`) and
cuts that into parts of at most :data:`MAX_INPUT_CHARS` characters, between paragraphs
where it can, else between sentences, else between words. :class:`Speaker` reads one
part aloud through the OpenAI-compatible ``POST /audio/speech`` with
``response_format: "opus"``: OGG/Opus bytes, which ``sendVoice`` shows as a voice note.

Failures are :class:`~bot.model.ModelError` of the chat call's kinds (tried again as
they are, :class:`~bot.model.client.Endpoint`), plus ``refused`` and ``size``
(bot/model/sdk.py, ``classify_media``), and ``rejected`` for an answer that is no
OGG/Opus audio.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markdown_it.token import Token

from ..markdown import MARKDOWN
from .client import Endpoint
from .types import ModelError

if TYPE_CHECKING:
    import openai

#: The most characters one ``/audio/speech`` request may carry (OpenAI's limit).
MAX_INPUT_CHARS = 4096
#: What OGG/Opus bytes start with: an Ogg page, then the Opus identification header.
OGG_MAGIC, OPUS_HEAD = b"OggS", b"OpusHead"


@dataclass(frozen=True, slots=True)
class Unread:
    """The phrases said instead of what is not read aloud, in the user's language
    (bot/media_texts.py: ``Unread(_(SPOKEN_CODE), _(SPOKEN_TABLE), _(SPOKEN_FORMULA))``)."""

    code: str
    table: str
    formula: str


@dataclass(frozen=True, slots=True)
class Speech:
    """One part read aloud."""

    #: OGG/Opus bytes (for ``sendVoice``).
    audio: bytes
    #: The characters read (what a speech model's price is per).
    characters: int
    latency: float


class Speaker:
    """Reads text aloud with ``model`` in ``voice`` at ``base_url``.

    Its SDK client is made on the first call (bot/model/sdk.py: the SDK is not
    imported at start-up).
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str,
        voice: str,
        timeout: float,
        max_retries: int,
        name: str | None = None,
    ) -> None:
        """``name``: the catalogue's name of the model (default: its id)."""
        self.model, self.voice = model, voice
        self.name = name or model
        self._endpoint = Endpoint(api_key, base_url, timeout, max_retries)
        self._client: openai.AsyncOpenAI | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def speak(self, text: str) -> Speech:
        """``text`` (one part of :func:`spoken_parts`) read aloud; failures as
        :class:`~bot.model.ModelError` with its ``latency`` set."""
        if not text.strip() or len(text) > MAX_INPUT_CHARS:
            raise ValueError(f"speak() takes 1 to {MAX_INPUT_CHARS} characters (spoken_parts)")
        from . import sdk  # noqa: PLC0415 - imported on the first model call

        if self._client is None:
            self._client = self._endpoint.client()
        client = self._client
        started = time.monotonic()
        try:
            audio = await self._endpoint.call(
                lambda: sdk.speak(client, model=self.model, voice=self.voice, text=text)
            )
            if not is_ogg_opus(audio):
                raise ModelError("rejected", "the speech endpoint answered no OGG/Opus audio")
        except ModelError as error:
            error.latency = time.monotonic() - started
            raise
        return Speech(audio, len(text), time.monotonic() - started)


def is_ogg_opus(data: bytes) -> bool:
    """Whether ``data`` starts as an OGG/Opus file: its first page holds ``OpusHead``."""
    return data.startswith(OGG_MAGIC) and data[28:36] == OPUS_HEAD


# ------------------------------------------------------------------ what is read aloud

#: Where a sentence ends: after . ! ? … and a space, or after a CJK full stop.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")
_SPACES = re.compile(r"\s+")
#: Between two blocks of a part (a paragraph's pause).
_BLOCKS_APART = "\n\n"
#: Sentence ends after which CJK text goes on without a space.
_CJK_STOPS = ("。", "！", "？")
#: A heading ending without one of these gets a full stop (a pause when read).
_PAUSES = (".", "!", "?", ":", ";", "…", "。", "！", "？")


def spoken_parts(markdown: str, unread: Unread, *, limit: int = MAX_INPUT_CHARS) -> list[str]:
    """What ``markdown`` reads aloud as, in parts of at most ``limit`` characters (none
    for an empty text). Parts break between paragraphs, else between sentences, else
    between words; a word longer than a part (a URL) is cut."""
    return _packed(spoken_blocks(markdown, unread), limit)


def spoken_blocks(markdown: str, unread: Unread) -> list[str]:
    """The paragraphs read aloud: each block's text without markup, a list item a block
    of its own (an ordered one with its number), a code block, table or display formula
    its phrase of ``unread`` (said once for several in a row)."""
    blocks: list[str] = []
    numbers: list[int | None] = []  # per open list: the next item's number (None: bullets)
    tokens = MARKDOWN.parse(markdown)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind, i = token.type, i + 1
        phrase = unread.code if kind in ("fence", "code_block") else None
        if kind == "math_block":
            phrase = unread.formula
        elif kind == "table_open":
            phrase, i = unread.table, _closing(tokens, i - 1)
        elif kind == "inline":
            text = _inline_text(token.children or ())
            if text and tokens[i - 2].type == "heading_open" and not text.endswith(_PAUSES):
                text += "."
            if text:
                blocks.append(_numbered(text, tokens, i - 1, numbers))
        else:
            _follow_lists(token, numbers)
        if phrase is not None and (not blocks or blocks[-1] != phrase):
            blocks.append(phrase)
    return blocks


def _follow_lists(token: Token, numbers: list[int | None]) -> None:
    """Keep ``numbers`` (the next item's number per open list) in step with ``token``."""
    if token.type == "bullet_list_open":
        numbers.append(None)
    elif token.type == "ordered_list_open":
        start = token.attrGet("start")
        numbers.append(int(start) if isinstance(start, int | str) else 1)
    elif token.type in ("bullet_list_close", "ordered_list_close"):
        numbers.pop()


def _closing(tokens: Sequence[Token], opening: int) -> int:
    """The index after the token that closes ``tokens[opening]``."""
    level = tokens[opening].level
    for j in range(opening + 1, len(tokens)):
        if tokens[j].nesting == -1 and tokens[j].level == level:
            return j + 1
    return len(tokens)


def _numbered(text: str, tokens: Sequence[Token], i: int, numbers: list[int | None]) -> str:
    """``text`` with its list item's number, if it opens an item of an ordered list."""
    opens_item = i >= 2 and tokens[i - 2].type == "list_item_open"
    if not (opens_item and numbers and numbers[-1] is not None):
        return text
    number = numbers[-1]
    numbers[-1] = number + 1
    return f"{number}. {text}"


def _inline_text(children: Sequence[Token]) -> str:
    """The words of a paragraph: text, code and formulas as written, a link by its text,
    an image by its description; raw HTML is not read."""
    words: list[str] = []
    for child in children:
        if child.type in ("text", "code_inline", "math_inline", "image"):
            words.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            words.append(" ")
    return _SPACES.sub(" ", "".join(words)).strip()


def _packed(blocks: Sequence[str], limit: int) -> list[str]:
    """``blocks`` joined into parts of at most ``limit`` characters: blocks apart by a
    blank line, the pieces of a block too long for one part by a space (none after a
    CJK full stop)."""
    parts: list[str] = []
    current = ""
    for block in blocks:
        for n, piece in enumerate(_pieces(block, limit)):
            apart = _BLOCKS_APART if not n else "" if current.endswith(_CJK_STOPS) else " "
            joined = f"{current}{apart}{piece}" if current else piece
            if len(joined) <= limit:
                current = joined
            else:
                parts.append(current)
                current = piece
    if current:
        parts.append(current)
    return parts


def _pieces(block: str, limit: int) -> Iterator[str]:
    """``block`` whole if it fits a part, else its sentences, a sentence too long for one
    part in runs of words (:func:`_words`)."""
    if len(block) <= limit:
        yield block
        return
    for sentence in _SENTENCE_END.split(block):
        if len(sentence) <= limit:
            if sentence:
                yield sentence
        else:
            yield from _words(sentence, limit)


def _words(sentence: str, limit: int) -> Iterator[str]:
    """``sentence`` in runs of whole words of at most ``limit`` characters; a word longer
    than that (a URL, a hash) cut into pieces of ``limit``."""
    run = ""
    for whole in sentence.split():
        pieces = [whole[at : at + limit] for at in range(0, len(whole), limit)]
        for word in pieces:
            if run and len(run) + 1 + len(word) <= limit:
                run += " " + word
            else:
                if run:
                    yield run
                run = word
    if run:
        yield run
