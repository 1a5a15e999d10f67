"""The context window: what one model call is sent, under CONTEXT_TOKEN_BUDGET.

Sizing is by tokens, never by message count. The size of a request is the
provider's reported prompt size of the previous call on this chain (when that
call was sent the same view) plus an estimate of only the new tail; estimates
are characters/4, calibrated by the ratio of reported to estimated tokens.

When the view would pass ``fold_at`` tokens, the older part is summarised into
a fold record (the originals stay; see :meth:`TranscriptStore.put_fold`) and
the view becomes: system prompt, summary, recent messages verbatim, which
stays byte-identical from turn to turn until the next fold. Folds are cut at
node boundaries only, and the first message kept verbatim is the user's. If
summarising fails, the oldest whole nodes are left out of this call instead.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from cachetools import LRUCache

from transcript import ChatMessage, Fold, Node, NodeId, TranscriptStore

from ..bus.inbound import Inbound
from ..data.connection import Queued
from ..model import Model, ModelError, Usage
from ..model.vision import Vision
from ..usage.accounting import Accounting
from ..usage.calls import SUMMARY_VIEW, CallRecord
from .branch import Branch
from .record import TurnState
from .window import (
    Estimator,
    Window,
    after,
    line,
    previous_user,
    starts_with_user,
    view_of,
)

#: System messages to insert after nodes (the personas chosen at them), by node.
Inserts = Mapping[NodeId, tuple[ChatMessage, ...]]
_NONE: Inserts = {}

log = logging.getLogger("replychain.context")

SUMMARY_PREFIX = "Summary of the earlier part of this conversation:\n"
SUMMARY_INSTRUCTIONS = (
    "You keep a running summary of a conversation between a user and an AI assistant. "
    "Merge the summary so far with the new part into one updated summary of at most "
    "{words} words. Keep facts, names, numbers, decisions, the user's preferences and "
    "open questions; drop small talk. Write only the summary, in the conversation's language."
)
#: Below this share of the fold threshold, estimates alone decide (no usage lookup).
NEAR = 0.8


class MessageTooLargeError(Exception):
    """The user's message alone does not fit into the budget."""


