"""What a turn is made of: the inbound message and the model, as the turn flow sees them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from transcript import ChatMessage

from .model import Answer


class Model(Protocol):
    """What the turn flow needs from a model (:class:`~bot.model.ModelClient`)."""

    @property
    def name(self) -> str: ...

    async def stream(
        self, messages: Sequence[ChatMessage], on_text: Callable[[str], None]
    ) -> Answer: ...

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer: ...


@dataclass(frozen=True, slots=True)
class Inbound:
    """A user's text message, stripped of everything Telegram-specific but ids."""

    chat_id: int
    message_id: int
    user_id: int
    text: str
    reply_to: int | None = None
    thread_id: int | None = None
    is_group: bool = False

    @property
    def scope(self) -> str:
        return str(self.chat_id)
