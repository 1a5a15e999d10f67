"""A conversation tree as the viewer's JSON: the skeleton first, texts on demand.

The skeleton (:func:`skeleton`) has one short entry per node: its parent, role,
depth, first line, message id, and what its model call cost when the usage
records still say so; it never holds a whole message, so a 1,000-node tree stays
a few hundred kilobytes. A fold's summary comes whole with the node it was made
at (few per tree; the viewer shows it in place of the messages it stands for).
:func:`details` gives the full messages of a few nodes, :func:`export` a branch
as Markdown (the renderer of ``/export``).

Everything is read inside one chat's scope: a node id from a request names a
node of the chat the request was authorised for, never of another.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from transcript import ChatMessage, NodeId, TranscriptStore, codec, keys
from transcript.outage import guarded

from ..data import keys as bot_keys
from ..ops import conversations
from ..usage.calls import Prices, Totals

#: Characters of a node's first line in the skeleton.
FIRST_LINE = 120
#: Nodes one details request may ask for.
MAX_DETAILS = 100
_REF = re.compile(r"^(\d{1,9})\.(\d{1,9})$")

JSON = dict[str, Any]


class ViewError(Exception):
    """A request names nothing readable; ``key`` names its text (texts.ERRORS)."""

    def __init__(self, status: int, key: str) -> None:
        super().__init__(key)
        self.status = status
        self.key = key


def parse_ref(scope: str, tree: int, ref: str) -> NodeId:
    """A node of the scope's tree from ``seg.idx``; :class:`ViewError` (400) when malformed."""
    match = _REF.match(ref)
    if match is None:
        raise ViewError(400, "bad_request")
    return NodeId(scope, tree, int(match[1]), int(match[2]))


def _role(item: conversations.TreeNode) -> str:
    node = item.node
    if node.id.seg == 0 and node.id.idx == 0:
        return "system"
    if any(m.tool_calls for m in node.messages):
        return "tool"
    first = node.messages[0].role if node.messages else "system"
    return "persona" if first == "system" else first


def _first_line(messages: Sequence[ChatMessage]) -> str:
    for message in messages:
        for line in (message.content or "").splitlines():
            if line.strip():
                text = line.strip()
                return text if len(text) <= FIRST_LINE else text[: FIRST_LINE - 1] + "…"
        if message.tool_calls:
            return ", ".join(f"{c.name}()" for c in message.tool_calls)[:FIRST_LINE]
    return ""


@dataclass(frozen=True, slots=True)
class _Call:
    at: int
    model: str
    prompt: int
    completion: int
    cached: int


async def _calls(redis: Redis, chat_id: int, tree: int, audit_days: int) -> dict[str, list[_Call]]:
    """The answer calls of one tree still audited, by the node they were sent up to
    (``seg.idx``), oldest first: one pipelined read of the chat's audit days."""
    if audit_days <= 0:
        return {}
    pipe = redis.pipeline(transaction=False)
    for name in _audit_days(chat_id, audit_days):
        pipe.hvals(name)
    prefix = f"{chat_id}/{tree}:"
    found: dict[str, list[_Call]] = {}
    for values in await guarded(pipe.execute()):
        for value in values:
            record = conversations.AuditRecord.decode(value, chat_id)
            if (
                record is None
                or record.is_summary
                or record.error
                or not record.sent.startswith(prefix)
            ):
                continue
            call = _Call(record.at, record.model, record.prompt, record.completion, record.cached)
            found.setdefault(record.sent.removeprefix(prefix), []).append(call)
    for calls in found.values():
        calls.sort(key=lambda c: c.at)
    return found


def _audit_days(chat_id: int, audit_days: int) -> list[str]:
    """The chat's audit hashes that may still exist (one per UTC day, kept
    ``audit_days`` + 1 days after their first call)."""
    today = dt.datetime.now(dt.UTC).date()
    return [
        bot_keys.chat_usage_key(chat_id, "a", (today - dt.timedelta(days=back)).strftime("%Y%m%d"))
        for back in range(audit_days + 2)
    ]


async def _node_usage(redis: Redis, chat_id: int, tree: int) -> dict[str, Totals]:
    """The per-node usage entries of one tree (sums of the calls sent up to each node)."""
    raw = await guarded(redis.hgetall(bot_keys.chat_usage_key(chat_id, "n", tree)))
    found: dict[str, Totals] = {}
    for ref, value in raw.items():
        text = value.decode() if isinstance(value, bytes) else str(value)
        name = ref.decode() if isinstance(ref, bytes) else str(ref)
        try:
            p, c, k, n = (int(v) for v in text.split(" ", 4)[:4])
        except ValueError:
            continue
        found[name.partition(":")[2]] = Totals(prompt=p, completion=c, cached=k, calls=n)
    return found


def _usage(totals: Totals, prices: Prices, **extra: Any) -> JSON:
    out: JSON = {"tokens": totals.tokens, **extra}
    if prices.configured:
        out["cost"] = round(prices.cost(totals), 6)
    return out


def _attribute(
    children: Sequence[tuple[int, int]],
    calls: Sequence[_Call],
    summed: Totals | None,
    prices: Prices,
) -> list[JSON | None]:
    """What the calls sent up to a node cost, per child (each child is what one call
    answered): paired in order when the counts agree, else shared."""
    if calls and len(calls) == len(children):
        return [
            _usage(Totals(c.prompt, c.completion, c.cached, 1), prices, model=c.model, at=c.at)
            for c in calls
        ]
    if calls:
        total = Totals()
        for c in calls:
            total = total + Totals(c.prompt, c.completion, c.cached, 1)
        models = ", ".join(dict.fromkeys(c.model for c in calls))
        shared = _usage(total, prices, model=models, at=calls[0].at, calls=len(calls),
                        answers=len(children))  # fmt: skip
        return [shared for _ in children]
    if summed is not None and len(children) == 1:
        return [_usage(summed, prices)]
    return [None for _ in children]


