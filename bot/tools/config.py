"""``MCP_CONFIG``: the owner's MCP servers, in the common ``mcpServers`` JSON format.

::

    {"mcpServers": {
        "notes": {"command": "uvx", "args": ["notes-mcp"], "env": {"NOTES_DIR": "/srv"}},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "..."}},
        "files": {"command": "files-mcp", "allowedTools": ["read_file", "list_dir"]}
    }}

A server has either ``command`` (stdio; ``args``, ``env``, ``cwd`` optional) or
``url`` (Streamable HTTP; ``headers`` optional). ``allowedTools`` limits which of
its tools are offered; ``"disabled": true`` skips it. Other keys are ignored,
so a file written for another client works unchanged.

This module stays light (only ``json``): the settings check reads the file
before anything heavy is imported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

#: What OpenAI accepts as a function name.
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class ToolConfigError(ValueError):
    """MCP_CONFIG cannot be used; the message says what to fix (one line, no secrets)."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One MCP server: stdio (``command``) or Streamable HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, hash=False, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = field(default=None, hash=False, repr=False)
    #: Tool names (as the server names them) offered; ``None``: all of them.
    allowed: frozenset[str] | None = None

    @property
    def prefix(self) -> str:
        """The start of the names its tools are offered under (unique per server)."""
        return _NAME.sub("_", self.name)[:24] + "__"


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolConfigError(f"{what} must be a list of strings")
    return tuple(value)


def _mapping(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ToolConfigError(f"{what} must be an object of strings")
    return dict(value)


def _server(name: str, raw: object) -> ServerConfig | None:
    where = f"mcpServers.{name}"
    if not isinstance(raw, dict):
        raise ToolConfigError(f"{where} must be an object")
    if raw.get("disabled") is True:
        return None
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise ToolConfigError(f'{where} needs either "command" (stdio) or "url" (HTTP)')
    allowed = raw.get("allowedTools")
    only = None if allowed is None else frozenset(_strings(allowed, f"{where}.allowedTools"))
    common = {"name": name, "allowed": only}
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ToolConfigError(f"{where}.url must be an http:// or https:// URL")
        headers = raw.get("headers")
        return ServerConfig(
            url=url,
            headers=None if headers is None else _mapping(headers, f"{where}.headers"),
            **common,  # type: ignore[arg-type]
        )
    if not isinstance(command, str) or not command.strip():
        raise ToolConfigError(f"{where}.command must be a non-empty string")
    env, cwd = raw.get("env"), raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ToolConfigError(f"{where}.cwd must be a string")
    return ServerConfig(
        command=command,
        args=_strings(raw.get("args", []), f"{where}.args"),
        env=None if env is None else _mapping(env, f"{where}.env"),
        cwd=cwd,
        **common,  # type: ignore[arg-type]
    )


def parse_config(text: str) -> list[ServerConfig]:
    """The servers of an ``mcpServers`` document; :class:`ToolConfigError` when malformed."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ToolConfigError(f"is not valid JSON ({exc})") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ToolConfigError('needs an object {"mcpServers": {"name": {...}, ...}}')
    parsed = [_server(name, raw) for name, raw in servers.items()]
    found = [s for s in parsed if s is not None]
    prefixes = [s.prefix for s in found]
    for server in found:
        if prefixes.count(server.prefix) > 1:
            raise ToolConfigError(f"server names clash once made tool-name safe: {server.name!r}")
    return found


def load_config(path: Path) -> list[ServerConfig]:
    """Read and parse ``MCP_CONFIG``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolConfigError(f"cannot read {path} ({exc.strerror})") from None
    return parse_config(text)


def allowed_by(names: frozenset[str], server: ServerConfig, tool: str) -> bool:
    """``ALLOWED_TOOLS``: empty allows all; an entry names a server, or ``server/tool``,
    or the offered name (``server__tool``)."""
    if server.allowed is not None and tool not in server.allowed:
        return False
    if not names:
        return True
    return bool(names & {server.name, f"{server.name}/{tool}", offered_name(server, tool)})


def offered_name(server: ServerConfig, tool: str) -> str:
    """The name the model sees: the server's prefix and the tool's name, at most 64 chars."""
    return (server.prefix + _NAME.sub("_", tool))[:64]
