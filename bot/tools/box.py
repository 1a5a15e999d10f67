"""The tools offered to the model: the owner's MCP servers and the bot's built-in tools.

A built-in tool (web search, reading a page, drawing a picture) implements
:class:`BuiltinTool` and is registered in bot/capabilities.py; the per-node tool loop
(bot/turn/tools.py) sees one :class:`Toolbox`, whatever is in it. A call never raises:
every failure comes back as a :class:`ToolResult` marked ``error``, for the model to
read. Light to import: the MCP SDK stays in bot/tools/hub.py, loaded only with
MCP_CONFIG.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from transcript import Image, Node

    from ..bus.inbound import Inbound


@dataclass(frozen=True, slots=True)
class ToolResult:
    text: str
    error: bool = False
    #: Pictures the tool made (blobs of the chat): kept with its result, shown with the
    #: answer (bot/turn/pictures.py).
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """What a built-in tool may need to know of the turn calling it."""

    inbound: Inbound
    #: The node this round's step will hang below (the user's, or the last step): the
    #: chain up to it is what the model saw (a tool that numbers what it finds, search
    #: results, goes on from the numbers used there).
    leaf: Node | None = None


class BuiltinTool(Protocol):
    """One tool the bot itself offers."""

    #: The name the model calls it by (no ``__``: MCP tools are ``<server>__<tool>``).
    name: str

    def spec(self) -> dict[str, Any]:
        """The OpenAI function tool the model is offered."""

    @property
    def idempotent(self) -> bool:
        """Safe to run again after an interruption (a read)."""

    async def call(self, arguments: dict[str, Any], context: ToolCallContext) -> ToolResult:
        """Run one call; every failure is a result marked ``error``."""


class RemoteTool(Protocol):
    """A tool of an MCP server, as offered (:class:`bot.tools.hub.Tool`)."""

    @property
    def remote(self) -> str: ...

    def spec(self) -> dict[str, Any]: ...


class Remote(Protocol):
    """The owner's MCP servers (:class:`bot.tools.hub.ToolHub`)."""

    @property
    def tools(self) -> Mapping[str, RemoteTool]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def idempotent(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: str) -> ToolResult: ...


class Toolbox:
    """Every tool offered: the MCP hub's (if any) and the built-in ones."""

    def __init__(self, hub: Remote | None = None, builtins: Sequence[BuiltinTool] = ()) -> None:
        self.hub = hub
        self.builtins = {tool.name: tool for tool in builtins}
        #: The request's ``tools`` array, encoded once (byte-stable across calls); set
        #: by :meth:`start`.
        self.spec_bytes: bytes | None = None

    async def start(self) -> None:
        """Connect to the MCP servers (a failing one is logged and skipped), then encode
        the offer once."""
        specs = [tool.spec() for tool in self.builtins.values()]
        if self.hub is not None:
            await self.hub.start()
            specs += [tool.spec() for tool in self.hub.tools.values()]
        encoded = json.dumps(specs, ensure_ascii=False, separators=(",", ":"))
        self.spec_bytes = encoded.encode() if specs else None

    async def close(self) -> None:
        if self.hub is not None:
            await self.hub.close()

    def idempotent(self, name: str) -> bool:
        builtin = self.builtins.get(name)
        if builtin is not None:
            return builtin.idempotent
        return self.hub is not None and self.hub.idempotent(name)

    def label(self, name: str) -> str:
        """What the user is shown a tool as while it runs."""
        tool = self.hub.tools.get(name) if self.hub is not None else None
        return tool.remote if tool is not None else name

    async def call(self, name: str, arguments: str, context: ToolCallContext) -> ToolResult:
        """Run one call; every failure is a result marked ``error``."""
        builtin = self.builtins.get(name)
        if builtin is None:
            if self.hub is None:
                return ToolResult(f"there is no tool named {name!r}", error=True)
            return await self.hub.call(name, arguments)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ToolResult("the arguments are not valid JSON", error=True)
        if not isinstance(args, dict):
            return ToolResult("the arguments must be a JSON object", error=True)
        return await builtin.call(args, context)
