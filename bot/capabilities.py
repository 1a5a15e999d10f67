"""What the bot can read, do and send besides text: every capability registered here.

A capability is a module that implements one small interface of the turn:

    an input reader   bot/turn/inputs.py: FileReader (a file a message carries),
                      MessageReader (what its text points at)
    a built-in tool   bot/tools/box.py: BuiltinTool, offered to tool-capable models in
                      the per-node tool loop beside MCP_CONFIG's tools; a Footer adds
                      what an answer shows under its text from its tool rounds
    an output         bot/turn/values.py: Output, what an answer sends after its text
                      as its attachments (bot/telegram/onscreen.py): its pictures
                      (bot/turn/pictures.py, also the /image turn), its voice notes
                      (bot/turn/speaking.py)

Adding one touches its module, its line here, its texts and its tests; the turn's
steps and persistence stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from transcript import TranscriptStore

from .catalogue import Models
from .model.transcribe import Transcriber
from .payments import Stars
from .reading.fetch import Fetcher, FetchPolicy
from .reading.search import NAMES, ReadingTools, SearXNG
from .settings import Settings
from .telegram.files import Files
from .tools.box import BuiltinTool, Footer
from .turn.context import ContextWindow
from .turn.inputs import FileReader, Inputs, MessageReader
from .turn.limits import Spending
from .turn.media import Download, NotReadable, PhotoReader, VoiceReader
from .turn.pictures import DrawTool, PictureAttachments, Pictures
from .turn.reading import DocumentReader, LinkReader, Room, WebTool, cited_sources, prompt_rules
from .turn.speaking import VoiceAnswers
from .turn.values import Output
from .usage.accounting import Accounting


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The readers a turn uses, as registered for these settings."""

    inputs: Inputs
    #: The voice reader: a reply to a voice note it could not transcribe retries it.
    voice: VoiceReader
    #: Tools the bot itself offers tool-capable models (beside MCP_CONFIG's).
    tools: tuple[BuiltinTool, ...] = ()
    #: What answers send after their text, in this order: their pictures, then the
    #: text read aloud (TTS_MODEL).
    outputs: tuple[Output, ...] = ()
    #: Pictures made and changed (IMAGE_MODEL), else ``None``.
    pictures: Pictures | None = None
    #: What answers show under their text when their turn ran tools.
    footers: tuple[Footer, ...] = ()
    #: What every new conversation's system prompt gets after the operator's (or a
    #: persona's): the rules the capabilities need the model to know.
    rules: str = ""


def capabilities(
    settings: Settings, *, store: TranscriptStore, files: Files, transcriber: Transcriber,
    redis: Redis, models: Models, accounting: Accounting, context: ContextWindow,
    stars: Stars | None = None,
) -> Capabilities:  # fmt: skip
    """Every capability these settings turn on, in the order the turn asks them
    (``stars``: payments, what the extras that cost money are checked against)."""
    download = Download(files)
    voice = VoiceReader(download, transcriber, redis, max_seconds=settings.audio_max_seconds)
    rules = prompt_rules(search_tools=settings.search_url is not None)
    room = Room(
        context, max_tokens=settings.document_max_tokens,
        prompt=settings.resolved_system_prompt() + rules,
        links=settings.links_per_message if settings.read_links else 0,
    )  # fmt: skip
    fetcher = Fetcher(
        FetchPolicy(allow=settings.url_fetch_networks, max_bytes=settings.url_fetch_max_bytes)
    )
    readers: list[FileReader] = [
        PhotoReader(store, download),
        voice,
        DocumentReader(download, room, max_bytes=settings.max_document_bytes),
        NotReadable(),  # last: whatever no reader takes gets one clear line
    ]
    message_readers: list[MessageReader] = []
    if settings.read_links and settings.links_per_message:
        message_readers.append(LinkReader(fetcher, room, most=settings.links_per_message))
    tools: list[BuiltinTool] = []
    spending = Spending(
        accounting, daily_tokens=settings.user_daily_token_limit,
        daily_dollars=settings.user_daily_budget_usd, stars=stars,
    )  # fmt: skip
    catalogue, pictures = models.catalogue, None
    speaker, maker = models.speaker(), models.image_maker()
    outputs: list[Output] = [PictureAttachments(store)]
    if speaker is not None and catalogue.speech is not None:
        prices = catalogue.speech.prices
        outputs.append(
            VoiceAnswers(speaker, accounting=accounting, prices=prices, spending=spending)
        )
    if maker is not None and catalogue.images is not None:
        pictures = Pictures(
            maker, store=store, accounting=accounting, prices=catalogue.images.prices,
            spending=spending,
        )  # fmt: skip
        if settings.image_tool:
            tools.append(DrawTool(pictures))
    footers: list[Footer] = []
    if settings.search_url is not None:
        engine = SearXNG(settings.search_url, results=settings.search_results)
        web = ReadingTools(engine, fetcher, max_tokens=room.tokens(4))  # a tool result's share
        tools += [WebTool(name, web, store) for name in NAMES]
        footers.append(cited_sources)
    return Capabilities(
        Inputs(readers, message_readers),
        voice,
        tuple(tools),
        outputs=tuple(outputs),
        pictures=pictures,
        footers=tuple(footers),
        rules=rules,
    )
