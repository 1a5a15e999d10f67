"""The model's Markdown -> Telegram rich messages (Bot API 10.1), split at block boundaries.

Pure functions (no aiogram, no openai), the rich counterpart of :mod:`bot.telegram.format`.
The Markdown is parsed by markdown-it-py (:mod:`bot.telegram.markdown`: CommonMark, GFM
tables and strikethrough, formulas) into a tree, and the tree is flattened into *leaves*: the blocks
that hold text (a paragraph, a heading, a code block, a formula, a table row, a list
item's text), each with the stack of containers it sits in (quotes, lists, list items,
tables). A message is a run of leaves; containers open at a cut are closed at the end of
one message and opened again at the start of the next (an ordered list goes on with its
number, a table repeats its header row), the way :mod:`~bot.telegram.format` reopens
formatting. A leaf is never cut (a table row, a formula, a code block stay whole) unless
it alone is larger than a message could hold.

What Markdown becomes (rich HTML, ``InputRichMessage.html``)::

    paragraph, heading 1-6        <p>, <h1>…<h6>
    **b**, *i*, ~~s~~, `code`     <b>, <i>, <s>, <code>
    [text](url), ![alt](url)      <a href> (http, https, tg, mailto only; else plain text)
    $…$, \\(…\\)                    <tg-math>   (inline formula, LaTeX source)
    $$…$$, \\[…\\], ```math         <tg-math-block>
    ```lang code```, indented     <pre><code class="language-lang">, <pre>
    > quote                       <blockquote>
    - item, 1. item, - [x] task   <ul>/<ol start><li>, <input type="checkbox" checked>
    | a | b | table               <table><tr><th>/<td align> (over 20 columns: a <pre> text table)
    ---                           <hr/>
    line breaks                   <br>
    <b> <sub> <sup> <u> <mark>…   kept when the model wrote them as balanced pairs
    any other HTML                shown as text

Text that only looks like markup stays text: "$5 and $6" (a closing ``$`` must follow a
non-space and precede no digit, and be the first ``$`` after the opening one), a pipe
in prose (a table needs its delimiter row), ``<b>`` inside code.

Telegram's limits (Bot API, "Rich Message Limits"): 32768 characters of text, formula
sources included; 500 blocks, nested blocks, list items and table rows included; 16
levels of nested formatting and blocks; 20 table columns. Text is counted here in UTF-16
code units plus one per block (never less than Telegram counts); blocks counting every
container as one; nesting as HTML element depth. Containers nest at most
:data:`_MAX_BOXES` deep (deeper lists and quotes go on as paragraphs, a list item's
marker written out), which leaves room for a leaf's own elements and its formatting.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markdown_it.token import Token

from .format import (
    BOLD,
    CODE,
    EMPTY_PLACEHOLDER,
    ITALIC,
    STRIKE,
    Chunk,
    Stack,
    Tag,
    clean_text,
    code_language,
    escape_html,
    safe_url,
    text_table,
    utf16_len,
)
from .markdown import MARKDOWN

__all__ = [
    "RICH_BLOCK_LIMIT",
    "RICH_DEPTH_LIMIT",
    "RICH_TABLE_COLUMNS",
    "RICH_TEXT_LIMIT",
    "needs_rich",
    "render_rich",
]

RICH_TEXT_LIMIT = 32768
"""Telegram's limit on a rich message's text, formula sources included."""
RICH_BLOCK_LIMIT = 500
"""Telegram's limit on a rich message's blocks (nested blocks, list items, table rows)."""
RICH_DEPTH_LIMIT = 16
"""Telegram's limit on nested formatting and blocks."""
RICH_TABLE_COLUMNS = 20
"""Telegram's limit on a table's columns."""

#: Containers nested at most this deep (each is one HTML element: a list and its item two).
_MAX_BOXES = 8
#: A leaf's own elements at most (a table row: <tr><td>; a code block: <pre><code>).
_LEAF_ELEMENTS = 2
#: A table's header row is repeated after a cut only when it is this small.
_HEADER_REPEAT_UNITS = 1024
#: Room kept beside the largest leaf: a repeated header row, the containers around it.
_LEAF_ROOM = 2 * _HEADER_REPEAT_UNITS
#: The live thoughts shown in a draft's thinking block: their last this many units.
THINKING_TAIL = 4096


#: What Markdown holding a table or a formula cannot lack.
_RICH_MARKERS = ("|", "$", "\\(", "\\[", "math")


