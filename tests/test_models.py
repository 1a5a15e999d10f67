"""Many models in one tree: the catalogue (MODELS_FILE), /model and /persona per branch,
/retry <model>, prices per model, the dollar budget and the spend alert.

Two model endpoints run: ``llm`` (catalogue model "fast", priced, the default) and
``local`` (catalogue model "local", another key, no prices, no vision). The real bot
talks to both over HTTP; each test server records the ``model`` of every request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import msgpack
import pytest
from redis.asyncio import Redis

from bot import choice_texts as texts
from bot.app import App
from bot.catalogue import CatalogueError, Defaults, Prices, load
from bot.catalogue import Models as CatalogueModels
from bot.data import keys as bot_keys
from bot.i18n import I18N, _
from bot.settings import SettingsError
from bot.turn.branch import Branches
from bot.usage.calls import AUDIT_FIELDS, day_of, utc_now
from transcript import ChatMessage, TranscriptStore
from transcript import keys as transcript_keys

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import (
    OTHER_USER,
    ROOT_PROMPT,
    SYSTEM_PROMPT,
    USER,
    answers_to,
    ask,
    running_bot,
    settings_for,
)
from .redis_server import RedisServer

TIMEOUT = 15.0
LOCAL_KEY = "sk-local-key-never-logged"

CATALOGUE = """
[models.fast]
model = "test-model"
price_input = 1.0
price_cached_input = 0.5
price_output = 2.0
default = true

[models.local]
model = "llama3"
base_url = "{local_url}"
api_key_env = "LOCAL_KEY"
vision = false

[personas.pirate]
prompt = "Talk like a pirate."

[personas.coder]
prompt_file = "{coder}"
model = "local"
"""


@pytest.fixture
async def local() -> AsyncIterator[FakeOpenAI]:
    """The second endpoint, with a key of its own."""
    async with FakeOpenAI(api_key=LOCAL_KEY, model="llama3") as server:
        yield server


@pytest.fixture
def catalogue(tmp_path: Path, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCAL_KEY", LOCAL_KEY)
    coder = tmp_path / "coder.txt"
    coder.write_text("You write code.\n")
    path = tmp_path / "models.toml"
    path.write_text(CATALOGUE.format(local_url=local.base_url, coder=coder))
    return path


Start = Any  # (settings) -> the running bot


@pytest.fixture
def start(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis, catalogue: Path
) -> Start:
    """Starts the real bot with the catalogue (``redis``: flushed first)."""

    def factory(**extra: Any) -> AbstractAsyncContextManager[App]:
        extra.setdefault("models_file", catalogue)
        return running_bot(settings_for(tg, llm, redis_server.url, **extra))

    return factory


async def command(tg: FakeTelegram, text: str, **kw: Any) -> StoredMessage:
    """Send a command as USER; the bot's one message replying to it."""
    sent = tg.send_user_message(USER, USER, text, **kw)
    await tg.wait_for(lambda: bool(answers_to(tg, USER, sent["message_id"])), TIMEOUT)
    [reply] = answers_to(tg, USER, sent["message_id"])
    return reply


def buttons(message: StoredMessage) -> dict[str, str]:
    """The menu's buttons: label -> callback data."""
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def pick(tg: FakeTelegram, text: str, label: str, **kw: Any) -> str:
    """Open a menu (``text``: /model or /persona), press ``label``; the confirmation."""
    menu = await command(tg, text, **kw)
    tg.press_button(USER, menu.message_id, USER, buttons(menu)[label])
    await tg.wait_for(lambda: tg.message(USER, menu.message_id).edits == 1, TIMEOUT)
    return tg.message(USER, menu.message_id).text or ""


def last_answer(tg: FakeTelegram, message_id: int) -> int:
    return answers_to(tg, USER, message_id)[-1].message_id


# ---------------------------------------------------------------- the catalogue


def defaults() -> Defaults:
    return Defaults(base_url=None, api_key="sk-x", model="gpt-4o-mini", context_tokens=32000)


