"""Pictures the bot makes: ``/image`` as a turn, and the built-in ``generate_image`` tool.

``/image <prompt>`` goes through the durable intake like any message (an :class:`Inbound`
of kind :data:`~bot.bus.inbound.IMAGE`), so it is answered once, by one worker, and
aliased like every answer. Its user node holds the command as sent; the answer node is
one assistant message whose text is the picture's prompt and whose image is the picture,
stored once as a blob of the chat (as a received photo is). As a reply to a message that
shows a picture (the bot's, or a user's photo), the prompt says what to change and the
picture goes to ``/images/edits``: the new picture hangs below the old one, a branch of
its own. As a reply to anything else the thread above goes with the prompt.

A tool-capable model may draw too (:class:`DrawTool`): the picture is stored the same
way, as an image of the tool's result, and shown after the answer's text.

Either way the answer's pictures (:func:`drawn`) are sent after its text as
*attachments* (bot/telegram/onscreen.py): through the part ledger, each aliased to the
answer's node, so a reply to a picture continues its thread. A model sees a picture the
bot made in a user message of its own right after the message holding it
(bot/model/wire.py): OpenAI takes images in user messages only.

The image call is priced per picture (``price_per_image``) and recorded with the answer
node on one round trip; the user's daily budget refuses it before the call; a refusal by
the endpoint (its content rules, a size) is one line, never tried again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from redis.asyncio.client import Pipeline

from transcript import ChatMessage, Image, Node, NodeId, TranscriptStore

from ..bus.inbound import IMAGE, IMAGE_COMMAND, RETRY, Inbound
from ..catalogue import Prices
from ..i18n import _
from ..media_texts import IMAGE_BUDGET, IMAGE_FAILED, IMAGE_FAILURES
from ..model import ModelError, Usage
from ..model.images import ImageMaker
from ..telegram.uploads import Attachment
from ..telegram.writer import AnswerWriter
from ..tools.box import ToolCallContext, ToolResult
from ..usage.accounting import Accounting
from ..usage.calls import CallRecord, resets_at
from ..usage.costs import image_cost
from .limits import Spending
from .speaking import announce
from .state import TurnStates
from .values import Drawn, Reply, Sent, Turn, TurnEnded

log = logging.getLogger("replychain.pictures")

#: The audit's view of an image call (a chat call's is the window it sent).
IMAGE_VIEW = "image"
#: The most characters of the thread above a prompt (DALL·E 3 takes 4,000 in all).
THREAD_CHARS = 3000
#: What goes before the thread in a prompt.
THREAD_LEAD = "\n\nThe conversation this picture is for (most recent last):\n"


def prompt_of(text: str) -> str:
    """The prompt of an ``/image`` message as stored ("/image a red cube")."""
    return text.removeprefix(IMAGE_COMMAND).strip()


def asks_for_picture(inbound: Inbound, user: Node) -> bool:
    """Whether the turn's answer is a picture: ``/image``, or ``/retry`` of one."""
    if inbound.kind == IMAGE:
        return True
    asked = user.messages[0].content if user.messages else None
    return inbound.kind == RETRY and (asked or "").startswith(IMAGE_COMMAND)


def drawn(path: Sequence[Node]) -> tuple[Drawn, ...]:
    """The pictures the last node of ``path`` shows: a user's photos, or an answer's
    pictures (its own, and those its tool rounds made, back to the question)."""
    last = path[-1] if path else None
    if last is not None and last.messages and last.messages[0].role == "user":
        return tuple(Drawn(i, m.content or "") for m in last.messages for i in m.images)
    found: list[Drawn] = []
    for node in reversed(path):
        if not node.messages or node.messages[0].role in ("user", "system"):
            break
        prompts = _prompts(node.messages)
        found[:0] = [
            Drawn(image, _caption(message, prompts))
            for message in node.messages
            for image in message.images
        ]
    return tuple(found)


def _caption(message: ChatMessage, prompts: dict[str, str]) -> str:
    """A picture's caption: an ``/image`` answer's text (its prompt), or the prompt of
    the ``generate_image`` call a tool result answers."""
    if message.role == "tool":
        return prompts.get(message.tool_call_id or "", "")
    return message.content or ""


def _prompts(messages: Sequence[ChatMessage]) -> dict[str, str]:
    """The prompt of each ``generate_image`` call of ``messages``, by call id."""
    found: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            if call.name == DrawTool.name:
                try:
                    prompt = json.loads(call.arguments).get("prompt", "")
                except (ValueError, AttributeError):
                    prompt = ""
                found[call.id] = prompt if isinstance(prompt, str) else ""
    return found


def with_thread(prompt: str, path: Sequence[Node]) -> str:
    """``prompt`` and the thread above it (its newest :data:`THREAD_CHARS` characters)."""
    lines: list[str] = []
    size = 0
    for node in reversed(path):
        for message in reversed(node.messages):
            if message.role not in ("user", "assistant") or not message.content:
                continue
            line = f"{message.role}: {' '.join(message.content.split())}"
            if size + len(line) > THREAD_CHARS:
                line = line[: max(0, THREAD_CHARS - size)]
            if line:
                lines.insert(0, line)
                size += len(line) + 1
            if size >= THREAD_CHARS:
                return prompt + THREAD_LEAD + "\n".join(lines)
    return prompt + THREAD_LEAD + "\n".join(lines) if lines else prompt


