"""The model edge: one OpenAI-compatible endpoint, streamed answers, typed failures."""

from .client import ModelClient
from .types import (
    IMAGE_PLACEHOLDER,
    IMAGE_UNREADABLE,
    MESSAGE_OVERHEAD,
    Answer,
    ErrorKind,
    Media,
    Model,
    ModelError,
    Usage,
    estimate_messages,
    estimate_text,
)
from .wire import WireCache, wire_messages

__all__ = [
    "IMAGE_PLACEHOLDER",
    "IMAGE_UNREADABLE",
    "MESSAGE_OVERHEAD",
    "Answer",
    "ErrorKind",
    "Media",
    "Model",
    "ModelClient",
    "ModelError",
    "Usage",
    "WireCache",
    "estimate_messages",
    "estimate_text",
    "wire_messages",
]
