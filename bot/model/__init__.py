"""The model edge: one OpenAI-compatible endpoint, streamed answers, typed failures."""

from .client import (
    IMAGE_PLACEHOLDER,
    IMAGE_UNREADABLE,
    MESSAGE_OVERHEAD,
    Answer,
    ErrorKind,
    Media,
    Model,
    ModelClient,
    ModelError,
    Usage,
    WireCache,
    estimate_messages,
    estimate_text,
    wire_messages,
)

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
