"""Markdown -> Telegram HTML chunks (bot.format), checked the way Telegram parses them."""

from __future__ import annotations

import gc
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.telegram.format import TELEGRAM_LIMIT, Chunk, escape_html, render_chunks, utf16_len

# ------------------------------------------------------------ a strict checker

ALLOWED_TAGS = frozenset({"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"})
NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
LINK_SCHEMES = ("http://", "https://", "tg:", "mailto:")
# Formatting entities that Telegram lets nest inside anything but code/pre.
SIMPLE_TAGS = frozenset({"b", "i", "u", "s", "tg-spoiler"})

_TAG = re.compile(r"<(/?)([a-z][a-z-]*)((?: [a-z-]+=\"[^\"<>]*\")*)>")
_ATTR = re.compile(r" ([a-z-]+)=\"([^\"<>]*)\"")
_ENTITY = re.compile(r"&(?:([a-z]+)|#([0-9]+)|#[xX]([0-9a-fA-F]+));")
_LANGUAGE_CLASS = re.compile(r"language-[A-Za-z0-9_+-]+")


def _decode_entities(text: str) -> str:
    """Decode the entities Telegram accepts; fail on anything else (bare & included)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "&":
            m = _ENTITY.match(text, i)
            assert m, f"invalid entity at {text[i : i + 12]!r}"
            name, dec, hexa = m.groups()
            if name is not None:
                assert name in NAMED_ENTITIES, f"unsupported named entity &{name};"
                out.append(NAMED_ENTITIES[name])
            else:
                out.append(chr(int(dec) if dec is not None else int(hexa, 16)))
            i = m.end()
        else:
            assert char not in "<>", f"raw {char!r} in text"
            out.append(char)
            i += 1
    return "".join(out)


def _check_open(name: str, attrs: dict[str, str], stack: list[str]) -> None:
    assert name in ALLOWED_TAGS, f"tag <{name}> not allowed"
    assert not ({"code", "pre"} & set(stack)) or (name == "code" and stack[-1] == "pre"), (
        f"<{name}> inside {stack}"
    )
    if name == "a":
        assert set(attrs) == {"href"} and "a" not in stack
        assert attrs["href"].startswith(LINK_SCHEMES), attrs["href"]
    elif name == "code" and attrs:
        assert set(attrs) == {"class"} and stack and stack[-1] == "pre"
        assert _LANGUAGE_CLASS.fullmatch(attrs["class"]), attrs["class"]
    else:
        assert not attrs, f"<{name}> takes no attributes: {attrs}"
    if name == "blockquote":
        assert "blockquote" not in stack, "blockquotes cannot nest"
    if name in ("pre", "blockquote"):
        assert not (SIMPLE_TAGS | {"a"}) & set(stack), f"block <{name}> inside {stack}"


def telegram_visible_text(html: str) -> str:
    """Validate `html` as Telegram's HTML parse mode would; return its visible text."""
    stack: list[str] = []
    out: list[str] = []
    pos = 0
    while pos < len(html):
        lt = html.find("<", pos)
        end = len(html) if lt == -1 else lt
        out.append(_decode_entities(html[pos:end]))
        if lt == -1:
            break
        m = _TAG.match(html, lt)
        assert m, f"malformed tag at {html[lt : lt + 30]!r}"
        closing, name, raw_attrs = m.groups()
        if closing:
            assert not raw_attrs and stack and stack[-1] == name, f"bad </{name}> in {stack}"
            stack.pop()
        else:
            attrs = {k: _decode_entities(v) for k, v in _ATTR.findall(raw_attrs)}
            _check_open(name, attrs, stack)
            stack.append(name)
        pos = m.end()
    assert not stack, f"unclosed tags {stack}"
    return "".join(out)


def check_chunks(chunks: list[Chunk], limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    assert chunks, "no chunks"
    for chunk in chunks:
        assert telegram_visible_text(chunk.html) == chunk.plain
        assert 0 < utf16_len(chunk.plain) <= limit
        assert chunk.plain.strip(), "whitespace-only chunk"
        head = chunk.plain[: len(chunk.plain) - len(chunk.plain.lstrip())]
        tail = chunk.plain[len(chunk.plain.rstrip()) :]
        assert "\n" not in head and "\n" not in tail, "whitespace-only line at an end"
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in chunk.plain), "lone surrogate"
        chunk.html.encode("utf-8")  # strict: fails on a split surrogate pair
    return chunks


