"""Typed failures of the transcript store.

    TranscriptError
    ├── RecordError                 a stored record cannot be used (names the record)
    │   ├── CorruptRecordError      bytes that do not decode to a valid record
    │   ├── UnknownSchemaError      a record written by a newer (or unknown) schema version
    │   └── MissingNodeError        a node (or segment) on a chain is absent: never shortened
    └── StoreUnavailableError       Redis cannot be reached (after redis-py's retries)

Messages never contain connection URLs or credentials.
"""

from __future__ import annotations


class TranscriptError(Exception):
    """Base class of every error the transcript store raises."""


class RecordError(TranscriptError):
    """A stored record on a chain cannot be used; ``ref`` names it."""

    def __init__(self, ref: str, detail: str) -> None:
        super().__init__(f"{detail} (record {ref})")
        self.ref = ref
        self.detail = detail


class CorruptRecordError(RecordError):
    """A record's bytes failed to decode or do not have the expected shape."""


class UnknownSchemaError(RecordError):
    """A record carries a schema version this code does not understand."""

    def __init__(self, ref: str, version: object) -> None:
        super().__init__(ref, f"unknown schema version {version!r}")
        self.version = version


class MissingNodeError(RecordError):
    """A node or segment that a chain depends on is not in Redis."""


class StoreUnavailableError(TranscriptError):
    """Redis could not be reached or did not answer in time."""


class StaleCacheError(TranscriptError):
    """A node was to be placed below a parent that is not, in Redis, the node this
    process had cached: Redis lost writes it had acknowledged and handed the parent's
    id out again. Nothing was written and the tree was dropped from the cache; the
    caller starts its step again from what Redis holds (a turn runs again)."""
