"""Which files are text, and how a text file's bytes become its text: one decoder for
documents, fetched pages and text files (a text file is a document,
:mod:`bot.reading.documents`)."""

from __future__ import annotations

import codecs
from pathlib import PurePosixPath

#: Extensions read as text whatever MIME type the client gave.
TEXT_EXTENSIONS = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".py",
        ".pyi",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".json",
        ".jsonl",
        ".csv",
        ".tsv",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".log",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".sql",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".bat",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".java",
        ".kt",
        ".go",
        ".rs",
        ".rb",
        ".php",
        ".pl",
        ".lua",
        ".r",
        ".swift",
        ".m",
        ".scala",
        ".hs",
        ".ex",
        ".exs",
        ".erl",
        ".clj",
        ".dart",
        ".vue",
        ".svelte",
        ".tex",
        ".srt",
        ".vtt",
        ".env",
        ".properties",
        ".gradle",
        ".dockerfile",
        ".makefile",
        ".diff",
        ".patch",
    ]
)
TEXT_MIME_TYPES = frozenset(
    (
        "application/json", "application/xml", "application/x-yaml", "application/yaml",
        "application/toml", "application/javascript", "application/x-sh", "application/sql",
        "application/x-python", "application/x-ndjson",
    )
)  # fmt: skip


def decode_text(data: bytes) -> str | None:
    """UTF-8 (a BOM allowed) or UTF-16 with a BOM; ``None`` for anything else or binary."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    return text


def suffix(name: str) -> str:
    """A file name's extension, lower case with its dot (``""`` when it has none)."""
    return PurePosixPath(name.lower()).suffix


def is_text(name: str, mime: str) -> bool:
    """Whether a file is read as text: a ``text/*`` or known text MIME type, or a known
    text extension whatever the MIME type (clients often send ``application/octet-stream``)."""
    mime = mime.lower()
    return mime.startswith("text/") or mime in TEXT_MIME_TYPES or suffix(name) in TEXT_EXTENSIONS