def needs_rich(markdown: str) -> bool:
    """Whether the Markdown holds what only a rich message shows: a table (of at most
    :data:`RICH_TABLE_COLUMNS` columns: a wider one is a text block either way) or a
    formula. Cheap for text without a pipe, a dollar sign or a backslash."""
    if not any(marker in markdown for marker in _RICH_MARKERS):
        return False
    columns = 0
    for token in MARKDOWN.parse(clean_text(markdown)):
        kind = token.type
        if kind == "math_block" or (kind == "fence" and code_language(token.info) == "math"):
            return True
        if kind == "inline" and any(c.type == "math_inline" for c in token.children or ()):
            return True
        if kind == "table_open":
            columns = 0
        elif kind == "th_open":
            columns += 1
        elif kind == "thead_close" and columns <= RICH_TABLE_COLUMNS:
            return True
    return False


# ------------------------------------------------------------------ the tree


class _Node:
    """A block or inline element: its (opening) token and its children. markdown-it's own
    SyntaxTreeNode does the same with a third of a rendering's time."""

    __slots__ = ("children", "token", "type")

    def __init__(self, kind: str, token: Token, children: list[_Node]) -> None:
        self.type, self.token, self.children = kind, token, children

    @property
    def tag(self) -> str:
        return self.token.tag

    @property
    def info(self) -> str:
        return self.token.info

    @property
    def content(self) -> str:
        return self.token.content

    @property
    def map(self) -> list[int] | None:
        return self.token.map

    def attr(self, name: str) -> str | int | float | None:
        return self.token.attrGet(name)


def _tree(tokens: Sequence[Token]) -> list[_Node]:
    """markdown-it's token stream (opening, closing, leaf tokens) as a tree."""
    root: list[_Node] = []
    levels = [root]
    for token in tokens:
        if token.nesting == 1:
            node = _Node(token.type.removesuffix("_open"), token, [])
            levels[-1].append(node)
            levels.append(node.children)
        elif token.nesting == -1:
            if len(levels) > 1:
                levels.pop()
        else:
            children = _tree(token.children) if token.children else []
            levels[-1].append(_Node(token.type, token, children))
    return root


# ------------------------------------------------------------------ inline runs


_Runs = list[tuple[str, Stack]]

_UNDERLINE = Tag("u", "<u>", "</u>")
_MARK = Tag("mark", "<mark>", "</mark>")
_SUB = Tag("sub", "<sub>", "</sub>")
_SUP = Tag("sup", "<sup>", "</sup>")
#: A formula: its run is one atom, never cut, never formatted inside.
_MATH = Tag("math", "<tg-math>", "</tg-math>")

_MARKDOWN_TAGS = {"strong": BOLD, "em": ITALIC, "s": STRIKE}
#: HTML a model writes that rich messages have, as balanced pairs without attributes.
_HTML_TAGS = {
    "b": BOLD, "strong": BOLD, "i": ITALIC, "em": ITALIC, "u": _UNDERLINE,
    "ins": _UNDERLINE, "s": STRIKE, "strike": STRIKE, "del": STRIKE, "code": CODE,
    "mark": _MARK, "sub": _SUB, "sup": _SUP,
}  # fmt: skip
_BREAKS = frozenset({"<br>", "<br/>", "<br />"})


def _html_tag(raw: str) -> tuple[str, bool] | None:
    """(name, is the closing tag) of ``<name>`` / ``</name>`` we keep, else None."""
    lowered = raw.strip().lower()
    if not (lowered.startswith("<") and lowered.endswith(">")):
        return None
    closing = lowered.startswith("</")
    name = lowered[2 if closing else 1 : -1]
    return (name, closing) if name in _HTML_TAGS else None


def _html_pairs(nodes: Sequence[_Node]) -> dict[int, int]:
    """Positions of the model's HTML tags that open and close each other properly."""
    pairs: dict[int, int] = {}
    opened: list[tuple[str, int]] = []
    for i, node in enumerate(nodes):
        tag = _html_tag(node.content) if node.type == "html_inline" else None
        if tag is None:
            continue
        name, closing = tag
        if not closing:
            opened.append((name, i))
            continue
        depth = next((d for d in range(len(opened) - 1, -1, -1) if opened[d][0] == name), None)
        if depth is not None:
            pairs[opened[depth][1]] = i
            del opened[depth:]  # tags left open inside it stay text
    return pairs


