"""Shared by the viewer's tests: signed launch parameters and a stored tree to view."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from redis.asyncio import Redis

from bot.model import Usage
from bot.usage.accounting import Accounting
from bot.usage.calls import CallRecord
from transcript import ChatMessage, NodeId, ToolCall, TranscriptStore
from transcript.records import Role

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> **still text**'
MARKDOWN = "Here is **bold**, *italic* and `code`.\n\n```\nprint('hi')\n```\n\n- one\n- two"
SUMMARY = "The user greeted the bot and asked how it could help."


def sign_init_data(
    token: str,
    user_id: int,
    auth_date: int,
    *,
    start_param: str | None = None,
    language: str = "en",
) -> str:
    """``initData`` as Telegram signs it (core.telegram.org/bots/webapps, "Validating
    data received via the Mini App"), written here from the spec, not with aiogram."""
    fields = {
        "auth_date": str(auth_date),
        "query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
        "user": json.dumps(
            {"id": user_id, "first_name": "Ada", "language_code": language},
            separators=(",", ":"),
        ),
    }
    if start_param is not None:
        fields["start_param"] = start_param
    check = "\n".join(f"{k}={v}" for k, v in sorted(fields.items()))
    secret = hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()
    fields["hash"] = hmac.new(secret, check.encode(), hashlib.sha256).hexdigest()
    return urlencode(fields)


@dataclass(frozen=True, slots=True)
class Seeded:
    """The demo tree's message ids and node refs (``seg.idx``)."""

    chat: int
    tree: int
    messages: dict[str, int]
    refs: dict[str, str]


async def seed_tree(redis: Redis, store: TranscriptStore, chat: int, *, user: int) -> Seeded:
    """A tree with a fold, two branches, a tool round, Markdown and an XSS payload::

    system → hello (1) → hi (2, folded here) ┬ markdown? (3) → markdown answer (4)
                                              └ search? (5) → tool round → xss answer (6)
    """
    scope = str(chat)
    root = await store.start(scope, [ChatMessage("system", "You are a test assistant.")])
    hello = await store.append(root.id, [ChatMessage("user", "hello there")], aliases=[1])
    hi = await store.append(
        hello.id, [ChatMessage("assistant", "Hi! How can I help?")], aliases=[2]
    )
    await store.put_fold(hi.id, [ChatMessage("user", SUMMARY)])
    ask_md = await store.append(hi.id, [ChatMessage("user", "show me markdown")], aliases=[3])
    md = await store.append(ask_md.id, [ChatMessage("assistant", MARKDOWN)], aliases=[4])
    ask_tool = await store.append(hi.id, [ChatMessage("user", "search the web")], aliases=[5])
    call = ToolCall("call_1", "search", '{"q": "weather"}')
    tool = await store.append(
        ask_tool.id,
        [
            ChatMessage("assistant", None, tool_calls=(call,)),
            ChatMessage("tool", "sunny, 21 °C", tool_call_id="call_1", name="search"),
        ],
    )
    xss = await store.append(tool.id, [ChatMessage("assistant", XSS)], aliases=[6])
    accounting = Accounting(redis, clock=lambda: datetime.now(UTC))
    for sent, message in ((ask_md.id, 3), (ask_tool.id, 5), (tool.id, 5)):
        await accounting.record(
            CallRecord(chat, user, message, sent, "test-model", Usage(1200, 300, 200), 0.8)
        )
    nodes = {"root": root, "hello": hello, "hi": hi, "ask_md": ask_md, "md": md,
             "ask_tool": ask_tool, "tool": tool, "xss": xss}  # fmt: skip
    return Seeded(
        chat,
        root.id.tree,
        {"hello": 1, "hi": 2, "ask_md": 3, "md": 4, "ask_tool": 5, "xss": 6},
        {name: _ref(node.id) for name, node in nodes.items()},
    )


def _ref(node: NodeId) -> str:
    return f"{node.seg}.{node.idx}"


async def seed_chain(store: TranscriptStore, chat: int, count: int, *, text_chars: int) -> int:
    """A tree of ``count`` nodes: a main chain with a side branch every tenth node;
    returns the message id of the main chain's last node."""
    scope = str(chat)
    node = (await store.start(scope, [ChatMessage("system", "You are a test assistant.")])).id
    body = ("lorem ipsum dolor sit amet " * (text_chars // 27 + 1))[:text_chars]
    message = leaf = 0
    made = 1
    while made < count:
        role: Role = "user" if made % 2 else "assistant"
        message += 1
        child = await store.append(
            node, [ChatMessage(role, f"{message}: {body}")], aliases=[message]
        )
        leaf = message
        made += 1
        if made % 10 == 0 and made < count:
            message += 1
            await store.append(
                node, [ChatMessage(role, f"{message}: side {body}")], aliases=[message]
            )
            made += 1
        node = child.id
    return leaf
