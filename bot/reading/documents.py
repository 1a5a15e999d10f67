"""A document's bytes → its text, cut to a token budget, or one typed reason why not.

PDF (its text layer, with pypdf), Word ``.docx`` (python-docx), HTML (the page's main
text, :mod:`.extract`) and every text file :mod:`.text` knows (Markdown, CSV, code…).
A document longer than the budget goes in as its first part and :class:`Extent` says
how much was read ("pages 1–42 of 130", or a share of the characters), so the caller
can tell the user and the model the same thing.

Hostile files are expected: the size is checked before anything is parsed; a .docx is
a zip, so the sizes its parts declare and the bytes they really inflate to are
counted before python-docx opens it; pypdf caps what one compressed stream may inflate
to; and a PDF is read page by page, stopping at the budget or after ``Limits.seconds``.
Parsing is CPU work: :func:`read_document` is synchronous, to be run in a thread
(:func:`asyncio.to_thread`) or a worker process, never on the event loop.
"""

from __future__ import annotations

import io
import logging
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from ..model.types import estimate_text
from . import quoting
from .extract import main_text
from .text import decode_text, is_text, suffix

log = logging.getLogger("replychain.reading")

Format = Literal["pdf", "docx", "html", "text"]
Kind = Literal[
    "scanned", "encrypted", "corrupt", "too_big", "zip_bomb", "unsupported", "undecodable",
    "empty",
]  # fmt: skip

#: What the model is told when a document could not be read (English, like every text
#: the model reads; the user's line is :data:`bot.reading.texts.FAILURES`).
REASONS: dict[Kind, str] = {
    "scanned": "it has no text layer (a scanned PDF)",
    "encrypted": "it is protected by a password",
    "corrupt": "it is damaged and could not be opened",
    "too_big": "it is too big",
    "zip_bomb": "it unpacks to far more than its size",
    "unsupported": "it is not a format the bot reads",
    "undecodable": "it is not UTF-8 or UTF-16 text",
    "empty": "it holds no text",
}
_HTML = frozenset({".html", ".htm", ".xhtml"})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
#: An OLE2 compound file: what Word writes for a .docx protected by a password.
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: A .docx of more parts than this is no Word document anyone wrote.
_MAX_PARTS = 10_000


class DocumentError(Exception):
    """A document that cannot be read; ``kind`` says why (one user line each)."""

    def __init__(self, kind: Kind, name: str, *, size: int = 0, limit: int = 0) -> None:
        super().__init__(f"{name}: {REASONS[kind]}")
        self.kind: Kind = kind
        self.name = name
        #: The document's bytes and the limit it passed (``too_big``, ``zip_bomb``).
        self.size = size
        self.limit = limit

    @property
    def reason(self) -> str:
        """Why, for the model: "it is protected by a password"."""
        return REASONS[self.kind]


@dataclass(frozen=True, slots=True)
class Limits:
    #: MAX_DOCUMENT_BYTES: the largest file read.
    max_bytes: int = 20 * 1024 * 1024
    #: DOCUMENT_MAX_TOKENS, or less when the branch's model budget allows less.
    max_tokens: int = 30_000
    #: Seconds of PDF parsing after which the pages read so far are what was read.
    seconds: float = 20.0

    @property
    def max_unzipped(self) -> int:
        """The most a .docx's parts may inflate to, together: XML packs about five to
        one, pictures not at all, so a real document stays well within five times."""
        return 5 * self.max_bytes


@dataclass(frozen=True, slots=True)
class Extent:
    """How much of a document was read: pages of a PDF, else characters."""

    unit: Literal["pages", "characters"]
    read: int
    total: int

    @property
    def complete(self) -> bool:
        return self.read >= self.total

    def describe(self) -> str:
        """For the model: "pages 1–42 of 130 read; the rest was not read"."""
        if self.complete:
            return ""
        if self.unit == "pages":
            return f"pages 1–{self.read} of {self.total} read; the rest was not read"
        share = self.read * 100 // max(1, self.total)
        return (
            f"the first {share}% read ({self.read:,} of {self.total:,} characters); "
            "the rest was not read"
        )


@dataclass(frozen=True, slots=True)
class Document:
    name: str
    format: Format
    text: str
    extent: Extent

    def as_quote(self) -> str:
        """The document as the model reads it: untrusted quoted content, named."""
        return quoting.quote(f"document {self.name}", self.text, note=self.extent.describe())


def document_format(name: str, mime: str) -> Format | None:
    """The reader for a file by its name and MIME type; ``None``: not one the bot reads."""
    mime, ext = mime.lower(), suffix(name)
    if mime == "application/pdf" or ext == ".pdf":
        return "pdf"
    if mime == _DOCX_TYPE or ext == ".docx":
        return "docx"
    if mime in _HTML_TYPES or ext in _HTML:
        return "html"
    return "text" if is_text(name, mime) else None


def read_document(data: bytes, *, name: str, mime: str = "", limits: Limits = Limits()) -> Document:
    """The document's text within ``limits``; raises :class:`DocumentError`."""
    kind = document_format(name, mime)
    if kind is None:
        raise DocumentError("unsupported", name)
    if len(data) > limits.max_bytes:
        raise DocumentError("too_big", name, size=len(data), limit=limits.max_bytes)
    if kind == "pdf":
        return _pdf(data, name, limits)
    if kind == "docx":
        text = _docx(data, name, limits)
    elif kind == "html":
        text = main_text(data).text  # its charset from its <meta>, as browsers do
    else:
        decoded = decode_text(data)
        if decoded is None:
            raise DocumentError("undecodable", name)
        text = decoded
    if not text.strip():
        raise DocumentError("empty", name)
    kept, extent = cut(text, limits.max_tokens)
    return Document(name, kind, kept, extent)