def _with(stack: Stack, tag: Tag | None, cap: int) -> Stack:
    """``stack`` plus ``tag``, unless it is None, already open, or the stack is full."""
    if tag is None or len(stack) >= cap or any(t.kind == tag.kind for t in stack):
        return stack
    return (*stack, tag)


def _link(url: str) -> Tag:
    return Tag("a", f'<a href="{escape_html(url, quote=True)}">', "</a>")


class _Inline:
    """A paragraph's (or cell's) inline content as runs of text with their tags."""

    def __init__(self, cap: int, skip: int = 0) -> None:
        self.runs: _Runs = []
        self._cap = cap  # most nested tags (what the leaf's depth leaves over)
        self._skip = skip  # characters still to drop (a task item's "[x] ")

    def add(self, text: str, stack: Stack) -> None:
        if self._skip:
            dropped = text[: self._skip]
            text, self._skip = text[self._skip :], self._skip - len(dropped)
        if not text:
            return
        if self.runs and self.runs[-1][1] == stack and _MATH not in stack:
            self.runs[-1] = (self.runs[-1][0] + text, stack)
        else:
            self.runs.append((text, stack))

    def walk(self, nodes: Sequence[_Node], stack: Stack) -> None:
        pairs = _html_pairs(nodes)
        closes: list[tuple[int, Stack]] = []  # (where, the stack to go back to)
        for i, node in enumerate(nodes):
            if closes and closes[-1][0] == i:
                stack = closes.pop()[1]
                continue
            if i in pairs:
                tag = _html_tag(node.content)
                assert tag is not None
                closes.append((pairs[i], stack))
                stack = _with(stack, _HTML_TAGS[tag[0]], self._cap)
                continue
            self._node(node, stack)

    def _node(self, node: _Node, stack: Stack) -> None:
        kind = node.type
        if kind in _MARKDOWN_TAGS:
            self.walk(node.children, _with(stack, _MARKDOWN_TAGS[kind], self._cap))
        elif kind in ("softbreak", "hardbreak"):
            self.add("\n", stack)
        elif kind == "code_inline":
            self.add(node.content, _with(stack, CODE, self._cap))
        elif kind == "math_inline":
            math = _with(stack, _MATH, self._cap)
            self.add(node.content, math if math != stack else _with(stack, CODE, self._cap))
        elif kind == "link":
            url = safe_url(str(node.attr("href") or ""))
            self.walk(node.children, _with(stack, _link(url) if url else None, self._cap))
        elif kind == "image":
            self._image(node, stack)
        elif kind == "html_inline" and node.content.strip().lower() in _BREAKS:
            self.add("\n", stack)
        else:  # text, an escape, HTML we do not keep (shown as text), anything unknown
            self.add(node.content, stack)

    def _image(self, node: _Node, stack: Stack) -> None:
        """An image is a link to it, named by its alt text (media are not fetched)."""
        alt = _Inline(self._cap)
        alt.walk(node.children, ())
        text = "".join(t for t, _ in alt.runs)
        url = safe_url(str(node.attr("src") or ""))
        if url is None or any(t.kind == "a" for t in stack):
            self.add(text, stack)
        else:
            self.add(text or url, _with(stack, _link(url), self._cap))


def _runs_html(runs: _Runs) -> str:
    """Rich HTML of inline runs: tags opened and closed as the stacks change."""
    parts: list[str] = []
    current: Stack = ()
    for text, stack in runs:
        common = 0
        while common < min(len(current), len(stack)) and current[common] is stack[common]:
            common += 1
        parts.extend(t.close for t in reversed(current[common:]))
        parts.extend(t.open for t in stack[common:])
        escaped = escape_html(text)
        parts.append(escaped if _MATH in stack else escaped.replace("\n", "<br>"))
        current = stack
    parts.extend(t.close for t in reversed(current))
    return "".join(parts)


def _fit(text: str, limit: int) -> int:
    """The longest prefix length of ``text`` within ``limit`` UTF-16 units."""
    if len(text) * 2 <= limit or utf16_len(text) <= limit:
        return len(text)
    units = 0
    for i, char in enumerate(text):
        units += 2 if char > "\uffff" else 1
        if units > limit:
            return i
    return len(text)


