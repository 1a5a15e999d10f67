"""Cold trees: a tree compacted in place into one value, and warmed back by a write.

A tree is *hot* (its hash ``rc:{S}:t:<tree>``, its aliases in ``rc:{S}:a``) or *cold*
(one zstd value ``rc:{S}:z:<tree>``, its aliases in the compact index ``rc:{S}:za``;
transcript/cold.py), never both and never neither: each way is one script in the
scope's slot. :meth:`StoreCold.compact` makes a tree cold in three steps, each safe to
stop after:

1. read the hot tree, its aliases and companion hashes (reads only);
2. build the cold value (no I/O);
3. swap, one script a tree (a scope's trees in one round trip): unless the tree was
   written since step 1, or was written less than ``cold_after`` seconds ago, or an
   unfinished unit of work wrote into it (a record hash listed in its ``R`` field still
   exists: a turn's record, until its end), write the value and remove the hash, the
   aliases and the companions. A swap run again finds the tree cold and does nothing.

A stop before 3 leaves the tree hot and unchanged; 3 is atomic (a Redis crash in it is
undone on load: scripts reach the AOF as MULTI/EXEC); after 3 it is cold and the caller's
index entry (``rc:{trees:<k>}``) is stale, which the next sweep finds cold and removes.

Reads serve a cold tree from its value without changing it (transcript/reads.py). A
write warms it first: :meth:`StoreCold.warm` restores the hash, the aliases and the
companions from the value and removes it, one script; an append the store prepared
below a node of a tree it read cold warms the tree first, and the append script refuses
to write into a cold tree (a sweep made it cold after the append was prepared): the
store warms it and places the node again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cold as cold_codec
from . import keys
from .cold import ColdTree, Companion
from .compact_lua import COMPACT_LUA, RESOLVE_LUA, WARM_LUA
from .reads import StoreReads, _parse_ref
from .records import NodeId

#: Tries of a warm whose value changed under it (warmed and compacted again meanwhile).
_WARM_TRIES = 3
#: Hash fields of a tree kept hot only: its last write, the work running in it.
_HOT_ONLY = frozenset({keys.WRITTEN_FIELD, keys.RUNNING_FIELD})


@dataclass(frozen=True, slots=True)
class Compaction:
    """What compacting one tree did: ``outcome`` is ``cold`` (compacted now or before),
    ``gone`` (no such tree), ``fresh`` (written less than ``cold_after`` ago),
    ``changed`` (written while it was read) or ``busy`` (unfinished work wrote into it)."""

    outcome: str
    #: The tree's last write (unix seconds) where the outcome tells it, else 0.
    written: int = 0
    #: Bytes of the records compacted (names and values) and of the value written.
    hot_bytes: int = 0
    cold_bytes: int = 0


@dataclass(slots=True)
class HotTree:
    """Compaction's step 1: a hot tree as read."""

    fields: dict[str, bytes]
    aliases: dict[str, tuple[int, int]] = field(default_factory=dict)
    companions: dict[str, Companion] = field(default_factory=dict)

    def version(self) -> tuple[int, str, int]:
        """Field count, last write, length of the choice index: any write changes one."""
        written = self.fields.get(keys.WRITTEN_FIELD, b"").decode()
        return len(self.fields), written, len(self.fields.get(keys.CHOICE_INDEX_FIELD, b""))

    def cold(self) -> ColdTree:
        """Step 2's input: what the cold value keeps."""
        kept = {k: v for k, v in self.fields.items() if k not in _HOT_ONLY}
        return ColdTree(kept, cold_codec.integer_aliases(self.aliases), self.companions)

    def size(self) -> int:
        return (
            sum(len(k) + len(v) for k, v in self.fields.items())
            + sum(len(k) + 8 for k in self.aliases)
            + sum(len(k) + len(v) for c in self.companions.values() for k, v in c.fields.items())
        )


