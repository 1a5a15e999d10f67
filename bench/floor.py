"""The floor: the least a bot doing replychain's job costs (``python -m bench.floor``).

Not product code: the baseline ``bench/process_bench.py`` runs beside ``python -m bot``.
It reads the same settings as the bot (TELEGRAM_BOT_TOKEN, TELEGRAM_API_URL,
OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, REDIS_URL, SYSTEM_PROMPT) and does one
turn the plainest way there is: an aiohttp long poll; per text message, the reply chain
from an in-memory node map (like llmcord's), one streamed completion (SSE parsed by
hand), one sendMessage reply with ``[depth:N]``, one Redis pipeline (RPUSH the exchange
to the chat's list and SET the message's done key). No framework, no retries, no
durability beyond that pipeline: what is left when everything replychain adds is taken
away.

The job around the transport (the node map, the addressed rule, the Redis pipeline) is
:class:`Chains`, which ``bench/floor_sdk.py`` shares: the same job through aiogram and
the openai SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
from redis.asyncio import Redis

#: How long a done key is kept (the bot keeps its finished-turn sets two days).
DONE_SECONDS = 2 * 86400


@dataclass(slots=True, frozen=True)
class Node:
    """One message of a chain; the chain is the walk up ``parent``."""

    parent: Node | None
    role: str
    content: str
    depth: int


def addressed(private: bool, parent: Node | None, entity_types: Iterable[str]) -> bool:
    """Private chats always; groups when replied to or @mentioned."""
    return private or parent is not None or "mention" in entity_types


def conversation(node: Node) -> list[dict[str, str]]:
    """The chain from the system prompt down to ``node``, as chat messages."""
    chain: list[dict[str, str]] = []
    walk: Node | None = node
    while walk is not None:
        chain.append({"role": walk.role, "content": walk.content})
        walk = walk.parent
    chain.reverse()
    return chain


class Chains:
    """The floors' job around their transport: the in-memory node map and the one Redis
    pipeline a turn writes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.root = Node(None, "system", env.get("SYSTEM_PROMPT", ""), 0)
        self.nodes: dict[tuple[int, int], Node] = {}
        self.redis = Redis.from_url(env["REDIS_URL"])

    def question(
        self,
        chat: int,
        replied: int | None,
        text: str | None,
        *,
        private: bool,
        entity_types: Iterable[str],
    ) -> Node | None:
        """The message's node below the one it replies to, or None if it is not for us."""
        parent = self.nodes.get((chat, replied)) if replied is not None else None
        if not text or not addressed(private, parent, entity_types):
            return None
        above = parent or self.root
        return Node(above, "user", text, above.depth + 1)

    async def answered(
        self, chat: int, question: Node, reply: str, *, asked: int, sent: int
    ) -> None:
        """Remember the question and the answer; RPUSH the exchange to the chat's list and
        SET the question's done key, in one pipeline."""
        self.nodes[(chat, asked)] = question
        self.nodes[(chat, sent)] = Node(question, "assistant", reply, question.depth + 1)
        exchange = [
            json.dumps({"role": "user", "content": question.content}),
            json.dumps({"role": "assistant", "content": reply}),
        ]
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.rpush(f"floor:{{{chat}}}:log", *exchange)
            pipe.set(f"floor:{{{chat}}}:done:{asked}", 1, ex=DONE_SECONDS)
            await pipe.execute()


class Floor(Chains):
    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        token = env["TELEGRAM_BOT_TOKEN"]
        self.api = f"{env.get('TELEGRAM_API_URL', 'https://api.telegram.org')}/bot{token}/"
        self.model_url = env["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
        self.model = env["OPENAI_MODEL"]
        self.auth = {"Authorization": f"Bearer {env.get('OPENAI_API_KEY', '')}"}
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.tasks: set[asyncio.Task[None]] = set()

    async def call(self, method: str, **params: Any) -> Any:
        async with self.http.post(self.api + method, json=params) as response:
            body = await response.json()
        if not body.get("ok"):
            raise RuntimeError(f"{method}: {body.get('description')}")
        return body["result"]

    async def poll(self, stop: asyncio.Event) -> None:
        offset = 0
        while not stop.is_set():
            updates = await self.call(
                "getUpdates", offset=offset, timeout=10, allowed_updates=["message"]
            )
            for update in updates:
                offset = update["update_id"] + 1
                if "message" in update:
                    task = asyncio.create_task(self.answer(update["message"]))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)

    async def answer(self, message: dict[str, Any]) -> None:
        chat, replied = message["chat"]["id"], message.get("reply_to_message")
        question = self.question(
            chat,
            replied["message_id"] if replied else None,
            message.get("text"),
            private=message["chat"]["type"] == "private",
            entity_types=(e["type"] for e in message.get("entities", ())),
        )
        if question is None:
            return
        reply = await self.complete(conversation(question))
        params: dict[str, Any] = {"chat_id": chat, "text": f"[depth:{question.depth + 1}] {reply}"}
        params["reply_parameters"] = {"message_id": message["message_id"]}
        if "message_thread_id" in message:
            params["message_thread_id"] = message["message_thread_id"]
        sent = await self.call("sendMessage", **params)
        await self.answered(
            chat, question, reply, asked=message["message_id"], sent=sent["message_id"]
        )

    async def complete(self, messages: list[dict[str, str]]) -> str:
        body = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        parts: list[str] = []
        async with self.http.post(self.model_url, json=body, headers=self.auth) as response:
            response.raise_for_status()
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                for choice in json.loads(data).get("choices") or ():
                    parts.append(choice["delta"].get("content") or "")
        return "".join(parts)

    async def close(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.http.close()
        await self.redis.aclose()


async def main() -> None:
    floor = Floor(dict(os.environ))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    polling = asyncio.create_task(floor.poll(stop))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({polling, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        polling.cancel()
        await floor.close()


if __name__ == "__main__":
    asyncio.run(main())
