"""The model's Markdown -> Telegram HTML, split into message-sized chunks.

Pure functions (no aiogram, no openai).  The Markdown is parsed by markdown-it-py
(:mod:`bot.markdown`: CommonMark, strikethrough, tables, formulas; a table is
shown as aligned text in a ``<pre>`` block, a formula's source as code: HTML has neither
tables nor formulas); its token stream is flattened into
runs of visible text, each carrying the stack of formatting tags active over it.
Chunks are cut from the visible text alone (measured in UTF-16 code units, as
Telegram counts), and each chunk's HTML is produced from the runs it covers, so
formatting open at a cut is closed at the end of one chunk and reopened, with the
same attributes, at the start of the next.

Telegram's HTML mode accepts only a few tags (b, i, u, s, code, pre, a href,
blockquote, tg-spoiler) and the entities &lt; &gt; &amp; &quot;; all text is
escaped, and raw HTML in the model's output is shown as text.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from markdown_it.token import Token

from ..markdown import (
    BOLD,
    CODE,
    ITALIC,
    MARKDOWN,
    STRIKE,
    Stack,
    Tag,
    clean_text,
    code_language,
    safe_url,
    text_table,
)

__all__ = [
    "TELEGRAM_LIMIT",
    "Chunk",
    "depth_tag",
    "escape_html",
    "render_chunks",
    "tagged_depth",
    "utf16_len",
]

TELEGRAM_LIMIT = 4096
"""Telegram's limit on a message's visible text, in UTF-16 code units."""

EMPTY_PLACEHOLDER = "…"

_DEPTH_TAG = re.compile(r"\[depth:(\d{1,9})\]")


def depth_tag(depth: int) -> str:
    """What an answer's first part starts with: ``[depth:N] ``."""
    return f"[depth:{depth}] "


def tagged_depth(text: str) -> int | None:
    """The N of a text that starts with an answer's ``[depth:N]`` tag, else ``None``."""
    found = _DEPTH_TAG.match(text)
    return None if found is None else int(found.group(1))


def untagged(text: str) -> str:
    """``text`` without the ``[depth:N]`` tag it starts with (if it does)."""
    found = _DEPTH_TAG.match(text)
    return text if found is None else text[found.end() :]


HORIZONTAL_RULE = "———"
BULLET = "• "
LIST_INDENT = "  "

_ZWJ = "\u200d"
_MAX_GRAPHEME_BACKOFF = 32


@dataclass(frozen=True)
class Chunk:
    """One Telegram message: `html` for parse_mode=HTML, `plain` as its fallback.

    `plain` is exactly the text Telegram shows for `html`; utf16_len(plain) <= limit.
    A rich chunk (``rich``, :mod:`bot.telegram.rich`) is a Bot API 10.1 rich message
    instead: `html` is its rich HTML (``InputRichMessage.html``) within the rich limits,
    `plain` its visible text, and it has no plain-text fallback of its own (refused, the
    answer is rendered again as HTML chunks).
    """

    html: str
    plain: str
    rich: bool = False


def utf16_len(text: str) -> int:
    """Length of `text` in UTF-16 code units (astral characters count 2)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def escape_html(text: str, *, quote: bool = False) -> str:
    """Escape & < > for Telegram HTML; with quote=True also " (for attribute values)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if quote:
        text = text.replace('"', "&quot;")
    return text


# --------------------------------------------------------------------------- tags (HTML's own)


_QUOTE = Tag("blockquote", "<blockquote>", "</blockquote>")
_PRE = Tag("pre", "<pre><code>", "</code></pre>")
#: A reasoning model's thoughts: collapsed under the answer's first line until tapped.
_THOUGHTS = Tag("blockquote", "<blockquote expandable>", "</blockquote>")

_INLINE_OPEN = {"strong_open": BOLD, "em_open": ITALIC, "s_open": STRIKE}
_INLINE_CLOSE = frozenset({"strong_close", "em_close", "s_close", "link_close"})


def _pre_tag(info: str) -> Tag:
    lang = code_language(info)
    if not lang:
        return _PRE
    return Tag("pre", f'<pre><code class="language-{lang}">', "</code></pre>")


def _link_tag(url: str) -> Tag:
    return Tag("a", f'<a href="{escape_html(url, quote=True)}">', "</a>")


def _with(stack: Stack, tag: Tag | None) -> Stack:
    """`stack` plus `tag`, unless the tag is None or its kind is already open."""
    if tag is None or any(t.kind == tag.kind for t in stack):
        return stack
    return (*stack, tag)


