"""The model edge's values: what a call returns, how it fails, what the turn needs of it.

Kept apart from the client (bot/model/client.py) and the SDK edge (bot/model/sdk.py),
which both use them: the SDK edge classifies failures as :class:`ModelError`, the
client reads answers into :class:`Answer`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from transcript import ChatMessage, ToolCall

ErrorKind = Literal[
    "rate_limited", "unavailable", "timeout", "too_long", "rejected", "config", "no_images",
    "bad_image", "refused", "size",
]  # fmt: skip
#: ``refused`` (the endpoint refused the content: never retried) and ``size`` (it refused
#: a picture's or a request's size) come only from the speech and image calls
#: (bot/model/speech.py, bot/model/images.py).
#: Image bytes by digest, for the images of the messages sent; ``None``: the model
#: cannot see images, and each is sent as :data:`IMAGE_PLACEHOLDER` instead. An image
#: whose digest is left out (the model could not read it) is sent as
#: :data:`IMAGE_UNREADABLE`.
Media = Mapping[str, bytes] | None
IMAGE_PLACEHOLDER = "[an image the user sent; this model cannot see images]"
IMAGE_UNREADABLE = "[an image the user sent; the model could not read it]"
#: The same for a picture the bot made (an assistant's or a tool's image).
PICTURE_PLACEHOLDER = "[a picture the assistant made; this model cannot see images]"
#: What a user message of its own says of the pictures the bot made that it carries (a
#: model sees images in user messages only, bot/model/wire.py).
MADE_PICTURES = "[the picture the assistant made above, as the user sees it]"
#: Per-message overhead of the chat format, in tokens.
MESSAGE_OVERHEAD = 4


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call; ``estimated`` when the provider reported none."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    usage: Usage
    latency: float
    #: Tools the model asked to run (only when it was offered tools).
    tool_calls: tuple[ToolCall, ...] = ()
    #: What a reasoning model thought before answering (never part of ``text``).
    reasoning: str = ""
    #: The user stopped the answer: ``text`` is what had arrived by then.
    stopped: bool = False


class ModelError(Exception):
    """A model call failed after retries; ``kind`` says how, ``partial`` what arrived.

    ``usage`` is an estimate of what the failed call may have cost (the prompt
    and any partial answer), ``latency`` how long it took.
    """

    def __init__(self, kind: ErrorKind, detail: str, partial: str = "") -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.partial = partial
        self.usage = Usage(0, 0, 0, estimated=True)
        self.latency = 0.0
        #: The failure came while reading a stream the endpoint had accepted.
        self.mid_stream = False
        #: ``bad_image``: the (message, part) index of the wire messages the error
        #: names, if it names one (its ``param``), and that image's digest.
        self.part: tuple[int, int] | None = None
        self.image: str | None = None
        #: A failure another try may not meet (429, 5xx, a timeout, a broken connection).
        self.transient = False
        #: The wait the endpoint asked for (``retry-after-ms`` / ``retry-after``), seconds.
        self.retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        """Transient, and no text arrived: worth another try (nothing was shown)."""
        return self.transient and not self.partial


class Model(Protocol):
    """What the turn flow needs from a model (:class:`ModelClient`)."""

    @property
    def name(self) -> str: ...

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        *,
        media: Media = None,
        stop: asyncio.Event | None = None,
        on_thoughts: Callable[[str], None] | None = None,
    ) -> Answer: ...

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer: ...


def estimate_text(text: str) -> int:
    """The one token estimate (~4 characters a token), for what no provider has counted."""
    return math.ceil(len(text) / 4)


def estimate_messages(messages: Sequence[ChatMessage]) -> int:
    """Estimated prompt tokens of ``messages``: text, the chat format's overhead, tool
    calls, and each image by the rule of :attr:`transcript.Image.tokens`.

    Runs over every message of a request: kept to plain loops (no nested generators).
    """
    total = 0
    for m in messages:
        total += -(-len(m.content or "") // 4) + MESSAGE_OVERHEAD  # ceil, as estimate_text
        if m.tool_calls:
            total += sum(estimate_text(c.name + c.arguments) for c in m.tool_calls)
        if m.images:
            total += sum(i.tokens for i in m.images)
    return total
