"""Pictures: made from a prompt, or a picture changed as a prompt says.

:class:`ImageMaker` calls the OpenAI-compatible ``POST /images/generations`` and
``POST /images/edits`` (the source picture uploaded with the prompt), asking for the
picture's bytes (``response_format: "b64_json"``) where the endpoint takes that
parameter: GPT image models always answer base64 and refuse it, so it is left out for
them, and for any endpoint that refuses it once (bot/model/sdk.py, ``_b64_or_not``).

Failures are :class:`~bot.model.ModelError`:

* ``refused``: the endpoint refused the content (its safety system); never tried again;
* ``size``: it refused a size (the source picture's bytes or sides, the request's);
* an outage: ``unavailable``, ``timeout``, ``rate_limited`` (tried again first, as every
  model call is, :class:`~bot.model.client.Endpoint`);
* ``config`` (401, 403, 404) and ``rejected`` (anything else refused; an answer that
  holds no picture's bytes).
"""

from __future__ import annotations

import base64
import binascii
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .client import Endpoint
from .types import ModelError

if TYPE_CHECKING:
    import openai
    from openai.types import ImagesResponse

#: The model errors that mean the image endpoint is away (say so, try later).
OUTAGE = frozenset(("unavailable", "timeout", "rate_limited"))


@dataclass(frozen=True, slots=True)
class Picture:
    """One picture the endpoint made (stored as a blob of the chat, as received photos)."""

    data: bytes
    mime: str
    width: int
    height: int
    latency: float
    #: The prompt as the endpoint rewrote it, where it says (DALL·E 3).
    revised_prompt: str | None = None


class ImageMaker:
    """Makes and edits pictures with ``model`` at ``base_url``; its SDK client is made on
    the first call (bot/model/sdk.py)."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        name: str | None = None,
    ) -> None:
        """``name``: the catalogue's name of the model (default: its id)."""
        self.model = model
        self.name = name or model
        self._endpoint = Endpoint(api_key, base_url, timeout, max_retries)
        self._client: openai.AsyncOpenAI | None = None
        #: Whether requests ask for ``response_format: b64_json`` (settled by the endpoint).
        self.b64 = "gpt-image" not in model.lower()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def generate(self, prompt: str) -> Picture:
        """A picture of ``prompt``."""
        from . import sdk  # noqa: PLC0415 - imported on the first model call

        client = self._sdk_client()
        return await self._made(
            lambda: sdk.generate_image(client, model=self.model, prompt=prompt, b64=self.b64)
        )

    async def edit(self, prompt: str, source: bytes) -> Picture:
        """``source`` (PNG, JPEG, WebP or GIF bytes) changed as ``prompt`` says."""
        from . import sdk  # noqa: PLC0415 - imported on the first model call

        found = picture_info(source)
        if found is None:
            raise ValueError("edit() takes the bytes of a PNG, JPEG, WebP or GIF picture")
        mime = found[0]
        image = (f"image.{mime.removeprefix('image/')}", source, mime)
        client = self._sdk_client()
        return await self._made(
            lambda: sdk.edit_image(
                client, model=self.model, prompt=prompt, image=image, b64=self.b64
            )
        )

    def _sdk_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = self._endpoint.client()
        return self._client

    async def _made(self, call: Callable[[], Awaitable[tuple[ImagesResponse, bool]]]) -> Picture:
        started = time.monotonic()
        try:
            response, self.b64 = await self._endpoint.call(call)
            data, revised = _first_picture(response)
            found = picture_info(data)
            if found is None:
                raise ModelError("rejected", "the image endpoint answered bytes of no picture")
        except ModelError as error:
            error.latency = time.monotonic() - started
            raise
        mime, width, height = found
        return Picture(data, mime, width, height, time.monotonic() - started, revised)


def _first_picture(response: ImagesResponse) -> tuple[bytes, str | None]:
    """The bytes of the answer's first picture, and its revised prompt."""
    first = response.data[0] if response.data else None
    if first is None or not first.b64_json:
        raise ModelError("rejected", "the image endpoint answered no picture's bytes")
    try:
        data = base64.b64decode(first.b64_json, validate=True)
    except (binascii.Error, ValueError):
        raise ModelError("rejected", "the image endpoint answered no base64") from None
    return data, first.revised_prompt


def picture_info(data: bytes) -> tuple[str, int, int] | None:
    """(MIME type, width, height) of PNG, JPEG, WebP or GIF bytes; None for anything else
    (a side the header does not tell is 0)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data.startswith(b"\xff\xd8\xff"):
        return ("image/jpeg", *_jpeg_size(data))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ("image/webp", *_webp_size(data))
    if data.startswith((b"GIF87a", b"GIF89a")) and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    return None


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The sides a JPEG's frame header (SOF0…SOF15, not DHT, JPG or DAC) tells."""
    pos = 2
    while pos + 9 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        pos += 2 + length
    return 0, 0


def _webp_size(data: bytes) -> tuple[int, int]:
    """The sides of a WebP's first chunk: VP8 (lossy), VP8L (lossless) or VP8X (extended)."""
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return 0, 0