def _cut_runs(runs: _Runs, cap: int) -> tuple[_Runs, _Runs]:
    """Runs of at most ``cap`` units, and the rest: cut at a line break, else a space,
    never inside a formula (one larger than ``cap`` is shown as code instead)."""
    head: _Runs = []
    room = cap
    for i, (text, tags) in enumerate(runs):
        units = utf16_len(text)
        if units <= room:
            head.append((text, tags))
            room -= units
            continue
        if _MATH in tags and head:
            return head, runs[i:]
        stack = tuple(CODE if t is _MATH else t for t in tags)
        end = _fit(text, room)
        cut = max(text.rfind("\n", 0, end + 1), text.rfind(" ", 0, end + 1))
        if cut <= 0 and head:
            return head, runs[i:]
        cut = cut if cut > 0 else max(end, 1)
        head.append((text[:cut], stack))
        rest = text[cut:].lstrip(" \n")
        return head, ([(rest, stack)] if rest else []) + runs[i + 1 :]
    return head, []


def _units(runs: _Runs) -> int:
    return sum(utf16_len(text) for text, _ in runs)


def _plain(runs: _Runs) -> str:
    return "".join(text for text, _ in runs)


# ------------------------------------------------------------------ leaves


@dataclass(eq=False)
class _Box:
    """A container (blockquote, ul, ol, li, table); compared by identity."""

    kind: str
    number: int = 1  # an ordered list's start; a list item's number
    checked: bool | None = None  # a task-list item's checkbox
    #: A table's header row (repeated after a cut). Weak: the row sits in this box,
    #: and a cycle would outlive the rendering until a full garbage collection.
    header: weakref.ref[_Leaf] | None = None

    def opening(self, following: _Box | None) -> str:
        if self.kind == "ol":
            start = following.number if following is not None else self.number
            return f'<ol start="{start}">' if start != 1 else "<ol>"
        if self.kind == "li" and self.checked is not None:
            return '<li><input type="checkbox" checked>' if self.checked else (
                '<li><input type="checkbox">'
            )  # fmt: skip
        return f"<{self.kind}>"

    @property
    def closing(self) -> str:
        return f"</{self.kind}>"


@dataclass(eq=False)
class _Leaf:
    """A block that holds text, ready as rich HTML, with the containers it sits in."""

    html: str
    plain: str
    units: int
    boxes: tuple[_Box, ...] = ()
    blocks: int = 1


def _text_html(kind: str, runs: _Runs) -> str:
    inner = _runs_html(runs)
    if kind == "bare":  # a list item's only text: inside the <li> itself
        return inner
    if kind == "thoughts":
        return f"<blockquote expandable>{inner}</blockquote>"
    if kind == "thinking":
        return f"<tg-thinking>{inner}</tg-thinking>"
    return f"<{kind}>{inner}</{kind}>"


@dataclass
class _Doc:
    """What the builder produces: the leaves, and the prefix while it is still owed."""

    leaves: list[_Leaf] = field(default_factory=list)
    prefix: str = ""
    leaf_cap: int = RICH_TEXT_LIMIT - _LEAF_ROOM
    #: A table's header row is repeated after a cut only when it is this small.
    header_cap: int = _HEADER_REPEAT_UNITS
    #: A list item's marker owed to the next text (a list nested too deep to be one).
    marker: str = ""
    #: The Markdown's lines (a table row's cells beyond its columns are read from them).
    lines: list[str] = field(default_factory=list)