# ----------------------------------------------------------- tokens -> text runs


@dataclass
class _ListState:
    ordered: bool
    number: int


def _inline_text(tokens: Sequence[Token]) -> str:
    parts: list[str] = []
    for tok in tokens:
        if tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif tok.children:
            parts.append(_inline_text(tok.children))
        else:
            parts.append(tok.content)
    return "".join(parts)


class _Builder:
    """Walks markdown-it's token stream, producing (text, tag stack) runs."""

    def __init__(self) -> None:
        self._parts: list[list[str]] = []
        self._stacks: list[Stack] = []
        self._containers: list[Stack] = [()]
        self._lists: list[_ListState] = []
        self._pending = ""  # separator owed before the next block's text
        self._pending_stack: Stack | None = None

    @property
    def _base(self) -> Stack:
        return self._containers[-1]

    def build(self, tokens: Sequence[Token]) -> None:
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.type == "table_open":
                i = self._table(tokens, i)
                continue
            handler = _BLOCK_HANDLERS.get(tok.type)
            if handler is not None:
                handler(self, tok)
            elif tok.children:
                self._start_block()
                self._inline(tok.children)
            elif tok.nesting == 0 and tok.content:
                self._leaf(tok.content, None)
            i += 1

    def runs(self) -> tuple[list[str], list[Stack]]:
        return ["".join(parts) for parts in self._parts], self._stacks

    def emit(self, text: str, stack: Stack) -> None:
        if not text:
            return
        if self._pending and self._stacks:
            sep_stack = self._pending_stack if self._pending_stack is not None else ()
            self._add(self._pending, sep_stack)
        self._pending = ""
        self._pending_stack = None
        self._add(text, stack)

    def _add(self, text: str, stack: Stack) -> None:
        # Tags compare by identity, so this is cheap; equal neighbours share a run.
        if self._stacks and self._stacks[-1] == stack:
            self._parts[-1].append(text)
        else:
            self._parts.append([text])
            self._stacks.append(stack)

    # blocks

    def _start_block(self) -> None:
        # The separator owed lies inside the containers open when the next block starts.
        if self._pending and self._pending_stack is None:
            self._pending_stack = self._base

    def _end_block(self, sep: str) -> None:
        if len(sep) > len(self._pending):
            self._pending = sep

    def _open_container(self, tag: Tag) -> None:
        self._start_block()
        self._containers.append(_with(self._base, tag))

    def _close_container(self) -> None:
        if len(self._containers) > 1:
            self._containers.pop()
        self._end_block("\n\n")

    def _open_list(self, tok: Token) -> None:
        self._start_block()
        start = str(tok.attrGet("start") or 1)
        number = int(start) if start.isdigit() else 1
        self._lists.append(_ListState(tok.type == "ordered_list_open", number))

    def _close_list(self) -> None:
        if self._lists:
            self._lists.pop()
        self._end_block("\n" if self._lists else "\n\n")

    def _list_item(self) -> None:
        self._start_block()
        if not self._lists:
            return
        state = self._lists[-1]
        marker = f"{state.number}. " if state.ordered else BULLET
        state.number += 1
        self.emit(LIST_INDENT * (len(self._lists) - 1) + marker, self._base)

    def _leaf(self, content: str, tag: Tag | None) -> None:
        self._start_block()
        self.emit(
            content.rstrip("\n") if tag is None else content.removesuffix("\n"),
            _with(self._base, tag),
        )
        self._end_block("\n\n")

    def _table(self, tokens: Sequence[Token], i: int) -> int:
        rows: list[list[str]] = []
        header_rows = 0
        j = i + 1
        while j < len(tokens) and tokens[j].type != "table_close":
            kind = tokens[j].type
            if kind == "tr_open":
                rows.append([])
            elif kind == "inline" and rows:
                rows[-1].append(tokens[j].content.strip())
            elif kind == "thead_close":
                header_rows = len(rows)
            j += 1
        self._leaf(text_table(rows, header_rows), _PRE)
        return j + 1

    # inline

    def _inline(self, children: Sequence[Token]) -> None:
        opened: list[Stack] = [self._base]
        for tok in children:
            kind = tok.type
            stack = opened[-1]
            if kind in _INLINE_OPEN:
                opened.append(_with(stack, _INLINE_OPEN[kind]))
            elif kind in _INLINE_CLOSE:
                if len(opened) > 1:
                    opened.pop()
            elif kind == "link_open":
                url = safe_url(str(tok.attrGet("href") or ""))
                opened.append(_with(stack, _link_tag(url) if url else None))
            elif kind in ("code_inline", "math_inline"):  # a formula: its source, as code
                in_link = any(t.kind == "a" for t in stack)
                self.emit(tok.content, stack if in_link else _with(stack, CODE))
            elif kind in ("softbreak", "hardbreak"):
                self.emit("\n", stack)
            elif kind == "image":
                self._image(tok, stack)
            else:  # text, html_inline (shown as text), anything unknown
                self.emit(tok.content, stack)

    def _image(self, tok: Token, stack: Stack) -> None:
        alt = _inline_text(tok.children) if tok.children else tok.content
        url = safe_url(str(tok.attrGet("src") or ""))
        if url is None or any(t.kind == "a" for t in stack):
            self.emit(alt, stack)
        else:
            self.emit(alt or url, _with(stack, _link_tag(url)))


