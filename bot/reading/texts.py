"""Every line a user reads about documents, links and search, as message ids.

The texts are marked with :func:`bot.i18n.N_` (``make i18n`` extracts them) and
translated where they are used, inside the turn's language, as
:mod:`bot.turn.notices` does. They are plain text (notices are sent unparsed); a
line that goes above an answer is plain text too, which Markdown leaves as it is.
What the *model* reads about a document or page (:mod:`bot.reading.quoting`) is
English and never translated: a request's bytes must not depend on who asks.
"""

from __future__ import annotations

from babel.numbers import format_decimal, format_percent

from ..i18n import N_, _, current, number
from .documents import DocumentError, Extent

#: The question when a document comes without a caption.
READ_THIS = N_("Read this document.")
#: Above the answer when only the first pages of a PDF were read.
READ_PAGES = N_(
    "📄 {name}: I read pages {first}–{last} of {total}; the rest is more than I can take "
    "in at once."
)
#: Above the answer when only the first part of another document or a page was read.
READ_SHARE = N_(
    "📄 {name}: I read the first {share} ({read} of {total} characters); the rest is more "
    "than I can take in at once."
)
#: Why a document was not read, by :attr:`DocumentError.kind`: one line each, and
#: nothing of the document goes to the model.
FAILURES = {
    "scanned": N_(
        "{name} has no text layer (it looks scanned), so I cannot read it. Please send its "
        "pages as photos, or its text."
    ),
    "encrypted": N_(
        "{name} is protected by a password, so I cannot read it. Please send a copy "
        "without the password."
    ),
    "corrupt": N_(
        "{name} looks damaged: I could not open it. Please save or export it again and "
        "send the new file."
    ),
    "too_big": N_(
        "{name} is too big for me ({size} MB; the limit is {limit} MB). Please send a "
        "smaller file, or the part that matters."
    ),
    "zip_bomb": N_(
        "{name} unpacks to far more than its size (over {limit} MB), so I did not open it."
    ),
    "unsupported": N_(
        "I cannot read {name}. I read PDF, Word (.docx), HTML, Markdown, CSV and text files."
    ),
    "undecodable": N_(
        "I could not read {name} as text (it is not UTF-8 or UTF-16, or it is binary). "
        "Please send it as UTF-8 text."
    ),
    "empty": N_("I found no text in {name}."),
}
#: Above the numbered sources under an answer that used web search or read pages.
SOURCES = N_("Sources")
#: The tool loop's progress line while the built-in tools run.
SEARCHING = N_("🔧 Searching the web…")
READING = N_("🔧 Reading {site}…")


def failure(error: DocumentError) -> str:
    """The one line telling the user why a document was not read (current language)."""
    return _(FAILURES[error.kind]).format(
        name=error.name, size=megabytes(error.size, 1), limit=megabytes(error.limit, 0)
    )


def partly_read(name: str, extent: Extent) -> str | None:
    """The line telling the user how much of a document or page was read; ``None`` when
    all of it was."""
    if extent.complete:
        return None
    if extent.unit == "pages":
        return _(READ_PAGES).format(
            name=name, first=number(1), last=number(extent.read), total=number(extent.total)
        )
    return _(READ_SHARE).format(
        name=name,
        share=format_percent(extent.read * 100 // max(1, extent.total) / 100, locale=current()),
        read=number(extent.read),
        total=number(extent.total),
    )


def megabytes(size: int, places: int) -> str:
    """``size`` bytes in MB to ``places`` decimals, in the current language's digits."""
    pattern = f"#,##0.{'0' * places}" if places else "#,##0"
    return format_decimal(round(size / 1048576, places), format=pattern, locale=current())
