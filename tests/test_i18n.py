"""The bot's own texts in every language: the catalogues against the code, what Telegram
accepts of them, and users of several languages talking to the real bot.

The catalogue checks read the code's message ids the way ``make i18n`` extracts them
(Babel, the same keywords) and each ``bot/locales/<lang>/LC_MESSAGES/replychain.po``.
"""

from __future__ import annotations

import gettext
import io
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest
from babel.messages.catalog import Catalog, Message
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from bot import choice_texts, i18n
from bot.chat import menu, steering, voice
from bot.chat.choices import COMMANDS as CHOICE_COMMANDS
from bot.chat.menu import sync_menu
from bot.chat.messages import NOT_A_THREAD
from bot.chat.routers import COMMANDS, HELP_TEXT, OUTPUT_COMMANDS, UNSUPPORTED_TEXT
from bot.chat.style import COMMANDS as STYLE_COMMANDS
from bot.i18n import I18N, _
from bot.paths import LOCALES
from bot.settings import SettingsError
from bot.settings_load import load_settings
from bot.telegram import guest
from bot.telegram.session import BotApiSession
from bot.turn import notices
from bot.usage.reports import OWNER_ONLY_TEXT
from bot.webapp.texts import ERRORS, PAGE

from .fakes.telegram import FakeTelegram, StoredMessage
from .harness import OTHER_USER, USER, BotFactory, answers_to, ask

#: The twelve languages the bot ships at least (English needs no catalogue).
SHIPPED = {"en", "de", "es", "fr", "it", "pt", "ru", "uk", "tr", "zh", "ja", "ar"}
#: What ``make i18n`` extracts: N_() marks, _() and ngettext() calls.
KEYWORDS = {"N_": None, "_": None, "ngettext": (1, 2)}
_FIELD = re.compile(r"\{[^{}]*\}")
_TAG = re.compile(r"</?[A-Za-z][^>]*>")
#: Kept as they are in every language: [depth:N], commands, setting names, markers.
_KEPT = re.compile(
    r"\[depth:N\]|(?<![A-Za-z0-9_/.])/[a-z]+(?![a-z])"
    r"|(?<![A-Za-z0-9_])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?![A-Za-z0-9_])|⚠️|⏹|◀|🔧"
)
#: Texts the page of the thread viewer shows (never sent to Telegram).
_PAGE_ONLY = {*PAGE.values(), *ERRORS.values()}
#: Texts shown as a callback query's answer (at most 200 characters).
_QUERY_ANSWERS = {
    steering.FORGET_CANCELLED, steering.FORGET_NOT_YOURS, steering.FORGET_EXPIRED,
    steering.FORGET_FAILED, "Erased.", guest.HOW_TO_CONTINUE, choice_texts.MENU_EXPIRED,
    choice_texts.NOT_YOURS, choice_texts.GONE, NOT_A_THREAD,
    choice_texts.CHOICE_FAILED, choice_texts.MODEL_CHOSEN, choice_texts.MODEL_DEFAULT_CHOSEN,
    choice_texts.PERSONA_CHOSEN, choice_texts.PERSONA_DEFAULT_CHOSEN, *voice.CHOSEN.values(),
}  # fmt: skip
#: The command menu: the routers' commands, then /model's and /persona's.
MENU = (*COMMANDS, *CHOICE_COMMANDS, *STYLE_COMMANDS, *OUTPUT_COMMANDS)
_COMMAND_TEXTS = {text for _name, text in MENU}


def code_ids() -> dict[str, Message]:
    """Every message id of the code, keyed by its singular."""
    found: dict[str, Message] = {}
    for _file, _line, text, _comments, _context in extract_from_dir(
        LOCALES.parent, keywords=KEYWORDS
    ):
        key = text if isinstance(text, str) else text[0]
        found[key] = Message(text)
    return found


def catalogues() -> Iterator[tuple[str, Catalog]]:
    for folder in sorted(p for p in LOCALES.iterdir() if (p / "LC_MESSAGES").is_dir()):
        path = folder / "LC_MESSAGES" / f"{i18n.DOMAIN}.po"
        with path.open("rb") as po:
            yield folder.name, read_po(po, locale=folder.name)


def forms(message: Message) -> list[str]:
    text = message.string
    return [str(f) for f in text] if isinstance(text, (tuple, list)) else [str(text or "")]


def exact_forms(catalogue: Catalog) -> set[int]:
    """The plural forms that stand for exactly one number (Arabic's one and two): a
    translation may say that number in words instead of ``{count}``."""
    pick = gettext.c2py(catalogue.plural_expr)
    counts = Counter(pick(n) for n in range(1000))
    return {form for form, seen in counts.items() if seen == 1}


