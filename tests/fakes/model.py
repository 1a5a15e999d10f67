"""A strict, OpenAI-compatible chat-completions server on loopback, for end-to-end tests.

Start it in the test's event loop and point the real ``openai.AsyncOpenAI`` at it (in-process,
or from a bot running as a subprocess)::

    async with FakeOpenAI() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/audio/transcriptions``,
``POST /v1/audio/speech``, ``POST /v1/images/generations``, ``POST /v1/images/edits``,
``GET /v1/models``, ``GET /v1/models/{id}``. The server serves ``model`` and any of
``extra_models``; each request's ``model`` is kept (``Request.model``), and a response names
the model asked for.
Several endpoints with their own keys are several servers. Any other path answers 404
with OpenAI error JSON (``Invalid URL (METHOD /path)``).

Transcriptions take OpenAI's multipart form (``file`` and ``model`` required; ``model`` must be
``transcribe_model``, else 404 ``model_not_found``; unknown form fields are rejected) and answer
``{"text": ...}`` from ``transcriber(bytes, filename)`` (default: the bytes decoded as UTF-8).
``fail_transcription_next(status)`` fails the next ones. Each is kept in ``transcriptions``.

Speech (``POST /v1/audio/speech``) takes OpenAI's JSON: ``model`` (``speech_model``, else 404
``model_not_found``), ``input`` (1 to 4,096 characters: a longer one gets OpenAI's 400
``String should have at most 4096 characters``, code ``string_above_max_length``) and ``voice``
(one of OpenAI's voices, or ``{"id": ...}``) required; ``response_format``, ``speed`` (0.25
to 4), ``instructions`` and ``stream_format`` optional; anything else is refused. It answers
real OGG/Opus bytes (:func:`ogg_opus_sample`, made once with libsndfile through the
``soundfile`` package: 0.2 s of a 440 Hz tone, mono, 48 kHz) for ``response_format: opus``;
the other formats the API knows (``mp3``, the default, among them) get a 400, as this server
encodes no other, so a client that forgets to ask for opus fails here. Each request answered
is kept in ``speeches`` (``speech_posts`` counts every one that arrived); a closed
``speech_gate`` holds them; ``fail_speech_next(status)`` fails the next ones.

Images: ``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart, the
source picture as ``image`` or ``image[]``, PNG, JPEG or WebP bytes up to ``edit_max_bytes``)
take ``prompt`` (required) and ``model`` (default ``dall-e-2``, as the API's; anything but
``image_model`` is 404). Like GPT image models, a ``gpt-image*`` model refuses
``response_format`` (400 ``Unknown parameter: 'response_format'.``, code
``unknown_parameter``) and answers ``b64_json`` (``refuses_response_format`` says so of any
model); other models answer ``b64_json`` when asked, else a ``url`` this server serves.
``size`` must be one the model knows (param ``size``). A prompt holding ``refuse_marker`` is
refused as OpenAI's safety system does (GPT image: ``moderation_blocked``; others:
``content_policy_violation``). Pictures are real PNGs of ``picture_side`` pixels
(:func:`png_bytes`), their colour drawn from the prompt (and, for an edit, the source). Each
request answered, edits with their uploaded files, is kept in ``image_requests``
(``image_posts`` counts every one that arrived); ``fail_images_next(status)`` fails the next
valid ones.

``text_only = True`` makes the model one that cannot see images: a request with an
``image_url`` part gets OpenAI's 400 ``Invalid content type. image_url is only supported by
certain models.`` (param ``messages.[i].content.[j].type``).

``reject_image(data)`` makes the (vision) model unable to read one image: a request with an
``image_url`` part whose data URL carries exactly those bytes gets OpenAI's 400 for it, as
the real API words it: ``"format"``: ``You uploaded an unsupported image. Please make sure
your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp'].`` (code
``invalid_image_format``), ``"policy"``: ``Your input image may contain content that is not
allowed by our safety system.``; param ``null`` (OpenAI does not say which image), or
``messages.[i].content.[j].image_url`` with ``name_part=True`` (as some compatible servers
do). Checked with the messages' validation, so such a request leaves the fault queue alone.

Wire format (as OpenAI sends it)
--------------------------------
* Errors: HTTP status plus ``{"error": {"message", "type", "param", "code"}}``. Every response
  carries an ``x-request-id`` header.
* Non-streaming: a ``chat.completion`` object, ``choices[0].message = {role: assistant,
  content}``, ``finish_reason`` "stop" (or "length" when ``max_tokens`` /
  ``max_completion_tokens`` cut the reply), and ``usage`` unless ``report_usage`` is False.
* Streaming (``stream: true``): ``text/event-stream``; each event is ``data: <json>\\n\\n`` and
  is written to the socket as soon as it is produced. Chunks, all ``chat.completion.chunk``
  with ``id``, ``created`` and ``model``: first ``delta {role: assistant, content: ""}``, then one
  chunk per ``chunk_chars`` characters of the reply, then an empty delta with
  ``finish_reason``; then, when the request had ``stream_options.include_usage: true`` and
  ``report_usage`` is True, a final chunk with ``choices: []`` and ``usage``; then
  ``data: [DONE]``. When include_usage is requested every other chunk carries ``usage: null``.
  ``chunk_delay`` seconds pass between consecutive chunks.

Validation (400 ``invalid_request_error`` with a clear message and ``param``)
-----------------------------------------------------------------------------
Checked in this order: auth (401, code ``invalid_api_key``; the message never echoes a key),
JSON body, ``model`` (string; unknown model -> 404 ``model_not_found``), unknown top-level
parameters (``Unrecognized request argument supplied: x``; extend ``allowed_extra_params`` for
provider-specific ones), parameter types/ranges, then ``messages``: a non-empty list; each
message an object whose ``role`` is system/developer/user/assistant/tool, with no keys beyond
that role's (e.g. ``Additional properties are not allowed ('x' was unexpected)``); ``content``
a string or a non-empty list of parts (``text`` everywhere, ``image_url`` for user, ``refusal``
for assistant); assistant content may be null only with ``tool_calls``; an assistant message
with ``tool_calls`` must be followed by ``tool`` messages answering each ``tool_call_id``, and a
tool message must answer a call of the assistant message right before it (OpenAI's rule).
Finally prompt tokens above ``context_limit`` -> 400 code ``context_length_exceeded``.
``stream_options`` is only allowed with ``stream: true``; only ``n`` = 1 is supported.

Token counting (deterministic; ``len`` counts Python characters)
----------------------------------------------------------------
* text of a message = its content string, or the concatenated ``text``/``refusal`` of its parts,
  plus, for each tool call, the function name and arguments;
* message_tokens = 4 + ceil(len(text) / 4) + 85 per ``image_url`` part;
* prompt_tokens = sum(message_tokens) + 2, plus ceil(len(json.dumps(tools, sort_keys=True)) / 4)
  when ``tools`` is given;
* completion_tokens = max(1, ceil(len(reply) / 4)).

Reasoning models
----------------
``reasoner`` (messages -> thoughts, or None) makes the model think before it answers;
``reasoning_style`` says how the thoughts are streamed: ``"reasoning_content"`` (DeepSeek,
vLLM) or ``"reasoning"`` (Ollama, OpenRouter) deltas before the content, or ``"think"``:
inside ``<think>…</think>`` at the start of the content (DeepSeek-R1, QwQ, Qwen3 served
raw). A non-streaming reply carries them the same way (``message.reasoning_content`` /
``message.reasoning``, or in the content). Thoughts are completion tokens:
completion_tokens = max(1, ceil(len(thoughts + reply) / 4)), and
``completion_tokens_details.reasoning_tokens`` = ceil(len(thoughts) / 4).

Early close
-----------
A client that closes a stream before ``[DONE]`` (a user's stop) is recorded:
``Request.closed_early`` is set and ``Request.events_sent`` says how many events went out
before the server noticed and stopped generating. Use ``chunk_delay`` for a slow stream.

Prompt cache emulation
----------------------
The server remembers every prompt it processed (per model and tools): the digest of each prefix
made of whole leading messages, serialized as ``json.dumps(message, sort_keys=True)``. For a new
request, ``cached_tokens`` = the sum of message_tokens of the longest such prefix seen before
(byte-identical messages only), rounded down to a multiple of 64, and 0 when below 1024
(like OpenAI). It is reported in ``usage.prompt_tokens_details.cached_tokens``. Prompts are
remembered when the model "ran": for answered requests and for cut/stalled streams, not for
auth/validation errors, injected failures or hangs that were never answered.

Fault injection
---------------
``fail_next``/``hang_next``/``cut_stream_next``/``stall_stream_next`` append to one FIFO queue;
each entry is consumed by one chat request that passed auth and validation (an invalid request
gets its honest 400 and leaves the queue alone). ``gate`` holds every chat request (before auth)
until the event is set. ``stop()`` ends every held, hung or stalled request by dropping its
connection, so nothing is left pending.
"""

from __future__ import annotations

from .model_media import MediaEndpoints, ogg_opus_sample, png_bytes
from .model_types import (
    ImageRequest,
    Request,
    SpeechRequest,
    ToolCalls,
    Usage,
    completion_tokens,
    default_responder,
    message_tokens,
    prompt_tokens,
)

__all__ = [
    "FakeOpenAI",
    "ImageRequest",
    "Request",
    "SpeechRequest",
    "ToolCalls",
    "Usage",
    "completion_tokens",
    "default_responder",
    "message_tokens",
    "ogg_opus_sample",
    "png_bytes",
    "prompt_tokens",
]


class FakeOpenAI(MediaEndpoints):
    """An OpenAI-compatible server for tests. See the module docstring for usage."""