def render(markdown: str, *, prefix: str = "", limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    return check_chunks(render_chunks(markdown, prefix=prefix, limit=limit), limit)


def html_of(markdown: str) -> str:
    chunks = render(markdown)
    assert len(chunks) == 1
    return chunks[0].html


def assert_pieces_of(full: str, chunks: list[Chunk]) -> None:
    """The chunks' plain texts, in order, are `full` minus whitespace at the cuts."""
    pos = 0
    for chunk in chunks:
        found = full.find(chunk.plain, pos)
        assert found != -1, f"chunk not found in order: {chunk.plain[:40]!r}"
        assert not full[pos:found].strip(), f"text lost at a cut: {full[pos:found]!r}"
        pos = found + len(chunk.plain)
    assert not full[pos:].strip()


# ------------------------------------------------------------------- basics


def test_utf16_len_and_escape() -> None:
    assert utf16_len("") == 0
    assert utf16_len("abc") == 3
    assert utf16_len("é€") == 2
    assert utf16_len("😀") == 2
    assert utf16_len("a😀b") == 4
    assert escape_html('<a href="x">&</a>') == '&lt;a href="x"&gt;&amp;&lt;/a&gt;'
    assert escape_html('"', quote=True) == "&quot;"


def test_empty_markdown() -> None:
    assert render("") == [Chunk("…", "…")]
    assert render("  \n\n \t ") == [Chunk("…", "…")]
    assert render("", prefix="[depth:4]") == [Chunk("[depth:4]", "[depth:4]")]
    # Trailing whitespace of the whole output is trimmed, even when it is the prefix's.
    assert render(" \n", prefix="<x&y> ") == [Chunk("&lt;x&amp;y&gt;", "<x&y>")]
    assert render("", prefix=" \n ") == [Chunk("…", "…")]
    assert render("hi", prefix=" ") == [Chunk("hi", "hi")]


def test_limit_must_allow_one_character() -> None:
    with pytest.raises(ValueError):
        render_chunks("hi", limit=1)


# -------------------------------------------------------------- conversions


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold** __bold__", "<b>bold</b> <b>bold</b>"),
        ("*it* _it_", "<i>it</i> <i>it</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("***both***", "<i><b>both</b></i>"),
        ("`x < y && z > 0`", "<code>x &lt; y &amp;&amp; z &gt; 0</code>"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("say \"hi\" & 'bye'", "say \"hi\" &amp; 'bye'"),
        ("&amp; &copy; &#60;", "&amp; © &lt;"),
        ("# Title *x*\n\ntext", "<b>Title <i>x</i></b>\n\ntext"),
        ("Title\n=====", "<b>Title</b>"),
        ("# **already bold**", "<b>already bold</b>"),
        ("line one\nline two", "line one\nline two"),
        ("hard  \nbreak", "hard\nbreak"),
        ("one\n\n\n\ntwo", "one\n\ntwo"),
        ("a\n\n---\n\nb", "a\n\n———\n\nb"),
        ("> quoted *it*", "<blockquote>quoted <i>it</i></blockquote>"),
        ("> outer\n> > inner", "<blockquote>outer\n\ninner</blockquote>"),
        ("> a\n\nb\n\n> c", "<blockquote>a</blockquote>\n\nb\n\n<blockquote>c</blockquote>"),
        ("- a\n- b\n  - c\n    - d\n- e", "• a\n• b\n  • c\n    • d\n• e"),
        ("1. x\n1. y\n1. z", "1. x\n2. y\n3. z"),
        ("3. x\n4. y", "3. x\n4. y"),
        ("- a\n\n- b", "• a\n\n• b"),
        ("1. first\n   - sub **b**\n2. second", "1. first\n  • sub <b>b</b>\n2. second"),
        ("> - q1\n> - q2", "<blockquote>• q1\n• q2</blockquote>"),
    ],
)
def test_markdown_constructs(markdown: str, expected: str) -> None:
    assert html_of(markdown) == expected


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        (
            "```python\nif a < b and c > d:\n    x = '&'\n```",
            '<pre><code class="language-python">if a &lt; b and c &gt; d:\n'
            "    x = '&amp;'</code></pre>",
        ),
        ("```\nplain\n```", "<pre><code>plain</code></pre>"),
        ("~~~c++ {.numbered}\nint x;\n~~~", '<pre><code class="language-c++">int x;</code></pre>'),
        (
            '```py"><script>x\n1\n```',
            '<pre><code class="language-pyscriptx">1</code></pre>',
        ),
        ('```"""\n1\n```', "<pre><code>1</code></pre>"),
        (
            "text\n\n    indented <code>\n      more",
            "text\n\n<pre><code>indented &lt;code&gt;\n  more</code></pre>",
        ),
        (
            "```python\n    def f():\n        pass\n```",
            '<pre><code class="language-python">    def f():\n        pass</code></pre>',
        ),
    ],
)
def test_code_blocks(markdown: str, expected: str) -> None:
    assert html_of(markdown) == expected


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("[t](https://e.com/a?b=1&c=2)", '<a href="https://e.com/a?b=1&amp;c=2">t</a>'),
        ('[t](http://e.com/"q"<x>)', '<a href="http://e.com/%22q%22%3Cx%3E">t</a>'),
        ("[**bold** link](https://e.com)", '<a href="https://e.com"><b>bold</b> link</a>'),
        ("[`code` link](https://e.com)", '<a href="https://e.com">code link</a>'),
        ("[me](tg://user?id=42)", '<a href="tg://user?id=42">me</a>'),
        ("[mail](mailto:a@b.co)", '<a href="mailto:a@b.co">mail</a>'),
        ("<https://e.com/x?a&b>", '<a href="https://e.com/x?a&amp;b">https://e.com/x?a&amp;b</a>'),
        ("<a@b.co>", '<a href="mailto:a@b.co">a@b.co</a>'),
        ("[t](javascript:alert(1))", "[t](javascript:alert(1))"),
        ("[t](JavaScript:alert(1))", "[t](JavaScript:alert(1))"),
        ("[t](ftp://e.com/f)", "t"),
        ("[t](/relative/path)", "t"),
        ("[t](#anchor)", "t"),
        ("[t](http:no-slashes)", "t"),
        ("[t][ref]\n\n[ref]: https://e.com", "[t][ref]\n\n[ref]: https://e.com"),
        ("Fact.[^1]\n\n[^1]: Source & note", "Fact.[^1]\n\n[^1]: Source &amp; note"),
        ("![a cat](https://e.com/cat.png)", '<a href="https://e.com/cat.png">a cat</a>'),
        ("![a *cat*](data:image/png;base64,xx)", "a cat"),
        ("![](https://e.com/c.png)", '<a href="https://e.com/c.png">https://e.com/c.png</a>'),
        ("[![alt](https://e.com/i.png)](https://e.com)", '<a href="https://e.com">alt</a>'),
        ("https://bare.example.com stays text", "https://bare.example.com stays text"),
    ],
)
def test_links(markdown: str, expected: str) -> None:
    assert html_of(markdown) == expected


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("x <b>y</b> <i>z", "x &lt;b&gt;y&lt;/b&gt; &lt;i&gt;z"),
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("<div>\nhi & bye\n</div>", "&lt;div&gt;\nhi &amp; bye\n&lt;/div&gt;"),
        ('<a href="javascript:x">y</a>', '&lt;a href="javascript:x"&gt;y&lt;/a&gt;'),
        ("<!-- comment -->", "&lt;!-- comment --&gt;"),
        ("a <tg-spoiler>s</tg-spoiler>", "a &lt;tg-spoiler&gt;s&lt;/tg-spoiler&gt;"),
    ],
)
def test_raw_html_is_shown_as_text(markdown: str, expected: str) -> None:
    assert html_of(markdown) == expected