#: What a block token does to the builder. A table of the class, not of each builder:
#: handlers bound to one builder would make it a reference cycle, kept in memory until
#: a full garbage collection, for every rendering of every answer.
_BLOCK_HANDLERS: dict[str, Callable[[_Builder, Token], None]] = {
    "paragraph_open": lambda b, tok: b._start_block(),
    "paragraph_close": lambda b, tok: b._end_block("\n" if tok.hidden else "\n\n"),
    "heading_open": lambda b, tok: b._open_container(BOLD),
    "heading_close": lambda b, tok: b._close_container(),
    "blockquote_open": lambda b, tok: b._open_container(_QUOTE),
    "blockquote_close": lambda b, tok: b._close_container(),
    "bullet_list_open": _Builder._open_list,
    "ordered_list_open": _Builder._open_list,
    "bullet_list_close": lambda b, tok: b._close_list(),
    "ordered_list_close": lambda b, tok: b._close_list(),
    "list_item_open": lambda b, tok: b._list_item(),
    "list_item_close": lambda b, tok: b._end_block("\n"),
    "inline": lambda b, tok: b._inline(tok.children or []),
    "fence": lambda b, tok: b._leaf(tok.content, _pre_tag(tok.info)),
    "code_block": lambda b, tok: b._leaf(tok.content, _PRE),
    "math_block": lambda b, tok: b._leaf(tok.content, _PRE),  # a formula's source
    "html_block": lambda b, tok: b._leaf(tok.content, None),
    "hr": lambda b, tok: b._leaf(HORIZONTAL_RULE, None),
}


# --------------------------------------------------------------- runs -> chunks


def _is_extender(char: str) -> bool:
    """Characters that continue the previous one's grapheme (do not cut before them)."""
    return (
        char == _ZWJ
        or "\ufe00" <= char <= "\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"
        or "\U000e0020" <= char <= "\U000e007f"
        or unicodedata.combining(char) != 0
    )