def test_every_language_is_shipped_and_loaded() -> None:
    assert set(i18n.languages()) >= SHIPPED
    assert i18n.languages()[0] == "en"


def test_a_catalogue_is_read_when_a_text_is_first_wanted_in_its_language() -> None:
    """Start-up reads no catalogue (aiogram's I18n reads all twelve); a language's is
    read once, when the first text is wanted in it."""
    catalogues = i18n.Catalogues(path=LOCALES, default_locale="en", domain=i18n.DOMAIN)
    assert catalogues.locales == {}
    assert set(catalogues.available_locales) == SHIPPED - {"en"}
    assert catalogues.has("de") and not catalogues.has("en") and not catalogues.has("xx")
    assert catalogues.gettext(notices.RETRY_HINT, locale="en") == notices.RETRY_HINT
    assert catalogues.gettext(notices.RETRY_HINT, locale="xx") == notices.RETRY_HINT
    assert catalogues.locales == {}
    german = catalogues.gettext(notices.RETRY_HINT, locale="de")
    assert german != notices.RETRY_HINT
    assert german == I18N.gettext(notices.RETRY_HINT, locale="de")
    read = catalogues.locales["de"]
    with catalogues.use_locale("de"):
        assert catalogues.gettext(notices.RETRY_HINT) == german
    assert list(catalogues.locales) == ["de"]
    assert catalogues.locales["de"] is read


def test_the_menu_wants_every_language_and_keeps_only_the_catalogues_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = i18n.Catalogues(path=LOCALES, default_locale="en", domain=i18n.DOMAIN)
    monkeypatch.setattr(i18n, "I18N", fresh)
    fresh.gettext(notices.RETRY_HINT, locale="de")  # a German user spoke already
    menus = menu.wanted()
    assert set(menus) == {None} | (SHIPPED - {"en"})
    assert all(len(menus[code]) == len(menus[None]) for code in menus)
    assert menus["fr"][0].description != menus[None][0].description
    assert list(fresh.locales) == ["de"]


def test_every_message_of_the_code_is_translated_in_every_catalogue() -> None:
    ids = code_ids()
    assert len(ids) > 100  # the extraction found the code's texts
    for language, catalogue in catalogues():
        for key, wanted in ids.items():
            message = catalogue.get(key)
            assert message is not None, f"{language}: {key!r} is missing (run make i18n)"
            assert message.id == wanted.id, f"{language}: {key!r} differs in its plural"
            assert not message.fuzzy, f"{language}: {key!r} is fuzzy"
            assert all(f.strip() for f in forms(message)), f"{language}: {key!r} untranslated"
            assert len(forms(message)) == (catalogue.num_plurals if message.pluralizable else 1)
        stale = {m.id if isinstance(m.id, str) else m.id[0] for m in catalogue if m.id} - set(ids)
        assert not stale, f"{language}: ids no longer in the code: {stale}"


def test_the_committed_mo_files_are_compiled_from_the_po_files() -> None:
    for language, catalogue in catalogues():
        compiled = io.BytesIO()
        write_mo(compiled, catalogue)
        mo = LOCALES / language / "LC_MESSAGES" / f"{i18n.DOMAIN}.mo"
        assert mo.read_bytes() == compiled.getvalue(), f"{language}: run make i18n"


def test_translations_keep_placeholders_markup_and_markers() -> None:
    for language, catalogue in catalogues():
        exact = exact_forms(catalogue)
        for message in catalogue:
            if not message.id:
                continue
            source = message.id if isinstance(message.id, str) else message.id[0]
            where = f"{language}: {source[:40]!r}"
            for index, text in enumerate(forms(message)):
                missing = Counter(_FIELD.findall(source)) - Counter(_FIELD.findall(text))
                if message.pluralizable and index in exact:
                    missing.pop("{count}", None)  # "one" said as a word
                assert not missing, f"{where} drops {set(missing)}"
                assert set(_FIELD.findall(text)) <= set(_FIELD.findall(source)), f"{where} renames"
                assert Counter(_TAG.findall(text)) == Counter(_TAG.findall(source)), where
                assert Counter(_KEPT.findall(text)) == Counter(_KEPT.findall(source)), where
                assert text.endswith("\n") == source.endswith("\n"), where


def _samples(text: str) -> dict[str, str]:
    return {name: "42" for name in re.findall(r"\{(\w+)\}", text)}


def _rendered(language: str) -> Iterator[tuple[str, str]]:
    """(message id, text as the bot sends it) of every message the bot sends to a chat,
    each plural form with a number that picks it."""
    with I18N.use_locale(language):
        for key, message in code_ids().items():
            if key in _PAGE_ONLY:
                continue
            if not message.pluralizable:
                yield key, _(key).format(**_samples(key))
                continue
            singular, plural = str(message.id[0]), str(message.id[1])
            seen: set[str] = set()
            for n in (0, 1, 2, 3, 5, 11, 21, 100, 101):
                text = i18n.ngettext(singular, plural, n)
                if text not in seen:
                    seen.add(text)
                    yield key, text.format(**{**_samples(text), "count": str(n)})


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


