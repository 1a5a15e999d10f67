"""Reading: a 100-page PDF and a 1 MB web page, CPU and wall per read.

The PDF (made like the tests' ones, tests/reading_files.py: a real text layer, 45
lines a page) is read by pypdf as a document is (:func:`bot.reading.documents.
read_document`): every page, and to the default DOCUMENT_MAX_TOKENS (30,000), where
reading stops early. Beside it, the simplest baseline: the text operators' strings
pulled out of the raw bytes by a regular expression (no parser, no fonts; it works
only because these content streams are not compressed).

The page (a navigation of 300 links, scripts, a sidebar, comments, an article, a
footer: 1 MB) goes to its main text by trafilatura (:func:`bot.reading.extract.
main_text`); the baseline is every text node through the standard library's
``html.parser``, navigation and scripts included. Fetching it from a loopback server
through the guarded :class:`~bot.reading.fetch.Fetcher` (a name resolved and checked,
a pinned connector, a session per fetch) is set beside one plain aiohttp GET on a
session kept open.

CPU is the process's (every thread); wall is the caller's. Medians of ``RUNS``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import re
import time
from collections.abc import Awaitable, Callable
from html.parser import HTMLParser

import aiohttp

from bot.reading.documents import Limits, read_document
from bot.reading.extract import main_text
from bot.reading.fetch import Fetcher, FetchPolicy
from bot.reading.pages import read_page
from tests.fakes.web import PageServer
from tests.reading_files import text_pdf

from .common import median, sized, table

PAGES = 100
LINES = 45
PAGE_BYTES = 1_000_000
RUNS = 10
#: Words of the made-up texts (a sample of English is what the extractors expect).
_WORDS = (
    "river", "bridge", "keeper", "light", "harbour", "winter", "ledger", "ship", "storm",
    "tide", "north", "coast", "lamp", "signal", "watch", "night", "morning", "rope", "anchor",
    "gull", "stone", "wall", "road", "field", "village", "market",
)  # fmt: skip
_TJ = re.compile(rb"\(((?:[^()\\]|\\.)*)\) Tj")


def _pdf() -> bytes:
    rng = random.Random(7)
    pages = [
        "\n".join(
            f"{p}.{n} " + " ".join(rng.choice(_WORDS) for _ in range(11)) for n in range(LINES)
        )
        for p in range(1, PAGES + 1)
    ]
    return text_pdf(pages)


def _page() -> bytes:
    rng = random.Random(11)

    def sentence(words: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."

    nav = "".join(f'<li><a href="/section/{i}">Section {i}</a></li>' for i in range(300))
    parts = [
        "<!DOCTYPE html><html><head><title>The harbour ledger</title>",
        "<script>" + "window.dataLayer.push({event: 'view'});" * 400 + "</script>",
        "<style>" + ".nav li { display: inline; }" * 300 + "</style></head><body>",
        f"<header><nav><ul>{nav}</ul></nav></header><main><article><h1>The ledger</h1>",
    ]
    aside = "<aside>" + "".join(f"<p>Related: {sentence(6)}</p>" for _ in range(50)) + "</aside>"
    comments = "".join(f"<div class='comment'><p>{sentence(9)}</p></div>" for _ in range(120))
    tail = (
        f"</article>{aside}</main><section id='comments'>{comments}</section>"
        + "<footer>" + "<a href='/legal'>Legal</a> " * 100 + "</footer></body></html>"
    )  # fmt: skip
    size, n = sum(map(len, parts)) + len(tail), 0
    while size < PAGE_BYTES:
        block = f"<h2>Entry {n}</h2><p>{' '.join(sentence(14) for _ in range(8))}</p>"
        parts.append(block)
        size += len(block)
        n += 1
    return ("".join(parts) + tail).encode()


class _AllText(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] = []

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.pieces.append(data.strip())


def _all_text(html: bytes) -> str:
    parser = _AllText()
    parser.feed(html.decode("utf-8", "replace"))
    return "\n".join(parser.pieces)


def _operators(pdf: bytes) -> str:
    return "\n".join(m.group(1).decode("latin-1") for m in _TJ.finditer(pdf))


async def _measure(runs: int, work: Callable[[], Awaitable[int]]) -> tuple[float, float, int]:
    """(median CPU ms, median wall ms, the work's size) over ``runs`` after one warm-up."""
    size = await work()
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        size = await work()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return median(cpu), median(wall), size


def _sync(work: Callable[[], int]) -> Callable[[], Awaitable[int]]:
    async def run() -> int:
        return work()

    return run


async def run() -> str:
    runs = sized(3, RUNS)
    pdf, page = _pdf(), _page()
    rows: list[list[object]] = []

    def add(what: str, measured: tuple[float, float, int]) -> None:
        rows.append([what, measured[0], measured[1], measured[2]])

    everything = Limits(max_tokens=10**9)
    add(
        f"{PAGES}-page PDF, every page (pypdf)",
        await _measure(
            runs, _sync(lambda: len(read_document(pdf, name="a.pdf", limits=everything).text))
        ),
    )
    document = read_document(pdf, name="a.pdf")
    add(
        f"{PAGES}-page PDF to 30,000 tokens: pages 1–{document.extent.read} (pypdf)",
        await _measure(runs, _sync(lambda: len(read_document(pdf, name="a.pdf").text))),
    )
    add(
        "  baseline: Tj strings by regex, no parser",
        await _measure(runs, _sync(lambda: len(_operators(pdf)))),
    )
    add(
        f"{len(page) // 1000} KB page → main text (trafilatura)",
        await _measure(runs, _sync(lambda: len(main_text(page).text))),
    )
    add(
        "  baseline: every text node (html.parser)",
        await _measure(runs, _sync(lambda: len(_all_text(page)))),
    )
    async with PageServer() as server:
        server.big = page
        guarded = Fetcher(FetchPolicy(allow=(ipaddress.ip_network("127.0.0.1/32"),)))
        url = server.url("/big")

        async def fetch() -> int:
            return len((await guarded.fetch(url)).body)

        async def read() -> int:
            return len((await read_page(guarded, url, max_tokens=30_000)).text)

        add("fetch it from loopback, guarded (Fetcher)", await _measure(runs, fetch))
        async with aiohttp.ClientSession() as session:

            async def plain() -> int:
                async with session.get(url) as response:
                    return len(await response.read())

            add("  baseline: one aiohttp GET, session kept", await _measure(runs, plain))
        add("fetch + main text (read_page, in a thread)", await _measure(runs, read))
    await asyncio.sleep(0)
    return table(
        f"Reading: a {PAGES}-page PDF ({len(pdf) // 1000} KB) and a {len(page) // 1000} KB "
        f"page; median of {runs}",
        ["what", "CPU ms", "wall ms", "characters (bytes for fetches)"],
        rows,
    )