class _Doc:
    """The visible text with its formatting runs; cuts and renders chunks of it."""

    def __init__(self, texts: list[str], stacks: list[Stack]) -> None:
        self.texts, self.stacks = texts, stacks
        self.text = "".join(self.texts)
        self.starts = [0, *accumulate(len(t) for t in self.texts)][:-1]
        # Cumulative UTF-16 lengths, only needed when there are astral characters.
        self._units: list[int] | None = None
        if utf16_len(self.text) != len(self.text):
            self._units = [0, *accumulate(2 if c > "\uffff" else 1 for c in self.text)]

    def _run_at(self, pos: int) -> int:
        return max(0, bisect_right(self.starts, pos) - 1)

    def in_pre(self, pos: int) -> bool:
        if not self.texts:
            return False
        return any(t.kind == "pre" for t in self.stacks[self._run_at(pos)])

    def window_end(self, start: int, limit: int) -> int:
        """The largest end such that text[start:end] fits in `limit` UTF-16 units."""
        if self._units is None:
            return min(len(self.text), start + limit)
        return bisect_right(self._units, self._units[start] + limit) - 1

    def skip_leading(self, pos: int) -> int:
        """Skip whitespace-only lines; outside code blocks also leading spaces."""
        text, n = self.text, len(self.text)
        end = pos
        while end < n and text[end].isspace():
            end += 1
        if end < n and self.in_pre(end):
            return text.rfind("\n", pos, end) + 1 or pos
        return end

    def trim_end(self, start: int, end: int) -> int:
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return end

    def find_cut(self, start: int, window: int, keep: int) -> tuple[int, int]:
        """Where to end a chunk starting at `start` that must end by `window`, and where
        the next one starts.  Prefers a blank line, then a line break, then a space,
        among those leaving the chunk at least half full, then among any; else hard-cuts
        a long word (never inside a surrogate pair or, if avoidable, a grapheme).
        No cut is made before `keep` (the prefix) when that can be avoided."""
        text = self.text
        first = start
        while first < window and text[first].isspace():
            first += 1
        floor = max(first + 1, keep if keep < window else 0)
        for lowest in (max(floor, (start + window) // 2), floor):
            for sep in ("\n\n", "\n", " "):
                cut = text.rfind(sep, lowest, window + len(sep))
                if cut != -1:
                    return cut, cut + len(sep)
        cut = window
        lowest = max(floor, window - _MAX_GRAPHEME_BACKOFF)
        while cut > lowest and (_is_extender(text[cut]) or text[cut - 1] == _ZWJ):
            cut -= 1
        if cut == lowest and (_is_extender(text[cut]) or text[cut - 1] == _ZWJ):
            cut = window  # an absurdly long grapheme: cut it anyway
        return cut, cut

    def spans(self, limit: int, keep: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        start, n = 0, len(self.text)
        while start < n:
            window = self.window_end(start, limit)
            if window >= n:  # the rest fits (and the text was trimmed already)
                end, following = n, n
            else:
                cut, following = self.find_cut(start, window, keep)
                end = self.trim_end(start, cut)
            if end > start:
                out.append((start, end))
            start = self.skip_leading(max(following, start + 1))
        return out

    def render(self, start: int, end: int) -> str:
        parts: list[str] = []
        current: Stack = ()
        i = self._run_at(start)
        pos = start
        while pos < end:
            run_end = min(end, self.starts[i] + len(self.texts[i]))
            stack = self.stacks[i]
            common = 0
            while common < min(len(current), len(stack)) and current[common] == stack[common]:
                common += 1
            parts.extend(t.close for t in reversed(current[common:]))
            parts.extend(t.open for t in stack[common:])
            parts.append(escape_html(self.text[pos:run_end]))
            current, pos, i = stack, run_end, i + 1
        parts.extend(t.close for t in reversed(current))
        return "".join(parts)


def _body_runs(markdown: str) -> tuple[list[str], list[Stack]]:
    builder = _Builder()
    builder.build(MARKDOWN.parse(markdown))
    doc = _Doc(*builder.runs())
    lo, hi = doc.skip_leading(0), len(doc.text.rstrip())
    texts: list[str] = []
    stacks: list[Stack] = []
    for text, stack, run_start in zip(doc.texts, doc.stacks, doc.starts, strict=True):
        a, b = max(lo, run_start), min(hi, run_start + len(text))
        if a < b:
            texts.append(text[a - run_start : b - run_start])
            stacks.append(stack)
    return texts, stacks


def render_chunks(
    markdown: str, *, prefix: str = "", reasoning: str = "", limit: int = TELEGRAM_LIMIT
) -> list[Chunk]:
    """Convert the model's Markdown to Telegram HTML chunks of at most `limit` visible units.

    `prefix` (plain text) starts the first chunk and counts against its limit;
    `reasoning` (plain text) follows it as a collapsed (expandable) quote.  Works
    on partial (still streaming) Markdown too.  Never returns an empty list or chunk.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 units")
    texts, stacks = _body_runs(clean_text(markdown))
    thoughts = clean_text(reasoning).strip()
    if thoughts:
        texts, stacks = [thoughts, "\n", *texts], [(_THOUGHTS,), (), *stacks]
    prefix = clean_text(prefix) if prefix.strip() else ""
    keep = 0  # avoid cutting inside the prefix
    if not texts:  # the output's trailing whitespace is trimmed, the prefix's too
        texts, stacks = [prefix.rstrip() or EMPTY_PLACEHOLDER], [()]
    elif prefix:
        texts, stacks, keep = [prefix, *texts], [(), *stacks], len(prefix)
    doc = _Doc(texts, stacks)
    spans = doc.spans(limit, keep)
    if not spans:  # only possible for a pathological whitespace prefix
        return [Chunk(EMPTY_PLACEHOLDER, EMPTY_PLACEHOLDER)]
    return [Chunk(doc.render(a, b), doc.text[a:b]) for a, b in spans]
