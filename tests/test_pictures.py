"""Pictures in the thread: ``/image`` as a turn, edits by reply, the ``generate_image`` tool.

The real bot against the Bot API test server (sendPhoto) and the OpenAI test server
(/images/generations and /images/edits answer real PNGs): a picture is an answer's part,
aliased to its node, so a reply to it continues the thread with the picture in the
request (in a user message of its own: OpenAI takes images nowhere else); a reply
``/image`` changes it into a sibling branch; budgets refuse before the call and a
content refusal is one line.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from bot.chat.pictures import NO_IMAGES
from bot.media_texts import IMAGE_BUDGET, IMAGE_REFUSED
from bot.model.types import MADE_PICTURES
from transcript import TranscriptStore

from .fakes.model import FakeOpenAI, ToolCalls
from .fakes.telegram import FakeTelegram
from .harness import USER, BotFactory, answers_to, ask

PICTURES = {"image_model": "gpt-image-1"}


def image_parts(message: dict[str, Any]) -> list[bytes]:
    """The bytes of a wire message's image parts."""
    content = message["content"]
    if not isinstance(content, list):
        return []
    return [
        base64.b64decode(part["image_url"]["url"].partition(",")[2])
        for part in content
        if part["type"] == "image_url"
    ]


async def test_a_picture_is_an_answer_a_reply_to_which_sees_it_and_edits_it(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, store: TranscriptStore
) -> None:
    async with start_bot(**PICTURES) as app:
        asked, _ = await ask(tg, app, USER, "/image a red cube")
        [photo] = answers_to(tg, USER, asked)
        [made] = llm.image_requests
        assert (made.kind, made.prompt) == ("generate", "a red cube")
        assert photo.photo == made.answered[0] and photo.caption == "[depth:2] a red cube"
        node = await store.resolve(str(USER), photo.message_id)
        assert node is not None and (await store.node(node)).depth == 2
        _, text = await ask(tg, app, USER, "what colour is it?", reply_to=photo.message_id)
        assert text == "[depth:4] echo: what colour is it?"
        sent = llm.requests[-1].messages
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "user"]
        assert (sent[2]["content"], sent[3]["content"][0]["text"]) == ("a red cube", MADE_PICTURES)
        assert image_parts(sent[3]) == [made.answered[0]]
        # an edit by reply: /images/edits gets that picture, the new one is a branch below
        edit, _ = await ask(tg, app, USER, "/image make it blue", reply_to=photo.message_id)
        [blue] = answers_to(tg, USER, edit)
        changed = llm.image_requests[-1]
        # /retry of a picture draws it again: a sibling of the first
        retried, _ = await ask(tg, app, USER, "/retry", reply_to=photo.message_id)
        [again] = answers_to(tg, USER, retried)
    assert (llm.image_requests[-1].kind, llm.image_requests[-1].prompt) == (
        "generate",
        "a red cube",
    )
    assert again.caption == "[depth:2] a red cube" and again.photo is not None
    assert (changed.kind, changed.prompt) == ("edit", "make it blue")
    assert [data for _name, _type, data in changed.images] == [made.answered[0]]
    assert blue.photo == changed.answered[0] != photo.photo
    assert blue.caption == "[depth:4] make it blue"
    below = await store.resolve(str(USER), blue.message_id)
    assert below is not None
    path = await store.path(below)
    assert [n.id for n in path[:3]] == [n.id for n in await store.path(node)]
    assert await store.resolve(str(USER), photo.message_id) == node  # the original stays


async def test_a_tool_capable_model_draws_with_generate_image(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, store: TranscriptStore
) -> None:
    def model(messages: list[dict[str, Any]]) -> str | ToolCalls:
        last = messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            return "Here is your cube."  # the picture came back to it: the answer
        return ToolCalls([("generate_image", json.dumps({"prompt": "a red cube"}))])

    llm.responder = model
    async with start_bot(**PICTURES) as app:
        asked, _ = await ask(tg, app, USER, "draw me a cube")
        text, photo = answers_to(tg, USER, asked)
    assert text.text == "[depth:2] Here is your cube."
    [made] = llm.image_requests
    assert photo.photo == made.answered[0] and photo.caption == "a red cube"
    node = await store.resolve(str(USER), text.message_id)
    assert node is not None and await store.resolve(str(USER), photo.message_id) == node
    after_tool = llm.requests[1].messages
    assert [m["role"] for m in after_tool[-3:]] == ["assistant", "tool", "user"]
    assert image_parts(after_tool[-1]) == [made.answered[0]]
    assert "generate_image" in json.dumps(llm.requests[0].body["tools"])


async def test_a_budget_at_its_limit_makes_no_image_call(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    catalogue = tmp_path / "models.toml"
    catalogue.write_text(
        f'[models.chat]\nmodel = "test-model"\nbase_url = "{llm.base_url}"\ndefault = true\n'
        f'[models.painter]\nkind = "image"\nmodel = "gpt-image-1"\nbase_url = "{llm.base_url}"\n'
        "price_per_image = 0.04\n"
    )
    async with start_bot(models_file=catalogue, image_model="painter",
                         user_daily_budget_usd=0.04) as app:  # fmt: skip
        first, _ = await ask(tg, app, USER, "/image a red cube")
        assert answers_to(tg, USER, first)[0].photo is not None
        today = await app.accounting.user_today(USER)
        assert (today.cost, today.models["painter"].cost) == (40_000_000, 40_000_000)
        _, text = await ask(tg, app, USER, "/image a blue cube")
    assert text.startswith(IMAGE_BUDGET.partition("{")[0]) and "UTC" in text
    assert llm.image_posts == 1  # refused before the call


async def test_a_content_refusal_is_one_line_never_retried(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory
) -> None:
    async with start_bot(**PICTURES) as app:
        _, text = await ask(tg, app, USER, "/image [refuse] something")
    assert text == IMAGE_REFUSED
    assert llm.image_posts == 1 and not tg.calls_to("sendPhoto")


async def test_without_an_image_model_image_says_so(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot():
        sent = tg.send_user_message(USER, USER, "/image a cat")["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, sent)), 10)
    assert answers_to(tg, USER, sent)[0].text == NO_IMAGES
