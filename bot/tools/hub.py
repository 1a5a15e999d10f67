"""Connections to the owner's MCP servers, held for the bot's lifetime.

Each server runs in a task of its own that enters the ``mcp`` SDK's context
managers (transport, then :class:`mcp.ClientSession`), lists the tools, and
waits for shutdown: the SDK's anyio task groups are entered and left in the
same task, inside the bot's event loop. A server that cannot be started, does
not answer ``initialize`` or ``tools/list`` within ``START_TIMEOUT``, or
breaks later, costs one log line; the bot runs on without its tools.

Tools are offered to the model as OpenAI function tools named
``<server>__<tool>`` (unique per server). A call never raises: a bad argument
string, an unknown name, a timeout, a server error or a tool's own error come
back as a :class:`ToolResult` marked ``error``, for the model to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import PaginatedRequestParams

from .box import ToolResult
from .config import ServerConfig, allowed_by, offered_name

log = logging.getLogger("replychain.tools")

#: Seconds a server gets to start and list its tools.
START_TIMEOUT = 20.0
#: Seconds a server gets to shut down before its task is cancelled.
STOP_TIMEOUT = 5.0
#: Longest tool result kept (characters); the rest is cut with a note.
MAX_RESULT_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class Tool:
    """One offered tool: the name the model sees, and where it lives."""

    name: str
    server: str
    remote: str
    description: str
    parameters: dict[str, Any]
    #: Safe to run again after an interruption (MCP readOnlyHint or idempotentHint).
    idempotent: bool

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class _Server:
    """One server's connection, owned by its own task."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.session: Any = None
        self.tools: list[Any] = []
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"mcp:{config.name}")

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                self.session = await self._connect(stack)
                await self.session.initialize()
                cursor: str | None = None
                while True:
                    params = None if cursor is None else _page(cursor)
                    listing = await self.session.list_tools(params=params)
                    self.tools.extend(listing.tools)
                    cursor = listing.next_cursor
                    if not cursor:
                        break
                self._ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            elif not self._stop.is_set():
                log.warning("tool server %s went away: %s", self.config.name, _describe(exc))
        finally:
            self.session = None

    async def _connect(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.url is not None:
            client = None
            if config.headers:
                client = create_mcp_http_client(headers=config.headers)
                await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(
                streamable_http_client(config.url, http_client=client)
            )
        else:
            assert config.command is not None
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=config.env, cwd=config.cwd
            )
            read, write = await stack.enter_async_context(stdio_client(params))
        return await stack.enter_async_context(ClientSession(read, write))

    async def ready(self, timeout: float) -> None:  # noqa: ASYNC109
        await asyncio.wait_for(asyncio.shield(self._ready), timeout)

    async def stop(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), STOP_TIMEOUT)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


def _page(cursor: str) -> PaginatedRequestParams:
    return PaginatedRequestParams(cursor=cursor)


def _describe(exc: BaseException) -> str:
    """One line for a failure: an exception group's first leaf, its type and message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


class ToolHub:
    """Every configured server's tools, and calls to them."""

    def __init__(
        self,
        servers: Sequence[ServerConfig],
        *,
        allowed: frozenset[str] = frozenset(),
        call_timeout: float = 60.0,
    ) -> None:
        self.configs = list(servers)
        self.allowed = allowed
        self.call_timeout = call_timeout
        self.tools: dict[str, Tool] = {}
        self._servers: dict[str, _Server] = {}
        #: Servers that failed to start, and why (one line each; for ``doctor``).
        self.failures: dict[str, str] = {}
        #: The request's ``tools`` array, encoded once (byte-stable across calls).
        self.spec_bytes: bytes | None = None

    async def start(self) -> None:
        """Connect to every server at once; a failing one is logged and skipped."""
        starting = [_Server(config) for config in self.configs]
        results = await asyncio.gather(
            *(s.ready(START_TIMEOUT) for s in starting), return_exceptions=True
        )
        for server, result in zip(starting, results, strict=True):
            name = server.config.name
            if isinstance(result, BaseException):
                what = (
                    "did not answer in time"
                    if isinstance(result, TimeoutError)
                    else (_describe(result))
                )
                log.warning("tool server %s failed to start (%s); running without it", name, what)
                self.failures[name] = what
                await server.stop()
                continue
            self._servers[name] = server
            self._add_tools(server)
            log.info("tool server %s: %d tool(s) offered", name, self._count(name))
        specs = [tool.spec() for tool in self.tools.values()]
        self.spec_bytes = (
            json.dumps(specs, ensure_ascii=False, separators=(",", ":")).encode() if specs else None
        )

    def _count(self, server: str) -> int:
        return sum(1 for t in self.tools.values() if t.server == server)

    def _add_tools(self, server: _Server) -> None:
        config = server.config
        for remote in server.tools:
            if not allowed_by(self.allowed, config, remote.name):
                continue
            name = offered_name(config, remote.name)
            if name in self.tools:
                log.warning("tool %s of %s: name taken, not offered", remote.name, config.name)
                continue
            hints = remote.annotations
            idempotent = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
            self.tools[name] = Tool(
                name=name,
                server=config.name,
                remote=remote.name,
                description=(remote.description or remote.name)[:1024],
                parameters=remote.input_schema or {"type": "object", "properties": {}},
                idempotent=idempotent,
            )

    @property
    def servers(self) -> list[str]:
        """Names of the servers connected at start-up."""
        return list(self._servers)

    async def close(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        await asyncio.gather(*(s.stop() for s in servers))

    def idempotent(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.idempotent

    async def call(self, name: str, arguments: str) -> ToolResult:
        """Run one tool call; every failure is a result marked ``error``."""
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(f"there is no tool named {name!r}", error=True)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ToolResult("the arguments are not valid JSON", error=True)
        if not isinstance(args, dict):
            return ToolResult("the arguments must be a JSON object", error=True)
        server = self._servers.get(tool.server)
        session = server.session if server is not None else None
        if session is None:
            return ToolResult(f"the tool server {tool.server} is not connected", error=True)
        try:
            result = await asyncio.wait_for(session.call_tool(tool.remote, args), self.call_timeout)
        except TimeoutError:
            return ToolResult(f"the tool did not answer within {self.call_timeout:g}s", error=True)
        except Exception as exc:
            log.info("tool %s failed: %s", name, _describe(exc))
            return ToolResult(f"the tool failed: {_describe(exc)}", error=True)
        return ToolResult(_text_of(result), error=bool(result.is_error))


def _text_of(result: Any) -> str:
    """The result as text: text blocks joined; other blocks named; structured as JSON."""
    pieces: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            pieces.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            pieces.append(block.resource.text)
        else:
            pieces.append(f"[{kind or 'unknown'} content not shown]")
    if not pieces and result.structured_content is not None:
        pieces.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(pieces)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[cut: {len(text)} characters in all]"
    return text
