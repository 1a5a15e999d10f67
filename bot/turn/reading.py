"""Reading the world, as capabilities of the turn: documents users send, the links in
their messages, and web search with the sources an answer cites (issue 44).

The work is done by :mod:`bot.reading` (which knows neither the turn nor Telegram);
this module plugs it into the turn's seams, registered in bot/capabilities.py:

    DocumentReader   a file reader: a PDF, .docx, HTML, Markdown, CSV or text file
                     becomes a quoted document in the user's message
    LinkReader       a message reader (READ_LINKS): the pages its first links point at,
                     each quoted with its URL
    WebTool          the built-in tools web_search and read_url (SEARCH_URL)
    cited_sources    a footer: the numbered sources an answer cites, under its text

How much of a document or page the model gets is :class:`Room`: DOCUMENT_MAX_TOKENS,
or less when the context budget allows less, shared by everything one message brings.
A reader runs before the branch's model is known (its user node is stored first), so
the budget is the bot's CONTEXT_TOKEN_BUDGET, not a catalogue model's own
``context_tokens``: a branch on a smaller model gets the too-large notice for a
document that fills the bot's budget.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from transcript import ChatMessage, TranscriptStore

from ..bus.inbound import Inbound, MediaRef
from ..i18n import _
from ..model.types import estimate_text
from ..reading import quoting, search
from ..reading.documents import DocumentError, Limits, document_format, read_document
from ..reading.fetch import Fetcher
from ..reading.pages import first_links, read_page
from ..reading.texts import READ_THIS, READING, SEARCHING, failure, partly_read
from ..tools.box import ToolCallContext, ToolResult
from .context import ContextWindow
from .inputs import MediaError, Read
from .media import Download

#: Tokens kept beside a document for the question and the quotes' opening lines.
MARGIN = 512
#: The least a document or page gets, however full the budget.
MIN_TOKENS = 100


def prompt_rules(*, search_tools: bool) -> str:
    """What the root system prompt gets from reading: the quoting rule always (any
    document can be read), the citation rule when the web tools are offered; appended
    to the operator's prompt, so a conversation's prefix stays byte-stable."""
    rules = [quoting.SYSTEM_RULE, *([search.CITE_RULE] if search_tools else [])]
    return "\n\n" + " ".join(rules)


def links_of(inbound: Inbound, most: int) -> list[str]:
    """The first ``most`` http(s) links of a message: those in its text, then those
    behind its words (``text_link`` entities)."""
    found = first_links(inbound.text, most)
    for url in inbound.links:
        if len(found) >= most:
            break
        if url not in found and url.lower().startswith(("http://", "https://")):
            found.append(url)
    return found


class Room:
    """How many tokens one document or page of a message may have."""

    def __init__(
        self, context: ContextWindow, *, max_tokens: int, prompt: str, links: int = 0
    ) -> None:
        self.context = context
        #: DOCUMENT_MAX_TOKENS.
        self.max_tokens = max_tokens
        #: The root prompt's tokens and the margin: what a request holds besides them.
        self.head = estimate_text(prompt) + MARGIN
        #: LINKS_PER_MESSAGE when links are read, else 0.
        self.links = links

    def tokens(self, items: int = 1) -> int:
        """One of ``items`` documents' share: within DOCUMENT_MAX_TOKENS and, with the
        root prompt, within what the context window fits (its estimate calibrated by the
        provider's counts, so a language of more tokens per character gets less text)."""
        context = self.context
        fits = int((context.limit - self.head) / context.estimator.ratio)
        return max(MIN_TOKENS, min(self.max_tokens, fits) // max(1, items))

    def share(self, inbound: Inbound) -> int:
        """The share of each document and link ``inbound`` brings."""
        documents = sum(1 for ref in inbound.media if ref.kind == "document")
        links = len(links_of(inbound, self.links)) if self.links else 0
        return self.tokens(documents + links)


class DocumentReader:
    """A document (PDF, .docx, HTML, Markdown, CSV, text): quoted with its name, its
    first part when it is long (the user is told how much was read); one clear line,
    and no model call, when it cannot be read."""

    def __init__(self, download: Download, room: Room, *, max_bytes: int) -> None:
        self.download, self.room, self.max_bytes = download, room, max_bytes

    def takes(self, ref: MediaRef) -> bool:
        return ref.kind == "document" and document_format(ref.name or "file", ref.mime) is not None

    async def read(self, inbound: Inbound, ref: MediaRef) -> Read:
        name = ref.name or "document"
        data = await self.download(ref, self.max_bytes)
        limits = Limits(max_bytes=self.max_bytes, max_tokens=self.room.share(inbound))
        try:  # parsing is CPU work: off the event loop
            document = await asyncio.to_thread(
                read_document, data, name=name, mime=ref.mime, limits=limits
            )
        except DocumentError as exc:
            raise MediaError(failure(exc)) from None
        text = document.as_quote()
        last = [r for r in inbound.media if r.kind == "document"][-1]
        if not inbound.text.strip() and ref == last:  # no caption: the question is asked
            text += "\n\n" + _(READ_THIS)
        return Read(text=text, note=partly_read(name, document.extent) or "")


class LinkReader:
    """The pages a message's first links point at (READ_LINKS), each quoted with its URL,
    fetched at once through the guarded fetcher. A link that cannot be read is named to
    the model with why ("could not be read (…)"), and the question is answered anyway."""

    def __init__(self, fetcher: Fetcher, room: Room, *, most: int) -> None:
        self.fetcher, self.room, self.most = fetcher, room, most

    def wants(self, inbound: Inbound) -> bool:
        return bool(links_of(inbound, self.most))

    async def read(self, inbound: Inbound) -> Read:
        budget = self.room.share(inbound)
        pages = await asyncio.gather(
            *(
                read_page(self.fetcher, url, max_tokens=budget)
                for url in links_of(inbound, self.most)
            )
        )
        notes = [partly_read(p.final_url, p.extent) if p.extent else None for p in pages]
        return Read(
            text="\n\n".join(page.as_quote() for page in pages),
            note="\n".join(note for note in notes if note),
        )


class WebTool:
    """The built-in tool ``web_search`` or ``read_url`` (SEARCH_URL). Each call numbers
    what it finds after the sources the chain already holds, and after those of the
    calls before it in its round, so a number names one source in a whole thread."""

    idempotent = True  # both only read

    def __init__(self, name: str, tools: search.ReadingTools, store: TranscriptStore) -> None:
        self.name, self.tools, self.store = name, tools, store

    def spec(self) -> dict[str, Any]:
        return next(s for s in search.SPECS if s["function"]["name"] == self.name)

    def progress(self, arguments: str) -> str:
        if self.name == search.WEB_SEARCH:
            return _(SEARCHING)
        try:
            url = json.loads(arguments).get("url", "")
            site = urlsplit(url).hostname if isinstance(url, str) else None
        except (ValueError, AttributeError):
            site = None
        return _(READING).format(site=site or "…")

    async def call(self, arguments: dict[str, Any], context: ToolCallContext) -> ToolResult:
        start = 1
        if context.leaf is not None:
            chain = await self.store.path(context.leaf.id)
            start = search.next_number([m for node in chain for m in node.messages])
        first = self.tools.numbers(context.calls, start)[context.index] if context.calls else start
        return await self.tools.call(self.name, arguments, first=first)


def cited_sources(chain: Sequence[ChatMessage], answer: str) -> str:
    """The numbered sources (title → URL) ``answer`` cites, among those the web tools
    found in its chain, as Markdown under it ("" when it cites none)."""
    found = search.cited(answer, search.sources(chain))
    return "\n\n" + search.footer(found) if found else ""