class ContextWindow:
    """Keeps each call's prompt under the budget with non-destructive folds."""

    def __init__(
        self,
        store: TranscriptStore,
        model: Model,
        accounting: Accounting,
        *,
        budget: int,
        fold_at: int,
        keep_recent: int,
        summary_tokens: int,
        vision: Vision | None = None,
    ) -> None:
        if not 0 < keep_recent < fold_at <= budget:
            raise ValueError("need 0 < keep_recent < fold_at <= budget")
        self.store = store
        self.model = model
        self.accounting = accounting
        self.budget = budget
        self.fold_at = fold_at
        self.keep_recent = keep_recent
        self.summary_tokens = summary_tokens
        self.vision = vision
        self.estimator = Estimator()
        #: Tokens of every request kept for what is not a message (the tools array).
        self.reserved = 0
        #: Turns large tool results of earlier exchanges into stubs (on with MCP_CONFIG).
        self.shape: Callable[[Sequence[ChatMessage]], tuple[ChatMessage, ...]] | None = None
        #: What views are fitted to: estimates are estimates, so keep ~3 % spare.
        self.limit = budget - max(8, budget // 32)
        #: Images set aside by running turns (turn key -> (digest, named by the error)).
        self._aside: LRUCache[str, list[tuple[str, bool]]] = LRUCache(maxsize=1024)
        #: Windows for models with another context budget (by budget); they share the
        #: estimator, the reserve and the images set aside with this one.
        self._siblings: dict[int, ContextWindow] = {}

    def for_branch(self, branch: Branch | None) -> ContextWindow:
        """The window for the branch's model: this one, or one sized to the model's own
        ``context_tokens`` (the thresholds scaled alike)."""
        budget = branch.spec.context_tokens if branch is not None and branch.spec else self.budget
        if budget == self.budget:
            return self
        sibling = self._siblings.get(budget)
        if sibling is None:
            sibling = copy.copy(self)  # shares the estimator, shape and set-aside images
            scale = budget / self.budget
            sibling.budget = budget
            sibling.fold_at = max(2, int((self.fold_at + self.reserved) * scale) - self.reserved)
            sibling.keep_recent = max(1, min(sibling.fold_at - 1, int(self.keep_recent * scale)))
            sibling.summary_tokens = max(64, int(self.summary_tokens * scale))
            sibling.limit = budget - max(8, budget // 32) - self.reserved
            sibling._siblings = {}
            self._siblings[budget] = sibling
        return sibling

    @classmethod
    def for_budget(
        cls,
        store: TranscriptStore,
        model: Model,
        accounting: Accounting,
        *,
        budget: int,
        fold_at: int = 0,
        keep_recent: int = 0,
        summary_tokens: int = 0,
        vision: Vision | None = None,
    ) -> ContextWindow:
        """Defaults: fold at 75 % of the budget, keep 40 % verbatim, summaries of 10 %."""
        return cls(
            store,
            model,
            accounting,
            budget=budget,
            fold_at=fold_at or budget * 3 // 4,
            keep_recent=keep_recent or budget * 2 // 5,
            summary_tokens=summary_tokens or max(64, min(2000, budget // 10)),
            vision=vision,
        )

    async def prepare(
        self, inbound: Inbound, user_node: NodeId, branch: Branch | None = None
    ) -> Window:
        """The messages for the call answering ``user_node``, at most the model's budget
        in tokens, with the bytes of their images.

        ``user_node`` is the last node the call is sent (a tool step's, in the tool loop).
        ``branch``: the model answering and the personas' system messages to insert
        (default: this window's model, no personas).
        """
        sized = self.for_branch(branch)
        inserts: dict[NodeId, tuple[ChatMessage, ...]] = {}
        for at, message in branch.personas if branch is not None else ():
            inserts[at] = (*inserts.get(at, ()), message)
        summariser = branch.summariser if branch is not None else self.model
        window = await sized._prepare(inbound, user_node, inserts, summariser)
        if self.shape is not None:
            window = replace(window, messages=self.shape(window.messages))
        digests = [i.digest for m in window.messages for i in m.images]
        if not digests:
            return window
        if branch is not None and branch.spec is not None and not branch.spec.vision:
            return window  # a text-only model: placeholders, without a failed call first
        model = branch.model.name if branch is not None else self.model.name
        if self.vision is not None:
            unread = await self.vision.unreadable(inbound.scope, model, digests)
            if unread is None:  # the model sees no images: placeholders
                return window
            # the model could not read these: it gets a placeholder instead of each
            digests = [d for d in digests if d not in unread]
        media = await self.store.blobs(inbound.scope, digests) if digests else {}
        return replace(window, media=media)

    async def sees_images(self) -> bool:
        return self.vision is None or await self.vision.sees_images(self.model.name)

    async def text_only(self, model: str | None = None) -> None:
        """The model (default: this window's) rejected images: from now on it gets
        placeholders."""
        if self.vision is not None:
            await self.vision.text_only(model or self.model.name)

    def set_aside(
        self,
        inbound: Inbound,
        state: TurnState,
        window: Window,
        error: ModelError,
        *,
        model: str | None = None,
    ) -> Queued | None:
        """The model could not read an image of ``window`` (``bad_image``): set one aside.

        That is the image the error names, else the newest image sent (the most
        likely new to the model: the current message's, the last of an album).
        Returns the write that remembers it for the chat and the model, so no later
        request sends it (a placeholder stands in): the turn makes it together with
        counting the call that retries without it. ``None`` when no image is left
        to set aside.
        """
        if self.vision is None or not window.media:
            return None
        sent = [i.digest for m in window.messages for i in m.images if i.digest in window.media]
        if not sent:
            return None
        named = error.image is not None and error.image in window.media
        digest = error.image if named and error.image else sent[-1]
        self._aside.setdefault(state.key, []).append((digest, named))
        log.warning(
            "the model could not read image %s… of chat %s (%s); it is set aside",
            digest[:12], inbound.chat_id, "named by the error" if named else "the newest sent",
        )  # fmt: skip
        name = model or self.model.name
        return lambda pipe: Vision.queue_set_aside(pipe, inbound.scope, name, digest)

    async def answered(self, inbound: Inbound, state: TurnState) -> None:
        """A call without the images this turn set aside was answered: the last one
        set aside was unreadable, while those guessed before it (not named by an
        error) may not be: they are given back, so later requests send them again
        (one that is unreadable too is set aside again then)."""
        aside = self._aside.pop(state.key, None) or []
        guessed = [digest for digest, named in aside[:-1] if not named]
        if guessed and self.vision is not None:
            await self.vision.give_back(inbound.scope, guessed)
            log.info("gave back %d image(s) of chat %s set aside before", len(guessed),
                     inbound.chat_id)  # fmt: skip

    async def _prepare(
        self, inbound: Inbound, user_node: NodeId, inserts: Inserts, summariser: Model
    ) -> Window:
        estimate = self.estimator.sized(*await self.store.size(user_node))
        extra = sum(self.estimator.tokens(m) for m in inserts.values())
        if estimate + extra <= self.fold_at * NEAR:
            # far below the threshold: the estimate decides, nothing more to look up
            if not inserts:
                history = await self.store.history(user_node)
                return Window(history.messages, None, estimate)
            nodes = await self.store.path(user_node)
            return Window(self._compose(nodes, None, 0, inserts), None, estimate + extra)
        nodes = await self.store.path(user_node)
        head = self.estimator.tokens(nodes[0].messages)
        if head + self.estimator.tokens(nodes[-1].messages) > self.limit:
            raise MessageTooLargeError
        fold = await self.store.fold_on_path(user_node)
        window = await self._window(inbound, nodes, fold, inserts)
        if window.tokens > self.fold_at:
            fold = await self._fold(inbound, nodes, fold, summariser)
            window = await self._window(inbound, nodes, fold, inserts)
        return await self._fit(inbound, nodes, window, inserts)

    def learn(self, messages: Sequence[ChatMessage], usage: Usage, *, tools: bool = False) -> None:
        """Calibrate estimates by a call's reported size (``tools``: it offered tools,
        whose share of the prompt is not the messages')."""
        if tools and self.reserved:
            usage = replace(usage, prompt_tokens=usage.prompt_tokens - self.reserved)
        self.estimator.learn(messages, usage)

    def reserve(self, tokens: int) -> None:
        """Keep ``tokens`` of every request for what is sent besides the messages (tools)."""
        self.reserved += tokens
        self.limit -= tokens
        self.fold_at = max(self.keep_recent + 1, self.fold_at - tokens)

    async def _window(
        self, inbound: Inbound, nodes: list[Node], fold: Fold | None, inserts: Inserts = _NONE
    ) -> Window:
        messages = self._compose(nodes, fold, 0, inserts)
        size = await self._size(inbound, nodes, messages, fold=fold, inserts=inserts)
        return Window(messages, fold, size)

    @staticmethod
    def _compose(
        nodes: list[Node], fold: Fold | None, drop: int = 0, inserts: Inserts = _NONE
    ) -> tuple[ChatMessage, ...]:
        """Root, summary, then the nodes after the fold (less the ``drop`` oldest), each
        followed by the system messages inserted after it; those of the nodes left out
        follow the summary (a persona chosen above the fold still speaks)."""
        start = after(nodes, fold) + drop
        summary = fold.messages if fold else ()
        if not inserts:
            return (*nodes[0].messages, *summary, *(m for n in nodes[start:] for m in n.messages))
        head = [m for n in nodes[:start] for m in inserts.get(n.id, ())]
        return (
            *nodes[0].messages,
            *summary,
            *head,
            *(m for n in nodes[start:] for m in (*n.messages, *inserts.get(n.id, ()))),
        )

    async def _size(
        self,
        inbound: Inbound,
        nodes: list[Node],
        messages: Sequence[ChatMessage],
        *,
        fold: Fold | None,
        dropped: int = 0,
        inserts: Inserts = _NONE,
    ) -> int:
        """Reported size of the previous call on this chain plus the new tail, if known."""
        previous = previous_user(nodes)
        if previous is not None:
            known = await self.accounting.last_call(inbound.scope, nodes[previous].id)
            if known is not None and known[2] == view_of(fold, dropped):
                prompt, completion, _ = known
                tail = [m for n in nodes[previous + 1 :] for m in inserts.get(n.id, ())] + [
                    m for n in nodes[previous + 2 :] for m in n.messages
                ]
                size: int = prompt + completion + self.estimator.tokens(tail)
                return size
        return self.estimator.tokens(messages)

    async def _fold(
        self, inbound: Inbound, nodes: list[Node], fold: Fold | None, model: Model
    ) -> Fold | None:
        """Fold the older part, leaving about ``keep_recent`` tokens verbatim."""
        start = after(nodes, fold)
        keep_from = self._keep_from(nodes, start)
        if keep_from is None:
            return fold
        pos = start
        while pos < keep_from:
            end = self._chunk_end(nodes, pos, keep_from, fold)
            try:
                summary = await self._summarise(inbound, fold, nodes[pos : end + 1], model)
            except ModelError as exc:
                log.warning("summarising chat %s failed (%s)", inbound.chat_id, exc.kind)
                return fold
            fold = await self.store.put_fold(nodes[end].id, [summary])
            pos = end + 1
        return fold

    def _keep_from(self, nodes: list[Node], start: int) -> int | None:
        """Index of the first node kept verbatim: a user node, within ``keep_recent``."""
        kept, index = 0, len(nodes) - 1
        while index - 1 >= start:
            cost = self.estimator.tokens(nodes[index - 1].messages)
            if kept + self.estimator.tokens(nodes[index].messages) + cost > self.keep_recent:
                break
            kept += self.estimator.tokens(nodes[index].messages)
            index -= 1
        while index < len(nodes) - 1 and not starts_with_user(nodes[index]):
            index += 1
        return index if index > start and starts_with_user(nodes[index]) else None

    def _chunk_end(self, nodes: list[Node], pos: int, stop: int, fold: Fold | None) -> int:
        """Last node of one summary call's input: it must fit in about 60 % of the budget."""
        room = int(self.budget * 0.6) - self.estimator.tokens(fold.messages if fold else ())
        end, used = pos, 0
        while end < stop:
            used += self.estimator.tokens(nodes[end].messages)
            if used > room and end > pos:
                break
            end += 1
        end -= 1
        # a fold must be followed by a user's message, so a view never starts mid-exchange
        while end + 1 < stop and not starts_with_user(nodes[end + 1]):
            end += 1
        return max(end, pos) if end + 1 <= stop else stop - 1

    async def _summarise(
        self, inbound: Inbound, fold: Fold | None, part: Sequence[Node], model: Model
    ) -> ChatMessage:
        words = max(50, self.summary_tokens * 3 // 4)
        previous = fold.messages[-1].content if fold else ""
        lines = [line(m) for n in part for m in n.messages]
        prompt = (
            f"Summary so far:\n{(previous or '(none)').removeprefix(SUMMARY_PREFIX)}\n\n"
            "New part of the conversation:\n" + "\n".join(lines)
        )
        request = [
            ChatMessage("system", SUMMARY_INSTRUCTIONS.format(words=words)),
            ChatMessage("user", prompt),
        ]
        try:
            answer = await model.complete(request, max_tokens=self.summary_tokens)
        except ModelError as exc:
            await self.accounting.record(
                CallRecord.of(
                    inbound, part[-1].id, model=model.name, usage=exc.usage,
                    latency=exc.latency, error=exc.kind, view=SUMMARY_VIEW,
                )
            )  # fmt: skip
            raise
        await self.accounting.record(
            CallRecord.of(
                inbound, part[-1].id, model=model.name, usage=answer.usage,
                latency=answer.latency, error=None, view=SUMMARY_VIEW,
            )
        )  # fmt: skip
        if not answer.text.strip():
            raise ModelError("rejected", "the summary came back empty")
        log.info(
            "folded chat %s up to %s (%d messages summarised)",
            inbound.chat_id, part[-1].id, len(lines),
        )  # fmt: skip
        return ChatMessage("system", SUMMARY_PREFIX + answer.text.strip())

    async def _fit(
        self, inbound: Inbound, nodes: list[Node], window: Window, inserts: Inserts = _NONE
    ) -> Window:
        """Leave out the oldest whole nodes while the view is over the budget."""
        drop = 0
        messages, tokens = window.messages, window.tokens
        start = after(nodes, window.fold)
        while tokens > self.limit and start + drop < len(nodes) - 1:
            drop += 1
            while start + drop < len(nodes) - 1 and not starts_with_user(nodes[start + drop]):
                drop += 1
            messages = self._compose(nodes, window.fold, drop, inserts)
            tokens = await self._size(
                inbound, nodes, messages, fold=window.fold, dropped=drop, inserts=inserts
            )
        if drop:
            log.warning(
                "context over budget: left the %d oldest node(s) out of this call (%d tokens)",
                drop, tokens,
            )  # fmt: skip
        if tokens > self.limit:
            raise MessageTooLargeError
        return Window(messages, window.fold, tokens, drop)
