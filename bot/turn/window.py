"""The request a turn sends, as values: the window of messages, the estimator sizing
it, and the small text helpers the context window (bot/turn/context.py) folds with."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from transcript import ChatMessage, Fold, Node

from ..model import MESSAGE_OVERHEAD, Media, Usage, estimate_messages


@dataclass(frozen=True, slots=True)
class Window:
    """What to send: the messages, the fold they start from, their estimated size.

    ``view`` names where the verbatim part starts (the fold, and how many of
    the oldest nodes after it were left out), so two calls sent the same view
    differ only by what was appended.
    """

    messages: tuple[ChatMessage, ...]
    fold: Fold | None
    tokens: int
    dropped: int = 0
    #: The bytes of the messages' images (``None``: the model gets placeholders).
    media: Media = None

    @property
    def view(self) -> str:
        return view_of(self.fold, self.dropped)


def view_of(fold: Fold | None, dropped: int) -> str:
    return f"{fold.at.ref if fold else ''}+{dropped}" if dropped else (fold.at.ref if fold else "")


class Estimator:
    """Characters/4 per message, scaled by what the provider reported for earlier calls."""

    def __init__(self) -> None:
        self.ratio = 1.0

    def tokens(self, messages: Sequence[ChatMessage]) -> int:
        return math.ceil(estimate_messages(messages) * self.ratio)

    def sized(self, messages: int, chars: int) -> int:
        """The estimate from totals (``TranscriptStore.size``), without the messages."""
        return math.ceil((chars / 4 + MESSAGE_OVERHEAD * messages) * self.ratio)

    def learn(self, messages: Sequence[ChatMessage], usage: Usage) -> None:
        """Move the ratio toward reported/estimated for a call of known size."""
        raw = estimate_messages(messages)
        if usage.estimated or raw < 50 or usage.prompt_tokens <= 0:
            return
        observed = min(4.0, max(0.25, usage.prompt_tokens / raw))
        self.ratio = 0.8 * self.ratio + 0.2 * observed


def after(nodes: list[Node], fold: Fold | None) -> int:
    """Index of the first node after the fold (after the root without one)."""
    if fold is None:
        return 1
    # depths grow along a path: look the fold's node up by its depth
    i = bisect.bisect_left(nodes, fold.depth, key=lambda n: n.depth)
    if i < len(nodes) and nodes[i].id.seg == fold.at.seg and nodes[i].id.idx == fold.at.idx:
        return i + 1
    seg, idx = fold.at.seg, fold.at.idx
    for i in range(len(nodes) - 1, 0, -1):  # (a node without messages shares a depth)
        if nodes[i].id.seg == seg and nodes[i].id.idx == idx:
            return i + 1
    return 1


def line(message: ChatMessage) -> str:
    """A message as the summariser reads it (tool calls and results named, results cut)."""
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments[:200]})" for c in message.tool_calls)
        return f"Assistant called tools: {calls}"
    if message.role == "tool":
        return f"Tool result: {(message.content or '')[:500]}"
    return f"{message.role.capitalize()}: {summary_text(message)}"


def summary_text(message: ChatMessage) -> str:
    """A message for the summariser: each image as ``[image: its caption]``."""
    if not message.images:
        return message.content or ""
    caption = (message.content or "").strip()
    first = f"[image: {caption}]" if caption else "[image]"
    return " ".join([first, *["[image]"] * (len(message.images) - 1)])


def starts_with_user(node: Node) -> bool:
    return bool(node.messages) and node.messages[0].role == "user"


def previous_user(nodes: list[Node]) -> int | None:
    """Index of the user node of the previous exchange (followed by its answer)."""
    for i in range(len(nodes) - 3, 0, -1):
        if starts_with_user(nodes[i]) and nodes[i + 1].messages[0].role == "assistant":
            return i
    return None
