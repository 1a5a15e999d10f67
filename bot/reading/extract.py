"""An HTML page's main text, without its navigation, scripts, ads and footers.

trafilatura does the work (the extractor web-archiving and language-model data
projects rely on; not a home-made one): its output is Markdown, so headings, lists
and tables keep their shape for the model. The title is the page's ``<title>``,
read from the tree trafilatura parsed, because its own metadata pass (dates, authors)
costs three times the extraction. A page where trafilatura finds no main text gives
its whole visible text (trafilatura's ``html2txt``) rather than nothing.

CPU work (``python -m bench reading`` measures it): call it in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Longest title kept (characters).
TITLE_MAX = 200


@dataclass(frozen=True, slots=True)
class MainText:
    title: str
    text: str


def main_text(html: str | bytes, *, url: str | None = None) -> MainText:
    """The page's title and main text (Markdown); both ``""`` when there is none.
    ``bytes`` are decoded by trafilatura (its charset detection)."""
    import trafilatura  # noqa: PLC0415 - 0.14 s to import: only when a page is read

    tree = trafilatura.load_html(html)
    if tree is None:
        return MainText("", "")
    title = " ".join((tree.findtext(".//title") or "").split())[:TITLE_MAX]
    text = trafilatura.extract(
        tree, url=url, output_format="markdown", include_comments=False, include_tables=True
    )
    if not text:
        text = trafilatura.html2txt(html)
    return MainText(title, (text or "").strip())
