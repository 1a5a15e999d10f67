"""``why``: what exactly one model call was sent, from its audit record.

It finds a call's audit records by scanning ``rc:{<chat>}:u:a:*`` (one hash per chat
and day, kept ``MODEL_AUDIT_DAYS`` days): fine for a command run by hand. The request
is rebuilt from the transcript as the call saw it, with the fold it was sent (the
store's deepest fold on a path is not enough: :meth:`TranscriptStore.fold` reads the
older one).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from transcript import ChatMessage, Fold, Node, NodeId, TranscriptStore

from ..model.wire import wire_messages
from .conversations import (
    AuditRecord,
    OpsError,
    audit_records,
    image_lines,
    locate,
    parse_view,
)


@dataclass(frozen=True, slots=True)
class Rendered:
    """What one view of a chain sent the model, part by part, with node ids."""

    root: Node
    fold: Fold | None
    dropped: int
    verbatim: tuple[Node, ...]

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        summary = self.fold.messages if self.fold else ()
        return (*self.root.messages, *summary, *(m for n in self.verbatim for m in n.messages))


async def render(store: TranscriptStore, nodes: Sequence[Node], view: str) -> Rendered:
    """The request a call of ``view`` on the chain ``nodes`` was sent, rebuilt from the store.

    The same composition as :class:`bot.turn.context.ContextWindow`: the root, the
    fold's summary, then the nodes after the fold less the ``dropped`` oldest.
    """
    fold_ref, dropped = parse_view(view)
    fold: Fold | None = None
    start = 1
    if fold_ref is not None:
        at = NodeId.parse(nodes[0].id.scope, fold_ref)
        cut = next((i for i, n in enumerate(nodes) if n.id == at), None)
        fold = await store.fold(at)
        if cut is None or fold is None:
            raise OpsError(f"the fold at node {fold_ref} named by the audit record is not stored")
        start = cut + 1
    return Rendered(nodes[0], fold, dropped, tuple(nodes[start + dropped :]))


def _when(at: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _usage_line(record: AuditRecord) -> str:
    share = f"{100 * record.cached / record.prompt:.0f} %" if record.prompt else "0 %"
    line = (
        f"prompt {record.prompt} tokens ({record.cached} cached, {share}), "
        f"completion {record.completion} tokens"
    )
    return line + (" (estimated: the provider reported no usage)" if record.estimated else "")


def _view_line(rendered: Rendered) -> str:
    if rendered.fold is None:
        line = "the full history (no fold)"
    else:
        line = (
            f"the fold at node {rendered.fold.at.ref} (a summary standing for the root → "
            f"that node, depth {rendered.fold.depth}), then the later nodes verbatim"
        )
    if rendered.dropped:
        line += f"; the {rendered.dropped} oldest node(s) after it left out (over the budget)"
    return line


def _message_block(title: str, message: ChatMessage) -> list[str]:
    lines = ["", f"### {title}", ""]
    if message.content:
        lines.append(message.content)
    lines += image_lines(message)
    lines += [f"- calls `{c.name}({c.arguments})`" for c in message.tool_calls]
    return lines


def _rendered_lines(rendered: Rendered) -> list[str]:
    wire = len(wire_messages(rendered.messages))
    lines = [
        "",
        f"## Rendered request ({wire} message(s) on the wire; the system prompt and a "
        "summary are joined into the first)",
    ]
    for message in rendered.root.messages:
        lines += _message_block(f"system prompt (root, node {rendered.root.id.ref})", message)
    if rendered.fold is not None:
        for message in rendered.fold.messages:
            lines += _message_block(f"fold summary (at node {rendered.fold.at.ref})", message)
    for node in rendered.verbatim:
        for message in node.messages:
            lines += _message_block(
                f"{message.role} (node {node.id.ref}, depth {node.depth})", message
            )
    return lines


async def why(
    redis: Redis, store: TranscriptStore, chat_id: int, message_id: int, *, audit_days: int
) -> str:
    """What the model was sent for an answer, and what came back, from the audit records."""
    found = await locate(redis, store, chat_id, message_id)
    nodes = await store.path(found.node)
    node = nodes[-1]
    role = node.messages[0].role if node.messages else "system"
    if len(nodes) < 2 or role not in ("user", "assistant"):
        raise OpsError(f"message {message_id} starts its conversation: no model call made it")
    if role == "assistant":
        asked, answer = nodes[:-1], node
    else:
        asked, answer = nodes, None
    sent = str(asked[-1].id)
    records = await audit_records(redis, chat_id)
    calls = [r for r in records if r.sent == sent and not r.is_summary]
    turns = {r.message for r in calls}
    summaries = [r for r in records if r.is_summary and r.message in turns]
    if not calls:
        if audit_days == 0:
            raise OpsError("no audit record: MODEL_AUDIT_DAYS=0 turns them off")
        raise OpsError(
            f"no audit record of the call(s) behind message {message_id}: they are kept "
            f"MODEL_AUDIT_DAYS={audit_days} day(s), so this one has expired (or the answer "
            "came from no model call)"
        )
    what = "answer" if answer is not None else "question"
    lines = [
        f"# Why: {what} message {message_id} in chat {chat_id}",
        "",
        f"Node {found.node.ref} at depth {node.depth}; the model was sent the chain up to "
        f"node {asked[-1].id.ref} (the user's message {', '.join(map(str, sorted(turns)))}).",
        "",
        f"## Model calls ({len(calls)} answer call(s), {len(summaries)} summary call(s))",
    ]
    for record in sorted([*calls, *summaries], key=lambda r: r.at):
        kind = "summary (fold)" if record.is_summary else "answer"
        lines += [
            "",
            f"- {_when(record.at)}  {kind} call to {record.model}, {record.latency:.2f} s",
            f"  usage: {_usage_line(record)}",
            f"  outcome: {f'failed ({record.error})' if record.error else 'answered'}",
        ]
    views = list(dict.fromkeys(r.view for r in calls))
    for view in views:
        rendered = await render(store, asked, view)
        lines += ["", f"View: {_view_line(rendered)}."]
        lines += _rendered_lines(rendered)
    if answer is not None:
        lines += ["", "## What came back"]
        for message in answer.messages:
            lines += _message_block(f"{message.role} (node {answer.id.ref})", message)
    return "\n".join(lines) + "\n"
