"""The openai SDK edge: the client, the calls and their failures as :class:`ModelError`.

Imported on the first model call (or by :func:`bot.model.client.load_sdk` once the
bot polls), never at start-up: importing the SDK builds its thousand response types
and takes about half a second of CPU. bot/model/client.py builds the requests and
reads the answers; this module hands them to the SDK and classifies what fails::

    APITimeoutError (a real one)             -> timeout
    RateLimitError                           -> rate_limited
    APIConnectionError (or an aiohttp        -> unavailable
      connection error the SDK reports as
      a timeout, see _timed_out)
    400 context_length_exceeded              -> too_long
    400 "cannot take images"                 -> no_images
    400 about one image                      -> bad_image (with the part it names)
    speech and image calls (classify_media):
      a content or safety refusal            -> refused (never retried)
      a refused size (413, a picture's       -> size
        bytes or sides, the size parameter)
    401, 403, 404                            -> config
    5xx, anything unforeseen                 -> unavailable
    other statuses                           -> rejected
"""

from __future__ import annotations

import email.utils
import inspect
import json
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, cast

import aiohttp
import openai
from openai.types import CompletionUsage, ImagesResponse
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from .types import ModelError, Usage


def openai_client(*, api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
    """The SDK client every call to the model endpoint goes through (chat, transcription).

    It runs on the SDK's aiohttp transport (``openai[aiohttp]``; aiohttp is aiogram's
    HTTP client already) instead of httpx's own (httpcore on anyio): the SDK's timeouts
    and typed errors stay, at less of the bot's CPU per turn (``python -m bench
    process`` measures it). Its retries are off: the edge retries once, in
    :meth:`bot.model.client.Endpoint.call`."""
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(),
    )


def can_post_bytes(client: openai.AsyncOpenAI) -> bool:
    """Whether this SDK's ``post`` sends a prebuilt body as it is (``content=``)."""
    try:
        return "content" in inspect.signature(client.post).parameters
    except (TypeError, ValueError):
        return False


async def stream_chunks(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    body: bytes | list[dict[str, Any]],
    tools: bytes | None,
) -> AsyncGenerator[dict[str, Any], None]:
    """The streamed chunks of one completion, each as its JSON object.

    ``body``: the prebuilt request (sent with ``post(content=...)``, chunks read as
    ``AsyncStream[object]``: the SDK builds no typed chunk), or the messages for
    ``create()``. A failure to open the stream is a :class:`ModelError`; one while
    reading it is too, with ``mid_stream`` set. The stream is closed when the
    iteration ends, however it ends (close the generator: ``contextlib.aclosing``).
    """
    try:
        stream = await _open(client, model=model, body=body, tools=tools)
    except openai.OpenAIError as exc:
        raise classify(exc) from exc
    try:
        async for raw in stream:
            yield _as_json(raw)
    except openai.OpenAIError as exc:
        error = classify(exc)
        error.mid_stream = True
        raise error from exc
    except Exception as exc:
        # some SDK versions let transport errors of a broken stream through unwrapped
        error = ModelError("unavailable", f"the stream broke ({type(exc).__name__})")
        error.mid_stream = error.transient = True
        raise error from exc
    finally:
        await stream.close()


async def _open(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    body: bytes | list[dict[str, Any]],
    tools: bytes | None,
) -> openai.AsyncStream[Any]:
    if isinstance(body, bytes):
        # post() sends ``content`` as it is (no transform, no copy; a retry sends
        # the same bytes) with the same auth and SSE parsing
        # create() uses; create() passes the same path, cast and security.
        return await client.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            content=body,
            options={"security": {"bearer_auth": True}},
            stream=True,
            stream_cls=openai.AsyncStream[object],  # chunks as JSON (stream_chunks)
        )
    messages = cast("list[ChatCompletionMessageParam]", body)
    if tools:
        return await client.chat.completions.create(
            model=model,
            messages=messages,
            stream=True,
            tools=json.loads(tools),
            stream_options={"include_usage": True},
        )
    return await client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )


def _as_json(chunk: object) -> dict[str, Any]:
    """A streamed chunk as its JSON object (``create()``'s typed chunks are dumped)."""
    if isinstance(chunk, dict):
        return chunk
    if isinstance(chunk, openai.BaseModel):
        return chunk.model_dump(exclude_unset=True)
    return {}


async def complete(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    body: bytes | list[dict[str, Any]],
    max_tokens: int,
) -> tuple[str, Usage | None]:
    """One completion without streaming: its text and reported usage (None: none)."""
    try:
        if isinstance(body, bytes):
            response = await client.post(
                "/chat/completions",
                cast_to=ChatCompletion,
                content=body,
                options={"security": {"bearer_auth": True}},
            )
        else:
            response = await client.chat.completions.create(
                model=model,
                messages=cast("list[ChatCompletionMessageParam]", body),
                max_tokens=max_tokens,
            )
    except openai.OpenAIError as exc:
        raise classify(exc) from exc
    text = (response.choices[0].message.content or "") if response.choices else ""
    reported = response.usage
    return text, _usage(reported) if reported is not None else None


def _usage(reported: CompletionUsage) -> Usage:
    """The provider's usage report as a :class:`Usage`."""
    details = reported.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    return Usage(reported.prompt_tokens, reported.completion_tokens, cached)


async def transcribe(
    client: openai.AsyncOpenAI, *, model: str, data: bytes, name: str, mime: str
) -> str:
    """The text heard in one audio file (``POST /audio/transcriptions``)."""
    try:
        result = await client.audio.transcriptions.create(
            model=model, file=(name, data, mime or "application/octet-stream")
        )
    except openai.OpenAIError as exc:
        raise classify(exc) from exc
    return result.text.strip()


async def speak(client: openai.AsyncOpenAI, *, model: str, voice: str, text: str) -> bytes:
    """``text`` read aloud as OGG/Opus (``POST /audio/speech``, ``response_format: opus``)."""
    try:
        response = await client.audio.speech.create(
            model=model, voice=voice, input=text, response_format="opus"
        )
        return await response.aread()
    except openai.OpenAIError as exc:
        raise classify_media(exc) from exc


async def generate_image(
    client: openai.AsyncOpenAI, *, model: str, prompt: str, b64: bool
) -> tuple[ImagesResponse, bool]:
    """One picture for ``prompt`` (``POST /images/generations``), and whether
    ``response_format: b64_json`` was sent (see :func:`_b64_or_not`)."""
    return await _b64_or_not(
        lambda with_b64: client.images.generate(
            model=model, prompt=prompt, response_format="b64_json" if with_b64 else openai.omit
        ),
        b64,
    )


async def edit_image(
    client: openai.AsyncOpenAI, *, model: str, prompt: str, image: tuple[str, bytes, str], b64: bool
) -> tuple[ImagesResponse, bool]:
    """``image`` (name, bytes, type) changed as ``prompt`` says (``POST /images/edits``)."""
    return await _b64_or_not(
        lambda with_b64: client.images.edit(
            model=model, prompt=prompt, image=image,
            response_format="b64_json" if with_b64 else openai.omit,
        ),
        b64,
    )  # fmt: skip


async def _b64_or_not(
    call: Callable[[bool], Awaitable[ImagesResponse]], b64: bool
) -> tuple[ImagesResponse, bool]:
    """``call(b64)``; when the endpoint refuses ``response_format`` (GPT image models
    always answer base64 and take no such parameter; DALL·E and most compatible servers
    answer a URL without it), the same call once more without it, at once: it was the
    request's form, not a failure."""
    try:
        return await call(b64), b64
    except openai.BadRequestError as exc:
        if not (b64 and str(getattr(exc, "param", "") or "") == "response_format"):
            raise classify_media(exc) from exc
    except openai.OpenAIError as exc:
        raise classify_media(exc) from exc
    try:
        return await call(False), False
    except openai.OpenAIError as exc:
        raise classify_media(exc) from exc


