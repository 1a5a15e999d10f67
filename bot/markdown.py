"""The model's Markdown as the bot reads it: the parser, formatting tags, safe links.

Both renderers (bot/telegram/format.py, rich.py) and the speech of an answer
(bot/model/speech.py) read the model's text with it.

CommonMark with GFM tables and strikethrough, reference definitions left as text (a
model's footnotes, "[^1]: text", would vanish otherwise), and formulas: ``$…$``,
``\\(…\\)`` inline and ``$$…$$``, ``\\[…\\]`` on lines of their own, as ``math_inline``
and ``math_block`` tokens (the rich renderer shows them as formulas, the HTML one as
code). Text that only looks like a formula stays text: "$5 and $6" (a closing ``$``
must follow a non-space and precede no digit, and be the first ``$`` after the opening
one).
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline

__all__ = [
    "BOLD",
    "CODE",
    "ITALIC",
    "MARKDOWN",
    "STRIKE",
    "Stack",
    "Tag",
    "clean_text",
    "code_language",
    "safe_url",
    "text_table",
]


def _dollar_math(src: str, pos: int, end: int) -> tuple[str, int] | None:
    """``$…$`` or ``$$…$$`` at ``pos``: (source, position after it), else None.

    Prices stay text: the closing ``$`` is the first unescaped ``$`` after the opening
    one, and it must follow a non-space and precede no digit ("$5 and $6" is no formula).
    """
    if src.startswith("$$", pos):
        close = src.find("$$", pos + 2, end)
        expr = src[pos + 2 : close] if close != -1 else ""
        return (expr, close + 2) if expr.strip() else None
    opening = pos + 1
    if opening >= end or src[opening].isspace() or src[opening] == "$":
        return None
    close = opening
    while True:
        close = src.find("$", close + 1, end)
        if close == -1:
            return None
        if src[close - 1] != "\\":
            break
    if src[close - 1].isspace() or (close + 1 < end and src[close + 1].isdigit()):
        return None
    return src[opening:close], close + 1


def _math_inline(state: StateInline, silent: bool) -> bool:
    """Inline formulas: ``$…$``, ``$$…$$``, ``\\(…\\)`` and ``\\[…\\]`` inside a paragraph."""
    src, pos, end = state.src, state.pos, state.posMax
    if src.startswith(("\\(", "\\["), pos):
        closer = "\\)" if src[pos + 1] == "(" else "\\]"
        close = src.find(closer, pos + 2, end)
        if close == -1 or not src[pos + 2 : close].strip():
            return False
        found: tuple[str, int] | None = (src[pos + 2 : close], close + 2)
    elif src[pos] == "$":
        found = _dollar_math(src, pos, end)
    else:
        return False
    if found is None:
        return False
    if not silent:
        token = state.push("math_inline", "tg-math", 0)
        token.content = found[0].strip()
    state.pos = found[1]
    return True


def _math_block(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """Display formulas on lines of their own: ``$$ … $$`` and ``\\[ … \\]``."""
    if state.is_code_block(start):
        return False
    src = state.src
    begin = state.bMarks[start] + state.tShift[start]
    opener = src[begin : begin + 2]
    if opener not in ("$$", "\\["):
        return False
    closer = "$$" if opener == "$$" else "\\]"
    lines = [src[begin + 2 : state.eMarks[start]]]
    line = start
    while not lines[-1].rstrip().endswith(closer) or (line == start and not lines[0].strip()):
        line += 1
        if line >= end or (state.sCount[line] < state.blkIndent and not state.isEmpty(line)):
            return False  # unclosed (still streaming, or not a formula): stays text
        lines.append(src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]])
    expr = "\n".join(lines).rstrip().removesuffix(closer)
    if not expr.strip():
        return False
    if not silent:
        token = state.push("math_block", "tg-math-block", 0)
        token.content = expr.strip()
        token.map = [start, line + 1]
    state.line = line + 1
    return True


def _parser() -> MarkdownIt:
    md = (
        MarkdownIt("commonmark", {"maxNesting": 64})
        .enable(["strikethrough", "table"])
        .disable("reference")
    )
    md.inline.ruler.before("escape", "math_inline", _math_inline)
    md.block.ruler.before(
        "fence",
        "math_block",
        _math_block,
        {"alt": ["paragraph", "reference", "blockquote", "list"]},
    )
    return md


#: The parser (one per process: building one costs more than most renderings).
MARKDOWN = _parser()


# ------------------------------------------------------------ what both render

_ALLOWED_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
_LANG_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-")
_MAX_LANG_LEN = 32


@dataclass(frozen=True, slots=True, eq=False)
class Tag:
    """A formatting tag; compared by identity (a reopened tag is the same object).
    Shared with the rich renderer (bot/telegram/rich.py)."""

    kind: str
    open: str
    close: str


Stack = tuple[Tag, ...]
BOLD = Tag("b", "<b>", "</b>")
ITALIC = Tag("i", "<i>", "</i>")
STRIKE = Tag("s", "<s>", "</s>")
CODE = Tag("code", "<code>", "</code>")


def code_language(info: str) -> str:
    """The language a code fence's info string names, reduced to what Telegram takes."""
    words = info.split()
    return "".join(c for c in words[0] if c in _LANG_CHARS)[:_MAX_LANG_LEN] if words else ""


def safe_url(url: str) -> str | None:
    """The URL if Telegram may link it (http, https, tg, mailto), else None."""
    url = url.strip()
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in _ALLOWED_SCHEMES or not rest:
        return None
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        return None
    if scheme in ("http", "https") and (not rest.startswith("//") or len(rest) <= 2):
        return None
    return url


def text_table(rows: list[list[str]], header_rows: int) -> str:
    """A table as aligned text with pipes, for a monospaced block (the first
    ``header_rows`` rows above a rule)."""
    if not rows:
        return ""
    ncols = max(len(row) for row in rows)
    cells = [row + [""] * (ncols - len(row)) for row in rows]
    widths = [max(1, *(len(row[c]) for row in cells)) for c in range(ncols)]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    if header_rows > 0:
        lines.insert(header_rows, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def clean_text(text: str) -> str:
    """Replace lone surrogates (from broken JSON) by U+FFFD; join split pairs."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