class _Builder:
    """Walks the Markdown tree, producing leaves."""

    def __init__(self, doc: _Doc) -> None:
        self.doc = doc

    def blocks(self, nodes: Sequence[_Node], boxes: tuple[_Box, ...]) -> None:
        for node in nodes:
            handler = _BLOCK_HANDLERS.get(node.type)
            if handler is not None:
                handler(self, node, boxes)
            elif node.children:
                self.blocks(node.children, boxes)
            elif node.content.strip():  # an HTML block (shown as text), anything unknown
                self.runs([(node.content.strip("\n"), ())], "p", boxes)

    # ---- leaves

    def add(self, leaf: _Leaf) -> None:
        doc = self.doc
        if doc.prefix:  # the prefix is the first text: a paragraph of its own
            prefix, doc.prefix = doc.prefix.rstrip(), ""
            self.add(_Leaf(_text_html("p", [(prefix, ())]), prefix, utf16_len(prefix)))
        doc.leaves.append(leaf)

    def inline(self, block: _Node, boxes: tuple[_Box, ...], skip: int = 0) -> _Runs:
        """The runs of a block's inline content (after a list marker owed, if any)."""
        builder = _Inline(RICH_DEPTH_LIMIT - len(boxes) - _LEAF_ELEMENTS, skip)
        if self.doc.marker:
            builder.add(self.doc.marker, ())
            self.doc.marker = ""
        inline = next((c for c in block.children if c.type == "inline"), None)
        if inline is not None:
            builder.walk(inline.children, ())
        return builder.runs

    def text(self, block: _Node, kind: str, boxes: tuple[_Box, ...]) -> None:
        self.runs(self.inline(block, boxes), kind, boxes)

    def runs(self, runs: _Runs, kind: str, boxes: tuple[_Box, ...]) -> None:
        doc = self.doc
        if doc.prefix and kind == "p" and not boxes:  # the prefix starts the first paragraph
            runs = [(doc.prefix, ()), *runs]
            doc.prefix = ""
        if not runs and kind != "bare":
            return
        if kind == "bare" and _units(runs) > doc.leaf_cap:
            kind = "p"  # the item's text goes on in paragraphs
        while True:
            head, runs = _cut_runs(runs, doc.leaf_cap)
            self.add(_Leaf(_text_html(kind, head), _plain(head), _units(head), boxes))
            if not runs:
                return
            kind = "p" if kind.startswith("h") else kind  # a long heading goes on as text

    def fence(self, node: _Node, boxes: tuple[_Box, ...]) -> None:
        lang = code_language(node.info)
        if lang == "math":
            self.math(node.content, boxes)
        else:
            self.pre(node.content, lang, boxes)

    def pre(self, code: str, lang: str, boxes: tuple[_Box, ...]) -> None:
        code = code.removesuffix("\n")
        opening = f'<pre><code class="language-{lang}">' if lang else "<pre>"
        closing = "</code></pre>" if lang else "</pre>"
        while code.strip():  # (a blank code block, as a fence starts streaming, shows nothing)
            end = _fit(code, self.doc.leaf_cap)
            cut = end if end == len(code) else (
                code.rfind("\n", 0, end) + 1 or code.rfind(" ", 0, end) + 1 or end
            )  # fmt: skip
            text, code = code[:cut].removesuffix("\n"), code[cut:]
            if text.strip():
                html = f"{opening}{escape_html(text)}{closing}"
                self.add(_Leaf(html, text, utf16_len(text), boxes))

    def math(self, expr: str, boxes: tuple[_Box, ...]) -> None:
        expr = expr.strip()
        if utf16_len(expr) > self.doc.leaf_cap:  # too long for a formula: its source as code
            self.pre(expr, "latex", boxes)
        elif expr:
            html = f"<tg-math-block>{escape_html(expr)}</tg-math-block>"
            self.add(_Leaf(html, expr, utf16_len(expr), boxes))

    # ---- containers

    def quote(self, node: _Node, boxes: tuple[_Box, ...]) -> None:
        inner = boxes if len(boxes) >= _MAX_BOXES else (*boxes, _Box("blockquote"))
        self.blocks(node.children, inner)

    def listing(self, node: _Node, boxes: tuple[_Box, ...]) -> None:
        ordered = node.type == "ordered_list"
        start = str(node.attr("start") or 1)
        number = int(start) if start.isdigit() else 1
        flat = len(boxes) + 2 > _MAX_BOXES  # too deep: items go on as marked paragraphs
        box = _Box("ol" if ordered else "ul", number)
        for i, item in enumerate(node.children):
            checked = _task(item)
            if flat:
                mark = "☑ " if checked else "☐ " if checked is False else "• "
                self.doc.marker = f"{number + i}. " if ordered else mark
                self.item(item, boxes, flat=True)
            else:
                self.item(item, (*boxes, box, _Box("li", number + i, checked)))

    def item(self, item: _Node, boxes: tuple[_Box, ...], *, flat: bool = False) -> None:
        children = item.children
        first = children[0] if children else None
        if first is None:
            if not flat:
                self.runs([], "bare", boxes)  # an empty item is still an item
            return
        if first.type != "paragraph":
            self.blocks(children, boxes)
            return
        kind = "bare" if len(children) == 1 and not flat else "p"
        skip = 4 if _task(item) is not None else 0
        self.runs(self.inline(first, boxes, skip), kind, boxes)
        self.blocks(children[1:], boxes)

    def table(self, node: _Node, boxes: tuple[_Box, ...]) -> None:
        rows = [(tr, part.type == "thead") for part in node.children for tr in part.children]
        columns = max((len(tr.children) for tr, _ in rows), default=0)
        if columns > RICH_TABLE_COLUMNS or len(boxes) >= _MAX_BOXES:
            cells = [[_cell_text(cell) for cell in tr.children] for tr, _ in rows]
            self.pre(text_table(cells, sum(head for _, head in rows)), "", boxes)
            return
        box = _Box("table")
        for tr, head in rows:
            leaf = self.row(tr, head, (*boxes, box))
            if leaf is None:  # a row too large for a message: its cells as paragraphs
                for cell in tr.children:
                    self.text(cell, "p", boxes)
                continue
            if head and box.header is None and leaf.units <= self.doc.header_cap:
                box.header = weakref.ref(leaf)
            self.add(leaf)

    def row(self, tr: _Node, head: bool, boxes: tuple[_Box, ...]) -> _Leaf | None:
        html, plain, units = ["<tr>"], [], 0
        excess = _excess_cells(self.doc.lines[tr.map[0]], len(tr.children)) if tr.map else ""
        for i, cell in enumerate(tr.children):
            runs = self.inline(cell, boxes)
            if excess and i == len(tr.children) - 1:
                runs.append((f" | {excess}", ()))
            tag = "th" if head else "td"
            align = _align(cell)
            html.append(f'<{tag} align="{align}">' if align else f"<{tag}>")
            html.append(f"{_runs_html(runs)}</{tag}>")
            plain.append(_plain(runs))
            units += _units(runs) + 1
        if units > self.doc.leaf_cap:
            return None
        html.append("</tr>")
        return _Leaf("".join(html), " | ".join(plain), units, boxes)