class StoreCold(StoreReads):
    """Cold trees of the store (a base of :class:`transcript.TranscriptStore`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resolve_script = self._redis.register_script(RESOLVE_LUA)

    # ------------------------------------------------------------- aliases

    async def resolve(self, scope: str, message_id: int | str) -> NodeId | None:
        """The node a message id of this scope is aliased to, or ``None`` if unknown.

        One round trip, hot or cold: a message of a cold tree brings the tree's value,
        which is cached whole (its nodes too: the chain then loads from the cache)."""
        field_ = str(message_id)
        cached = self._cache.alias(scope, field_)
        if cached is not None:
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        found_keys, args = self._resolve_args(scope, field_, True)
        found = await self._io(self._resolve_script(keys=found_keys, args=args))
        if not found:
            return None
        if found[0] == b"h":
            if not found[1]:  # a message of no conversation (TranscriptStore.unthreaded)
                return None
            node = _parse_ref(scope, found[1], f"alias {scope}/{field_}")
            self._cache.put_alias(scope, field_, node)
            return node
        tree, data = int(found[1]), found[2]
        if isinstance(data, bytes):
            self._learn_cold(scope, tree, data)
        else:  # the index names a tree whose value is gone (erased): as the hash says
            await self._read_cold(scope, tree)
        return self._cache.alias(scope, field_) or await self._alias_of_hot(scope, field_)

    async def _alias_of_hot(self, scope: str, field_: str) -> NodeId | None:
        ref: bytes | str | None = await self._io(self._redis.hget(keys.alias_key(scope), field_))
        return _parse_ref(scope, ref, f"alias {scope}/{field_}") if ref else None

    async def known(self, scope: str, message_id: int | str) -> bool:
        """Whether the message id is aliased, to a node or to none (:meth:`unthreaded`),
        in a hot tree or a cold one."""
        field_ = str(message_id)
        if self._cache.alias(scope, field_) is not None:
            return True
        found_keys, args = self._resolve_args(scope, field_, False)
        return bool(await self._io(self._resolve_script(keys=found_keys, args=args)))

    @staticmethod
    def _resolve_args(scope: str, field_: str, value: bool) -> tuple[list[str], list[Any]]:
        slot, low = ("", 0)
        if (number := _integer(field_)) is not None:
            slot, low = cold_codec.alias_slot(number)
        args = [field_, slot, low, keys.cold_key_prefix(scope), "1" if value else ""]
        return [keys.alias_key(scope), keys.cold_alias_key(scope)], args

    async def aliased(self, scope: str) -> list[str]:
        """Every message id of the scope that is aliased, hot or cold."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hkeys(keys.alias_key(scope))
        pipe.hgetall(keys.cold_alias_key(scope))
        hot, cold = await self._io(pipe.execute())
        found = [_text(name) for name in hot]
        for bucket, packed in cold.items():
            found += [str(m) for m, _ in cold_codec.unpack_aliases(_text(bucket), packed)]
        return found

    # --------------------------------------------------------------- reads

    async def dump(self, scope: str, tree: int) -> ColdTree | None:
        """Every field of a tree and its aliases, hot or cold (``None``: no such tree)."""
        hot = await self._read_hot(scope, [tree], lambda _: ())
        if hot.get(tree) is not None:
            return hot[tree].cold()  # type: ignore[union-attr]
        return await self._read_cold(scope, tree)

    async def companion(self, scope: str, tree: int, name: str) -> dict[bytes, bytes]:
        """A companion hash of a tree (``name``: its key without the scope's prefix),
        also while the tree is cold (then as compacted, unless it expired since)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hgetall(keys.scope_prefix(scope) + name)
        pipe.exists(keys.tree_key(scope, tree))
        found, hot = await self._io(pipe.execute())
        if found or hot:
            return dict(found)
        cold = await self._read_cold(scope, tree)
        kept = None if cold is None else cold.companions.get(name)
        if kept is None or 0 < kept.expires_ms < time.time() * 1000:
            return {}
        return dict(kept.fields)

    # ---------------------------------------------------------------- warm

    async def warm(self, scope: str, tree: int) -> str:
        """Make a cold tree hot again (one round trip with its value read already, else
        two): ``warm``, or ``hot`` / ``gone`` when it was not cold."""
        data: bytes | str | None = self._cold.pop((scope, tree), None)
        outcome = "changed"
        for _ in range(_WARM_TRIES):
            if data is None:
                data = await self._io(self._redis.get(keys.cold_key(scope, tree)))
            if not isinstance(data, bytes):
                return "hot"  # (or gone: the append finds out)
            cold = self._learn_cold(scope, tree, data)
            self._cold.pop((scope, tree), None)
            pipe = self._redis.pipeline(transaction=False)
            found, args = _warm_call(scope, tree, cold, _digest_hex(data))
            pipe.eval(WARM_LUA, len(found), *found, *args)
            self.queue_touch(pipe, scope, tree)
            pipe.hincrby(keys.COLD_STATS, "n", -1)  # (approximate: the script may find
            pipe.hincrby(keys.COLD_STATS, "b", -len(data))  # it warmed by another)
            outcome = _text((await self._io(pipe.execute()))[0])
            if outcome != "changed":
                break
            data = None
        return outcome

    # ------------------------------------------------------------- compact

    async def compact(
        self,
        scope: str,
        trees: Sequence[int],
        *,
        cold_after: float,
        companions: Callable[[int], Iterable[str]] = lambda _: (),
    ) -> dict[int, Compaction]:
        """Compact each of ``trees`` of one scope that nothing wrote for ``cold_after``
        seconds and no unfinished work wrote into (see the module docstring).
        ``companions``: the names (keys without the scope's prefix) of a tree's companion
        hashes, compacted with it."""
        read = await self._read_hot(scope, trees, companions)  # step 1
        hot = {tree: found for tree, found in read.items() if found is not None}
        values = await self._encode(hot)  # step 2
        done = await self._swap(scope, hot, values, cold_after=cold_after)  # step 3
        missing = [tree for tree in trees if tree not in hot]
        if missing:  # no hash: cold already (a sweep stopped before its index write), or gone
            pipe = self._redis.pipeline(transaction=False)
            for tree in missing:
                pipe.exists(keys.cold_key(scope, tree))
            for tree, cold in zip(missing, await self._io(pipe.execute()), strict=True):
                done[tree] = Compaction("cold" if cold else "gone")
        return done

    async def _read_hot(
        self, scope: str, trees: Sequence[int], companions: Callable[[int], Iterable[str]]
    ) -> dict[int, HotTree | None]:
        """Step 1: the trees' hashes and companions (one round trip) and their aliases
        (one scan of the scope's alias hash)."""
        prefix = keys.scope_prefix(scope)
        names = {tree: list(companions(tree)) for tree in trees}
        pipe = self._redis.pipeline(transaction=False)
        for tree in trees:
            pipe.hgetall(keys.tree_key(scope, tree))
            for name in names[tree]:
                pipe.hgetall(prefix + name)
                pipe.pttl(prefix + name)
        replies = iter(await self._io(pipe.execute()))
        now_ms = int(time.time() * 1000)
        read: dict[int, HotTree | None] = {}
        for tree in trees:
            fields = next(replies)
            hot = HotTree({_text(k): v for k, v in fields.items()}) if fields else None
            for name in names[tree]:
                found, left = next(replies), int(next(replies))
                if hot is not None and found:
                    expires = now_ms + left if left > 0 else 0
                    hot.companions[name] = Companion(expires, dict(found))
            read[tree] = hot
        wanted = {str(tree) for tree, hot in read.items() if hot is not None}
        if wanted:
            async for name, ref in self._redis.hscan_iter(keys.alias_key(scope), count=1000):
                tree_text, _, node = _text(ref).partition(":")
                if tree_text in wanted:
                    seg, _, idx = node.partition(".")
                    target = read[int(tree_text)]
                    assert target is not None
                    target.aliases[_text(name)] = (int(seg), int(idx))
        return read

    @staticmethod
    async def _encode(hot: dict[int, HotTree]) -> dict[int, bytes]:
        """Step 2: the trees' cold values (zstd: off the event loop)."""

        def encode() -> dict[int, bytes]:
            return {tree: cold_codec.encode(found.cold()) for tree, found in hot.items()}

        return await asyncio.to_thread(encode) if hot else {}

    async def _swap(
        self, scope: str, hot: dict[int, HotTree], values: dict[int, bytes], *, cold_after: float
    ) -> dict[int, Compaction]:
        """Step 3: one script a tree (see ``compact_lua.COMPACT_LUA``), all in one round trip."""
        if not hot:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        moved = {tree: cold_codec.integer_aliases(found.aliases) for tree, found in hot.items()}
        for tree, found in hot.items():
            packed = cold_codec.pack_aliases(tree, moved[tree])
            count, written, choices = found.version()
            names = [
                keys.tree_key(scope, tree), keys.cold_key(scope, tree), keys.alias_key(scope),
                keys.cold_alias_key(scope),
                *(keys.scope_prefix(scope) + n for n in found.companions),
            ]  # fmt: skip
            args: list[Any] = [
                max(0, int(cold_after)), count, written, choices, values[tree],
                tree.to_bytes(4, "big"), len(moved[tree]), *map(str, moved[tree]), len(packed),
            ]  # fmt: skip
            for bucket, entries in packed.items():
                args += [bucket, entries]
            pipe.eval(COMPACT_LUA, len(names), *names, *args)
        done: dict[int, Compaction] = {}
        for tree, (said, when) in zip(hot, await self._io(pipe.execute()), strict=True):
            outcome, stamp = _text(said), _text(when)
            if outcome == "was":
                done[tree] = Compaction("cold")
            elif outcome != "cold":
                done[tree] = Compaction(outcome, int(stamp) if stamp.isdigit() else 0)
            else:
                self._cold.pop((scope, tree), None)
                cold_bytes = len(values[tree]) + cold_codec.ALIAS_ENTRY * len(moved[tree])
                done[tree] = Compaction("cold", 0, hot[tree].size(), cold_bytes)
        return done

    # --------------------------------------------------------------- index

    @staticmethod
    def queue_touch(pipe: Any, scope: str, tree: int) -> None:
        """Note on a caller's round trip that the store wrote into a hot tree now (the
        index of hot trees by last append, which the cold sweep reads)."""
        bucket = keys.idle_key(keys.idle_bucket(scope))
        pipe.zadd(bucket, {keys.idle_member(scope, tree): int(time.time())})


async def cold_companion(redis: Any, scope: str, tree: int, name: str) -> dict[bytes, bytes]:
    """A companion hash as a cold tree keeps it (empty: the tree is not cold, or the
    hash expired): for a reader without a store (its caller guards the round trip)."""
    data = await redis.get(keys.cold_key(scope, tree))
    if not isinstance(data, bytes):
        return {}
    kept = cold_codec.decode(f"{scope}/z:{tree}", data).companions.get(name)
    if kept is None or 0 < kept.expires_ms < time.time() * 1000:
        return {}
    return dict(kept.fields)


def _warm_call(scope: str, tree: int, cold: ColdTree, digest: str) -> tuple[list[str], list[Any]]:
    """The warm script's keys and arguments for a decoded cold value."""
    prefix = keys.scope_prefix(scope)
    found = [
        keys.tree_key(scope, tree), keys.cold_key(scope, tree), keys.alias_key(scope),
        keys.cold_alias_key(scope), *(prefix + name for name in cold.companions),
    ]  # fmt: skip
    args: list[Any] = [digest, tree.to_bytes(4, "big"), int(time.time() * 1000), len(cold.fields)]
    for name, value in cold.fields.items():
        args += [name, value]
    args.append(len(cold.aliases))
    for message_id, (seg, idx) in cold.aliases.items():
        args += [str(message_id), f"{tree}:{seg}.{idx}"]
    buckets = sorted({cold_codec.alias_slot(m)[0] for m in cold.aliases})
    args += [len(buckets), *buckets]
    for companion in cold.companions.values():
        args += [companion.expires_ms, len(companion.fields)]
        for key, value in companion.fields.items():
            args += [key, value]
    return found, args


def _digest_hex(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def _integer(text: str) -> int | None:
    try:
        number = int(text)
    except ValueError:
        return None
    return number if str(number) == text else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