def test_table_is_monospace() -> None:
    markdown = "| a | b |\n|---|---|\n| 1 | 22 |\n| <x> | & |"
    assert html_of(markdown) == (
        "<pre><code>| a   | b  |\n|-----|----|\n| 1   | 22 |\n| &lt;x&gt; | &amp;  |</code></pre>"
    )


def test_trailing_whitespace_trimmed() -> None:
    chunks = render("hello\n\n```\ncode   \n\n\n```\n\n\n")
    assert chunks[0].plain == "hello\n\ncode"


def test_prefix_is_escaped_and_counted() -> None:
    prefix = "[depth:4] <&> "
    chunks = render("*hi*", prefix=prefix)
    assert chunks == [Chunk("[depth:4] &lt;&amp;&gt; <i>hi</i>", prefix + "hi")]
    chunks = render("x" * 100, prefix=prefix, limit=50)
    assert chunks[0].plain == prefix + "x" * (50 - len(prefix))
    assert all(not c.plain.startswith(prefix) for c in chunks[1:])
    assert "".join(c.plain for c in chunks) == prefix + "x" * 100


# ---------------------------------------------------------------- splitting


def _words(n: int, word: str = "word") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_split_prefers_paragraph_boundaries() -> None:
    p1, p2, p3 = _words(360, "a"), _words(360, "b"), _words(360, "c")
    assert 1600 < len(p1) < 2000
    chunks = render(f"{p1}\n\n{p2}\n\n{p3}")
    assert [c.plain for c in chunks] == [f"{p1}\n\n{p2}", p3]
    # A blank line beats later line breaks, as long as the chunk is at least half full.
    lines = "\n".join(f"line {i} " + "x" * 40 for i in range(60))
    chunks = render(f"{p1} {p2}\n\n{lines}")
    assert [c.plain for c in chunks] == [f"{p1} {p2}", lines]
    # A blank line early in the window loses to the last line break.
    chunks = render(f"Intro:\n\n{lines}", limit=1000)
    assert chunks[0].plain.startswith("Intro:\n\nline 0 ")
    assert utf16_len(chunks[0].plain) > 950
    assert chunks[1].plain.startswith("line ")


