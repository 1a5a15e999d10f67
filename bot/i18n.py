"""The bot's own texts in the user's language: gettext catalogues, read by aiogram's I18n.

Every text the bot writes itself is an English message id in the code. Where the
text is defined (a module constant) it is marked with :func:`N_` for extraction;
where it is sent it goes through :func:`_` (or :func:`ngettext` for a count), which
translates it into the language of the current context. The catalogues are
``bot/locales/<lang>/LC_MESSAGES/replychain.po`` (``make i18n`` extracts the ids and
updates them; their compiled ``.mo`` files are committed beside them, so an install
needs no build step).

The language is a context variable (aiogram's ``I18n.use_locale``): a handler gets
it from the update's sender (:class:`LanguageMiddleware`); a turn from the
``language_code`` its intake entry carries (:func:`speaking`), since the turn engine
sends its notices long after the handler returned, possibly in another process.
``BOT_LANGUAGE`` (:func:`force`) sets one language for everyone.
"""

from __future__ import annotations

import functools
import gettext
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any

from aiogram.types import TelegramObject, User
from aiogram.utils.i18n import I18n, I18nMiddleware
from babel import Locale, UnknownLocaleError
from babel.dates import format_date, format_time
from babel.numbers import format_currency, format_decimal

from .paths import LOCALES

#: The catalogues' gettext domain (their folder is bot/locales/, paths.LOCALES).
DOMAIN = "replychain"
#: The language of the message ids, and of anyone whose language has no catalogue.
DEFAULT = "en"


class Catalogues(I18n):
    """aiogram's I18n, reading a language's catalogue when a text is first wanted in it
    (aiogram reads them all at start-up): a bot whose users speak English holds none."""

    _files: dict[str, Path]

    def find_locales(self) -> dict[str, gettext.GNUTranslations]:
        """Finds the compiled catalogues; reads none (:meth:`gettext` does)."""
        self._files = {}
        for folder in self.path.iterdir():
            mo = folder / "LC_MESSAGES" / f"{self.domain}.mo"
            if mo.exists():
                self._files[folder.name] = mo
            elif mo.with_suffix(".po").exists():
                raise RuntimeError(f"the catalogue of {folder.name!r} is not compiled")
        return {}

    @property
    def available_locales(self) -> tuple[str, ...]:
        return tuple(self._files)

    def has(self, locale: str) -> bool:
        """Whether ``locale`` has a catalogue."""
        return locale in self._files

    def gettext(
        self, singular: str, plural: str | None = None, n: int = 1, locale: str | None = None
    ) -> str:
        locale = self.current_locale if locale is None else locale
        if locale not in self.locales and locale in self._files:
            with self._files[locale].open("rb") as catalogue:
                self.locales[locale] = gettext.GNUTranslations(catalogue)
        return super().gettext(singular, plural, n, locale)

    @contextmanager
    def passing(self, locale: str) -> Iterator[None]:
        """Texts in ``locale`` within the block (no awaits in it), its catalogue let go
        after unless a user speaks it already: the command menu at start-up wants every
        language once."""
        kept = locale in self.locales
        try:
            with self.use_locale(locale):
                yield
        finally:
            if not kept:
                self.locales.pop(locale, None)


I18N = Catalogues(path=LOCALES, default_locale=DEFAULT, domain=DOMAIN)

#: BOT_LANGUAGE, once :func:`force` has set it: the language of everyone.
_forced: str | None = None


def N_(text: str) -> str:
    """Mark ``text`` as a message id for extraction; it is translated where it is used."""
    return text


def _(text: str) -> str:
    """``text`` (a message id) in the current language."""
    return I18N.gettext(text)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The form of ``singular``/``plural`` for the count ``n`` in the current language
    (each language's CLDR plural rules, from its catalogue's Plural-Forms)."""
    return I18N.gettext(singular, plural, n)


def languages() -> tuple[str, ...]:
    """The languages with a catalogue, English first (it needs none)."""
    return (DEFAULT, *sorted(code for code in I18N.available_locales if code != DEFAULT))


@functools.lru_cache(maxsize=512)
def _resolve(language_code: str) -> str:
    try:
        locale = Locale.parse(language_code, sep="-" if "-" in language_code else "_")
    except (ValueError, UnknownLocaleError):
        return DEFAULT
    candidates = [str(locale)]
    if locale.script:  # zh-hans → zh_Hans, then zh
        candidates.append(f"{locale.language}_{locale.script}")
    candidates.append(locale.language)  # pt-br → pt_BR, then pt
    return next((c for c in candidates if I18N.has(c)), DEFAULT)


def locale_of(language_code: str | None) -> str:
    """The catalogue for a Telegram ``language_code`` (``pt-br`` → ``pt`` unless ``pt_BR``
    exists; unknown or none → English), or BOT_LANGUAGE's when it is set."""
    code = _forced or language_code
    return _resolve(code) if code else DEFAULT


def force(language_code: str | None) -> None:
    """BOT_LANGUAGE: every text in this language (None: each user's own)."""
    global _forced  # noqa: PLW0603 - one setting for the process, set once at start-up
    _forced = language_code or None


def forced() -> str | None:
    """The catalogue BOT_LANGUAGE names, or None when each user gets their own."""
    return _resolve(_forced) if _forced else None


@contextmanager
def speaking(language_code: str | None) -> Iterator[None]:
    """Within the block (and tasks started in it), texts are in this user's language."""
    with I18N.use_locale(locale_of(language_code)):
        yield


def current() -> str:
    """The catalogue of the current context (``en`` outside any)."""
    return I18N.current_locale


def number(value: int | float) -> str:
    """A count in the current language's digits and grouping (1,234 / 1.234 / 1 234)."""
    return format_decimal(value, locale=current())


def dollars(value: float, places: int = 4) -> str:
    """An amount in US dollars to ``places`` decimals (an estimated cost: four; a budget:
    two), written the current language's way ($0.0017, 0,0017 $)."""
    pattern = Locale.parse(current()).currency_formats["standard"].pattern
    return format_currency(
        value, "USD", format=pattern.replace("0.00", "0." + "0" * places), locale=current(),
        currency_digits=False,
    )  # fmt: skip


def clock_time(moment: datetime) -> str:
    """A time of day, short, the current language's way (14:05, 2:05 PM)."""
    return format_time(moment, "short", tzinfo=moment.tzinfo, locale=current())


def day(value: date) -> str:
    """A date, medium length, the current language's way (Nov 26, 2026; 26.11.2026)."""
    return format_date(value, "medium", locale=current())


class LanguageMiddleware(I18nMiddleware):
    """Handlers answer in the sender's language (``from.language_code``, per update,
    so in a group each person gets their own)."""

    def __init__(self) -> None:
        super().__init__(I18N, i18n_key=None, middleware_key="i18n_middleware")

    async def get_locale(self, event: TelegramObject, data: dict[str, Any]) -> str:
        user: User | None = data.get("event_from_user")
        return locale_of(user.language_code if user else None)
