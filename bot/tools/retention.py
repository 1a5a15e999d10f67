"""Tool results in the view the model is sent: old, large ones become short stubs.

A tool result of an earlier exchange (before the last user message) longer than
``STUB_OVER`` characters is replaced by a stub naming its size; the ``tool``
message itself stays, with its ``tool_call_id``, so every call keeps its
result. The rule depends on the messages alone, so a chain renders to the
same bytes every turn (the prompt-cache prefix moves once, when a turn's
results age into stubs). The stored nodes keep the full results.
"""

from __future__ import annotations

from collections.abc import Sequence

from transcript import ChatMessage

#: Longer results of earlier exchanges are stubbed (characters).
STUB_OVER = 600
STUB = (
    "[an earlier tool result of {chars} characters, left out to save space; "
    "call the tool again if it is needed]"
)


def stub_old_results(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """``messages`` with the large results of earlier exchanges stubbed."""
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), 0)
    out = list(messages)
    for i in range(last_user):
        message = out[i]
        if message.role == "tool" and len(message.content or "") > STUB_OVER:
            out[i] = ChatMessage(
                "tool",
                STUB.format(chars=len(message.content or "")),
                tool_call_id=message.tool_call_id,
                name=message.name,
            )
    return tuple(out)
