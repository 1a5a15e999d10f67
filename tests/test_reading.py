"""Reading the world, end to end (issue 44): documents, links and web search through the
real bot, the Bot API test server, the OpenAI test server, a loopback page server and
a SearXNG stand-in (tests/fakes/web.py). Tests allow loopback fetches with
URL_FETCH_ALLOW=127.0.0.1/32 where they read a page; one leaves it out on purpose."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.reading import quoting, search
from bot.reading.fetch import Fetcher
from bot.reading.texts import FAILURES, READ_THIS, READING, SEARCHING
from bot.tools.box import Toolbox
from bot.turn.reading import WebTool
from transcript import ToolCall, TranscriptStore

from .fakes.model import FakeOpenAI, ToolCalls
from .fakes.telegram import FakeTelegram
from .fakes.web import ARTICLE_TEXT, PageServer
from .harness import SYSTEM_PROMPT, USER, BotFactory, answers_to, ask
from .reading_files import encrypted_pdf, scanned_pdf, text_pdf, word_docx

LOOPBACK = "127.0.0.1/32"
RESULTS = [
    {"url": f"https://example.org/{n}", "title": f"Result {n}", "content": f"About {n}."}
    for n in range(1, 4)
]


@pytest.fixture
async def pages() -> AsyncIterator[PageServer]:
    async with PageServer() as server:
        server.search_results = list(RESULTS)
        yield server


def user_texts(llm: FakeOpenAI, index: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.requests[index].messages if m["role"] == "user"]


async def send_file(
    tg: FakeTelegram, app: Any, data: bytes, name: str, mime: str, **kw: Any
) -> tuple[int, str]:
    return await ask(
        tg, app, USER, None, document=True, data=data, file_name=name, mime_type=mime, **kw
    )


# ------------------------------------------------------------------ documents


async def test_a_pdf_is_read_and_a_reply_continues_with_it_in_the_history(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    pdf = text_pdf(["The dam holds at page one.", "The river fell on page two."])
    async with start_bot() as app:
        question, text = await send_file(
            tg, app, pdf, "report.pdf", "application/pdf", caption="what happened?"
        )
        assert text.startswith("[depth:2] echo: what happened?\n\n<<<quoted ")
        answer = answers_to(tg, USER, question)[-1].message_id
        _, text = await ask(tg, app, USER, "and then?", reply_to=answer)
    assert text == "[depth:4] echo: and then?"
    first, follow_up = user_texts(llm)
    assert first.startswith("what happened?\n\n" + quoting.OPENING)
    assert "document report.pdf" in first.splitlines()[2]  # the quote names the file
    assert "The dam holds at page one." in first and "The river fell on page two." in first
    assert follow_up == "and then?"
    # the system prompt says quoted text is material, not instructions
    assert llm.requests[0].messages[0]["content"].endswith(quoting.SYSTEM_RULE)


async def test_a_docx_without_a_caption_is_read_and_asked_about(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    mime = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    async with start_bot() as app:
        _, text = await send_file(tg, app, word_docx(), "q3.docx", mime)
    assert text.startswith("[depth:2] echo: <<<quoted ")
    [content] = user_texts(llm)
    assert "# Quarterly report" in content and "North | 42" in content
    assert content.endswith("\n\n" + READ_THIS)  # no caption: the question is asked for it


async def test_scanned_encrypted_and_damaged_pdfs_get_one_line_each_and_no_model_call(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    files = {
        "scan.pdf": (scanned_pdf(), "scanned"),
        "locked.pdf": (encrypted_pdf(["secret minutes"]), "encrypted"),
        "broken.pdf": (text_pdf(["half a file"])[:200], "corrupt"),
    }
    async with start_bot() as app:
        for name, (data, kind) in files.items():
            message, text = await send_file(tg, app, data, name, "application/pdf")
            assert text == FAILURES[kind].format(name=name)
        # the thread is unharmed: replying to the notice goes on
        notice = answers_to(tg, USER, message)[-1].message_id
        _, text = await ask(tg, app, USER, "here is the text instead", reply_to=notice)
    assert text == "[depth:2] echo: here is the text instead"
    assert len(llm.requests) == 1


async def test_a_document_over_the_limit_goes_in_as_its_first_pages_and_says_so(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    pages = [f"Page {n} of the long report. " * 6 for n in range(1, 7)]  # ~45 tokens each
    async with start_bot(document_max_tokens=100) as app:
        _, text = await send_file(tg, app, text_pdf(pages), "long.pdf", "application/pdf")
    line = "📄 long.pdf: I read pages 1–2 of 6; the rest is more than I can take in at once."
    assert text.startswith(f"[depth:2] {line}\necho: ")
    [content] = user_texts(llm)
    assert "(pages 1–2 of 6 read; the rest was not read)>>>" in content.splitlines()[0]
    assert "Page 2 of" in content and "Page 3 of" not in content


# ---------------------------------------------------------------------- links


async def test_a_link_is_read_as_the_pages_main_text_with_its_url(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, pages: PageServer
) -> None:
    url = pages.url("/article")
    behind = pages.url("/report.pdf")  # a link behind words: a text_link entity
    text = "compare this and that"
    entity = {"type": "text_link", "offset": 18, "length": 4, "url": behind}
    async with start_bot(url_fetch_allow=LOOPBACK) as app:
        _, answer = await ask(tg, app, USER, f"{text} {url}", entities=[entity])
    assert answer.startswith(f"[depth:2] echo: {text} {url}")
    [content] = user_texts(llm)
    article, pdf = content.split(quoting.OPENING)[1:]
    assert article.split(">>>")[0].endswith(f"web page {url} “Keeper's log”")
    assert ARTICLE_TEXT.strip() in article
    for junk in ("TRACKING_SCRIPT", "SITE_NAVIGATION", "FOOTER_COPYRIGHT"):
        assert junk not in content
    assert f"web page {behind}" in pdf and "Report page two: the river fell." in pdf
    assert pages.requests[0].headers["User-Agent"].startswith("replychain/")


async def test_without_the_allow_list_a_loopback_link_is_refused_and_the_question_answered(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, pages: PageServer
) -> None:
    url = pages.url("/article")
    async with start_bot() as app:
        _, answer = await ask(tg, app, USER, f"what is on {url} ?")
    assert answer.startswith(f"[depth:2] echo: what is on {url} ?")
    [content] = user_texts(llm)
    assert content.endswith(f"Link {url}: could not be read (the address 127.0.0.1 is loopback).")
    assert pages.hits() == 0  # no request reached the server


# ----------------------------------------------------------------- web search


def searching_model(messages: list[dict[str, Any]]) -> str | ToolCalls:
    """Searches once, then answers citing the second result."""
    if messages[-1]["role"] == "tool":
        return "The keeper kept four volumes [2]."
    return ToolCalls([(search.WEB_SEARCH, json.dumps({"query": "keeper's log 1911"}))])


async def test_web_search_reaches_searxng_and_the_answer_lists_the_sources_it_cites(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    start_bot: BotFactory,
    pages: PageServer,
    store: TranscriptStore,
) -> None:
    llm.responder = searching_model
    async with start_bot(search_url=pages.url(""), search_results=3) as app:
        question, text = await ask(tg, app, USER, "how long was the log?")
        answer = answers_to(tg, USER, question)[-1]
        llm.responder = lambda _m: "noted"
        await ask(tg, app, USER, "thanks", reply_to=answer.message_id)
    assert [s.query for s in pages.requests] == [{"q": "keeper's log 1911", "format": "json"}]
    first = llm.requests[0].body
    offered = sorted(t["function"]["name"] for t in first["tools"])
    assert offered == sorted(search.NAMES)
    system = first["messages"][0]["content"]
    assert system.startswith(SYSTEM_PROMPT) and search.CITE_RULE in system
    [result] = [m for m in llm.requests[1].messages if m["role"] == "tool"]
    for n in (1, 2, 3):
        assert f"[{n}] Result {n}\nURL: https://example.org/{n}" in result["content"]
    # the sources it cites, under the answer, in the same message
    assert text == ("[depth:2] The keeper kept four volumes [2].\n\nSources\n[2] Result 2")
    assert any(e.get("url") == "https://example.org/2" for e in answer.entities)
    # what is stored, and sent again, is the model's own text
    assistant = [m for m in llm.requests[-1].messages if m["role"] == "assistant"]
    assert assistant[-1]["content"] == "The keeper kept four volumes [2]."


async def test_a_model_without_tools_is_offered_none(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, pages: PageServer
) -> None:
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.plain]\nmodel = "test-model"\nbase_url = "{llm.base_url}"\ntools = false\n'
    )
    async with start_bot(search_url=pages.url(""), models_file=models) as app:
        _, text = await ask(tg, app, USER, "search for me")
    assert text == "[depth:2] echo: search for me"
    assert "tools" not in llm.requests[0].body
    assert pages.hits() == 0


def test_the_web_tools_say_what_they_do_while_they_run(store: TranscriptStore) -> None:
    tools = search.ReadingTools(search.SearXNG("http://127.0.0.1:1"), Fetcher(), max_tokens=100)
    box = Toolbox(None, [WebTool(name, tools, store) for name in search.NAMES])
    searching = ToolCall("c1", search.WEB_SEARCH, '{"query": "x"}')
    reading = ToolCall("c2", search.READ_URL, '{"url": "https://example.org/a"}')
    assert box.progress([searching]) == SEARCHING
    assert box.progress([searching, reading]) == SEARCHING + "\n" + READING.format(
        site="example.org"
    )
