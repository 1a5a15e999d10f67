"""The model's Markdown -> Telegram rich messages (Bot API 10.1), split at block boundaries.

Pure functions (no aiogram, no openai), the rich counterpart of :mod:`bot.telegram.format`.
The Markdown is parsed by markdown-it-py (:mod:`bot.markdown`: CommonMark, GFM
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

from ..markdown import MARKDOWN, clean_text, code_language, text_table
from .format import EMPTY_PLACEHOLDER, Chunk, escape_html, utf16_len
from .rich_runs import (
    _Box,
    _cut_runs,
    _fit,
    _Inline,
    _Leaf,
    _Node,
    _plain,
    _Runs,
    _runs_html,
    _text_html,
    _tree,
    _units,
)

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
