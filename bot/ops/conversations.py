"""Reading stored conversations for the operator: ``export`` and ``tree`` (``why`` is
:mod:`bot.ops.why`).

``tree`` and ``export`` also answer /tree and /export: their words are message ids
(:mod:`bot.i18n`), in English for the operator's commands and in the user's language
there.

Everything here only reads. A message id is found through the store's public
API (:meth:`TranscriptStore.resolve`, ``history``, ``path``, ``node``); two
reads the store has no API for are done here, from the key shapes in
:mod:`transcript.keys` and the record codec, because only an operator needs them:

* the children of a node (``tree``): one ``HSCAN`` of the conversation's tree hash,
  each node record decoded; a node's parent follows from its segment
  (``(seg, i - 1)``, or the nearest ancestor run for a segment's first node);
* the fold record at a given node (``why``, :mod:`bot.ops.why`): the store only
  offers the deepest fold on a path, but a call may have been sent an older one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
from redis.asyncio import Redis

from transcript import ChatMessage, Fold, Node, NodeId, TranscriptStore, codec, keys
from transcript.errors import CorruptRecordError
from transcript.outage import guarded

from ..data import keys as bot_keys
from ..i18n import N_, _, ngettext
from ..usage.calls import AUDIT_FIELDS, SUMMARY_VIEW, TITLE_VIEW

#: Words of a message shown in a tree line.
TREE_WORDS = 8
_NODE_FIELD = re.compile(rb"^(\d+)\.(\d+)$")
_HEADINGS = {
    "system": N_("System"), "user": N_("User"), "assistant": N_("Assistant"), "tool": N_("Tool")
}  # fmt: skip


class OpsError(Exception):
    """A command cannot do what was asked; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class Found:
    """A message id of a chat and the node it is aliased to."""

    chat_id: int
    message_id: int
    node: NodeId


async def locate(redis: Redis, store: TranscriptStore, chat_id: int, message_id: int) -> Found:
    """The node ``message_id`` of ``chat_id`` belongs to, or a one-line :class:`OpsError`."""
    scope = str(chat_id)
    node = await store.resolve(scope, message_id)
    if node is None:
        if not await guarded(redis.exists(keys.alias_key(scope))):
            raise OpsError(
                f"chat {chat_id} is unknown: no thread is stored for it "
                "(check CHAT_ID, and that REDIS_URL is the bot's Redis)"
            )
        raise OpsError(
            f"message {message_id} of chat {chat_id} is unknown: it belongs to no stored "
            "thread (a message the bot never answered, or a wrong MESSAGE_ID)"
        )
    return Found(chat_id, message_id, node)


def _text(message: ChatMessage) -> str:
    return message.content or ""


# --------------------------------------------------------------------- export


async def export(redis: Redis, store: TranscriptStore, chat_id: int, message_id: int) -> str:
    """The thread root → the message's node as Markdown: a title, a heading per message.

    A fold summary made on this branch follows the message it was made at, under
    its own heading (it stands for everything above it; the messages stay too).
    """
    found = await locate(redis, store, chat_id, message_id)
    return await export_node(redis, store, found.node, _("message {id}").format(id=message_id))


