"""Steering a thread: /tree, /export (no model call), /retry, edits, /forget, topics.

End to end: the real bot against the Bot API and OpenAI test servers and real
Redis; the 300-node tree is built with the store directly (a focused step).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from bot.ops import threads
from bot.telegram.steering import EXPORT_HINT, NOT_A_THREAD, TREE_HINT
from transcript import ChatMessage, TranscriptStore

from .fake_openai import FakeOpenAI
from .fake_telegram import FakeTelegram, StoredMessage
from .harness import USER, BotFactory, answers_to, ask

TIMEOUT = 15.0


async def command(tg: FakeTelegram, text: str, **kw: Any) -> StoredMessage:
    """Send a command as USER; the bot's one message replying to it."""
    sent = tg.send_user_message(USER, USER, text, **kw)
    await tg.wait_for(lambda: bool(answers_to(tg, USER, sent["message_id"])), TIMEOUT)
    [reply] = answers_to(tg, USER, sent["message_id"])
    return reply


async def three_branches(tg: FakeTelegram, app: Any) -> dict[str, int]:
    """hello → answer; three replies to that answer (three branches)."""
    hello, _ = await ask(tg, app, USER, "hello there")
    first = answers_to(tg, USER, hello)[-1].message_id
    ids = {"hello": hello, "first": first}
    for name in ("alpha question", "beta question", "gamma question"):
        asked, _ = await ask(tg, app, USER, name, reply_to=first)
        ids[name] = asked
        ids[name + " answer"] = answers_to(tg, USER, asked)[-1].message_id
    return ids


async def test_tree_and_export_of_a_thread_with_three_branches(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        ids = await three_branches(tg, app)
        calls = len(llm.requests)

        tree = await command(tg, "/tree", reply_to=ids["beta question answer"])
        lines = (tree.text or "").splitlines()
        assert "9 node(s), 3 branch(es)" in lines[0]
        assert lines[1].startswith("system prompt: You are a test assistant.")
        assert lines[2].startswith("[depth:1] user: hello there")
        assert lines[4].startswith("├─ [depth:3] user: alpha question")
        assert lines[6].startswith("├─ [depth:3] user: beta question")
        assert lines[7].startswith("│  [depth:4] bot: ")
        assert lines[7].endswith("◀ this message")
        assert lines[8].startswith("└─ [depth:3] user: gamma question")
        assert sum("◀" in line for line in lines) == 1
        assert tree.raw["entities"][0]["type"] == "pre"  # monospace, as the CLI shows it

        export = await command(tg, "/export", reply_to=ids["gamma question"])
        assert export.document is not None
        name, data = export.document
        assert name == f"conversation-{USER}-{ids['gamma question']}.md"
        md = data.decode()
        headings = [line for line in md.splitlines() if line.startswith("## ")]
        assert headings == ["## System prompt", "## User", "## Assistant", "## User"]
        assert "## System prompt\n\nYou are a test assistant.\n" in md
        assert "## User\n\ngamma question\n" in md
        assert "alpha question" not in md and "beta question" not in md  # only that branch
        assert len(llm.requests) == calls  # neither command reached the model


async def test_misplaced_tree_and_export_get_a_one_line_hint(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot() as app:
        hello, _ = await ask(tg, app, USER, "hello")
        assert (await command(tg, "/tree")).text == TREE_HINT
        assert (await command(tg, "/export")).text == EXPORT_HINT
        hint = await command(tg, "/tree")
        stray = await command(tg, "/export", reply_to=hint.message_id)  # in no thread
        assert stray.text == NOT_A_THREAD
        assert hello
        assert len(llm.requests) == 1  # hello, never a command


async def test_a_300_node_tree_fits_one_message_around_the_marked_path(
    redis: Redis, store: TranscriptStore
) -> None:
    root = await store.start("77", [ChatMessage("system", "You are a test assistant.")])
    spine = [root.id]
    node = root
    for i in range(60):  # a 120-node spine
        node = await store.append(node.id, [ChatMessage("user", f"spine question {i} " * 3)])
        node = await store.append(node.id, [ChatMessage("assistant", f"spine answer {i} " * 3)])
        spine.append(node.id)
    count = 121
    for i in range(90):  # 90 side branches of two nodes hanging off the spine
        at = spine[(i * 7) % len(spine)]
        side = await store.append(at, [ChatMessage("user", f"side question {i} " * 3)])
        await store.append(side.id, [ChatMessage("assistant", f"side answer {i} " * 3)])
        count += 2
    assert count >= 300
    marked = spine[40]
    await store.alias("77", [5000], marked)
    full = await threads.tree(redis, store, 77, 5000)
    assert len(full) > 4096 and full.count("\n") == count + 1
    short = await threads.tree(redis, store, 77, 5000, limit=4096)
    assert len(short) <= 4096
    lines = short.splitlines()
    assert f"{count} node(s)" in lines[0]
    assert lines[1].startswith("system prompt:")
    [mark] = [line for line in lines if "◀" in line]
    assert "spine answer 39" in mark
    assert any("spine question 39" in line for line in lines)  # its question, above it
    assert any("spine question 40" in line for line in lines)  # the reply below it
    assert any("… " in line and " more" in line for line in lines)
