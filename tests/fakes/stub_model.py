"""A model that answers at once, for tests and benches that drive the engine directly.

It stands in for :class:`bot.model.Model` (and the tool loop's model) where the
model's HTTP edge is not what is tested or measured; ``tests/fakes/model.py`` is
the stand-in that speaks the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from bot.model import Answer, Media, ModelError, Usage
from transcript import ChatMessage


class StubModel:
    """Answers ``answer`` at once, as a provider with no latency would, with usage that
    grows with the request. Counts its calls; while ``fail`` is set, raises it.

    A variant answers differently by overriding :meth:`reply` (or :meth:`complete`).
    """

    name = "instant"

    def __init__(self, answer: str = "") -> None:
        self.answer = answer
        self.calls = 0
        self.fail: ModelError | None = None

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        on_text: Callable[[str], None],
        *,
        tools: bytes | None = None,
        media: Media = None,
        stop: asyncio.Event | None = None,
        on_thoughts: Callable[[str], None] | None = None,
    ) -> Answer:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        answer = self.reply(messages, tools=tools, media=media)
        if answer.text:
            on_text(answer.text)
        return answer

    def reply(
        self, messages: Sequence[ChatMessage], *, tools: bytes | None, media: Media
    ) -> Answer:
        """The answer to one request (its text is streamed whole, when it has one)."""
        return Answer(self.answer, Usage(len(messages) * 50, 40), 0.0)

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> Answer:
        return Answer("summary", Usage(len(messages) * 50, 10), 0.0)