def cut(text: str, max_tokens: int) -> tuple[str, Extent]:
    """The longest start of ``text`` within ``max_tokens`` by the project's one estimate
    (:func:`bot.model.estimate_text`), ended at a line break when one is near."""
    if estimate_text(text) <= max_tokens:
        return text, Extent("characters", len(text), len(text))
    low, high = 0, len(text)  # the longest prefix within the budget: low fits, high not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if estimate_text(text[:middle]) <= max_tokens else (low, middle)
    end = text.rfind("\n", 0, low)
    if end < low * 4 // 5:  # no line break in the last fifth: cut mid-line
        end = low
    return text[:end], Extent("characters", end, len(text))


def _pdf(data: bytes, name: str, limits: Limits) -> Document:
    from pypdf import PdfReader  # noqa: PLC0415 - 0.13 s to import, only for PDFs
    from pypdf.errors import (  # noqa: PLC0415
        DependencyError,
        FileNotDecryptedError,
        LimitReachedError,
    )

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                opened = bool(reader.decrypt(""))  # encrypted for permissions only: readable
            except (DependencyError, NotImplementedError) as exc:
                log.info("%s: cannot decrypt (%s)", name, exc)
                opened = False
            if not opened:
                raise DocumentError("encrypted", name)
        return _pages(name, (page.extract_text for page in reader.pages), limits)
    except DocumentError:
        raise
    except FileNotDecryptedError:
        raise DocumentError("encrypted", name) from None
    except LimitReachedError:
        raise DocumentError("zip_bomb", name, limit=limits.max_unzipped) from None
    except Exception as exc:  # a parser of hostile bytes: any failure means damaged
        log.info("%s: not a readable PDF (%s: %s)", name, type(exc).__name__, exc)
        raise DocumentError("corrupt", name) from None


def _pages(name: str, pages: Iterable[Callable[[], str]], limits: Limits) -> Document:
    """Pages' text while it fits the budget (a first page that does not fit is cut)
    and time is left; the page count is the total."""
    found = list(pages)  # one extractor per page (pypdf reads a page only when asked)
    if not found:
        raise DocumentError("empty", name)
    deadline = time.monotonic() + limits.seconds
    texts: list[str] = []
    used = 0
    for page in found:
        text = page().strip()
        if used + estimate_text(text) > limits.max_tokens:
            if not texts:  # even the first page is too long: its start
                kept, extent = cut(text, limits.max_tokens)
                if len(found) == 1:  # "page 1 of 1" would hide the cut
                    return Document(name, "pdf", kept, extent)
                texts.append(kept)
            break
        texts.append(text)
        used += estimate_text(text + "\n\n")
        if time.monotonic() > deadline:
            log.info("%s: stopped reading after %d pages (%ss)", name, len(texts), limits.seconds)
            break
    joined = "\n\n".join(t for t in texts if t)
    if not any(c.isalnum() for c in joined):
        if len(texts) < len(found):  # stopped by time on blank pages
            raise DocumentError("corrupt", name)
        raise DocumentError("scanned", name)
    return Document(name, "pdf", joined, Extent("pages", len(texts), len(found)))


def _docx(data: bytes, name: str, limits: Limits) -> str:
    if data.startswith(_OLE):
        raise DocumentError("encrypted", name)
    _check_unzipped(data, name, limits.max_unzipped)
    import docx  # noqa: PLC0415 - only for .docx
    from docx.table import Table  # noqa: PLC0415

    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                blocks.extend(" | ".join(c.text.strip() for c in row.cells) for row in item.rows)
                continue
            style = item.style.name if item.style is not None else ""
            level = style.removeprefix("Heading ")
            prefix = "#" * int(level) + " " if level.isdigit() else "# " if style == "Title" else ""
            if item.text.strip():
                blocks.append(prefix + item.text.strip())
    except Exception as exc:  # as for PDFs: a damaged or foreign file
        log.info("%s: not a readable .docx (%s: %s)", name, type(exc).__name__, exc)
        raise DocumentError("corrupt", name) from None
    return "\n\n".join(blocks)


def _check_unzipped(data: bytes, name: str, limit: int) -> None:
    """Refuses a zip whose parts declare, or really inflate to, more than ``limit``.

    The declared sizes are summed first (no inflating at all); then every part is
    inflated in 1 MB steps and counted. zipfile never inflates a part past its declared
    size: a part whose header lies fails its CRC and the file is refused as damaged.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
            declared = sum(p.file_size for p in parts)
            if len(parts) > _MAX_PARTS or declared > limit:
                raise DocumentError("zip_bomb", name, size=declared, limit=limit)
            inflated = 0
            for part in parts:
                with archive.open(part) as stream:
                    while chunk := stream.read(1 << 20):
                        inflated += len(chunk)
                        if inflated > limit:
                            raise DocumentError("zip_bomb", name, size=inflated, limit=limit)
    except DocumentError:
        raise
    except RuntimeError:  # a part encrypted with a zip password
        raise DocumentError("encrypted", name) from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        log.info("%s: not a readable zip (%s)", name, exc)
        raise DocumentError("corrupt", name) from None