#: What a block does to the builder. A table of the class, not of each builder: handlers
#: bound to one builder would make it a reference cycle, kept in memory until a full
#: garbage collection, for every rendering of every answer.
_BLOCK_HANDLERS: dict[str, Callable[[_Builder, _Node, tuple[_Box, ...]], None]] = {
    "paragraph": lambda b, node, boxes: b.text(node, "p", boxes),
    "heading": lambda b, node, boxes: b.text(node, node.tag, boxes),
    "blockquote": _Builder.quote,
    "bullet_list": _Builder.listing,
    "ordered_list": _Builder.listing,
    "table": _Builder.table,
    "math_block": lambda b, node, boxes: b.math(node.content, boxes),
    "fence": _Builder.fence,
    "code_block": lambda b, node, boxes: b.pre(node.content, "", boxes),
    "hr": lambda b, node, boxes: b.add(_Leaf("<hr/>", "———", 1, boxes)),
}


def _inline_of(node: _Node) -> _Node | None:
    return next((c for c in node.children if c.type == "inline"), None)


def _cell_text(cell: _Node) -> str:
    inline = _inline_of(cell)
    return inline.content.strip() if inline is not None else ""


#: What may stand before a table row's first pipe when that pipe starts the row: the
#: markers of the quotes and lists around the table.
_ROW_LEAD = re.compile(r"(?:>|[-*+](?=\s)|\d+[.)](?=\s)|\s)*")


def _excess_cells(line: str, columns: int) -> str:
    """The cells of a table row's source line beyond the table's columns, as text: GFM
    drops them, and a pipe the model meant as text would take its words along."""
    cells = re.split(r"(?<!\\)\|", line.rstrip())
    if _ROW_LEAD.fullmatch(cells[0]):
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    return " | ".join(cell.strip() for cell in cells[columns:])


def _align(cell: _Node) -> str:
    style = str(cell.attr("style") or "")
    return style.removeprefix("text-align:") if style.startswith("text-align:") else ""


def _task(item: _Node) -> bool | None:
    """A task-list item's checkbox: True ("[x] "), False ("[ ] "), None for none."""
    first = item.children[0] if item.children else None
    inline = _inline_of(first) if first is not None and first.type == "paragraph" else None
    head = inline.content[:4] if inline is not None else ""
    if head in ("[x] ", "[X] "):
        return True
    return False if head == "[ ] " else None


# ------------------------------------------------------------------ messages


def _opened(before: tuple[_Box, ...], boxes: tuple[_Box, ...]) -> int:
    """How many of ``boxes`` are not open after a leaf in ``before``."""
    common = 0
    while common < min(len(before), len(boxes)) and before[common] is boxes[common]:
        common += 1
    return len(boxes) - common


