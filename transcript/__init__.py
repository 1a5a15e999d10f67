"""replychain's transcript store: Telegram-agnostic reply-chain transcripts in Redis.

It knows chat scopes, message ids, nodes and chat messages, nothing of
Telegram or of any model API.
"""

from . import keys
from .cache import Choice, RecordCache
from .cold import ColdTree, Companion
from .compact import Compaction, cold_companion
from .errors import (
    CorruptRecordError,
    MissingNodeError,
    RecordError,
    StaleCacheError,
    StoreUnavailableError,
    TranscriptError,
    UnknownSchemaError,
)
from .reads import DEFAULT_CACHE_BYTES
from .records import ChatMessage, Fold, Image, Node, NodeId, ToolCall, Transcript, count_depth
from .store import Placement, TranscriptStore

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "ChatMessage",
    "Choice",
    "ColdTree",
    "Compaction",
    "Companion",
    "CorruptRecordError",
    "Fold",
    "Image",
    "MissingNodeError",
    "Node",
    "NodeId",
    "Placement",
    "RecordCache",
    "RecordError",
    "StaleCacheError",
    "StoreUnavailableError",
    "ToolCall",
    "Transcript",
    "TranscriptError",
    "TranscriptStore",
    "UnknownSchemaError",
    "cold_companion",
    "count_depth",
    "keys",
]
