"""The pieces the rich renderer (:mod:`bot.telegram.rich`) builds messages from.

markdown-it's tokens as a tree (:class:`_Node`); a block's inline content as *runs* of
text with the stack of tags over them (:class:`_Inline`), cut to a size without
splitting a formula (:func:`_cut_runs`); and *leaves*, the blocks that hold text, as
rich HTML with the containers (:class:`_Box`) they sit in (:class:`_Leaf`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from ..markdown import BOLD, CODE, ITALIC, STRIKE, Stack, Tag, safe_url
from .format import escape_html, utf16_len

# ------------------------------------------------------------------ the tree


class _Node:
    """A block or inline element: its (opening) token and its children. markdown-it's own
    SyntaxTreeNode does the same at a much higher cost (``python -m bench rich``)."""

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
