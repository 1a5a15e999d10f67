"""Markdown -> rich messages (bot.telegram.rich), checked as the strict test server checks them.

Every rendering is read back by :func:`tests.fakes.rich_messages.parse_rich` (what FakeTelegram
accepts for ``sendRichMessage``: tags, nesting, entities, limits), whose ``RichMessage``
aiogram must decode. The fuzz tests at the end feed thousands of generated Markdown
answers (tables with pipes in cells, nested lists, unbalanced ``$``, stray HTML, code
fences cut mid-stream) and check that no message is refused and no word is lost.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from aiogram.types import Message, RichMessage
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bot.bus.inbound import REPLY_HEAD_CHARS
from bot.chat.messages import shown_head
from bot.telegram.format import Chunk, tagged_depth
from bot.telegram.rich import (
    RICH_BLOCK_LIMIT,
    RICH_DEPTH_LIMIT,
    RICH_TEXT_LIMIT,
    THINKING_TAIL,
    render_rich,
)

from .fakes.rich_messages import Rich, RichError, parse_rich

JSON = dict[str, Any]


def accepted(
    chunks: list[Chunk], *, limit: int = RICH_TEXT_LIMIT, max_blocks: int = RICH_BLOCK_LIMIT
) -> list[Rich]:
    """Each chunk as the test server takes it (raises if it would refuse one)."""
    results = []
    for chunk in chunks:
        assert chunk.rich
        rich = parse_rich({"html": chunk.html})
        assert rich.units <= limit and rich.blocks <= max_blocks
        assert rich.depth <= RICH_DEPTH_LIMIT
        results.append(rich)
    return results


def html(markdown: str, *, prefix: str = "", reasoning: str = "") -> str:
    [chunk] = render_rich(markdown, prefix=prefix, reasoning=reasoning)
    accepted([chunk])
    return chunk.html


def blocks(chunk: Chunk) -> list[JSON]:
    rich = parse_rich({"html": chunk.html})
    RichMessage.model_validate(rich.message)  # what aiogram reads back from Telegram
    return rich.message["blocks"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ constructs


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**b** *i* ~~s~~ `c`", "<p><b>b</b> <i>i</i> <s>s</s> <code>c</code></p>"),
        ("# Title", "<h1>Title</h1>"),
        ("###### small", "<h6>small</h6>"),
        ("line one\nline two", "<p>line one<br>line two</p>"),
        ("$x^2 + y^2$", "<p><tg-math>x^2 + y^2</tg-math></p>"),
        ("so \\(a<b\\) holds", "<p>so <tg-math>a&lt;b</tg-math> holds</p>"),
        ("$$\nE = mc^2\n$$", "<tg-math-block>E = mc^2</tg-math-block>"),
        ("\\[\n\\int_0^1 x\\,dx\n\\]", "<tg-math-block>\\int_0^1 x\\,dx</tg-math-block>"),
        ("```math\na^2\n```", "<tg-math-block>a^2</tg-math-block>"),
        ("```py\nif a<b: print('<b>')\n```",
         '<pre><code class="language-py">if a&lt;b: print(\'&lt;b&gt;\')</code></pre>'),
        ("    indented()", "<pre>indented()</pre>"),
        ("> quoted\n> on", "<blockquote><p>quoted<br>on</p></blockquote>"),
        ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
        ("3. c\n4. d", '<ol start="3"><li>c</li><li>d</li></ol>'),
        ("- [ ] open\n- [x] done",
         '<ul><li><input type="checkbox">open</li><li><input type="checkbox" checked>done</li>'
         "</ul>"),
        ("- a\n  - b", "<ul><li><p>a</p><ul><li>b</li></ul></li></ul>"),
        ("text\n\n---", "<p>text</p><hr/>"),
        ("[site](https://example.org/a?b=1&c=2)",
         '<p><a href="https://example.org/a?b=1&amp;c=2">site</a></p>'),
        ("[bad](javascript:alert(1))", "<p>[bad](javascript:alert(1))</p>"),
        ("[ftp](ftp://e.org/f)", "<p>ftp</p>"),
        ("![a cat](https://example.org/cat.png)",
         '<p><a href="https://example.org/cat.png">a cat</a></p>'),
        ("H<sub>2</sub>O and x<sup>2</sup>", "<p>H<sub>2</sub>O and x<sup>2</sup></p>"),
        ("one<br>two", "<p>one<br>two</p>"),
        ("<kbd>Ctrl</kbd>", "<p>&lt;kbd&gt;Ctrl&lt;/kbd&gt;</p>"),
        ("<b>unclosed", "<p>&lt;b&gt;unclosed</p>"),
        ("`<b>` in code", "<p><code>&lt;b&gt;</code> in code</p>"),
        ("<div>raw block</div>", "<p>&lt;div&gt;raw block&lt;/div&gt;</p>"),
    ],
)  # fmt: skip
def test_markdown_constructs(markdown: str, expected: str) -> None:
    assert html(markdown) == expected


def test_table_is_a_rich_table_with_alignment_and_math() -> None:
    chunk = render_rich("| name | value |\n|:--|--:|\n| pi | $\\pi$ |\n| e | 2.718 |")[0]
    assert chunk.html.startswith('<table><tr><th align="left">name</th>')
    [table] = blocks(chunk)
    assert table["type"] == "table"
    cells = table["cells"]
    assert isinstance(cells, list) and len(cells) == 3
    assert cells[1][1]["text"] == {"type": "mathematical_expression", "expression": "\\pi"}
    assert cells[0][0]["is_header"] and cells[1][1]["align"] == "right"


@pytest.mark.parametrize(
    "text",
    ["It costs $5 and $6.", "US$5 or US$6", "$20/$30", "between $5 and $10", "pay $5",
     "a $ b $ c", "$$ not closed", "\\$x\\$ escaped"],
)  # fmt: skip
def test_prices_and_stray_dollars_stay_text(text: str) -> None:
    assert "tg-math" not in html(text)


def test_pipes_in_prose_and_in_cells_stay_text() -> None:
    assert html("a | b | c") == "<p>a | b | c</p>"
    # GFM would drop the cell the stray pipe makes: it is kept in the row's last cell
    rows = blocks(render_rich("| a | b |\n|---|---|\n| 1 | 2|3 |\n| x \\| y | z |")[0])
    cells = rows[0]["cells"]
    assert isinstance(cells, list)
    assert cells[1][1]["text"] == "2 | 3"
    assert cells[2][0]["text"] == "x | y"


def test_too_many_columns_become_a_text_table() -> None:
    head = "|" + "|".join(f"c{i}" for i in range(25)) + "|"
    rule = "|" + "|".join("-" for _ in range(25)) + "|"
    row = "|" + "|".join(str(i) for i in range(25)) + "|"
    chunk = render_rich(f"{head}\n{rule}\n{row}")[0]
    [block] = blocks(chunk)
    assert block["type"] == "pre" and "c24" in str(block["text"])


def test_prefix_is_the_first_text() -> None:
    assert html("hello", prefix="[depth:2] ") == "<p>[depth:2] hello</p>"
    assert html("# Title", prefix="[depth:4] ").startswith("<p>[depth:4]</p><h1>")
    heard = "[depth:2] 🎙 “what time is it”\n"
    assert html("noon", prefix=heard) == "<p>[depth:2] 🎙 “what time is it”<br>noon</p>"
    assert html("", prefix="[depth:2] ") == "<p>[depth:2]</p>"
    assert html("") == "<p>…</p>"


def test_reasoning_follows_the_prefix_collapsed() -> None:
    out = html("answer", prefix="[depth:2] ", reasoning="step 1\nstep 2")
    assert out == (
        "<p>[depth:2]</p><blockquote expandable>step 1<br>step 2</blockquote><p>answer</p>"
    )


def test_thinking_block_exists_only_in_drafts() -> None:
    [chunk] = render_rich("", prefix="[depth:2] ", thinking="first I add the numbers")
    assert chunk.html == "<p>[depth:2]</p><tg-thinking>first I add the numbers</tg-thinking>"
    assert parse_rich({"html": chunk.html}, draft=True).message["blocks"][1]["type"] == "thinking"
    with pytest.raises(RichError, match="THINKING"):
        parse_rich({"html": chunk.html})  # never in a message
    long = " ".join(f"thought{i}" for i in range(3000))
    [chunk] = render_rich("", thinking=long)
    shown = parse_rich({"html": chunk.html}, draft=True)
    assert shown.units <= THINKING_TAIL and shown.text.endswith("thought2999")
    assert shown.text.startswith("thought")  # from a whole word on


# ------------------------------------------------------------------ long answers


def paragraphs(count: int, size: int) -> list[str]:
    return [f"p{i:04d} " + " ".join(["word"] * ((size - 6) // 5)) for i in range(count)]


def test_a_12000_character_answer_is_one_message() -> None:
    text = "\n\n".join(paragraphs(12, 1010))
    assert len(text) >= 12_000
    [chunk] = render_rich(text, prefix="[depth:2] ")
    accepted([chunk])


def test_a_70000_character_answer_splits_at_paragraphs() -> None:
    paras = paragraphs(70, 1000)
    chunks = render_rich("\n\n".join(paras), prefix="[depth:2] ")
    assert len(chunks) == 3
    texts = [rich.text for rich in accepted(chunks)]
    assert texts[0].startswith("[depth:2] p0000")
    for para in paras:  # every paragraph whole, in exactly one message
        assert sum(para in text for text in texts) == 1


def test_a_long_code_block_is_cut_between_lines() -> None:
    lines = [f"line_{i:05d} = {i}" for i in range(3000)]
    chunks = render_rich("```py\n" + "\n".join(lines) + "\n```", limit=16_384)
    assert len(chunks) >= 3
    shown: list[str] = []
    for chunk in chunks:
        [block] = blocks(chunk)
        assert block["type"] == "pre" and block["language"] == "py"
        shown.extend(str(block["text"]).split("\n"))
    assert shown == lines


def test_a_table_with_more_rows_than_blocks_repeats_its_header() -> None:
    rows = "\n".join(f"| r{i} | {i} |" for i in range(700))
    chunks = render_rich(f"| key | value |\n|---|---|\n{rows}")
    assert len(chunks) == 2
    tables = [blocks(chunk)[0] for chunk in chunks]
    seen: list[str] = []
    for table in tables:
        cells = table["cells"]
        assert isinstance(cells, list)
        assert cells[0][0]["text"] == "key" and cells[0][0].get("is_header")
        seen.extend(row[0]["text"] for row in cells[1:])
    assert seen == [f"r{i}" for i in range(700)]


def test_an_ordered_list_goes_on_numbering_after_a_cut() -> None:
    items = "\n".join(f"{i}. item {i} " + "x" * 40 for i in range(1, 41))
    chunks = render_rich(items, limit=1000)
    assert len(chunks) > 1
    accepted(chunks, limit=1000)
    numbers = [item["value"] for chunk in chunks for item in blocks(chunk)[0]["items"]]
    assert numbers == list(range(1, 41))


def test_deep_nesting_stays_within_the_depth_limit() -> None:
    deep = "".join("  " * i + f"- level{i}\n" for i in range(30))
    quotes = ">" * 30 + " quoted deep"
    for markdown in (deep, quotes, f"> - > - **_~~`x`~~_** {deep}"):
        rich = accepted(render_rich(markdown))
        text = " ".join(r.text for r in rich)
        assert all(f"level{i}" in text for i in range(30)) or "quoted deep" in text or "x" in text


def test_small_limits_are_kept() -> None:
    markdown = "\n\n".join(paragraphs(30, 300)) + "\n\n" + "\n".join(f"- i{i}" for i in range(100))
    for limit, max_blocks in ((512, 16), (2048, 40), (RICH_TEXT_LIMIT, 20)):
        chunks = render_rich(markdown, prefix="[depth:2] ", limit=limit, max_blocks=max_blocks)
        accepted(chunks, limit=limit, max_blocks=max_blocks)


def test_limits_must_allow_a_message() -> None:
    with pytest.raises(ValueError, match="at least"):
        render_rich("x", limit=10)


# ------------------------------------------------------------------ fuzz

WORD = re.compile(r"\bw\d{1,3}\b")
WORDS = st.integers(min_value=0, max_value=999).map(lambda n: f"w{n}")
INLINE = st.sampled_from(
    ["**", "*", "_", "~~", "$", "$$", "\\(", "\\)", "\\[", "\\]", "|", " | ", "\\|", "\\",
     "<b>", "</b>", "<sub>", "</sub>", "<br>", "<kbd>", "</i>", "&", "&amp;", "&#x1F600;",
     "&bogus;", "<", ">", "<!--", "-->", "😀", "e\u0301", "\u200d", " ", "  ", "[", "]",
     "](https://e.org/x)", "](javascript:x)", "![", "$5", "US$", "`", "\t", "'", '"']
)  # fmt: skip
BLOCK = st.sampled_from(
    ["\n", "\n\n", "\n# ", "\n## ", "\n> ", "\n> > ", "\n- ", "\n  - ", "\n    - ", "\n1. ",
     "\n3) ", "\n- [ ] ", "\n- [x] ", "\n    ", "\n```py\n", "\n```\n", "\n~~~\n", "\n$$\n",
     "\n\\[\n", "\n---\n", "\n| a | b |\n|---|:-:|\n| ", "\n|---|\n", "\n<div>\n", "\n===\n",
     "\n<details>\n"]
)  # fmt: skip
PIECE = st.one_of(WORDS, WORDS, WORDS, INLINE, BLOCK)
MARKDOWNISH = st.lists(PIECE, max_size=120).map(" ".join)


def words_of(text: str) -> Counter[str]:
    return Counter(WORD.findall(text))


def header_words(block: Any) -> Counter[str]:
    """The words of every table header row in ``block`` (and the blocks inside it)."""
    found: Counter[str] = Counter()
    if isinstance(block, dict):
        cells = block.get("cells")
        if (
            isinstance(cells, list)
            and cells
            and all(isinstance(c, dict) and c.get("is_header") for c in cells[0])
        ):
            found += words_of(" ".join(str(c.get("text", "")) for c in cells[0]))
        for value in block.values():
            if isinstance(value, (dict, list)):
                found += header_words(value)
    elif isinstance(block, list):
        for item in block:
            found += header_words(item)
    return found


def check_answer(markdown: str, *, limit: int, max_blocks: int) -> None:
    """Every word shown once, and no other; a table cut across messages shows its header
    row again at the top of the next one, so those words may come twice."""
    chunks = render_rich(markdown, prefix="[depth:2] ", limit=limit, max_blocks=max_blocks)
    shown = accepted(chunks, limit=limit, max_blocks=max_blocks)
    assert shown[0].text.startswith("[depth:2]")
    seen, asked = words_of(" ".join(r.text for r in shown)), words_of(markdown)
    assert not asked - seen  # nothing lost
    repeated = sum((header_words(r.message["blocks"]) for r in shown[1:]), Counter[str]())
    assert not (seen - asked) - repeated  # nothing added but repeated headers


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MARKDOWNISH, st.integers(min_value=0, max_value=400))
def test_fuzz_answers_and_their_streamed_prefixes_are_accepted_whole(
    markdown: str, cut: int
) -> None:
    """An answer, and the same answer cut anywhere (a draft mid-stream: a fence, a
    formula or a table left open), is a message the server takes, every word in it."""
    check_answer(markdown, limit=RICH_TEXT_LIMIT, max_blocks=RICH_BLOCK_LIMIT)
    partial = markdown[: cut % (len(markdown) + 1)]
    check_answer(partial, limit=RICH_TEXT_LIMIT, max_blocks=RICH_BLOCK_LIMIT)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(MARKDOWNISH, min_size=1, max_size=8).map("\n\n".join),
    st.integers(min_value=64, max_value=2000),
    st.integers(min_value=16, max_value=60),
)
# a table cut across messages: its header row shown again (found by CI's run of this fuzz)
@example("w0 w0 w0 w0 w0 w0 w0 w10 w10 w100\n\nw0 w10 w10 w100 | \n---\n w0", 64, 16)
def test_fuzz_small_limits_split_without_loss(markdown: str, limit: int, max_blocks: int) -> None:
    """With tiny limits every answer is cut into many messages: each within them."""
    check_answer(markdown, limit=limit, max_blocks=max_blocks)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text(text: str) -> None:
    chunks = render_rich(text, prefix="[depth:2] ")
    accepted(chunks)


def test_a_reply_keeps_the_start_of_the_bot_message_it_replies_to() -> None:
    """What tells whose part a message the bot lost track of is: its [depth:N] tag, read
    from the text, the caption or a rich message's blocks as the chat shows them."""
    chat = {"id": 1, "type": "private"}
    [first] = render_rich("**Hello** world, and more after that", prefix="[depth:4] ")
    rich = parse_rich({"html": first.html}).message
    shown = Message.model_validate({"message_id": 5, "date": 0, "chat": chat, "rich_message": rich})
    assert shown_head(shown) == "[depth:4] Hello world, and more"[:REPLY_HEAD_CHARS]
    assert tagged_depth(shown_head(shown)) == 4
    text = Message.model_validate({"message_id": 6, "date": 0, "chat": chat, "text": "go on"})
    assert shown_head(text) == "go on" and tagged_depth("go on") is None
    bare = Message.model_validate({"message_id": 7, "date": 0, "chat": chat})
    assert shown_head(bare) == "" and shown_head(None) == ""
    assert tagged_depth("[depth:12] x") == 12 and tagged_depth(" [depth:12]") is None