def _repeat_header(box: _Box, leaf: _Leaf) -> _Leaf | None:
    """A table's header row, shown again when the table goes on after a cut."""
    header = box.header() if box.header is not None else None
    return header if header is not leaf else None


def _cost(before: tuple[_Box, ...], leaf: _Leaf) -> tuple[int, int]:
    """(text units, blocks) ``leaf`` adds to a message whose last leaf sat in ``before``."""
    opened = leaf.boxes[len(leaf.boxes) - _opened(before, leaf.boxes) :]
    units, blocks = leaf.units + 1, leaf.blocks + len(opened)
    for box in opened:
        header = _repeat_header(box, leaf)
        if header is not None:
            units, blocks = units + header.units + 1, blocks + 1
    return units, blocks


def _pages(leaves: list[_Leaf], limit: int, max_blocks: int) -> list[list[_Leaf]]:
    """The leaves, cut into messages within the text and block limits."""
    pages: list[list[_Leaf]] = []
    page: list[_Leaf] = []
    units = blocks = 0
    for leaf in leaves:
        add = _cost(page[-1].boxes if page else (), leaf)
        if page and (units + add[0] > limit or blocks + add[1] > max_blocks):
            pages.append(page)
            page, units, blocks = [], 0, 0
            add = _cost((), leaf)
        page.append(leaf)
        units, blocks = units + add[0], blocks + add[1]
    if page:
        pages.append(page)
    return pages


def _page_html(page: list[_Leaf]) -> str:
    parts: list[str] = []
    current: tuple[_Box, ...] = ()
    for leaf in page:
        keep = len(leaf.boxes) - _opened(current, leaf.boxes)
        parts.extend(box.closing for box in reversed(current[keep:]))
        new = leaf.boxes[keep:]
        for i, box in enumerate(new):
            following = new[i + 1] if i + 1 < len(new) else None
            parts.append(box.opening(following))
            header = _repeat_header(box, leaf)
            if header is not None:
                parts.append(header.html)
        parts.append(leaf.html)
        current = leaf.boxes
    parts.extend(box.closing for box in reversed(current))
    return "".join(parts)


def render_rich(
    markdown: str,
    *,
    prefix: str = "",
    reasoning: str = "",
    thinking: str = "",
    limit: int = RICH_TEXT_LIMIT,
    max_blocks: int = RICH_BLOCK_LIMIT,
) -> list[Chunk]:
    """Convert the model's Markdown to rich messages (chunks with ``rich`` set).

    ``prefix`` (plain text) is the first text of the first message; ``reasoning``
    (SHOW_REASONING) follows it as a collapsed quote; ``thinking`` (a draft's live
    thoughts, never part of a message) as a thinking block, its last
    :data:`THINKING_TAIL` units. Works on partial (still streaming) Markdown. Each
    message holds at most ``limit`` units of text and ``max_blocks`` blocks; never
    returns an empty list.
    """
    if limit < 64 or max_blocks < 16:
        raise ValueError("a rich message needs at least 64 units and 16 blocks")
    markdown = clean_text(markdown).replace("\r\n", "\n").replace("\r", "\n")
    doc = _Doc(prefix=clean_text(prefix) if prefix.strip() else "", lines=markdown.split("\n"))
    doc.leaf_cap = max(limit - _LEAF_ROOM, limit // 2)
    doc.header_cap = min(_HEADER_REPEAT_UNITS, limit // 4)
    builder = _Builder(doc)
    live = clean_text(thinking).strip()
    if live:
        keep = _fit(live[::-1], THINKING_TAIL)  # the latest thoughts, from a word on
        tail = live[len(live) - keep :]
        builder.runs([(tail if keep == len(live) else tail.split(" ", 1)[-1], ())], "thinking", ())
    thoughts = clean_text(reasoning).strip()
    if thoughts:
        builder.runs([(thoughts, ())], "thoughts", ())
    builder.blocks(_tree(MARKDOWN.parse(markdown)), ())
    if doc.prefix or not doc.leaves:
        text = doc.prefix.rstrip() or EMPTY_PLACEHOLDER
        doc.leaves.append(_Leaf(_text_html("p", [(text, ())]), text, utf16_len(text)))
    return [
        Chunk(_page_html(page), "\n".join(leaf.plain for leaf in page), rich=True)
        for page in _pages(doc.leaves, limit, max_blocks)
    ]
