"""A URL → what the model reads of it; and the links of a user's message.

An HTML page becomes its main text (:mod:`.extract`), a PDF is read as a document
(:mod:`.documents`), plain text, Markdown, CSV and JSON as they are; anything else
(an image, a video, an archive) is named, not read. A link that cannot be read is
never an error for the turn: its :class:`Page` says why ("could not be read (…)"),
the model is told so, and the user's question is still answered.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from . import quoting
from .documents import DocumentError, Extent, Limits, cut, read_document
from .extract import main_text
from .fetch import Fetched, Fetcher, FetchError

#: A URL in a message: the scheme, then anything up to a space, quote or angle bracket.
_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
#: Punctuation that ends a sentence rather than a URL.
_TRAILING = ".,;:!?'\"”’»)]}>*_~"
_PAIRS = {")": "(", "]": "[", "}": "{"}
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-ndjson"})
#: Types a server names when it does not know (aiohttp's for none at all): sniffed.
_UNSURE = frozenset({"", "application/octet-stream", "text/plain"})


@dataclass(frozen=True, slots=True)
class Page:
    """What was read at a URL, or why nothing was."""

    #: The URL as the user or the model gave it.
    url: str
    #: The URL the text came from (after redirects).
    final_url: str
    title: str = ""
    #: The main text, cut to the budget ("" when nothing was read).
    text: str = ""
    extent: Extent | None = None
    #: Why nothing was read, for the model ("could not be read (…)"); None when read.
    unread: str | None = None
    #: The response was cut at URL_FETCH_MAX_BYTES (this many bytes were read).
    cut_at: int = 0

    def as_quote(self) -> str:
        """What the model is given for this link: the page as untrusted quoted content,
        or one line saying why it was not read."""
        if self.unread is not None:
            return f"Link {self.url}: {self.unread}."
        label = f"web page {self.final_url}" + (f" “{self.title}”" if self.title else "")
        notes = [self.extent.describe() if self.extent is not None else ""]
        if self.cut_at:
            notes.append(f"only its first {self.cut_at:,} bytes were fetched")
        return quoting.quote(label, self.text, note="; ".join(n for n in notes if n))


async def read_page(fetcher: Fetcher, url: str, *, max_tokens: int) -> Page:
    """Fetch ``url`` and read it; never raises for the page's sake (see :class:`Page`)."""
    try:
        fetched = await fetcher.fetch(url)
    except FetchError as exc:
        return Page(url, url, unread=exc.describe())
    return await asyncio.to_thread(readable, fetched, url=url, max_tokens=max_tokens)


def readable(fetched: Fetched, *, url: str, max_tokens: int) -> Page:
    """A fetched response as a :class:`Page` (CPU work: :func:`read_page` runs it in a
    thread)."""
    kind, head = fetched.content_type, fetched.body[:256].lstrip().lower()
    if kind == "application/pdf" or head.startswith(b"%pdf-"):
        return _pdf(fetched, url, max_tokens)
    if kind in _HTML_TYPES or (kind in _UNSURE and head.startswith((b"<!doctype html", b"<html"))):
        found = main_text(_decoded(fetched) or fetched.body, url=fetched.url)
        title, text = found.title, found.text
    elif kind.startswith("text/") or kind in _TEXT_TYPES:
        title, text = "", _decoded(fetched) or fetched.body.decode("utf-8", "replace")
    else:
        return Page(url, fetched.url, unread=f"not read: it is {kind or 'an unnamed type'}")
    if not text.strip():
        return Page(url, fetched.url, title=title, unread="could not be read (no text found)")
    kept, extent = cut(text, max_tokens)
    cut_at = len(fetched.body) if fetched.truncated else 0
    return Page(url, fetched.url, title=title, text=kept, extent=extent, cut_at=cut_at)


def _pdf(fetched: Fetched, url: str, max_tokens: int) -> Page:
    if fetched.truncated:
        size = len(fetched.body) // 1048576
        return Page(url, fetched.url, unread=f"could not be read (a PDF over {size} MB)")
    name = unquote(urlsplit(fetched.url).path.rsplit("/", 1)[-1]) or "document.pdf"
    try:
        document = read_document(
            fetched.body, name=name, mime="application/pdf", limits=Limits(max_tokens=max_tokens)
        )
    except DocumentError as exc:
        return Page(url, fetched.url, unread=f"could not be read ({exc.reason})")
    return Page(url, fetched.url, title=name, text=document.text, extent=document.extent)


def _decoded(fetched: Fetched) -> str | None:
    """The body in the charset the server named; ``None`` when it named none (or one
    Python does not know), for the extractor to detect."""
    if not fetched.charset:
        return None
    try:
        return fetched.body.decode(fetched.charset, "replace")
    except LookupError:
        return None


def first_links(text: str, n: int) -> list[str]:
    """The first ``n`` distinct http(s) URLs of a message, in order (LINKS_PER_MESSAGE).

    Punctuation that closes the sentence is not part of the URL ("see https://x.org/a.")
    but a closing bracket the URL opened is (Wikipedia's ``…/Python_(language)``).
    """
    found: list[str] = []
    for match in _URL.finditer(text):
        if len(found) >= n:
            break
        url = _trim(match.group())
        try:
            usable = bool(urlsplit(url).hostname)
        except ValueError:  # a port that is no number, a bad IPv6 literal
            usable = False
        if usable and url not in found:
            found.append(url)
    return found


def _trim(url: str) -> str:
    while url and url[-1] in _TRAILING:
        last = url[-1]
        if last in _PAIRS and url.count(_PAIRS[last]) >= url.count(last):
            break  # the URL's own bracket
        url = url[:-1]
    return url