async def export_node(redis: Redis, store: TranscriptStore, leaf: NodeId, what: str) -> str:
    """:func:`export` of the branch root → ``leaf`` (a node of a chat found already);
    ``what`` names the leaf in the title (``message 42``, ``node 0.7``)."""
    nodes = await store.path(leaf)
    folded = await guarded(redis.hget(keys.tree_key(leaf.scope, leaf.tree), keys.FOLD_INDEX_FIELD))
    fold_refs = set((folded.decode() if isinstance(folded, bytes) else folded or "").split(","))
    history = await store.history(leaf)
    count = len(history.messages)
    lines = [
        "# " + _("Conversation in chat {chat}, up to {what}").format(chat=leaf.scope, what=what),
        "",
        "_"
        + _(
            "{messages}, depth {depth}, from the root to node {node}: the full history of "
            "this branch only."
        ).format(
            messages=ngettext("{count} message", "{count} messages", count).format(count=count),
            depth=history.depth,
            node=leaf.ref,
        )
        + "_",
    ]
    for index, node in enumerate(nodes):
        for message in node.messages:
            if index == 0 and message.role == "system":
                heading = _("System prompt")
            else:
                heading = _(_HEADINGS[message.role])
                if message.name:
                    heading += f" ({message.name})"
            lines += ["", f"## {heading}", ""]
            if message.content:
                lines.append(message.content)
            lines += image_lines(message)
            for call in message.tool_calls:
                lines.append(
                    "- " + _("calls {call}").format(call=f"`{call.name}({call.arguments})`")
                )
        if keys.node_field(node.id.seg, node.id.idx) in fold_refs:
            fold = await fold_at(redis, node.id)
            for message in fold.messages if fold else ():
                lines += ["", "## " + _("Fold summary (stands for everything above)"), ""]
                lines.append(_text(message))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------- tree


@dataclass(slots=True)
class TreeNode:
    """A node of a loaded tree, linked to its parent and children (``seg``, ``idx``)."""

    node: Node
    parent: tuple[int, int] | None
    children: list[tuple[int, int]] = field(default_factory=list)
    below: int = 0
    message_ids: list[int] = field(default_factory=list)


async def load_tree(redis: Redis, scope: str, tree: int) -> dict[tuple[int, int], TreeNode]:
    """Every node of one conversation tree, linked to its parent and children (HSCAN)."""
    found: dict[tuple[int, int], TreeNode] = {}
    async for name, value in redis.hscan_iter(keys.tree_key(scope, tree), count=1000):
        match = _NODE_FIELD.match(name if isinstance(name, bytes) else str(name).encode())
        if match is None:
            continue  # the segment counter, folds, the fold index
        seg, idx = int(match[1]), int(match[2])
        node_id = NodeId(scope, tree, seg, idx)
        record = codec.decode_node(str(node_id), value)
        parent: tuple[int, int] | None = None
        if idx > 0:
            parent = (seg, idx - 1)
        elif seg > 0:
            if record.segment is None or not record.segment.ancestors:
                raise CorruptRecordError(str(node_id), "first node of a branch lacks its ancestors")
            parent = record.segment.ancestors[0]
        found[(seg, idx)] = TreeNode(Node(node_id, record.depth, record.messages), parent)
    _link(found)
    async for ref, target in redis.hscan_iter(keys.alias_key(scope), count=1000):
        text = target.decode() if isinstance(target, bytes) else str(target)
        if text.startswith(f"{tree}:"):
            node = NodeId.parse(scope, text)
            entry = found.get((node.seg, node.idx))
            if entry is not None:
                entry.message_ids.append(int(ref))
    return found


def _link(found: dict[tuple[int, int], TreeNode]) -> None:
    """Fill in children (oldest segment first) and the count of nodes below each node."""
    for key, item in sorted(found.items()):
        if item.parent is not None and item.parent in found:
            found[item.parent].children.append(key)
    # breadth first from the top, then counted bottom up (children before parents)
    order = [k for k, item in found.items() if item.parent is None or item.parent not in found]
    for key in order:  # grows while it is walked
        order.extend(found[key].children)
    for key in reversed(order):
        parent = found[key].parent
        if parent is not None and parent in found:
            found[parent].below += found[key].below + 1


def _first_words(text: str, words: int = TREE_WORDS) -> str:
    parts = text.split()
    shown = " ".join(parts[:words])
    return shown + ("…" if len(parts) > words else "")


def _tree_label(item: TreeNode, marked: NodeId, model: str | None = None) -> str:
    node = item.node
    role = node.messages[0].role if node.messages else "system"
    text = " ".join(_text(m) for m in node.messages)
    if node.id.seg == 0 and node.id.idx == 0:
        label = _("system prompt: {text}").format(text=_first_words(text))
    else:
        who = {"user": _("user"), "assistant": _("bot")}.get(role, role)
        label = f"[depth:{node.depth}] {who}: {_first_words(text)}"
    details = [f"model {model}"] if model else []
    if item.message_ids:
        details.append(_("msg {id}").format(id=min(item.message_ids)))
    details.append(_("{count} below").format(count=item.below))
    label += f"  ({'; '.join(details)})"
    if node.id == marked:
        label += "  " + _("◀ this message")
    return label


