"""Rich messages (Bot API 10.1-10.3) as the test Bot API server takes them.

:func:`parse_rich` reads an ``InputRichMessage`` the way the Bot API documents it and
returns the ``RichMessage`` a sent message carries (its ``blocks``, which aiogram must
decode), its visible text, and its size, or raises :class:`RichError` with the
description the fake answers with (after ``Bad Request: ``).

What it checks, from the Bot API's "Rich message formatting options":

* exactly one of ``html``, ``markdown``, ``blocks``;
* rich HTML: only the documented tags, each with its documented attributes, properly
  nested and closed (inline tags hold inline content only; ``ul``/``ol`` hold ``li``;
  ``table`` holds ``caption`` and ``tr``, ``tr`` holds ``th``/``td``; cells, paragraphs
  and headings hold inline content; ``pre`` holds text or one ``code``; a ``code`` with a
  language only inside ``pre``); only the named entities the Bot API lists, and numeric
  ones; links to http(s), tg, mailto, tel or ``#anchor`` only;
* the limits: 32768 characters of text (counted here in UTF-16 code units, formula
  sources included: never fewer than Telegram's count of characters), 500 blocks (list
  items, table rows and nested blocks included), 16 levels of nested blocks and
  formatting, 20 table columns; a thinking block only in a draft.

Telegram does not document the descriptions it answers these refusals with; the ones
here follow the shape of the ``RICH_*`` errors seen in the wild (``RICH_MESSAGE_EMPTY``).
The bot must not depend on them (it tells a refused rich message apart by exclusion).
Deliberately stricter than Telegram: unknown attributes are refused, and media, maps,
collages, slideshows and buttons (which the bot never sends) are not supported.
``markdown`` is read by converting it with markdown-it (CommonMark and GFM tables) to
rich HTML: close to, not exactly, Telegram's dialect.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from markdown_it import MarkdownIt

JSON = dict[str, Any]

RICH_TEXT_LIMIT: Final = 32768
RICH_BLOCK_LIMIT: Final = 500
RICH_DEPTH_LIMIT: Final = 16
RICH_TABLE_COLUMNS: Final = 20

_NAMED: Final = {
    "lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'", "nbsp": "\xa0",
    "hellip": "…", "mdash": "—", "ndash": "–", "lsquo": "‘", "rsquo": "’",
    "ldquo": "“", "rdquo": "”",
}  # fmt: skip
_SPACE: Final = " \t\r\n\f"
_VOID: Final = frozenset({"br", "hr", "input"})
#: Inline tags and the RichText type they become.
_INLINE: Final = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
    "del": "strikethrough", "code": "code", "mark": "marked", "sub": "subscript",
    "sup": "superscript", "tg-spoiler": "spoiler",
}  # fmt: skip
_INLINE_OTHER: Final = frozenset({"a", "tg-math", "br", "tg-emoji", "tg-time", "tg-reference"})
_TEXT_BLOCKS: Final = {"p": "paragraph", "footer": "footer"}
_HEADINGS: Final = {f"h{n}": n for n in range(1, 7)}
_BLOCKS: Final = frozenset(
    {"p", "footer", "pre", "hr", "ul", "ol", "blockquote", "aside", "table", "details",
     "tg-math-block", "tg-thinking", *_HEADINGS}
)  # fmt: skip
_ATTRIBUTES: Final = {
    "a": {"href", "name"}, "ol": {"start", "type", "reversed"}, "li": {"value", "type"},
    "input": {"type", "checked"}, "blockquote": {"expandable"},
    "table": {"bordered", "striped", "compact"},
    "td": {"colspan", "rowspan", "align", "valign"},
    "th": {"colspan", "rowspan", "align", "valign"}, "details": {"open"},
    "code": {"class"}, "tg-emoji": {"emoji-id"}, "tg-time": {"unix", "format"},
    "tg-reference": {"name"},
}  # fmt: skip
_KNOWN: Final = frozenset(
    {*_INLINE, *_INLINE_OTHER, *_BLOCKS, "li", "input", "tr", "td", "th", "caption", "summary",
     "cite"}
)  # fmt: skip
_LINK_SCHEMES: Final = ("http://", "https://", "tg://", "mailto:", "tel:")


class RichError(Exception):
    """A refused rich message; ``str(exc)`` follows ``Bad Request: ``."""


@dataclass
class Node:
    """An element of parsed rich HTML."""

    name: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)
    at: int = 0  # offset in the source, for error messages


@dataclass(frozen=True)
class Rich:
    """A rich message as sent: the ``RichMessage`` object, its visible text and its size."""

    message: JSON
    text: str
    units: int
    blocks: int
    depth: int


# ------------------------------------------------------------------ HTML


class _Parser:
    """rich HTML -> a tree of :class:`Node` (strict: see the module docstring)."""

    def __init__(self, src: str) -> None:
        self.src, self.pos = src, 0
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.text: list[str] = []

    def parse(self) -> Node:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "<":
                self._flush()
                self._tag()
            elif ch == "&":
                self.text.append(self._entity())
            else:
                end = min((i for i in (src.find("<", self.pos), src.find("&", self.pos)) if i >= 0),
                          default=len(src))  # fmt: skip
                self.text.append(src[self.pos : end])
                self.pos = end
        self._flush()
        if len(self.stack) > 1:
            raise RichError(f'can\'t parse rich message: unclosed tag "{self.stack[-1].name}"')
        return self.root

    def _flush(self) -> None:
        if self.text:
            self.stack[-1].children.append("".join(self.text))
            self.text = []

    def _entity(self) -> str:
        match = re.match(r"&(#[0-9]{1,8}|#x[0-9a-fA-F]{1,7}|[a-zA-Z]+);", self.src[self.pos :])
        if match is None:
            raise RichError(f'can\'t parse rich message: a bare "&" at offset {self.pos}')
        name = match.group(1)
        if name.startswith("#"):
            code = int(name[2:], 16) if name[1] == "x" else int(name[1:])
            if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise RichError(f"can't parse rich message: invalid character reference {name}")
            char = chr(code)
        elif name in _NAMED:
            char = _NAMED[name]
        else:
            raise RichError(f'can\'t parse rich message: unsupported HTML entity "&{name};"')
        self.pos += match.end()
        return char

    def _tag(self) -> None:
        match = re.match(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)", self.src[self.pos :])
        if match is None:
            raise RichError(f'can\'t parse rich message: a bare "<" at offset {self.pos}')
        closing, name, at = bool(match.group(1)), match.group(2).lower(), self.pos
        if name not in _KNOWN:
            raise RichError(f'can\'t parse rich message: unsupported tag "{name}"')
        self.pos += match.end()
        attrs = self._attributes(name)
        self_closing = self.src.startswith("/>", self.pos)
        end = self.pos + (2 if self_closing else 1)
        if not self.src.startswith(("/>", ">"), self.pos):
            raise RichError(f'can\'t parse rich message: unclosed tag "{name}" at offset {at}')
        self.pos = end
        if closing:
            if attrs or self.stack[-1].name != name:
                raise RichError(f'can\'t parse rich message: unmatched end tag "{name}"')
            self.stack.pop()
            return
        node = Node(name, attrs, at=at)
        self.stack[-1].children.append(node)
        if name not in _VOID and not self_closing:
            self.stack.append(node)

    def _attributes(self, name: str) -> dict[str, str]:
        attrs: dict[str, str] = {}
        pattern = re.compile(r"""[ \t\r\n]+([a-zA-Z-]+)(?:=("[^"]*"|'[^']*'|[^\s"'>/]+))?""")
        while match := pattern.match(self.src, self.pos):
            key, value = match.group(1).lower(), match.group(2) or ""
            if key not in _ATTRIBUTES.get(name, set()):
                raise RichError(f'can\'t parse rich message: attribute "{key}" of "{name}"')
            attrs[key] = _unescape(value.strip("\"'"))
            self.pos = match.end()
        while self.pos < len(self.src) and self.src[self.pos] in _SPACE:
            self.pos += 1
        return attrs


def _unescape(value: str) -> str:
    parser = _Parser(value)
    parser.parse()
    return "".join(c for c in parser.root.children if isinstance(c, str))


# ------------------------------------------------------------------ tree -> RichMessage


def _text(parts: list[Any]) -> Any:
    """A RichText from its parts: strings joined, one part alone, "" for none."""
    merged: list[Any] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif part != "":
            merged.append(part)
    if not merged:
        return ""
    return merged[0] if len(merged) == 1 else merged


def _link(node: Node, inner: Any) -> Any:
    if "name" in node.attrs and "href" not in node.attrs:
        return {"type": "anchor", "name": node.attrs["name"]}
    href = node.attrs.get("href", "")
    if href.startswith("#"):
        return {"type": "anchor_link", "text": inner, "anchor_name": href[1:]}
    if not href.startswith(_LINK_SCHEMES) or len(href) < 8 or any(c.isspace() for c in href):
        raise RichError("RICH_MESSAGE_URL_INVALID")
    if href.startswith("mailto:"):
        return {"type": "email_address", "text": inner, "email_address": href[7:]}
    if href.startswith("tel:"):
        return {"type": "phone_number", "text": inner, "phone_number": href[4:]}
    return {"type": "url", "text": inner, "url": href}


def _inline(children: list[Node | str], where: str) -> Any:
    """The RichText of inline content (``where`` names its block, for errors)."""
    parts: list[Any] = []
    for child in children:
        if isinstance(child, str):
            parts.append(child)
            continue
        name = child.name
        if name in _INLINE:
            if name == "code" and child.attrs:
                raise RichError("can't parse rich message: a language is for <pre><code> only")
            parts.append({"type": _INLINE[name], "text": _inline(child.children, where)})
        elif name == "br":
            parts.append("\n")
        elif name == "a":
            parts.append(_link(child, _inline(child.children, where)))
        elif name == "tg-math":
            parts.append({"type": "mathematical_expression", "expression": _raw(child)})
        elif name in ("tg-emoji", "tg-time", "tg-reference"):
            parts.append(_inline(child.children, where))  # (kept as their text here)
        else:
            raise RichError(f'can\'t parse rich message: tag "{name}" inside <{where}>')
    return _text(parts)


def _raw(node: Node) -> str:
    """Text-only content (a formula's source, a code block's text)."""
    if any(not isinstance(c, str) for c in node.children):
        raise RichError(f"can't parse rich message: <{node.name}> holds text only")
    source = "".join(c for c in node.children if isinstance(c, str))
    if not source.strip():
        raise RichError(f"can't parse rich message: empty <{node.name}>")
    return source


def _is_block(child: Node | str) -> bool:
    return isinstance(child, Node) and child.name in _BLOCKS


def _blocks(children: list[Node | str], where: str, *, draft: bool) -> list[JSON]:
    """Block content; a run of inline content between blocks is a paragraph of its own."""
    blocks: list[JSON] = []
    run: list[Node | str] = []

    def flush() -> None:
        text = _inline(run, where)
        if not (isinstance(text, str) and not text.strip()):
            blocks.append({"type": "paragraph", "text": text})
        run.clear()

    for child in children:
        if _is_block(child):
            flush()
            assert isinstance(child, Node)
            blocks.append(_block(child, draft=draft))
        else:
            run.append(child)
    flush()
    return blocks


def _block(node: Node, *, draft: bool) -> JSON:
    name = node.name
    if name in _TEXT_BLOCKS:
        return {"type": _TEXT_BLOCKS[name], "text": _inline(node.children, name)}
    if name in _HEADINGS:
        return {"type": "heading", "text": _inline(node.children, name), "size": _HEADINGS[name]}
    if name == "blockquote" and "expandable" not in node.attrs:
        return {"type": "blockquote", "blocks": _blocks(node.children, name, draft=draft)}
    if name == "tg-thinking" and not draft:
        raise RichError("RICH_MESSAGE_THINKING_NOT_ALLOWED")
    return _SPECIAL[name](node, draft)


_SPECIAL: Final[dict[str, Callable[[Node, bool], JSON]]] = {
    "pre": lambda node, _draft: _pre(node),
    "hr": lambda _node, _draft: {"type": "divider"},
    "tg-math-block": lambda node, _draft: {"type": "mathematical_expression",
                                           "expression": _raw(node)},
    "ul": lambda node, draft: _list(node, draft=draft),
    "ol": lambda node, draft: _list(node, draft=draft),
    "blockquote": lambda node, _draft: {"type": "expandable_blockquote",
                                        "text": _inline(node.children, "blockquote")},
    "aside": lambda node, _draft: {"type": "pullquote", "text": _inline(node.children, "aside")},
    "table": lambda node, _draft: _table(node),
    "details": lambda node, draft: _details(node, draft=draft),
    "tg-thinking": lambda node, _draft: {"type": "thinking",
                                         "text": _inline(node.children, "tg-thinking")},
}  # fmt: skip


def _pre(node: Node) -> JSON:
    children = [c for c in node.children if not (isinstance(c, str) and not c.strip())]
    if len(children) == 1 and isinstance(children[0], Node) and children[0].name == "code":
        code = children[0]
        block: JSON = {"type": "pre", "text": _raw(code)}
        css = code.attrs.get("class", "")
        if css:
            if not css.startswith("language-") or len(css) == len("language-"):
                raise RichError('can\'t parse rich message: a code class is "language-…"')
            block["language"] = css.removeprefix("language-")
        return block
    return {"type": "pre", "text": _raw(node)}


def _list(node: Node, *, draft: bool) -> JSON:
    items: list[JSON] = []
    start = node.attrs.get("start", "1")
    if not start.isdigit():
        raise RichError('can\'t parse rich message: "start" is a number')
    number = int(start)
    for child in node.children:
        if isinstance(child, str) and not child.strip():
            continue
        if not isinstance(child, Node) or child.name != "li":
            raise RichError(f"can't parse rich message: <{node.name}> holds <li> only")
        item: JSON = {"label": f"{number}." if node.name == "ol" else "•"}
        content = list(child.children)
        box = content[0] if content else None
        if isinstance(box, Node) and box.name == "input":
            if box.attrs.get("type") != "checkbox":
                raise RichError('can\'t parse rich message: <input type="checkbox"> only')
            item["has_checkbox"] = True
            if "checked" in box.attrs:
                item["is_checked"] = True
            content = content[1:]
        if any(isinstance(c, Node) and c.name == "input" for c in content):
            raise RichError("can't parse rich message: a checkbox starts its item")
        item["blocks"] = _blocks(content, "li", draft=draft)
        if node.name == "ol":
            item["value"] = number
        items.append(item)
        number += 1
    return {"type": "list", "items": items}


def _table(node: Node) -> JSON:
    rows: list[list[JSON]] = []
    table: JSON = {"type": "table"}
    table.update({f"is_{flag}": True for flag in ("bordered", "striped", "compact")
                  if flag in node.attrs})  # fmt: skip
    for child in node.children:
        if isinstance(child, str) and not child.strip():
            continue
        if isinstance(child, Node) and child.name == "caption":
            table["caption"] = _inline(child.children, "caption")
        elif isinstance(child, Node) and child.name == "tr":
            rows.append(_row(child))
        else:
            raise RichError("can't parse rich message: <table> holds <caption> and <tr> only")
    table["cells"] = rows
    return table


def _row(tr: Node) -> list[JSON]:
    cells: list[JSON] = []
    for cell in tr.children:
        if isinstance(cell, str) and not cell.strip():
            continue
        if not isinstance(cell, Node) or cell.name not in ("td", "th"):
            raise RichError("can't parse rich message: <tr> holds <td> and <th> only")
        align, valign = cell.attrs.get("align", "left"), cell.attrs.get("valign", "top")
        if align not in ("left", "center", "right") or valign not in ("top", "middle", "bottom"):
            raise RichError("can't parse rich message: a cell's align or valign is invalid")
        out: JSON = {"text": _inline(cell.children, cell.name), "align": align, "valign": valign}
        if cell.name == "th":
            out["is_header"] = True
        for span in ("colspan", "rowspan"):
            if span in cell.attrs:
                if not cell.attrs[span].isdigit() or int(cell.attrs[span]) < 1:
                    raise RichError(f"can't parse rich message: invalid {span}")
                out[span] = int(cell.attrs[span])
        cells.append(out)
    return cells


def _details(node: Node, *, draft: bool) -> JSON:
    content = [c for c in node.children if not (isinstance(c, str) and not c.strip())]
    summary = content[0] if content else None
    if not isinstance(summary, Node) or summary.name != "summary":
        raise RichError("can't parse rich message: <details> starts with <summary>")
    block: JSON = {
        "type": "details",
        "summary": _inline(summary.children, "summary"),
        "blocks": _blocks(content[1:], "details", draft=draft),
    }
    if "open" in node.attrs:
        block["is_open"] = True
    return block


# ------------------------------------------------------------------ size and text


def _u16(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass
class _Size:
    units: int = 0
    blocks: int = 0
    depth: int = 0
    columns: int = 0

    def text(self, rich: Any, depth: int) -> None:
        """Measure a RichText at nesting ``depth``."""
        if isinstance(rich, str):
            self.units += _u16(rich)
            self.depth = max(self.depth, depth)
        elif isinstance(rich, list):
            for part in rich:
                self.text(part, depth)
        else:
            self.depth = max(self.depth, depth + 1)
            if "expression" in rich:
                self.units += _u16(rich["expression"])
            elif "text" in rich:
                self.text(rich["text"], depth + 1)

    def blocks_of(self, blocks: list[JSON], depth: int) -> None:
        for block in blocks:
            self.block(block, depth + 1)

    def block(self, block: JSON, depth: int) -> None:
        self.blocks += 1
        self.depth = max(self.depth, depth)
        kind = block["type"]
        if kind == "list":
            for item in block["items"]:
                self.blocks += 1
                self.blocks_of(item["blocks"], depth + 1)
        elif kind in ("blockquote", "details"):
            if kind == "details":
                self.text(block["summary"], depth)
            self.blocks_of(block["blocks"], depth)
        elif kind == "table":
            for row in block["cells"]:
                self.blocks += 1
                self.columns = max(self.columns, sum(cell.get("colspan", 1) for cell in row))
                for cell in row:
                    self.text(cell.get("text", ""), depth + 2)
        elif kind == "mathematical_expression":
            self.units += _u16(block["expression"])
        elif "text" in block:
            self.text(block["text"], depth)


def plain(rich: Any) -> str:
    """The visible text of a RichText."""
    if isinstance(rich, str):
        return rich
    if isinstance(rich, list):
        return "".join(plain(part) for part in rich)
    return str(rich["expression"]) if "expression" in rich else plain(rich.get("text", ""))


def block_text(block: JSON) -> str:
    """A block's visible text: blocks a blank line apart, list items and table rows one
    line apart (as the HTML rendering shows them)."""
    kind = block["type"]
    if kind == "list":
        return "\n".join(blocks_text(item["blocks"]) for item in block["items"])
    if kind == "blockquote":
        return blocks_text(block["blocks"])
    if kind == "details":
        return "\n\n".join([plain(block["summary"]), blocks_text(block["blocks"])])
    if kind == "table":
        rows = block["cells"]
        return "\n".join(" | ".join(plain(cell.get("text", "")) for cell in row) for row in rows)
    if kind == "mathematical_expression":
        return str(block["expression"])
    return plain(block.get("text", ""))


def blocks_text(blocks: list[JSON]) -> str:
    return "\n\n".join(text for text in map(block_text, blocks) if text.strip())


def measure(blocks: list[JSON], *, draft: bool) -> Rich:
    """Check ``blocks`` against the limits; the rich message they make."""
    if not blocks:
        raise RichError("RICH_MESSAGE_EMPTY")
    size = _Size()
    size.blocks_of(blocks, 0)
    if size.units > RICH_TEXT_LIMIT:
        raise RichError("RICH_MESSAGE_TOO_LONG")
    if size.blocks > RICH_BLOCK_LIMIT:
        raise RichError("RICH_MESSAGE_TOO_MANY_BLOCKS")
    if size.depth > RICH_DEPTH_LIMIT:
        raise RichError("RICH_MESSAGE_TOO_DEEP")
    if size.columns > RICH_TABLE_COLUMNS:
        raise RichError("RICH_MESSAGE_TABLE_TOO_WIDE")
    if not draft and any(block.get("type") == "thinking" for block in blocks):
        raise RichError("RICH_MESSAGE_THINKING_NOT_ALLOWED")
    return Rich(
        {"blocks": blocks}, blocks_text(blocks).strip(), size.units, size.blocks, size.depth
    )


_markdown = MarkdownIt("commonmark").enable(["strikethrough", "table"])


def parse_rich(value: Any, *, draft: bool = False) -> Rich:
    """An ``InputRichMessage`` (decoded JSON) as Telegram takes it; raises :class:`RichError`."""
    if not isinstance(value, dict):
        raise RichError("can't parse rich message JSON object")
    given = [key for key in ("html", "markdown", "blocks") if value.get(key) is not None]
    if len(given) != 1:
        raise RichError(
            "RICH_MESSAGE_EMPTY" if not given else "only one of html, markdown, blocks is allowed"
        )
    if value.get("media"):
        raise RichError("media in rich messages are not supported by FakeTelegram")
    if given == ["blocks"]:
        try:
            return measure(list(value["blocks"]), draft=draft)
        except (KeyError, TypeError, AttributeError):
            raise RichError("can't parse rich message blocks") from None
    source = value[given[0]]
    if not isinstance(source, str) or not source.strip():
        raise RichError("RICH_MESSAGE_EMPTY")
    if given == ["markdown"]:
        source = _as_rich_html(_markdown.render(source))
    root = _Parser(source).parse()
    return measure(_blocks(root.children, "message", draft=draft), draft=draft)


def _as_rich_html(rendered: str) -> str:
    """markdown-it's HTML in the rich dialect (no thead/tbody, align for style)."""
    rendered = re.sub(r"</?t(?:head|body)>", "", rendered)
    rendered = re.sub(r' style="text-align:(left|center|right)"', r' align="\1"', rendered)
    return rendered.replace("<hr />", "<hr/>").replace("<br />", "<br>")
