"""Reading the world: documents users send, links in their messages, web search.

Each module has one job and none of them knows the turn, Telegram or Redis, so the
turn's capabilities (input readers, built-in tools) wrap them without reaching in:

- :mod:`.documents`: a file's bytes → its text (PDF, .docx, HTML, Markdown, CSV, text),
  cut to a token budget, with what was read (:class:`~.documents.Extent`).
- :mod:`.fetch`: the guarded HTTP client: no way into the operator's network (SSRF).
- :mod:`.pages`: a fetched resource → readable text; the links of a user's message.
- :mod:`.search`: SearXNG, the built-in ``web_search`` and ``read_url`` tools, and the
  numbered sources cited under an answer.
- :mod:`.quoting`: how a document or page is shown to the model (untrusted, delimited).
- :mod:`.texts`: every line a user reads about it, as message ids (translated).
- :mod:`.text`: which files are text, and how their bytes are decoded.
- :mod:`.extract`: an HTML page's main text (trafilatura).

Failures are typed, each with a ``kind``::

    DocumentError   a document that cannot be read: scanned, encrypted, corrupt,
                    too_big, zip_bomb, unsupported, undecodable, empty
    FetchError      a URL that may not or could not be fetched: bad_url, refused, dns,
                    connect, tls, timeout, redirects, status
    SearchError     the search service failed

The parsers (pypdf, python-docx, trafilatura) are imported when first used: their
import time is not start-up's to pay.
"""