#: How image and speech endpoints say they refuse the content: OpenAI's codes
#: (``content_policy_violation`` for DALL·E, ``moderation_blocked`` for GPT image models)
#: and their words ("rejected by the safety system", "…as a result of our safety system",
#: "content policy").
_REFUSED_CODES = frozenset(
    ("content_policy_violation", "moderation_blocked", "image_content_policy_violation")
)
_REFUSED = re.compile(r"safety system|content policy|content_policy")
#: How they say a size is refused: a picture's bytes or sides, the ``size`` parameter.
_SIZE_CODES = frozenset(
    ("image_too_large", "image_file_too_large", "image_too_small", "invalid_size",
     "string_above_max_length")
)  # fmt: skip
_SIZE = re.compile(
    r"too (large|big|small)|file size|exceeds|maximum (size|length)|at most \d+ characters"
)


def classify_media(exc: Exception) -> ModelError:
    """:func:`classify`, knowing what speech and image endpoints refuse: content
    (``refused``, never tried again, whatever the response says) and sizes (``size``)."""
    if isinstance(exc, openai.APIStatusError) and 400 <= exc.status_code < 500:
        code = str(getattr(exc, "code", "") or "")
        message = exc.message.lower()
        if code in _REFUSED_CODES or (exc.status_code == 400 and _REFUSED.search(message)):
            return ModelError("refused", "the endpoint refused the content")
        param = str(getattr(exc, "param", "") or "")
        if (
            exc.status_code == 413
            or code in _SIZE_CODES
            or param == "size"
            or (exc.status_code == 400 and _SIZE.search(message))
        ):
            return ModelError("size", f"the endpoint refused the size ({code or exc.status_code})")
    return classify(exc)


#: How servers say a model cannot take images at all (not: this image is bad).
_NO_IMAGES = re.compile(
    r"only supported by certain models|invalid content type|not a multimodal model"
    r"|(does not|doesn't|do not) support (image|vision|multimodal)"
    r"|(image|vision|multimodal)[\w ]{0,20} (is|are) not supported"
)
#: OpenAI's param for a content part of a type the model does not take.
_PART_TYPE_PARAM = re.compile(r"messages\.\[\d+\]\.content\.\[\d+\]\.type")


def _about_images(exc: openai.APIStatusError) -> bool:
    """A 400 saying the model cannot see pictures (OpenAI: "Invalid content type.
    image_url is only supported by certain models.", param
    ``messages.[i].content.[j].type``); a 400 about one bad image is not one."""
    param = str(getattr(exc, "param", "") or "")
    return bool(_NO_IMAGES.search(exc.message.lower()) or _PART_TYPE_PARAM.fullmatch(param))


#: How servers say one image could not be read (its format, size, bytes or content):
#: OpenAI "You uploaded an unsupported image…" / "Invalid image." / "Your input image may
#: contain content that is not allowed by our safety system.", Anthropic-style "…: The
#: image specified was not valid" / "image exceeds 5 MB maximum", local servers
#: "cannot identify image file" / "failed to decode image".
_BAD_IMAGE = re.compile(
    r"unsupported image|invalid image|not a valid image|does not represent a valid image"
    r"|image[\w ]{0,30} (was|is) not valid|image[\w ]{0,20} too (large|small|big)"
    r"|image exceeds|input image may contain"
    r"|(failed to|could not|cannot|unable to) (process|parse|decode|load|read|identify)"
    r" (the )?image"
)
#: OpenAI's error codes about one image (openai-python ``ResponseError.code``).
_BAD_IMAGE_CODES = frozenset(
    (
        "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
        "image_too_large", "image_too_small", "image_parse_error",
        "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
        "unsupported_image_media_type", "empty_image_file", "failed_to_download_image",
        "image_file_not_found",
    )
)  # fmt: skip
#: A ``param`` naming one content part: ``messages.[i].content.[j]`` (and what follows).
_PART_PARAM = re.compile(r"messages\.\[(\d+)\]\.content\.\[(\d+)\]")