class PictureAttachments:
    """The pictures an answer shows, sent after its text (an
    :class:`~bot.turn.values.Output`; registered whether or not an image model is set up:
    an answer stored with pictures shows them)."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store

    def wanted(self, turn: Turn, reply: Reply) -> bool:
        return bool(reply.pictures)

    async def send(
        self, turn: Turn, writer: AnswerWriter, reply: Reply, *, text: str, first: int
    ) -> Sent:
        scope = turn.inbound.scope
        for number, shown in enumerate(reply.pictures, first):
            if number <= len(writer.attached):
                continue  # on screen: an earlier run of this turn sent it
            image = shown.image
            data = (await self.store.blobs(scope, [image.digest]))[image.digest]
            await writer.attach(number, Attachment("photo", data, shown.caption, image.mime))
        return Sent(first + len(reply.pictures))


class Pictures:
    """Makes and changes pictures for turns and for the tool (one per bot)."""

    def __init__(
        self, maker: ImageMaker, *, store: TranscriptStore, accounting: Accounting,
        prices: Prices, spending: Spending,
    ) -> None:  # fmt: skip
        self.maker, self.store, self.accounting = maker, store, accounting
        self.prices, self.spending = prices, spending

    async def answer(self, turn: Turn, user: Node, states: TurnStates) -> Reply:
        """The picture of an ``/image`` turn, stored as its answer node with the call's cost
        (one round trip); a refusal ends the turn with one line."""
        inbound = turn.inbound
        prompt = prompt_of(user.messages[0].content or "")
        path = await self.store.path(user.id)
        above = path[:-1]
        # a reply to a picture changes it; to anything else, the thread goes with the prompt
        # (a new conversation has none: its root holds the system prompt alone)
        source = drawn(above)
        if await self.spending.spent(inbound.user_id):
            reset = resets_at(self.accounting.clock())
            raise TurnEnded(Reply(_(IMAGE_BUDGET).format(reset=reset), user.id, notice=True))
        try:
            if source:
                original = source[-1].image
                data = (await self.store.blobs(inbound.scope, [original.digest]))[original.digest]
                picture = await self.maker.edit(prompt, data)
            else:
                picture = await self.maker.generate(with_thread(prompt, above))
        except ModelError as exc:
            log.warning("image call for chat %s failed: %s", inbound.chat_id, exc.kind)
            await self.accounting.record(self._call(inbound, user.id, exc.latency, exc.kind))
            raise TurnEnded(Reply(_(IMAGE_FAILURES.get(exc.kind, IMAGE_FAILED)), user.id,
                                  notice=True)) from None  # fmt: skip
        digest = await self.store.put_blob(inbound.scope, picture.data)
        image = Image(digest, picture.mime, picture.width, picture.height)
        message = ChatMessage("assistant", prompt, images=(image,))
        placement = await states.answer_placement(turn.state, user, message, [])

        def place(pipe: Pipeline) -> None:
            self.store.queue_place(pipe, placement)
            announce(turn, 1)(pipe)  # the picture, sent next: one round trip less

        call = self._call(inbound, user.id, picture.latency, None)
        [reply, *_others] = await self.accounting.record(call, with_writes=place)
        turn.state.sending, turn.state.attaching = 0, 1
        node = await states.answer_placed(turn.state, placement, reply)
        return Reply(prompt, node.id, pictures=(Drawn(image, prompt),), captioned=True)

    async def draw(self, prompt: str, context: ToolCallContext) -> ToolResult:
        """The tool's picture of ``prompt``, stored as a blob of the chat; a refusal is
        the result, for the model to read."""
        inbound = context.inbound
        if await self.spending.spent(inbound.user_id):
            return ToolResult("the user's budget for today is spent: no picture", error=True)
        sent = context.leaf.id if context.leaf is not None else None
        try:
            picture = await self.maker.generate(prompt)
        except ModelError as exc:
            log.warning("image call for chat %s failed: %s", inbound.chat_id, exc.kind)
            if sent is not None:
                await self.accounting.record(self._call(inbound, sent, exc.latency, exc.kind))
            return ToolResult(f"no picture: {exc.kind} ({exc.detail})", error=True)
        if sent is not None:
            await self.accounting.record(self._call(inbound, sent, picture.latency, None))
        digest = await self.store.put_blob(inbound.scope, picture.data)
        image = Image(digest, picture.mime, picture.width, picture.height)
        return ToolResult(DRAWN, images=(image,))

    def _call(
        self, inbound: Inbound, sent: NodeId, latency: float, error: str | None
    ) -> CallRecord:
        """The record of one image call (a failed one costs nothing)."""
        return CallRecord(
            inbound.chat_id, inbound.user_id, inbound.message_id, sent, self.maker.name,
            Usage(0, 0), latency, error=error, view=IMAGE_VIEW,
            cost=0 if error else image_cost(self.prices),
        )  # fmt: skip


#: The tool's result for the model (which sees the picture in the next message).
DRAWN = (
    "The picture is made; the user will see it below your answer (with the prompt as its "
    "caption). Do not repeat the prompt or link to the picture."
)


class DrawTool:
    """``generate_image(prompt)``: a built-in tool (bot/tools/box.py). Not idempotent: a
    picture costs money, so a call a crash interrupted is not made again."""

    name = "generate_image"
    idempotent = False

    def __init__(self, pictures: Pictures) -> None:
        self.pictures = pictures

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": (
                    "Draw a picture for the user from a detailed description. The picture "
                    "is shown to the user after your answer."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "prompt": {
                            "type": "string",
                            "description": "What to draw: subject, style, colours, setting.",
                        }
                    },
                    "required": ["prompt"],
                },
            },
        }

    async def call(self, arguments: dict[str, Any], context: ToolCallContext) -> ToolResult:
        prompt = arguments.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return ToolResult("prompt must be a non-empty string", error=True)
        return await self.pictures.draw(prompt.strip(), context)
