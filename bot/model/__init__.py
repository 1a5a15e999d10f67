"""The model edge: one OpenAI-compatible endpoint, streamed answers, typed failures."""

from .client import (
    MESSAGE_OVERHEAD,
    Answer,
    ErrorKind,
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
    "MESSAGE_OVERHEAD",
    "Answer",
    "ErrorKind",
    "Model",
    "ModelClient",
    "ModelError",
    "Usage",
    "WireCache",
    "estimate_messages",
    "estimate_text",
    "wire_messages",
]