def test_split_then_line_boundaries() -> None:
    lines = [f"line {i} " + "x" * 40 for i in range(200)]
    chunks = render("\n".join(lines), limit=1000)
    assert len(chunks) > 1
    rebuilt: list[str] = []
    for chunk in chunks:
        got = chunk.plain.split("\n")
        assert all(line in lines for line in got), "a line was cut"
        rebuilt.extend(got)
    assert rebuilt == lines
    assert utf16_len(chunks[0].plain) > 1000 - 50  # filled up to the last line that fits


def test_split_then_word_boundaries() -> None:
    text = _words(2000)
    chunks = render(text, limit=500)
    assert len(chunks) > 1
    assert " ".join(c.plain for c in chunks) == text
    for chunk in chunks[:-1]:
        assert 500 - 10 < len(chunk.plain) <= 500


def test_hard_cut_of_one_long_word() -> None:
    chunks = render("y" * 5000)
    assert [len(c.plain) for c in chunks] == [4096, 904]
    chunks = render("short " + "z" * 300, limit=100)
    assert [c.plain for c in chunks] == ["short", "z" * 100, "z" * 100, "z" * 100]


def test_formatting_reopened_after_cut() -> None:
    text = _words(300)
    chunks = render(f"> **{text}**", limit=400)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.html.startswith("<blockquote><b>")
        assert chunk.html.endswith("</b></blockquote>")
    chunks = render(f"see [{text}](https://e.com/?q=1&r=2)", limit=400)
    assert chunks[0].html.startswith('see <a href="https://e.com/?q=1&amp;r=2">')
    for chunk in chunks[1:]:
        assert chunk.html.startswith('<a href="https://e.com/?q=1&amp;r=2">')
        assert chunk.html.endswith("</a>")


def test_long_code_block_splits_into_balanced_chunks() -> None:
    body = "\n".join(f"    value_{i} = compute({i}) if a < b else b & c" for i in range(220))
    assert len(body) > 10_000
    chunks = render(f"Here:\n\n```python\n{body}\n```\n\nDone.")
    assert len(chunks) >= 3
    opener = '<pre><code class="language-python">'
    assert chunks[0].plain.startswith("Here:\n\n    value_0")
    for chunk in chunks[1:]:
        assert chunk.html.startswith(opener)
    for chunk in chunks[:-1]:
        assert chunk.html.endswith("</code></pre>")
    assert chunks[-1].html.endswith("</code></pre>\n\nDone.")
    code_lines = "\n".join(c.plain for c in chunks).removeprefix("Here:\n\n")
    assert code_lines.removesuffix("\n\nDone.") == body  # indentation kept at each cut


def test_emoji_counted_as_two_units_and_never_split() -> None:
    chunks = render("😀" * 3000)
    assert [len(c.plain) for c in chunks] == [2048, 952]
    assert [utf16_len(c.plain) for c in chunks] == [4096, 1904]
    chunks = render("a" + "😀" * 100, limit=51)
    assert chunks[0].plain == "a" + "😀" * 25
    assert all(set(c.plain) == {"😀"} for c in chunks[1:])


def test_grapheme_clusters_kept_on_hard_cut() -> None:
    family = "👨\u200d👩\u200d👧"  # 8 units
    chunks = render(family * 10, limit=20)
    for chunk in chunks:
        assert not chunk.plain.startswith("\u200d") and not chunk.plain.endswith("\u200d")
    assert "".join(c.plain for c in chunks) == family * 10


def test_entities_count_as_one_visible_character() -> None:
    chunks = render("&" * 5000)
    assert [len(c.plain) for c in chunks] == [4096, 904]
    assert chunks[0].html == "&amp;" * 4096
    chunks = render("a<b & c>d " * 1000, limit=4096)
    assert all(len(c.plain) > 4000 for c in chunks[:-1])


