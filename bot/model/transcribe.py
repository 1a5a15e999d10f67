"""Speech to text through an OpenAI-compatible ``POST /audio/transcriptions``."""

from __future__ import annotations

import openai

from .client import _classify, openai_client


class Transcriber:
    """Transcribes voice notes and audio files with ``model`` at ``base_url``."""

    def __init__(
        self, *, api_key: str, base_url: str | None, model: str, timeout: float, max_retries: int
    ) -> None:
        self.model = model
        self._client = openai_client(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    async def close(self) -> None:
        await self._client.close()

    async def transcribe(self, data: bytes, *, name: str, mime: str) -> str:
        """The text heard; failures as :class:`~bot.model.ModelError`."""
        try:
            result = await self._client.audio.transcriptions.create(
                model=self.model, file=(name, data, mime or "application/octet-stream")
            )
        except openai.OpenAIError as exc:
            raise _classify(exc) from exc
        return result.text.strip()
