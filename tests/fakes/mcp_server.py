"""A small MCP server of our own, for the tool tests: ``python tests/fakes/mcp_server.py``
serves stdio; ``--http PORT`` serves Streamable HTTP at ``http://127.0.0.1:PORT/mcp``.

Every call is appended to the file named by ``MCP_CALL_LOG`` (one line: tool and
arguments) before the tool runs, so tests can count runs across a crash; the slow
tools wait while the file named by ``MCP_HOLD`` exists.
``MCP_FAIL_AT_START=1`` makes it exit before answering anything.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
WRITES = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False)

server = MCPServer("testtools")


def _log(tool: str, **args: object) -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": tool, **args}) + "\n")
            out.flush()


async def _held() -> None:
    """Wait while the file named by ``MCP_HOLD`` exists (a test holds a call in flight)."""
    hold = os.environ.get("MCP_HOLD")
    if not hold:
        return
    held = Path(hold)
    # another process (the test) removes the file: there is no event to wait on
    while await asyncio.to_thread(held.exists):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


@server.tool(annotations=READ_ONLY)
def weather(city: str) -> str:
    """Today's weather in a city."""
    _log("weather", city=city)
    return f"sunny, 21 C in {city}"


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> str:
    """Add two integers."""
    _log("add", a=a, b=b)
    return str(a + b)


@server.tool(annotations=READ_ONLY)
def fail(reason: str) -> str:
    """Always fails with the reason given."""
    _log("fail", reason=reason)
    raise ToolError(f"it failed: {reason}")


@server.tool(annotations=READ_ONLY)
def big(chars: int) -> str:
    """A result of the given length."""
    _log("big", chars=chars)
    return ("0123456789" * (chars // 10 + 1))[:chars]


@server.tool(annotations=READ_ONLY)
async def slow_read(seconds: float) -> str:
    """A read-only tool that takes a while."""
    _log("slow_read", seconds=seconds)
    await _held()
    await asyncio.sleep(seconds)
    return f"read after {seconds}s"


@server.tool(annotations=WRITES)
async def send_mail(to: str, seconds: float = 0.0) -> str:
    """Sends a mail (not idempotent: never run twice)."""
    _log("send_mail", to=to)
    await _held()
    await asyncio.sleep(seconds)
    return f"mail sent to {to}"


def main() -> None:
    if os.environ.get("MCP_FAIL_AT_START") == "1":
        print("refusing to start", file=sys.stderr)
        sys.exit(3)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
