"""Value objects of the transcript store: messages, node ids, nodes, folds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))
#: Roles counted by ``depth``: the conversation itself, not its scaffolding.
DEPTH_ROLES: frozenset[str] = frozenset(("user", "assistant"))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call requested by the model (kept verbatim for replay)."""

    id: str
    name: str
    arguments: str


#: Longest side an image is scaled to before it is cut into tiles (the estimate rule).
_FIT_SIDE = 2048
_SHORT_SIDE = 768
_TILE = 512


@dataclass(frozen=True, slots=True)
class Image:
    """An image in a message: a reference to its bytes, stored once per scope.

    ``digest`` is the SHA-256 (hex) of the bytes and names the blob
    (:func:`transcript.keys.blob_key`); the node holds only this reference.
    """

    digest: str
    mime: str
    width: int = 0
    height: int = 0

    @property
    def tokens(self) -> int:
        """Estimated prompt tokens until a provider has counted them.

        The rule of OpenAI's high-detail images: fit into 2048x2048, scale the
        short side down to 768, then 170 tokens per 512-pixel tile plus 85
        (an image of unknown size counts as one 1024x1024: 765).
        """
        known = self.width > 0 and self.height > 0
        w, h = (float(self.width), float(self.height)) if known else (1024.0, 1024.0)
        scale = min(1.0, _FIT_SIDE / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, _SHORT_SIDE / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / _TILE) * math.ceil(h / _TILE)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a model transcript.

    ``content`` may be ``None`` only for an assistant message that carries
    ``tool_calls``. A ``tool`` message answers the call named by ``tool_call_id``.
    ``images`` (a user's message) are sent beside the text, in order.
    """

    role: Role
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    images: tuple[Image, ...] = ()


def sizing_chars(message: ChatMessage) -> int:
    """A message's size in characters for estimates (an image counts 4 per token)."""
    size = len(message.content or "")
    for image in message.images:
        size += 4 * image.tokens
    return size


def count_depth(messages: tuple[ChatMessage, ...] | list[ChatMessage]) -> int:
    """Number of user and assistant messages (the unit of ``[depth:N]``); an assistant
    message that carries tool calls is a step of the tool loop, not an answer."""
    return sum(1 for m in messages if m.role in DEPTH_ROLES and not m.tool_calls)


@dataclass(frozen=True, slots=True, order=True)
class NodeId:
    """Identity of a node: chat scope, conversation tree, segment, index in segment.

    A segment is a run of nodes in which each node's parent is the one before
    it; node ``(seg, 0)`` records where the segment hangs (or is the root when
    ``seg == 0``). Node ids are only meaningful inside their scope.
    """

    scope: str
    tree: int
    seg: int
    idx: int

    @property
    def ref(self) -> str:
        """Compact form stored in alias and idempotency hashes: ``"tree:seg.idx"``."""
        return f"{self.tree}:{self.seg}.{self.idx}"

    @classmethod
    def parse(cls, scope: str, ref: str | bytes) -> NodeId:
        """Inverse of :attr:`ref`; raises ``ValueError`` on a malformed value."""
        text = ref.decode() if isinstance(ref, bytes) else ref
        tree, sep, rest = text.partition(":")
        seg, dot, idx = rest.partition(".")
        if not sep or not dot:
            raise ValueError(f"malformed node reference {text!r}")
        return cls(scope, int(tree), int(seg), int(idx))

    def __str__(self) -> str:
        return f"{self.scope}/{self.ref}"


@dataclass(frozen=True, slots=True)
class Node:
    """An immutable node: the messages appended at one step and the chain depth there.

    ``digest`` is the SHA-1 of its record as the store read or wrote it (b"": not
    known): an append below it checks that Redis still holds that record, so a node
    Redis lost (and handed its id out again) never gets a child of another thread.
    """

    id: NodeId
    depth: int
    messages: tuple[ChatMessage, ...]
    digest: bytes = field(default=b"", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Fold:
    """A summary standing for the chain root → ``at`` (the originals stay).

    It serves every branch below ``at``; ``depth`` is the depth it stands for.
    """

    at: NodeId
    depth: int
    messages: tuple[ChatMessage, ...]


@dataclass(frozen=True, slots=True)
class Transcript:
    """A chain assembled root → leaf.

    ``messages`` is what the model is sent; ``depth`` counts the user and
    assistant messages of the whole chain (a fold does not lower it).
    ``folded`` is the fold the view starts from (None: the full history).
    """

    leaf: NodeId
    depth: int
    messages: tuple[ChatMessage, ...] = field(repr=False)
    folded: Fold | None = None
