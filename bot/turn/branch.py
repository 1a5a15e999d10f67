"""Which model answers a turn, and as which persona: the branch's choices.

Models and personas belong to the tree. The model of a turn is the nearest model
choice on the path from the turn's node up to the root, else the user's default,
else the catalogue's default; every persona choice on the path inserts its system
text as a system message right after its node, so the request above that node stays
byte-identical (prompt caches keep hitting) and the nearest persona speaks last.

A choice is an append-only record keyed by a node, in its tree's choice index (see
:meth:`transcript.TranscriptStore.choose`); a persona's text is stored once as a blob
of the chat (content-addressed), so the record is what the model was sent even after
the catalogue changes. The user's defaults (``/model`` and ``/persona`` sent without
a reply) are a hash of the chat (:func:`bot.data.keys.prefs_key`).

Resolving costs no Redis round trip of its own: the turn's claim reads the tree's
choice index and the user's defaults on its round trip (:class:`BranchReads`), so a
choice made through any process applies to the next turn everywhere; nodes, the
index and persona texts come from the store's caches after that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from transcript import ChatMessage, NodeId, TranscriptStore
from transcript.outage import guarded

from .. import choice_texts
from ..bus.inbound import Inbound
from ..catalogue import MODEL, PERSONA, Catalogue, ModelSpec
from ..data import keys
from ..i18n import _
from ..model import Model
from ..model.client import ModelClient


class ModelSource(Protocol):
    """The catalogue and a model for each of its names (:class:`bot.catalogue.Models`)."""

    @property
    def catalogue(self) -> Catalogue: ...

    def client(self, name: str) -> Model: ...


@dataclass(frozen=True, slots=True)
class Prefs:
    """A user's defaults for new conversations (catalogue names; ``None``: unset)."""

    model: str | None = None
    persona: str | None = None

    @classmethod
    def parse(cls, values: Sequence[Any]) -> Prefs:
        model, persona = (v.decode() if isinstance(v, bytes) else v for v in values)
        return cls(model or None, persona or None)


@dataclass(frozen=True, slots=True)
class Branch:
    """What answers one turn: the model, the personas' system messages, a note."""

    model: Model
    #: The model's catalogue entry (``None`` for a bot driven without a catalogue).
    spec: ModelSpec | None = None
    #: The model for folds and topic titles (SUMMARY_MODEL, else ``model``).
    summary: Model | None = None
    #: System messages to insert after nodes of the chain, root first.
    personas: tuple[tuple[NodeId, ChatMessage], ...] = ()
    #: A line for the answer's notice (a picked model that is no longer offered).
    note: str = ""

    @property
    def summariser(self) -> Model:
        return self.summary or self.model

    @property
    def client(self) -> ModelClient | None:
        """The model as an endpoint client (what the tool loop streams from)."""
        return self.model if isinstance(self.model, ModelClient) else None


class BranchReads:
    """The reads that go on a turn's claim round trip: the user's defaults and, when
    the message continues a known node, its tree's choice index."""

    def __init__(self, branches: Branches, inbound: Inbound, node: NodeId | None) -> None:
        self.branches, self.inbound, self.node = branches, inbound, node
        self.prefs = Prefs()

    def queue(self, pipe: Pipeline) -> None:
        inbound = self.inbound
        pipe.hmget(keys.prefs_key(inbound.scope), _fields(inbound.user_id))
        if self.node is not None:
            self.branches.store.queue_choices(pipe, self.node)

    def read(self, replies: list[Any]) -> None:
        self.prefs = Prefs.parse(replies[0])
        if self.node is not None:
            self.branches.store.learn_choices(self.node.scope, self.node.tree, replies[1])


class Branches:
    """Resolves turns' branches and records choices (one per bot)."""

    def __init__(
        self,
        redis: Redis,
        store: TranscriptStore,
        models: ModelSource,
        *,
        system_prompt: str,
        summary_model: str | None = None,
    ) -> None:
        self.redis, self.store, self.models = redis, store, models
        self.system_prompt = system_prompt
        self.summary_model = summary_model

    @property
    def catalogue(self) -> Catalogue:
        return self.models.catalogue

    def reads(self, inbound: Inbound, node: NodeId | None) -> BranchReads:
        """The reads to send with the turn's claim (``node``: the node it continues)."""
        return BranchReads(self, inbound, node)

    def root_prompt(self, prefs: Prefs) -> str:
        """The system prompt of the user's new conversation (their default persona's)."""
        persona = self.catalogue.personas.get(prefs.persona or "")
        return persona.prompt if persona is not None else self.system_prompt

    async def resolve(self, leaf: NodeId, prefs: Prefs, *, override: str | None = None) -> Branch:
        """The branch of a turn whose chain ends at ``leaf`` (``override``: /retry <model>)."""
        choices = await self.store.choices_on_path(leaf)
        chosen = next((c.name for c in reversed(choices) if c.kind == MODEL), None)
        catalogue, note = self.catalogue, ""
        fallback = catalogue.default
        if prefs.model is not None and prefs.model in catalogue.models:
            fallback = prefs.model
        name: str = override or chosen or prefs.model or fallback
        if name not in catalogue.models:
            note = _(choice_texts.MODEL_GONE_NOTE).format(name=name, used=fallback)
            name = fallback
        personas = [c for c in choices if c.kind == PERSONA and c.digest]
        texts = await self.store.blobs(leaf.scope, [c.digest for c in personas]) if personas else {}
        spec = catalogue.models[name]
        return Branch(
            self.models.client(name),
            spec,
            self.models.client(self.summary_model) if self.summary_model else None,
            tuple((c.at, ChatMessage("system", texts[c.digest].decode())) for c in personas),
            note,
        )

    async def prefs(self, scope: str, user_id: int) -> Prefs:
        """A user's defaults in a chat, read now (outside a turn)."""
        return Prefs.parse(await guarded(self.redis.hmget(keys.prefs_key(scope), _fields(user_id))))

    async def choose(self, node: NodeId, kind: str, name: str) -> None:
        """Record a model or persona choice at ``node`` (a persona with its own model
        chooses that model too)."""
        if kind == MODEL:
            await self.store.choose(node, MODEL, name)
            return
        persona = self.catalogue.personas[name]
        digest = await self.store.put_blob(node.scope, persona.prompt.encode())
        await self.store.choose(node, PERSONA, name, digest)
        if persona.model is not None:
            await self.store.choose(node, MODEL, persona.model)

    async def set_default(self, scope: str, user_id: int, kind: str, name: str | None) -> None:
        """The user's default model or persona for new conversations in this chat
        (``None``: none; a persona with its own model sets that model too)."""
        model, persona = _fields(user_id)
        values: dict[str, str] = {}
        if kind == MODEL:
            values[model] = name or ""
        else:
            values[persona] = name or ""
            found = self.catalogue.personas.get(name or "")
            if found is not None and found.model is not None:
                values[model] = found.model
        items = [part for pair in values.items() for part in pair]
        await guarded(self.redis.hset(keys.prefs_key(scope), items=items))


def _fields(user_id: int) -> list[str]:
    """The prefs hash's fields of one user: the model, the persona."""
    return [f"m{user_id}", f"p{user_id}"]