async def test_every_translation_is_html_telegram_accepts_and_fits_its_place(
    tg: FakeTelegram,
) -> None:
    """Every text, as sent (HTML parse mode), in every language: the strict test server
    parses it; a message fits 4096 characters, a caption 1024, a command's description
    256, a callback answer 200. Texts go in batches that fit one message."""
    bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
    try:
        for language in i18n.languages():
            batch: list[str] = []
            for key, text in [*_rendered(language), ("", "")]:
                limit = 200 if key in _QUERY_ANSWERS else 256 if key in _COMMAND_TEXTS else 4096
                assert _units(text) <= limit, f"{language}: {key[:40]!r} is too long"
                if batch and (not text or _units("\n\n".join([*batch, text])) > 4096):
                    await _send(bot, language, batch)
                    batch = []
                batch.append(text)
            with I18N.use_locale(language):  # captions: /export's and /stats'
                caption = _("This branch of the conversation, from its root to that message.")
                assert _units(caption) <= 1024
    finally:
        await bot.session.close()
    assert len(tg.bot_messages(USER)) >= len(i18n.languages())


async def _send(bot: Bot, language: str, batch: list[str]) -> None:
    """One message of several texts; when Telegram refuses it, the text it refuses."""
    try:
        await bot.send_message(USER, "\n\n".join(batch), parse_mode="HTML")
    except TelegramBadRequest as refused:
        for text in batch:
            try:
                await bot.send_message(USER, text, parse_mode="HTML")
            except TelegramBadRequest as exc:
                pytest.fail(f"{language}: Telegram refuses {text[:60]!r}: {exc.message}")
        pytest.fail(f"{language}: Telegram refuses texts together: {refused.message}")


# ------------------------------------------------------------------ the real bot


def in_language(language: str, text: str) -> str:
    with I18N.use_locale(language):
        return _(text)


async def command(tg: FakeTelegram, chat: int, user: int, text: str, **kw: object) -> str:
    """The bot's answer to ``text``: a message, or in a group the asker's ephemeral one."""
    message = tg.send_user_message(chat, user, text, **kw)  # type: ignore[arg-type]

    def replies() -> list[StoredMessage]:
        mine = [
            m for m in tg.ephemerals if m.chat_id == chat and m.reply_to == message["message_id"]
        ]
        return answers_to(tg, chat, message["message_id"]) + mine

    await tg.wait_for(lambda: bool(replies()))
    return replies()[0].text or ""