def test_the_catalogue_file_is_read(catalogue: Path, local: FakeOpenAI) -> None:
    found = load(catalogue, defaults())
    assert list(found.models) == ["fast", "local"] and found.default == "fast"
    fast, other = found.models["fast"], found.models["local"]
    assert (fast.model, fast.base_url, fast.api_key, fast.vision) == (
        "test-model",
        None,
        "sk-x",
        True,
    )
    assert fast.prices == Prices(1.0, 0.5, 2.0) and fast.context_tokens == 32000
    assert (other.model, other.base_url, other.api_key) == ("llama3", local.base_url, LOCAL_KEY)
    assert not other.vision and not other.prices.configured
    assert found.personas["pirate"].prompt == "Talk like a pirate."
    assert (found.personas["coder"].prompt, found.personas["coder"].model) == (
        "You write code.", "local",
    )  # fmt: skip
    assert LOCAL_KEY not in repr(other)  # a key is never shown


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[models.a]\nmodel = 1\n", "[models.a] model: must be a non-empty string"),
        ("[models.a]\nmodel = 'x'\nprice_input = -1\n", "[models.a] price_input: must be a number"),
        ("[models.a]\nmodel = 'x'\ncolour = 'red'\n", "[models.a] colour: unknown key"),
        ("[models.a]\nmodel = 'x'\n[models.b]\nmodel = 'y'\n", "[models] default: exactly one"),
        ("[models.a]\nmodel = 'x'\nvision = 'yes'\n", "[models.a] vision: must be true or false"),
        (
            "[models.a]\nmodel = 'x'\napi_key_env = 'NOPE_UNSET'\n",
            "the variable NOPE_UNSET is not set",
        ),
        (
            "[models.a]\nmodel = 'x'\n[personas.p]\nprompt = 'hi'\nmodel = 'b'\n",
            "[personas.p] model: names no [models.b] table",
        ),
        ("[models.a]\nmodel = 'x'\n[personas.p]\n", "[personas.p] prompt: give exactly one"),
        ("[models]\n", "[models]: needs at least one"),
        ("[model.a]\n", "unknown table [model]"),
        ("[models.a\n", "is not valid TOML"),
        ("[models.'a b']\nmodel = 'x'\n", "[models.a b]: the name must be"),
    ],
)
def test_a_bad_catalogue_is_one_line_naming_the_file_the_table_and_the_key(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(CatalogueError) as raised:
        load(path, defaults(), env={})
    message = str(raised.value)
    assert message.startswith(f"MODELS_FILE {path}: ") and says in message
    assert "\n" not in message


def test_a_model_on_a_remote_endpoint_needs_a_key(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text("[models.a]\nmodel = 'x'\n[models.b]\nmodel = 'y'\ndefault = true\n"
                    "base_url = 'http://127.0.0.1:11434/v1'\n")  # fmt: skip
    keyless = Defaults(
        base_url=None, api_key=None, model="m", context_tokens=32000,
        keyless=lambda url: bool(url and "127.0.0.1" in url),
    )  # fmt: skip
    with pytest.raises(
        CatalogueError, match=r"\[models.a\] api_key_env: OPENAI_API_KEY is not set"
    ):
        load(path, keyless)
    path.write_text("[models.b]\nmodel = 'y'\nbase_url = 'http://127.0.0.1:11434/v1'\n")
    assert load(path, keyless).models["b"].api_key == "not-needed"  # a local one needs none


def test_a_bad_catalogue_stops_the_settings_check_and_never_shows_a_key(
    tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, tmp_path: Path
) -> None:
    path = tmp_path / "models.toml"
    path.write_text("[models.a]\nmodel = 'x'\nprice_output = 'lots'\n")
    settings = settings_for(tg, llm, redis_server.url, models_file=path)
    with pytest.raises(SettingsError) as raised:
        settings.catalogue()
    assert "[models.a] price_output" in str(raised.value) and "sk-test" not in str(raised.value)
    unknown = settings_for(tg, llm, redis_server.url, summary_model="nope")
    with pytest.raises(SettingsError, match="SUMMARY_MODEL is invalid: nope"):
        unknown.catalogue()


# ----------------------------------------------------------- /model per branch


async def test_model_as_a_reply_switches_that_branch_only_and_both_go_on_apart_after_a_restart(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start
) -> None:
    async with start() as app:
        question, _ = await ask(tg, app, USER, "compare us")
        first = last_answer(tg, question)
        left, _ = await ask(tg, app, USER, "left", reply_to=first)
        right, _ = await ask(tg, app, USER, "right", reply_to=first)
        left_answer, right_answer = last_answer(tg, left), last_answer(tg, right)
        menu = await command(tg, "/model", reply_to=left_answer)
        assert menu.text == texts.MODEL_MENU.format(current="fast")
        assert set(buttons(menu)) == {"✓ fast", "local"}
        said = await pick(tg, "/model", "local", reply_to=left_answer)
        assert said == texts.MODEL_CHOSEN.format(name="local")
        assert not local.requests  # the menu and the choice asked no model
        asked = len(llm.requests)
        more_left, text = await ask(tg, app, USER, "more left", reply_to=left_answer)
        assert text.startswith("[depth:6] ")  # the menu counts in no depth
        assert [r.model for r in local.requests] == ["llama3"] and len(llm.requests) == asked
        more_right, _ = await ask(tg, app, USER, "more right", reply_to=right_answer)
        assert len(llm.requests) == asked + 1 and len(local.requests) == 1
        # the branch's history went to the other model as it is
        assert [m["content"] for m in local.requests[0].messages][-3:] == [
            "left", "echo: left", "more left",
        ]  # fmt: skip
    async with start() as app:  # a restart: the choices are in Redis
        await ask(tg, app, USER, "left again", reply_to=last_answer(tg, more_left))
        await ask(tg, app, USER, "right again", reply_to=last_answer(tg, more_right))
        await ask(tg, app, USER, "first again", reply_to=first)  # above the choice
    assert len(local.requests) == 2 and local.requests[-1].messages[-1]["content"] == "left again"
    assert [r.messages[-1]["content"] for r in llm.requests[-2:]] == ["right again", "first again"]


async def test_a_choice_made_through_another_process_applies_to_the_next_turn(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start, redis: Redis
) -> None:
    async with start() as app:
        question, _ = await ask(tg, app, USER, "hello")
        first = last_answer(tg, question)
        await ask(tg, app, USER, "warm the caches", reply_to=first)
        # another process (its own store and caches) records a choice at the first answer
        store = TranscriptStore(redis)
        node = await store.resolve(str(USER), first)
        assert node is not None
        elsewhere = Branches(
            redis, store, CatalogueModels(app.catalogue, timeout=5, max_retries=0),
            system_prompt="x",
        )  # fmt: skip
        await elsewhere.choose(node, "m", "local")
        await ask(tg, app, USER, "now", reply_to=first)
    assert [r.messages[-1]["content"] for r in local.requests] == ["now"]


async def test_model_without_a_reply_sets_the_default_of_new_conversations(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start
) -> None:
    async with start() as app:
        await ask(tg, app, USER, "before")
        said = await pick(tg, "/model", "local")
        assert said == texts.MODEL_DEFAULT_CHOSEN.format(name="local")
        await ask(tg, app, USER, "a new one")
        assert [r.messages[-1]["content"] for r in local.requests] == ["a new one"]
        menu = await command(tg, "/model")
        assert "✓ local" in buttons(menu)
        await ask(tg, app, OTHER_USER, "someone else", user=OTHER_USER)
    assert llm.requests[-1].messages[-1]["content"] == "someone else"  # their own default


async def test_a_model_gone_from_the_file_falls_back_with_a_note(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start, tmp_path: Path
) -> None:
    async with start() as app:
        question, _ = await ask(tg, app, USER, "hello")
        first = last_answer(tg, question)
        await pick(tg, "/model", "local", reply_to=first)
    smaller = tmp_path / "smaller.toml"
    smaller.write_text('[models.fast]\nmodel = "test-model"\n')
    async with start(models_file=smaller) as app:
        _asked, text = await ask(tg, app, USER, "still there?", reply_to=first)
        assert text.startswith(
            "[depth:4] " + texts.MODEL_GONE_NOTE.format(name="local", used="fast")
        )
        assert text.endswith("echo: still there?")
    assert not local.requests and llm.requests[-1].messages[-1]["content"] == "still there?"


async def test_only_the_openai_settings_offer_one_model(
    tg: FakeTelegram, llm: FakeOpenAI, start: Start
) -> None:
    async with start(models_file=None) as app:
        menu = await command(tg, "/model")
        assert menu.text == texts.ONE_MODEL.format(name="test-model")
        assert (await command(tg, "/persona")).text == texts.NO_PERSONAS
        await ask(tg, app, USER, "hello")
    assert [r.model for r in llm.requests] == ["test-model"]


# --------------------------------------------------------------------- /persona


async def test_persona_inserts_its_text_below_the_node_and_leaves_the_prefix_bytes_alone(
    tg: FakeTelegram, llm: FakeOpenAI, start: Start
) -> None:
    async with start() as app:
        question, _ = await ask(tg, app, USER, "hello")
        first = last_answer(tg, question)
        second_q, _ = await ask(tg, app, USER, "go on", reply_to=first)
        second = last_answer(tg, second_q)
        await ask(tg, app, USER, "plain", reply_to=second)
        before = llm.requests[-1].messages
        said = await pick(tg, "/persona", "pirate", reply_to=second)
        assert said == texts.PERSONA_CHOSEN.format(name="pirate")
        _, text = await ask(tg, app, USER, "ahoy?", reply_to=second)
        after = llm.requests[-1].messages
        await ask(tg, app, USER, "above it", reply_to=first)
        above = llm.requests[-1].messages
    assert text.startswith("[depth:6] ")  # a system message counts in no depth
    assert json.dumps(after[:5]).encode() == json.dumps(before[:5]).encode()
    assert after[5] == {"role": "system", "content": "Talk like a pirate."}
    assert after[6] == {"role": "user", "content": "ahoy?"}
    assert all(m["role"] != "system" or m is above[0] for m in above)  # not above the choice


async def test_persona_without_a_reply_is_the_root_prompt_of_new_conversations(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start
) -> None:
    async with start() as app:
        said = await pick(tg, "/persona", "coder")
        assert said == texts.PERSONA_DEFAULT_CHOSEN.format(name="coder")
        await ask(tg, app, USER, "write a loop")
        await pick(tg, "/persona", texts.PERSONA_NONE_BUTTON)
        await pick(tg, "/model", "fast")
        await ask(tg, app, USER, "plain again")
    # the persona's own model answered, with the persona as the root prompt (and the
    # rules every root prompt gets)
    rules = ROOT_PROMPT.removeprefix(SYSTEM_PROMPT)
    assert local.requests[0].messages[0] == {"role": "system", "content": "You write code." + rules}
    assert llm.requests[-1].messages[0] == {"role": "system", "content": ROOT_PROMPT}


# ------------------------------------------------------------------ /retry model


async def test_retry_with_a_model_asks_the_same_history_there_as_a_sibling(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start, redis: Redis
) -> None:
    async with start() as app:
        question, _ = await ask(tg, app, USER, "which is better?")
        first = last_answer(tg, question)
        retry, text = await ask(tg, app, USER, "/retry local", reply_to=first)
        assert text == "[depth:2] echo: which is better?"
        refused = await command(tg, "/retry nope", reply_to=first)
        assert refused.text == texts.UNKNOWN_MODEL.format(name="nope", names="fast, local")
        tree = (await command(tg, "/tree", reply_to=first)).text or ""
    # /tree tells the two answers' models apart
    [fast_line] = [
        line for line in tree.splitlines() if "bot: echo" in line and "model fast" in line
    ]
    [local_line] = [line for line in tree.splitlines() if "model local" in line]
    assert f"msg {first}" in fast_line and f"msg {last_answer(tg, retry)}" in local_line
    assert local.requests[0].messages == llm.requests[0].messages  # exactly the same history
    assert len(llm.requests) == 1 and len(local.requests) == 1
    store = TranscriptStore(redis)
    one, two = (
        await store.resolve(str(USER), first),
        await store.resolve(str(USER), last_answer(tg, retry)),
    )
    assert one is not None and two is not None and one != two
    assert (await store.path(one))[-2].id == (await store.path(two))[-2].id  # siblings


async def test_choices_are_appended_and_apply_below_their_node_only(redis: Redis) -> None:
    store = TranscriptStore(redis)
    root = await store.start("7", [ChatMessage("system", "s")])
    question = await store.append(root.id, [ChatMessage("user", "q")])
    left = await store.append(question.id, [ChatMessage("assistant", "a")])
    right = await store.append(question.id, [ChatMessage("assistant", "b")])
    await store.choose(left.id, "m", "local")
    await store.choose(left.id, "m", "fast")  # a later choice at the same node wins
    await store.choose(question.id, "p", "pirate", "0" * 64)
    below = await store.append(left.id, [ChatMessage("user", "more")])
    fresh = TranscriptStore(redis)  # another process: everything read from Redis
    on_left = [(c.at, c.kind, c.name) for c in await fresh.choices_on_path(below.id)]
    assert on_left == [(question.id, "p", "pirate"), (left.id, "m", "fast")]
    assert [c.kind for c in await fresh.choices_on_path(right.id)] == ["p"]  # the sibling
    assert await fresh.choices_on_path(question.id) == await fresh.choices_on_path(right.id)
    index = await redis.hget(transcript_keys.tree_key("7", root.id.tree), "C")
    assert index == b"0.2 m local,0.2 m fast,0.1 p pirate " + b"0" * 64  # only appended


@pytest.fixture
def small_local(catalogue: Path) -> Path:
    """The catalogue with a "local" of a 400-token context."""
    small = catalogue.read_text().replace("vision = false", "vision = false\ncontext_tokens = 400")
    catalogue.write_text(small)
    return catalogue


async def test_a_branch_on_a_small_model_folds_with_the_summary_model(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start, small_local: Path
) -> None:
    async with start(models_file=small_local, summary_model="fast") as app:
        await pick(tg, "/model", "local")
        reply_to = None
        for i in range(6):
            asked, _ = await ask(tg, app, USER, f"message {i} " + "words " * 60, reply_to=reply_to)
            reply_to = last_answer(tg, asked)
    summaries = [r for r in llm.requests if not r.stream]
    assert summaries and all(r.stream for r in local.requests)  # folds asked "fast"
    assert all(r.usage is not None and r.usage.prompt_tokens <= 400 for r in local.requests)


# --------------------------------------------------------------------- money


async def test_every_call_is_priced_by_its_model_in_usage_stats_and_the_audit(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start, redis: Redis
) -> None:
    async with start(owner_user_ids=frozenset({USER})) as app:
        question, _ = await ask(tg, app, USER, "priced")
        await ask(tg, app, USER, "/retry local", reply_to=last_answer(tg, question))
        usage = await command(tg, "/usage")
        sent = tg.send_user_message(USER, USER, "/stats")
        await tg.wait_for(lambda: len(answers_to(tg, USER, sent["message_id"])) == 2, TIMEOUT)
        stats = answers_to(tg, USER, sent["message_id"])[0].text or ""
    paid = llm.usages[0]
    cost = (paid.prompt_tokens - paid.cached_tokens) * 1.0 + paid.cached_tokens * 0.5
    cost = (cost + paid.completion_tokens * 2.0) / 1e6
    free = local.usages[0]
    text = usage.text or ""
    assert f"about ${cost:.4f}" in text
    assert f"  fast: {paid.total_tokens:,} tokens in 1 call, about ${cost:.4f}" in text
    assert f"  local: {free.total_tokens:,} tokens in 1 call, tokens only: no prices set" in text
    assert f"Estimated cost of the days above: ${cost:.4f}" in stats
    assert "By model" in stats and "  local: " in stats
    audit = await redis.hgetall(bot_keys.chat_usage_key(USER, "a", day_of(utc_now())))
    models = sorted(msgpack.unpackb(v)[AUDIT_FIELDS.index("model")] for v in audit.values())
    assert models == ["fast", "local"]


async def test_the_dollar_budget_refuses_before_any_model_call(
    tg: FakeTelegram, llm: FakeOpenAI, start: Start
) -> None:
    async with start(user_daily_budget_usd=0.000001) as app:
        await ask(tg, app, USER, "the first spends the budget")
        asked = len(llm.requests)
        _, text = await ask(tg, app, USER, "one more")
        assert len(llm.requests) == asked  # no model call
        assert "You have spent your $0.00 for today (UTC)" in text
        _, other = await ask(tg, app, OTHER_USER, "mine is fresh", user=OTHER_USER)
        assert other.endswith("echo: mine is fresh")


async def test_the_owner_is_told_once_when_the_days_spend_passes_the_alert(
    tg: FakeTelegram, llm: FakeOpenAI, start: Start
) -> None:
    async with start(daily_spend_alert_usd=0.00001, owner_user_ids=frozenset({OTHER_USER})) as app:
        await ask(tg, app, USER, "cheap question " * 20)
        await tg.wait_for(lambda: len(tg.bot_messages(OTHER_USER)) == 1, TIMEOUT)
        for i in range(2):
            await ask(tg, app, USER, f"and more {i} " * 20)
    [alert] = tg.bot_messages(OTHER_USER)
    assert (alert.text or "").startswith("Today's model spend has passed $0.00:")


async def test_a_text_only_model_gets_placeholders_without_a_failed_call(
    tg: FakeTelegram, llm: FakeOpenAI, local: FakeOpenAI, start: Start
) -> None:
    local.text_only = True  # it would refuse an image part with a 400
    async with start() as app:
        await pick(tg, "/model", "local")
        await ask(tg, app, USER, None, photo=True, caption="what is this?")
    [request] = local.requests
    assert request.status == 200 and "this model cannot see images" in json.dumps(request.messages)


async def test_the_menu_and_its_confirmation_are_in_the_askers_language(
    tg: FakeTelegram, start: Start
) -> None:
    tg.set_language(USER, "de")
    async with start():
        menu = await command(tg, "/model")
        said = await pick(tg, "/model", "local")
    with I18N.use_locale("de"):
        wanted_menu = _(texts.MODEL_MENU_DEFAULT).format(current="fast")
        wanted_said = _(texts.MODEL_DEFAULT_CHOSEN).format(name="local")
    assert wanted_said != texts.MODEL_DEFAULT_CHOSEN.format(name="local")
    assert menu.text == wanted_menu
    assert said == wanted_said