def test_lone_surrogates_are_replaced() -> None:
    chunks = render("a\ud83db \ud83d\ude00")
    assert chunks[0].plain == "a\ufffdb 😀"


def test_streaming_prefixes_render_valid_chunks() -> None:
    answer = SAMPLE_ANSWER
    for limit in (TELEGRAM_LIMIT, 300, 60):
        for end in range(0, len(answer) + 1, 37):
            check_chunks(render_chunks(answer[:end], prefix="[depth:2] ", limit=limit), limit)


def test_unclosed_fence_and_emphasis() -> None:
    html = html_of("Try:\n\n```bash\necho '<hi>' && ls")
    assert (
        html
        == "Try:\n\n<pre><code class=\"language-bash\">echo '&lt;hi&gt;' &amp;&amp; ls</code></pre>"
    )
    assert html_of("so **bold and `code") == "so **bold and `code"


# --------------------------------------------------------------- properties

# fmt: off
PIECES = [
    "word", "other", "x", " ", " ", "  ", "\n", "\n", "\n\n", "*", "**", "_", "__",
    "`", "```", "```py\n", "~~", "#", "# ", "## ", "-", "- ", "1. ", "  ", "    ",
    ">", "> ", "<", ">", "&", "&amp;", "<b>", "</i>", "😀", "👨\u200d👩", "é", "|",
    "| a | b |\n|---|---|\n", "[", "]", "(", ")", "[l](https://e.com/?a&b)",
    "![i](http://x/y.png)", "<https://e.com>", "\\", "---\n", "\t", "\"", "'",
]
# fmt: on
MARKDOWNISH = st.lists(st.sampled_from(PIECES), max_size=120).map("".join)


def _check_split(markdown: str, limit: int) -> None:
    chunks = check_chunks(render_chunks(markdown, limit=limit), limit)
    (whole,) = check_chunks(render_chunks(markdown, limit=10**9), 10**9)
    assert_pieces_of(whole.plain, chunks)


@settings(max_examples=200, deadline=None)
@given(MARKDOWNISH, st.integers(min_value=50, max_value=TELEGRAM_LIMIT))
def test_property_markdownish(markdown: str, limit: int) -> None:
    _check_split(markdown, limit)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(MARKDOWNISH, min_size=1, max_size=30).map("".join),
    st.integers(min_value=50, max_value=400),
)
def test_property_long_markdownish_small_limits(markdown: str, limit: int) -> None:
    _check_split(markdown, limit)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=2, max_value=200))
def test_property_arbitrary_text(markdown: str, limit: int) -> None:
    _check_split(markdown, limit)


SAMPLE_ANSWER = """\
# Setting up the bot

Here is **how** to do it, step by _step_ — with `a < b && c > d` checks.

1. Install the package:

   ```bash
   pip install "replychain[dev]" && echo '<ok>'
   ```

2. Configure the token in `.env` (see [the docs](https://core.telegram.org/bots/api?x=1&y=2)).
3. Run it:
   - locally with `make run`
   - or in *Docker* 🐳

> **Note:** never share your token & keep it <secret>.
> > Nested quotes are flattened.

| option | default | meaning |
|--------|---------|---------|
| limit  | 4096    | chars   |

---

```python
def split(text: str, limit: int) -> list[str]:
    \"\"\"Split <text> & keep "quotes".\"\"\"
    return [text[i : i + limit] for i in range(0, len(text), limit)]
```

That's all! 😀 Ask again if ~~anything~~ something is unclear. <b>raw</b>
"""


#: Every kind of block the renderers handle, once.
EVERY_BLOCK = (
    "# Title\n\nSome **bold** and `code`, a [link](https://example.com).\n\n"
    "- one\n- two\n  1. nested\n\n> quoted\n\n```py\nx = 1\n```\n\n    indented\n\n---\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n$$x^2$$\n"
)


def test_rendering_leaves_no_reference_cycle_behind() -> None:
    """Each rendering is freed when done: a cycle (handlers bound to the builder) would
    keep every rendering of every answer until a full garbage collection."""
    from bot.telegram.rich import render_rich  # noqa: PLC0415

    render_chunks(EVERY_BLOCK)  # first use: the parser and its caches
    render_rich(EVERY_BLOCK)
    gc.collect()
    gc.disable()
    try:
        render_chunks(EVERY_BLOCK, prefix="[depth:2] ", reasoning="thoughts")
        render_rich(EVERY_BLOCK, prefix="[depth:2] ", reasoning="thoughts")
        assert gc.collect() == 0
    finally:
        gc.enable()
