"""The fake model server's audio and image endpoints: transcriptions, speech and
pictures (generations and edits), each checked as strictly as OpenAI checks them."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import struct
import time
import zlib
from collections import deque
from typing import Any

from aiohttp import web

from .model_core import ModelCore
from .model_types import (
    _DEFAULT_MESSAGES,
    _ERROR_TYPES,
    ImageRequest,
    SpeechRequest,
    _ApiError,
    _invalid,
    _invalid_type,
)

#: The most characters one speech request may carry (OpenAI's limit).
SPEECH_MAX_CHARS = 4096

_SPEECH_PARAMS = frozenset(
    {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
)

_SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")

#: OpenAI's built-in voices.
VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer",
     "verse", "marin", "cedar"}
)  # fmt: skip

_IMAGE_PARAMS = frozenset(
    {"prompt", "model", "n", "size", "quality", "response_format", "background",
     "output_format", "output_compression", "user", "safety_identifier"}
)  # fmt: skip

_SIZES = {
    "gpt-image": ("auto", "1024x1024", "1536x1024", "1024x1536"),
    "other": ("256x256", "512x512", "1024x1024", "1792x1024", "1024x1792"),
}


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise _invalid(
            "We could not parse the JSON body of your request. The OpenAI API expects a JSON "
            "payload."
        )
    return body


def _required(body: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if name not in body:
            raise _invalid(
                f"Missing required parameter: '{name}'.",
                param=name, code="missing_required_parameter",
            )  # fmt: skip


def _check_voice(voice: object) -> None:
    custom = isinstance(voice, dict) and set(voice) == {"id"} and isinstance(voice["id"], str)
    if not custom and not (isinstance(voice, str) and voice in VOICES):
        listed = ", ".join(f"'{v}'" for v in sorted(VOICES))
        raise _invalid(
            f"Invalid value: {json.dumps(voice)}. Supported values are: {listed}.",
            param="voice", code="invalid_value",
        )  # fmt: skip


def _speech_options(body: dict[str, Any]) -> str:
    """The checked optional parameters of a speech request; its audio format."""
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4:
        raise _invalid("speed must be a number from 0.25 to 4.0", param="speed")
    if not isinstance(body.get("instructions", ""), str):
        raise _invalid_type("instructions", "a string", body["instructions"])
    if body.get("stream_format", "audio") not in ("audio", "sse"):
        raise _invalid("stream_format must be 'audio' or 'sse'", param="stream_format")
    audio_format = str(body.get("response_format", "mp3"))
    if audio_format not in _SPEECH_FORMATS:
        listed = ", ".join(f"'{f}'" for f in _SPEECH_FORMATS)
        raise _invalid(
            f"Invalid value: '{audio_format}'. Supported values are: {listed}.",
            param="response_format", code="invalid_value",
        )  # fmt: skip
    if audio_format != "opus":
        raise _invalid(
            f"FakeOpenAI encodes only opus; this request asked for {audio_format} "
            "(the API's default is mp3).",
            param="response_format",
        )
    return audio_format


def _count(body: dict[str, Any]) -> int:
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10:
        raise _invalid("n must be an integer from 1 to 10", param="n")
    return n


def _picture_kind(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


@functools.cache
def ogg_opus_sample() -> bytes:
    """Real OGG/Opus bytes: 0.2 s of a quiet 440 Hz tone, mono, 48 kHz, encoded once by
    libsndfile (the ``soundfile`` package's wheel ships it with Opus)."""
    import numpy  # noqa: PLC0415 - only tests that speak pay for the import
    import soundfile  # noqa: PLC0415

    rate = 48_000
    tone = 0.2 * numpy.sin(2 * numpy.pi * 440 * numpy.arange(rate // 5) / rate)
    out = io.BytesIO()
    soundfile.write(out, tone.astype("float32"), rate, format="OGG", subtype="OPUS")
    return out.getvalue()


def png_bytes(seed: bytes, side: int = 32) -> bytes:
    """A real PNG: ``side`` × ``side`` pixels of one RGB colour drawn from ``seed``."""
    colour = hashlib.sha256(seed).digest()[:3]
    rows = (b"\x00" + colour * side) * side  # filter type 0 on each row

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8 bits, RGB
    return b"".join(
        (b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header), chunk(b"IDAT", zlib.compress(rows)),
         chunk(b"IEND", b""))
    )  # fmt: skip


class MediaEndpoints(ModelCore):
    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/images/generations", self._generate_image)
        app.router.add_post("/v1/images/edits", self._edit_image)
        app.router.add_get("/v1/images/files/{name}", self._image_file)

    async def _transcribe(self, request: web.Request) -> web.Response:
        try:
            self._check_auth(request)
            if request.content_type != "multipart/form-data":
                raise _invalid("Expected a multipart/form-data request body.")
            form = await request.post()
            unknown = sorted(
                set(form) - {"file", "model", "language", "prompt", "response_format",
                             "temperature"}
            )  # fmt: skip
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            upload, model = form.get("file"), form.get("model")
            if not isinstance(model, str) or not model:
                raise _invalid(
                    "you must provide a model parameter", param="model",
                    code="missing_required_parameter",
                )  # fmt: skip
            if not isinstance(upload, web.FileField):
                raise _invalid("1 validation error for Request\nbody -> file\n  field required")
            if model != self.transcribe_model:
                raise self._model_not_found(model)
            data = upload.file.read()
            if self._transcription_faults:
                status = self._transcription_faults.popleft()
                kind = "server_error" if status >= 500 else "invalid_request_error"
                raise _ApiError(status, "The server had an error processing your request.",
                                type_=kind)  # fmt: skip
            text = self.transcriber(data, upload.filename)
            self.transcriptions.append((model, upload.filename, upload.content_type, data))
            return web.json_response({"text": text}, headers=self._response_headers())
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    def _injected(self, faults: deque[int]) -> None:
        """The next queued failure of one endpoint, raised (nothing queued: nothing)."""
        if faults:
            status = faults.popleft()
            message = _DEFAULT_MESSAGES.get(status, f"Injected failure ({status}).")
            kind, code = _ERROR_TYPES.get(status, ("server_error", None))
            raise _ApiError(status, message, type_=kind, code=code)

    async def _speech(self, request: web.Request) -> web.Response:
        self.speech_posts += 1
        self._notify()
        if self.speech_gate is not None and not await self._pass_gate(self.speech_gate):
            return web.Response(status=503)
        try:
            self._check_auth(request)
            body = await _json_body(request)
            _required(body, ("model", "input", "voice"))
            unknown = sorted(set(body) - _SPEECH_PARAMS)
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            model, text, voice = body["model"], body["input"], body["voice"]
            if not isinstance(model, str):
                raise _invalid_type("model", "a string", model)
            if model != self.speech_model:
                raise self._model_not_found(model)
            if not isinstance(text, str) or not text:
                raise _invalid("input must be a non-empty string", param="input")
            if len(text) > SPEECH_MAX_CHARS:
                raise _invalid(
                    f"[{{'type': 'string_too_long', 'loc': ('body', 'input'), 'msg': 'String "
                    f"should have at most {SPEECH_MAX_CHARS} characters'}}]",
                    param="input", code="string_above_max_length",
                )  # fmt: skip
            _check_voice(voice)
            audio_format = _speech_options(body)
            self._injected(self._speech_faults)
            self.speeches.append(SpeechRequest(model, voice, text, audio_format, body))
            return web.Response(
                body=self.speech_audio or ogg_opus_sample(), content_type="audio/ogg",
                headers=self._response_headers(),
            )  # fmt: skip
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _generate_image(self, request: web.Request) -> web.Response:
        self.image_posts += 1
        try:
            self._check_auth(request)
            body = await _json_body(request)
            _required(body, ("prompt",))
            unknown = sorted(set(body) - _IMAGE_PARAMS - {"style", "moderation"})
            if unknown:
                raise _invalid(f"Unrecognized request argument supplied: {unknown[0]}")
            model, prompt, b64 = self._check_image_request(body)
            self._injected(self._image_faults)
            record = ImageRequest("generate", model, prompt, fields=body)
            return self._pictures(record, b64, _count(body), prompt.encode())
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _edit_image(self, request: web.Request) -> web.Response:
        self.image_posts += 1
        try:
            self._check_auth(request)
            if request.content_type != "multipart/form-data":
                raise _invalid("Expected a multipart/form-data request body.")
            fields, images = await self._edit_form(request)
            _required(fields, ("prompt",))
            if not images:
                raise _invalid(
                    "1 validation error for Request\nbody -> image\n  field required",
                    param="image",
                )
            model, prompt, b64 = self._check_image_request(fields)
            for name, _type, data in images:
                self._check_source(name, data)
            self._injected(self._image_faults)
            record = ImageRequest("edit", model, prompt, fields=fields, images=images)
            seed = prompt.encode() + b"".join(hashlib.sha256(i[2]).digest() for i in images)
            return self._pictures(record, b64, _count(fields), seed)
        except _ApiError as err:
            return self._error(err)
        finally:
            self._notify()

    async def _edit_form(
        self, request: web.Request
    ) -> tuple[dict[str, Any], list[tuple[str, str, bytes]]]:
        """The form's fields (numbers as numbers) and its ``image``/``image[]`` files."""
        fields: dict[str, Any] = {}
        images: list[tuple[str, str, bytes]] = []
        form = await request.post()
        for key, value in form.items():
            if key in ("image", "image[]"):
                if not isinstance(value, web.FileField):
                    raise _invalid("image must be a file", param="image")
                images.append((value.filename, value.content_type, value.file.read()))
            elif key == "mask":
                continue
            elif key not in _IMAGE_PARAMS | {"input_fidelity"}:
                raise _invalid(f"Unrecognized request argument supplied: {key}")
            else:
                text = str(value)
                fields[key] = int(text) if key == "n" and text.isdigit() else text
        return fields, images

    def _check_image_request(self, body: dict[str, Any]) -> tuple[str, str, bool]:
        """(model, prompt, answer base64?) of a valid request; else the API's error."""
        model = body.get("model", "dall-e-2")
        if not isinstance(model, str):
            raise _invalid_type("model", "a string", model)
        if model != self.image_model:
            raise self._model_not_found(model)
        prompt = body["prompt"]
        gpt_image = model.startswith("gpt-image")
        b64_only = (
            gpt_image if self.refuses_response_format is None else self.refuses_response_format
        )
        longest = 32000 if gpt_image else 4000
        if not isinstance(prompt, str) or not prompt.strip():
            raise _invalid("prompt must be a non-empty string", param="prompt")
        if len(prompt) > longest:
            raise _invalid(
                f"Invalid 'prompt': string too long. Expected a string with maximum length "
                f"{longest}, but got a string with length {len(prompt)} instead.",
                param="prompt", code="string_above_max_length",
            )  # fmt: skip
        if "response_format" in body and b64_only:
            raise _invalid(
                "Unknown parameter: 'response_format'.",
                param="response_format", code="unknown_parameter",
            )  # fmt: skip
        answer = body.get("response_format", "url")
        if answer not in ("url", "b64_json"):
            raise _invalid(
                f"Invalid value: '{answer}'. Supported values are: 'url' and 'b64_json'.",
                param="response_format", code="invalid_value",
            )  # fmt: skip
        sizes = _SIZES["gpt-image" if gpt_image else "other"]
        size = body.get("size", "auto" if gpt_image else "1024x1024")
        if size not in sizes:
            listed = ", ".join(f"'{s}'" for s in sizes)
            raise _invalid(
                f"Invalid value: '{size}'. Supported values are: {listed}.",
                param="size", code="invalid_value",
            )  # fmt: skip
        if self.refuse_marker and self.refuse_marker in prompt:
            if gpt_image:
                raise _ApiError(
                    400,
                    "Your request was rejected by the safety system. If you believe this is "
                    "an error, contact us at help.openai.com and include the request ID.",
                    type_="image_generation_user_error", code="moderation_blocked",
                )  # fmt: skip
            raise _invalid(
                "Your request was rejected as a result of our safety system. Your prompt may "
                "contain text that is not allowed by our safety system.",
                code="content_policy_violation",
            )  # fmt: skip
        return model, prompt, b64_only or answer == "b64_json"

    def _check_source(self, name: str, data: bytes) -> None:
        """An edit's source picture: PNG, JPEG or WebP bytes, at most ``edit_max_bytes``."""
        kind = _picture_kind(data)
        if kind is None:
            raise _invalid(
                f"Invalid file '{name}': unsupported mimetype. Supported file formats are "
                "'image/jpeg', 'image/png', and 'image/webp'.",
                param="image", code="invalid_image_format",
            )  # fmt: skip
        if len(data) > self.edit_max_bytes:
            raise _invalid(
                f"Invalid file '{name}': the image is too large ({len(data)} bytes; at most "
                f"{self.edit_max_bytes}).",
                param="image", code="image_too_large",
            )  # fmt: skip

    def _pictures(self, record: ImageRequest, b64: bool, n: int, seed: bytes) -> web.Response:
        """The answer of ``n`` pictures drawn from ``seed``, kept in ``record``."""
        data: list[dict[str, Any]] = []
        for i in range(n):
            picture = png_bytes(seed + bytes([i]), self.picture_side)
            record.answered.append(picture)
            if b64:
                data.append({"b64_json": base64.b64encode(picture).decode()})
            else:
                name = f"img-{next(self._ids)}.png"
                self._image_files[name] = picture
                data.append({"url": f"{self.base_url}/images/files/{name}"})
        self.image_requests.append(record)
        answer: dict[str, Any] = {"created": int(time.time()), "data": data}
        if record.model.startswith("gpt-image"):
            side = self.picture_side
            answer |= {
                "background": "opaque", "output_format": "png", "quality": "medium",
                "size": f"{side}x{side}",
                "usage": {
                    "input_tokens": 50, "output_tokens": 1056, "total_tokens": 1106,
                    "input_tokens_details": {"text_tokens": 50, "image_tokens": 0},
                },
            }  # fmt: skip
        return web.json_response(answer, headers=self._response_headers())

    async def _image_file(self, request: web.Request) -> web.Response:
        found = self._image_files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=found, content_type="image/png")