async def _folds(redis: Redis, scope: str, tree: int) -> dict[str, JSON]:
    """Every fold of the tree, by the node it was made at: its depth and summary."""
    key = keys.tree_key(scope, tree)
    index = await guarded(redis.hget(key, keys.FOLD_INDEX_FIELD))
    refs = [
        r for r in ((index.decode() if isinstance(index, bytes) else index) or "").split(",") if r
    ]
    if not refs:
        return {}
    at = [parse_ref(scope, tree, r) for r in refs]
    fields = [keys.fold_field(n.seg, n.idx) for n in at]
    values = await guarded(redis.hmget(key, fields))
    found: dict[str, JSON] = {}
    for ref, data in zip(refs, values, strict=True):
        if data is not None:
            depth, messages = codec.decode_fold(f"fold at {scope}/{tree}:{ref}", data)
            found[ref] = {"depth": depth, "text": "\n\n".join(m.content or "" for m in messages)}
    return found


def _entry(item: conversations.TreeNode, parent: int) -> JSON:
    """A node's skeleton entry: ref, parent, role, depth, first line, message id, images."""
    node = item.node
    entry: JSON = {
        "k": keys.node_field(node.id.seg, node.id.idx),
        "p": parent,
        "r": _role(item),
        "d": node.depth,
        "t": _first_line(node.messages),
    }
    if item.message_ids:
        entry["m"] = min(item.message_ids)
    images = sum(len(m.images) for m in node.messages)
    if images:
        entry["i"] = images
    return entry


def _usages(
    nodes: dict[tuple[int, int], conversations.TreeNode],
    calls: dict[str, list[_Call]],
    summed: dict[str, Totals],
    prices: Prices,
) -> dict[tuple[int, int], JSON | None]:
    """What each node's model call cost, where the records tell."""
    usage: dict[tuple[int, int], JSON | None] = {}
    for key, item in nodes.items():
        if item.children:
            ref = keys.node_field(*key)
            used = _attribute(item.children, calls.get(ref, []), summed.get(ref), prices)
            usage.update(zip(item.children, used, strict=True))
    return usage


async def skeleton(
    redis: Redis,
    store: TranscriptStore,
    *,
    chat_id: int,
    message_id: int,
    audit_days: int,
    prices: Prices,
) -> JSON:
    """The tree holding ``message_id`` of ``chat_id``, one short entry per node.

    ``nodes`` is in depth-first order, parents first; ``selected`` is the index of
    the message's node. :class:`ViewError` (404) for a message of no stored thread.
    """
    try:
        found = await conversations.locate(redis, store, chat_id, message_id)
    except conversations.OpsError:
        raise ViewError(404, "not_found") from None
    scope, tree = found.node.scope, found.node.tree
    nodes = await conversations.load_tree(redis, scope, tree)
    if (0, 0) not in nodes:
        raise ViewError(404, "not_found")
    folds = await _folds(redis, scope, tree)
    calls = await _calls(redis, chat_id, tree, audit_days)
    summed = await _node_usage(redis, chat_id, tree)
    order: list[tuple[int, int]] = []
    stack = [(0, 0)]
    while stack:  # depth first, children in the order they were written
        key = stack.pop()
        order.append(key)
        stack.extend(reversed(nodes[key].children))
    index = {key: i for i, key in enumerate(order)}
    usage = _usages(nodes, calls, summed, prices)
    entries: list[JSON] = []
    for key in order:
        item = nodes[key]
        entry = _entry(item, index.get(item.parent, -1) if item.parent is not None else -1)
        ref = entry["k"]
        if usage.get(key) is not None:
            entry["u"] = usage[key]
        sent = calls.get(ref)
        if sent and entry["r"] == "user":
            entry["at"] = sent[0].at  # the question was sent on with its first call
        if ref in folds:
            entry["f"] = folds[ref]
        entries.append(entry)
    return {
        "chat": chat_id,
        "tree": tree,
        "selected": index[(found.node.seg, found.node.idx)],
        "nodes": entries,
    }


def _message(message: ChatMessage) -> JSON:
    out: JSON = {"r": message.role, "c": message.content or ""}
    if message.name:
        out["name"] = message.name
    if message.tool_calls:
        out["calls"] = [
            {"id": c.id, "name": c.name, "args": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id:
        out["id"] = message.tool_call_id
    if message.images:
        out["images"] = [[i.width, i.height] for i in message.images]
    return out


async def details(store: TranscriptStore, chat_id: int, tree: int, refs: Iterable[str]) -> JSON:
    """The full messages of a few nodes of one tree of the chat, by ``seg.idx``."""
    wanted = list(dict.fromkeys(refs))
    if not wanted or len(wanted) > MAX_DETAILS:
        raise ViewError(400, "bad_request")
    scope = str(chat_id)
    out: JSON = {}
    for ref in wanted:
        node = await store.node(parse_ref(scope, tree, ref))
        out[ref] = [_message(m) for m in node.messages]
    return {"nodes": out}


async def export(
    redis: Redis, store: TranscriptStore, chat_id: int, *, tree: int, ref: str
) -> JSON:
    """The branch root → node ``ref`` as Markdown (``/export``'s renderer) and a file name."""
    node = parse_ref(str(chat_id), tree, ref)
    text = await conversations.export_node(redis, store, node, f"node {ref}")
    return {"name": f"conversation-{abs(chat_id)}-{tree}-{ref}.md", "markdown": text}