def _bad_image(exc: openai.APIStatusError) -> ModelError | None:
    """A 400 saying one image of the request could not be read, with the part it
    names (if its ``param`` does)."""
    code = str(getattr(exc, "code", "") or "")
    if code not in _BAD_IMAGE_CODES and not _BAD_IMAGE.search(exc.message.lower()):
        return None
    error = ModelError("bad_image", "the model could not read an image")
    named = _PART_PARAM.match(str(getattr(exc, "param", "") or ""))
    if named:
        error.part = (int(named[1]), int(named[2]))
    return error


def _timed_out(exc: openai.APITimeoutError) -> bool:
    """Whether the SDK's timeout error was a timeout. Its aiohttp transport maps every
    aiohttp connection error to a connect timeout (the vendored adapter's broad
    ``ClientConnectionError`` entry wins over ``ClientConnectorError``; noted in
    openai-python PR #3594's review), so a refused connection or a failed DNS lookup
    arrives as one: among the causes is then an aiohttp error that is no timeout."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientError) and not isinstance(cause, TimeoutError):
            return False
        cause = cause.__cause__
    return True


def classify(exc: Exception) -> ModelError:
    """The SDK's error (or an unexpected one) as a :class:`ModelError` of a kind, marked
    transient where the SDK itself would have retried it (with the wait it names)."""
    error = _kind_of(exc)
    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        error.transient = True
    elif isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        told = exc.response.headers.get("x-should-retry")  # the server's say wins
        error.transient = (
            told == "true"
            if told in ("true", "false")
            else (status in (408, 409, 429) or status >= 500)
        )
        error.retry_after = _retry_after(exc.response.headers)
    return error


#: The longest ``retry-after`` honoured (the SDK's bound); a longer one gets the backoff.
RETRY_AFTER_LIMIT = 60.0


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, else ``retry-after`` in seconds
    or as an HTTP date; None when absent, unreadable, or outside (0, 60] s."""
    wait: float | None = None
    try:
        if "retry-after-ms" in headers:
            wait = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            raw = headers["retry-after"]
            try:
                wait = float(raw)
            except ValueError:
                when = email.utils.parsedate_to_datetime(raw)
                wait = when.timestamp() - time.time()
    except (ValueError, TypeError, IndexError):
        return None
    return wait if wait is not None and 0 < wait <= RETRY_AFTER_LIMIT else None


def _kind_of(exc: Exception) -> ModelError:
    if isinstance(exc, openai.APITimeoutError) and _timed_out(exc):
        return ModelError("timeout", "the model did not answer in time")
    if isinstance(exc, openai.RateLimitError):
        return ModelError("rate_limited", "the model endpoint is rate limiting")
    if isinstance(exc, openai.APIConnectionError):
        return ModelError("unavailable", "cannot reach the model endpoint")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        code = str(getattr(exc, "code", "") or "")
        if status == 400 and "context_length" in code:
            return ModelError("too_long", "the conversation is too long for the model")
        if status == 400 and _about_images(exc):
            return ModelError("no_images", "the model does not accept images")
        bad_image = _bad_image(exc) if status == 400 else None
        if bad_image is not None:
            return bad_image
        if status in (401, 403, 404):
            return ModelError("config", f"the model endpoint refused the request ({status})")
        if status >= 500:
            return ModelError("unavailable", f"the model endpoint failed ({status})")
        return ModelError("rejected", f"the model endpoint rejected the request ({status})")
    return ModelError("unavailable", f"unexpected failure ({type(exc).__name__})")