async def test_a_german_user_gets_german_help_and_notices(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    tg.set_language(USER, "de")
    async with start_bot(max_input_chars=100) as app:
        german = in_language("de", HELP_TEXT)
        assert german != HELP_TEXT
        assert await command(tg, USER, USER, "/help") == german
        sticker = tg.send_user_message(USER, USER, sticker=True)["message_id"]
        await tg.wait_for(lambda: bool(answers_to(tg, USER, sticker)))
        assert answers_to(tg, USER, sticker)[0].text == in_language("de", UNSUPPORTED_TEXT)
        # a notice of the turn engine: the language came with the message through the intake
        _message, text = await ask(tg, app, USER, "x" * 150)
        assert text == in_language("de", notices.TOO_LONG).format(length="150", limit="100")
        assert text.startswith("Deine Nachricht ist zu lang (150 Zeichen")


async def test_a_russian_user_gets_cyrillic_usage_with_russian_plurals(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    tg.set_language(USER, "ru")
    async with start_bot(user_daily_token_limit=1_000_000) as app:
        await ask(tg, app, USER, "раз")
        one = await command(tg, USER, USER, "/usage")
        await ask(tg, app, USER, "два")
        two = await command(tg, USER, USER, "/usage")
        for word in ("три", "четыре", "пять"):
            await ask(tg, app, USER, word)
        five = await command(tg, USER, USER, "/usage")
    assert one.startswith("Ваше использование:\nСегодня (UTC): ")
    assert "за 1 вызов модели" in one  # one
    assert "за 2 вызова модели" in two  # few
    assert "за 5 вызовов модели" in five  # many
    # the daily limit, grouped the Russian way (no-break spaces) with its plural
    assert "Дневной лимит: 1\xa0000\xa0000 токенов" in one


async def test_arabic_portuguese_fallbacks_and_unknown_languages(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    async with start_bot():
        tg.set_language(USER, "ar")
        arabic = await command(tg, USER, USER, "/help")
        assert arabic == in_language("ar", HELP_TEXT)
        assert re.search("[\u0600-\u06ff]", arabic)
        assert "[depth:N]" in arabic and "/retry" in arabic
        tg.set_language(USER, "pt-br")  # no pt_BR catalogue: Portuguese
        assert await command(tg, USER, USER, "/help") == in_language("pt", HELP_TEXT)
        tg.set_language(USER, "xx")  # no such language: English
        assert await command(tg, USER, USER, "/help") == HELP_TEXT
        tg.set_language(USER, None)  # Telegram sent none: English
        assert await command(tg, USER, USER, "/help") == HELP_TEXT


async def test_in_a_group_each_person_gets_usage_in_their_own_language(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    group = -100777
    tg.add_group(group, "Team")
    tg.add_member(group, USER)
    tg.add_member(group, OTHER_USER)
    tg.set_language(USER, "de")
    tg.set_language(OTHER_USER, "fr")
    async with start_bot():
        german = await command(tg, group, USER, "/usage")
        french = await command(tg, group, OTHER_USER, "/usage")
    assert german.startswith("Deine Nutzung:\nHeute (UTC): 0 Tokens in 0 Modellaufrufen")
    assert french.startswith("Votre utilisation :\nAujourd’hui (UTC) : 0 jeton en 0 appel")


async def test_bot_language_forces_one_language(tg: FakeTelegram, start_bot: BotFactory) -> None:
    tg.set_language(USER, "de")
    try:
        async with start_bot(bot_language="uk"):
            assert await command(tg, USER, USER, "/help") == in_language("uk", HELP_TEXT)
            assert await command(tg, USER, USER, "/stats") == in_language("uk", OWNER_ONLY_TEXT)
    finally:
        i18n.force(None)


def _menu(tg: FakeTelegram, language: str) -> list[str]:
    return [c["description"] for c in tg.commands.get(('{"type": "default"}', language), [])]


async def test_the_command_menu_is_set_per_language_once(
    tg: FakeTelegram, start_bot: BotFactory
) -> None:
    menus = len(i18n.languages())  # the default (English) and one per other language
    async with start_bot():
        await tg.wait_for(lambda: len(tg.calls_to("setMyCommands")) == menus)
    assert _menu(tg, "") == [text for _name, text in MENU]
    assert _menu(tg, "de")[0] == in_language("de", COMMANDS[0][1]) != COMMANDS[0][1]
    assert {c.params.get("language_code") for c in tg.calls_to("setMyCommands")} == {
        None,
        *(code for code in i18n.languages() if code != "en"),
    }
    # a restart: every menu is read, none is set again
    bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
    try:
        assert await sync_menu(bot) == 0
        assert len(tg.calls_to("setMyCommands")) == menus
        assert len(tg.calls_to("getMyCommands")) == 2 * menus
        # BOT_LANGUAGE: the default menu in that language, the others deleted
        i18n.force("ja")
        assert await sync_menu(bot) == menus
        assert _menu(tg, "") == [in_language("ja", text) for _name, text in MENU]
        assert all(not _menu(tg, code) for code in i18n.languages())
        assert await sync_menu(bot) == 0
    finally:
        i18n.force(None)
        await bot.session.close()


async def test_a_refused_menu_call_is_raised_once_every_call_has_ended(
    tg: FakeTelegram,
) -> None:
    """No menu call is left running when one fails (the session may be closed next); the
    default menu is asked first, alone, so a server refusing menus is asked once."""
    tg.fail_next("getMyCommands", status=400, description="Bad Request: refused")
    bot = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
    try:
        with pytest.raises(TelegramBadRequest):
            await sync_menu(bot)
        assert len(tg.calls_to("getMyCommands")) == 1
        assert not tg.calls_to("setMyCommands")
    finally:
        await bot.session.close()


def test_bot_language_must_name_a_shipped_language(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("BOT_LANGUAGE", "pt-BR")
    assert load_settings(env_file=None).bot_language == "pt-BR"
    for wrong in ("xx", "german", "d3"):
        monkeypatch.setenv("BOT_LANGUAGE", wrong)
        with pytest.raises(SettingsError) as raised:
            load_settings(env_file=None)
        line = str(raised.value)
        assert line.startswith("BOT_LANGUAGE is invalid") and "ar, de, en," in line, line
        assert "\n" not in line


def test_a_catalogue_is_found_for_regional_and_script_codes() -> None:
    assert i18n.locale_of("pt-br") == "pt"
    assert i18n.locale_of("zh-hans") == "zh"
    assert i18n.locale_of("de-AT") == "de"
    assert i18n.locale_of("xx") == "en"
    assert i18n.locale_of("") == "en"
    assert i18n.locale_of(None) == "en"
    assert Path(LOCALES / "ar" / "LC_MESSAGES" / "replychain.mo").is_file()
