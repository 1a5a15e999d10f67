"""Speech to text through an OpenAI-compatible ``POST /audio/transcriptions``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client import Endpoint

if TYPE_CHECKING:
    import openai


class Transcriber:
    """Transcribes voice notes and audio files with ``model`` at ``base_url``.

    Its SDK client is made on the first transcription (bot/model/sdk.py: the SDK is
    not imported at start-up).
    """

    def __init__(
        self, *, api_key: str, base_url: str | None, model: str, timeout: float, max_retries: int
    ) -> None:
        self.model = model
        self._endpoint = Endpoint(api_key, base_url, timeout, max_retries)
        self._client: openai.AsyncOpenAI | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def transcribe(self, data: bytes, *, name: str, mime: str) -> str:
        """The text heard; failures as :class:`~bot.model.ModelError`."""
        from . import sdk  # noqa: PLC0415 - imported on the first model call

        if self._client is None:
            self._client = self._endpoint.client()
        client = self._client
        return await self._endpoint.call(
            lambda: sdk.transcribe(client, model=self.model, data=data, name=name, mime=mime)
        )
