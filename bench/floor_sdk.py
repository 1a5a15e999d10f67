"""The floor through the project's libraries (``python -m bench.floor_sdk``).

Not product code: the second baseline ``bench/process_bench.py`` runs beside
``python -m bot`` and ``bench/floor.py``. It does exactly the floor's job (the same
settings, the same :class:`~bench.floor.Chains`: node map, addressed rule, Redis
pipeline; the same ``[depth:N]`` reply) the way a plain small bot uses aiogram and the
openai SDK: aiogram's ``Dispatcher`` polling with one message handler (run as a task per
update, aiogram's default) and ``Bot.send_message``; ``AsyncOpenAI`` on the SDK's aiohttp
transport (as the bot runs it), one streamed ``chat.completions.create``. Everything else
is left at the libraries' defaults: what these two cost by themselves is the gap between
this floor and ``bench/floor.py``.
"""

from __future__ import annotations

import asyncio
import os
from typing import cast

import openai
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.types import Message, ReplyParameters
from openai.types.chat import ChatCompletionMessageParam

from .floor import Chains, conversation


class SdkFloor(Chains):
    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        server = TelegramAPIServer.from_base(
            env.get("TELEGRAM_API_URL", "https://api.telegram.org")
        )
        self.bot = Bot(env["TELEGRAM_BOT_TOKEN"], session=AiohttpSession(api=server))
        self.model = env["OPENAI_MODEL"]
        self.client = openai.AsyncOpenAI(
            base_url=env["OPENAI_BASE_URL"],
            api_key=env.get("OPENAI_API_KEY", ""),
            http_client=openai.DefaultAioHttpClient(),
        )
        self.dp = Dispatcher()
        self.dp.message.register(self.answer)
        self.dp.shutdown.register(self.close)
        #: The handlers running now: aiogram keeps its own tasks private and does not wait
        #: for them on SIGTERM; the floor finishes them like bench/floor.py does.
        self.tasks: set[asyncio.Task[object]] = set()

    async def answer(self, message: Message) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self._answer(message)
        finally:
            self.tasks.discard(task)

    async def _answer(self, message: Message) -> None:
        chat, replied = message.chat.id, message.reply_to_message
        question = self.question(
            chat,
            replied.message_id if replied else None,
            message.text,
            private=message.chat.type == "private",
            entity_types=(e.type for e in message.entities or ()),
        )
        if question is None:
            return
        reply = await self.complete(conversation(question))
        sent = await self.bot.send_message(
            chat_id=chat,
            text=f"[depth:{question.depth + 1}] {reply}",
            reply_parameters=ReplyParameters(message_id=message.message_id),
            message_thread_id=message.message_thread_id,
        )
        await self.answered(chat, question, reply, asked=message.message_id, sent=sent.message_id)

    async def complete(self, messages: list[dict[str, str]]) -> str:
        stream = await self.client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            stream=True,
            stream_options={"include_usage": True},
        )
        parts: list[str] = []
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    parts.append(choice.delta.content or "")
        return "".join(parts)

    async def close(self) -> None:
        """Finish the answers under way, then close the model client and Redis (aiogram
        closes the Bot's session after its shutdown handlers)."""
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.close()
        await self.redis.aclose()


async def main() -> None:
    floor = SdkFloor(dict(os.environ))
    # handle_signals (the default): SIGTERM and SIGINT stop polling, then shutdown runs.
    await floor.dp.start_polling(floor.bot, allowed_updates=["message"])


if __name__ == "__main__":
    asyncio.run(main())