async def tree(
    redis: Redis, store: TranscriptStore, chat_id: int, message_id: int, *, limit: int = 0
) -> str:
    """The conversation tree holding the message: one line per node, branches indented.

    With ``limit`` (characters, e.g. Telegram's 4096 for ``/tree``) a tree too
    long to show whole is summarised around the marked path: the lines nearest
    the marked node (its ancestors, its replies, the branches beside its path)
    stay, the rest become ``… N more`` lines.
    """
    found = await locate(redis, store, chat_id, message_id)
    nodes = await load_tree(redis, found.node.scope, found.node.tree)
    root = nodes.get((0, 0))
    if root is None:
        raise OpsError(f"the conversation of message {message_id} has no root node stored")
    leaves = sum(1 for item in nodes.values() if not item.children)
    header = _(
        "conversation {tree} of chat {chat}: {nodes}, {branches}; message {message} is node "
        "{node} (depth {depth})"
    ).format(
        tree=found.node.tree,
        chat=chat_id,
        nodes=ngettext("{count} node", "{count} nodes", len(nodes)).format(count=len(nodes)),
        branches=ngettext("{count} branch", "{count} branches", leaves).format(count=leaves),
        message=message_id,
        node=found.node.ref,
        depth=(await store.node(found.node)).depth,
    )
    models = _answer_models(nodes, await audit_records(redis, chat_id))
    if len(set(models.values())) < 2:
        models = {}  # one model answered them all: nothing to tell apart
    lines: list[_Line] = []
    # (key, prefix of its own line, prefix of the lines below it)
    stack: list[tuple[tuple[int, int], str, str]] = [((0, 0), "", "")]
    while stack:
        key, first, rest = stack.pop()
        item = nodes[key]
        lines.append(_Line(key, first, _tree_label(item, found.node, models.get(key))))
        children = item.children
        if len(children) == 1:
            stack.append((children[0], rest, rest))
            continue
        for i in reversed(range(len(children))):
            last = i == len(children) - 1
            stack.append(
                (children[i], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
            )
    text = _render_lines(header, lines, None)
    if not limit or len(text) <= limit:
        return text
    marked = (found.node.seg, found.node.idx)
    distance = _distances(nodes, marked)
    order = sorted(range(len(lines)), key=lambda i: (distance[lines[i].key], i))
    low, high = 1, len(lines)  # the most lines that fit, nearest first
    while low < high:
        middle = (low + high + 1) // 2
        if len(_render_lines(header, lines, set(order[:middle]))) <= limit:
            low = middle
        else:
            high = middle - 1
    return _render_lines(header, lines, set(order[:low]), limit)


def _answer_models(
    nodes: dict[tuple[int, int], TreeNode], records: Sequence[AuditRecord]
) -> dict[tuple[int, int], str]:
    """The model of each answer the audit still tells: the answers below a node, oldest
    first, paired with the answered calls sent up to that node, in time order (a
    /retry on another model is a later call and a later sibling)."""
    calls: dict[str, list[str]] = {}
    for record in records:
        if record.error is None and not record.is_summary and record.view != TITLE_VIEW:
            calls.setdefault(record.sent, []).append(record.model)
    found: dict[tuple[int, int], str] = {}
    for item in nodes.values():
        made = calls.get(str(item.node.id))
        if not made:
            continue
        answers = [
            child for child in item.children
            if nodes[child].node.messages and nodes[child].node.messages[0].role == "assistant"
        ]  # fmt: skip
        found.update(zip(answers, made, strict=False))
    return found


@dataclass(frozen=True, slots=True)
class _Line:
    key: tuple[int, int]
    prefix: str
    label: str


def _render_lines(
    header: str, lines: Sequence[_Line], shown: set[int] | None, limit: int = 0
) -> str:
    """The tree's text; lines not ``shown`` are folded into ``… N more`` lines."""
    out = [header]
    hidden = 0
    for index, line in enumerate(lines):
        if shown is None or index in shown:
            if hidden:
                out.append(line.prefix + _more(hidden))
                hidden = 0
            out.append(line.prefix + line.label)
        else:
            hidden += 1
    if hidden:
        out.append(_more(hidden))
    text = "\n".join(out) + "\n"
    return text[: limit - 2] + "…\n" if limit and len(text) > limit else text


def _more(hidden: int) -> str:
    return _("… {count} more").format(count=hidden)


def _distances(
    nodes: dict[tuple[int, int], TreeNode], marked: tuple[int, int]
) -> dict[tuple[int, int], int]:
    """Steps in the tree from the marked node to every node (the root counts as near)."""
    distance = {marked: 0}
    queue = [marked]
    for key in queue:  # grows while it is walked: breadth first
        item = nodes[key]
        neighbours = [*item.children, *([item.parent] if item.parent in nodes else [])]
        for other in neighbours:
            if other is not None and other not in distance:
                distance[other] = distance[key] + 1
                queue.append(other)
    distance[(0, 0)] = 0
    return {key: distance.get(key, len(nodes)) for key in nodes}


# ------------------------------------------------------------------ audit records


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One model call as :class:`bot.usage.accounting.Accounting` recorded it."""

    at: int
    model: str
    user: int
    message: int
    sent: str
    prompt: int
    completion: int
    cached: int
    estimated: bool
    latency: float
    error: str | None
    view: str

    @classmethod
    def decode(cls, data: bytes, chat_id: int) -> AuditRecord | None:
        """A record of ``chat_id``'s audit (the chat's hash leaves out the chat: a nil
        user is the chat, ``sent`` is a ref in the chat; see AUDIT_FIELDS)."""
        try:
            values = msgpack.unpackb(data, raw=False)
            if not isinstance(values, list) or len(values) != len(AUDIT_FIELDS):
                return None
            record: dict[str, Any] = dict(zip(AUDIT_FIELDS, values, strict=True))
            if record["user"] is None:
                record["user"] = chat_id
            record["sent"] = f"{chat_id}/{record['sent']}"
            return cls(**record)
        except Exception:  # a record that does not decode is skipped, not fatal
            return None

    @property
    def is_summary(self) -> bool:
        return self.view == SUMMARY_VIEW


async def audit_records(redis: Redis, chat_id: int) -> list[AuditRecord]:
    """Every audit record of one chat still kept.

    The chat's audit hashes, one per day (``rc:{<chat>}:u:a:<day>``), found by a SCAN.
    """
    values: list[Any] = []
    days = bot_keys.chat_usage_key(chat_id, "a", "*")
    async for name in redis.scan_iter(match=days, count=1000):
        values += (await guarded(redis.hgetall(name))).values()
    records: list[AuditRecord] = []
    for value in values:
        record = AuditRecord.decode(value, chat_id) if isinstance(value, bytes) else None
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: r.at)


def parse_view(view: str) -> tuple[str | None, int]:
    """The fold ref (None: no fold) and the count of oldest nodes left out, of a view."""
    base, _plus, dropped = view.partition("+")
    return (base or None), int(dropped) if dropped else 0


async def fold_at(redis: Redis, node: NodeId) -> Fold | None:
    """The fold record standing for root → ``node``, if one was written there."""
    data = await guarded(
        redis.hget(keys.tree_key(node.scope, node.tree), keys.fold_field(node.seg, node.idx))
    )
    if data is None:
        return None
    depth, messages = codec.decode_fold(f"fold at {node}", data)
    return Fold(node, depth, messages)


def image_lines(message: ChatMessage) -> list[str]:
    """An image as its reference: size and digest (its blob, ``rc:{chat}:b:<digest>``)."""
    return [f"- image {i.width}x{i.height} `{i.digest}`" for i in message.images]
