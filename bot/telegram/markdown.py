"""The Markdown parser both renderers read the model's text with.

CommonMark with GFM tables and strikethrough, reference definitions left as text (a
model's footnotes, "[^1]: text", would vanish otherwise), and formulas: ``$…$``,
``\\(…\\)`` inline and ``$$…$$``, ``\\[…\\]`` on lines of their own, as ``math_inline``
and ``math_block`` tokens (the rich renderer shows them as formulas, the HTML one as
code). Text that only looks like a formula stays text: "$5 and $6" (a closing ``$``
must follow a non-space and precede no digit, and be the first ``$`` after the opening
one).
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline

__all__ = ["MARKDOWN"]


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
