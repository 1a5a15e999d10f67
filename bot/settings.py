"""Settings from the environment and ``.env`` (names as in DESIGN.md): their checks.

:class:`Settings` adds to the declared fields (:mod:`bot.settings_fields`) the check of
each value and across values, and what is derived from them (the system prompt, the
model catalogue, listen addresses). Loading them with one line per problem is
:mod:`bot.settings_load`; the ``--help`` table is :mod:`bot.settings_help`.

This module must stay light: ``python -m bot`` validates settings before aiogram,
openai or redis are imported, so a bad ``.env`` gets its one line at once.
An empty value (``TELEGRAM_BOT_TOKEN=`` as ``config/example.env`` ships it)
counts as not set, for every setting.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import (
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from . import catalogue
from .paths import LOCALES, PROJECT_ROOT
from .settings_fields import SettingsFields

DEFAULT_SYSTEM_PROMPT_FILE = PROJECT_ROOT / "config" / "system_prompt.txt"
#: MODELS_FILE when it is not set, if it exists.
DEFAULT_MODELS_FILE = PROJECT_ROOT / "config" / "models.toml"
FALLBACK_SYSTEM_PROMPT = "You are a helpful assistant chatting in Telegram."
#: The most packs STAR_PACKS may name (/buy sends one invoice each), and the most
#: Stars one pack may be.
MAX_STAR_PACKS = 6
MAX_PACK_STARS = 100_000

#: A bot token as @BotFather issues it: the bot's numeric id, a colon, and a
#: URL-safe secret. Checked here rather than with aiogram so that a bad token is
#: reported before aiogram (seconds to import) is loaded.
_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
#: What Telegram accepts as a webhook's secret_token.
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
#: Telegram's own Bot API server; any other TELEGRAM_API_URL names a self-hosted one.
OFFICIAL_API_HOST = "api.telegram.org"
#: The only ports Telegram's own server posts webhooks to (a local server: any port).
OFFICIAL_WEBHOOK_PORTS = (443, 80, 88, 8443)

#: Host name suffixes that name a machine on this host or the local network.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")


def shipped_languages() -> list[str]:
    """The languages of the bot's own texts: English and each catalogue in bot/locales/
    (read without Babel or aiogram, which this module must not import)."""
    found = (p.name for p in LOCALES.iterdir() if (p / "LC_MESSAGES").is_dir())
    return sorted({"en", *found})


class SettingsError(Exception):
    """A setting is missing or invalid; the message is one line for the operator."""


def is_local_endpoint(url: str | None) -> bool:
    """True when *url* names a model server on this machine or a private network.

    Such servers (Ollama, vLLM, llama.cpp) usually need no key. Local means: a
    loopback or private address, ``localhost``, a ``.local``/``.internal`` name, or
    a single-label host such as a compose service (``http://ollama:11434/v1``).
    No URL means the SDK default, OpenAI itself, which is remote.
    """
    if not url:
        return False
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(_LOCAL_SUFFIXES):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_private or address.is_link_local


def is_official_api(url: str) -> bool:
    """True when *url* is Telegram's own Bot API server rather than a self-hosted one."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host.rstrip(".").lower() == OFFICIAL_API_HOST


def webhook_rule(api_url: str) -> str:
    """What WEBHOOK_URL must be for the Bot API server at *api_url*, for error lines."""
    if is_official_api(api_url):
        return (
            "Telegram's own server posts only to public https:// URLs on port 443, 80, 88 or "
            "8443; http:// and other ports need a local Bot API server (telegram-bot-api "
            "--local) named by TELEGRAM_API_URL"
        )
    return (
        "a self-hosted Bot API server takes http:// and any port only when it runs with "
        "--local; without it, an https:// URL on port 443, 80, 88 or 8443"
    )


def _parse_ids(value: object) -> object:
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace(";", ",").split(",")]
        return [p for p in parts if p]
    if isinstance(value, int):
        return [value]
    return value


class Settings(SettingsFields):
    """Every setting of the bot; see docs/settings.md."""

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object, info: ValidationInfo) -> object:
        """A value of only spaces counts as not set, like an empty one."""
        if not (isinstance(value, str) and not value.strip()):
            return value
        name = info.field_name or ""
        field = cls.model_fields[name]
        if field.is_required():
            raise PydanticCustomError("missing", "Field required")
        return field.get_default(call_default_factory=True)

    @field_validator("allowed_user_ids", "owner_user_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        return _parse_ids(value)

    @field_validator("star_packs", mode="before")
    @classmethod
    def _split_packs(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
        return value

    @field_validator("star_packs")
    @classmethod
    def _check_packs(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not 1 <= len(value) <= MAX_STAR_PACKS or len(set(value)) < len(value):
            raise ValueError(f"name 1 to {MAX_STAR_PACKS} different packs, e.g. 50,250,1000")
        if not all(1 <= stars <= MAX_PACK_STARS for stars in value):
            raise ValueError(f"each pack is a whole number of Stars from 1 to {MAX_PACK_STARS}")
        return value

    @field_validator("stars_usd", "free_daily_usd")
    @classmethod
    def _check_nano(cls, value: Decimal | None) -> Decimal | None:
        """Money is counted in whole nano-dollars: an amount must be one."""
        if value is not None and (value * 10**9) % 1:
            raise ValueError("use at most 9 decimals (money is counted in nano-dollars)")
        return value

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("telegram_bot_token")
    @classmethod
    def _check_token(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value().strip()
        if not _TOKEN.fullmatch(token):
            raise ValueError("does not look like a bot token (digits:letters)")
        return SecretStr(token)

    @field_validator("url_fetch_allow", mode="before")
    @classmethod
    def _split_networks(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        networks = []
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            try:
                networks.append(str(ipaddress.ip_network(part, strict=False)))
            except ValueError:
                raise ValueError(
                    f"{part} is not a network; use comma-separated CIDRs, e.g. "
                    "127.0.0.1/32,10.0.0.0/8"
                ) from None
        return networks

    @field_validator(
        "telegram_api_url", "openai_base_url", "transcribe_base_url", "redis_url", "search_url"
    )
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None:
            value = value.strip()
            if "://" not in value:
                raise ValueError("must be a URL with a scheme, e.g. http://127.0.0.1:8081")
        return value.rstrip("/") if value and not value.startswith("redis") else value

    @field_validator("metrics_listen")
    @classmethod
    def _check_listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        host, colon, port = value.rpartition(":")
        if not colon or not port.isdigit() or not 0 < int(port) < 65536 or " " in host:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9108 (or :9108 for every address)")
        return value

    @field_validator("telegram_local_files", mode="before")
    @classmethod
    def _detected_is_unset(cls, value: object) -> object:
        """``detected``, the documented default, may also be written out."""
        if isinstance(value, str) and value.strip().lower() == "detected":
            return None
        return value

    @field_validator("webhook_url")
    @classmethod
    def _check_webhook_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        try:
            parts = urlsplit(value)
            usable = parts.scheme in ("https", "http") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a port that is not a number from 1 to 65535
            usable = False
        if not usable:
            raise ValueError(
                "must be the URL the Bot API server posts updates to, "
                "e.g. https://bot.example.org/tg/hook"
            )
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _check_webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _WEBHOOK_SECRET.fullmatch(value.get_secret_value().strip()):
            raise ValueError("use 1 to 256 characters A-Z, a-z, 0-9, _ and -")
        return None if value is None else SecretStr(value.get_secret_value().strip())

    @field_validator("webhook_listen", "webapp_listen")
    @classmethod
    def _check_webhook_listen(cls, value: str, info: ValidationInfo) -> str:
        host, _, port = value.strip().rpartition(":")
        lowest = 0 if info.field_name == "webapp_listen" else 1  # 0: any free port
        if not host or not port.isdigit() or not lowest <= int(port) < 65536:
            example = "8081" if info.field_name == "webapp_listen" else "8080"
            raise ValueError(f"must be host:port, e.g. 127.0.0.1:{example}")
        return value.strip()

    @field_validator("bot_language")
    @classmethod
    def _check_bot_language(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        shipped = shipped_languages()
        base = re.split(r"[-_]", value, maxsplit=1)[0].lower()
        if not re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*", value) or (
            base not in shipped
        ):
            raise ValueError(
                f"must be a language the bot has texts in: {', '.join(shipped)} "
                "(a regional code such as pt-br is fine)"
            )
        return value

    @field_validator("webapp_url")
    @classmethod
    def _check_webapp_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        try:
            parts = urlsplit(value)
            usable = parts.scheme == "https" and bool(parts.hostname) and parts.port != 0
        except ValueError:
            usable = False
        if not usable or parts.query or parts.fragment:
            raise ValueError(
                "must be the public https:// URL Telegram opens (Mini Apps need HTTPS), "
                "without ?query or #fragment, e.g. https://bot.example.org/viewer/"
            )
        return value

    @property
    def url_fetch_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """URL_FETCH_ALLOW as networks (for :class:`bot.reading.fetch.FetchPolicy`)."""
        return tuple(ipaddress.ip_network(n) for n in sorted(self.url_fetch_allow))

    @property
    def redis_location(self) -> str:
        """host:port of REDIS_URL, never its credentials (for logs and notices)."""
        parts = urlsplit(self.redis_url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"

    @property
    def webhook_listen_address(self) -> tuple[str, int]:
        """(host, port) of WEBHOOK_LISTEN (an IPv6 host may be in brackets)."""
        return _address(self.webhook_listen)

    @property
    def webapp_listen_address(self) -> tuple[str, int]:
        """(host, port) of WEBAPP_LISTEN."""
        return _address(self.webapp_listen)

    @property
    def metrics_listen_address(self) -> tuple[str, int] | None:
        """(host, port) of METRICS_LISTEN (None: unset)."""
        return _address(self.metrics_listen) if self.metrics_listen else None

    @field_validator("rich_messages", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return level

    @model_validator(mode="after")
    def _check_key(self) -> Settings:
        keyless = self.openai_api_key is None and not is_local_endpoint(self.openai_base_url)
        if keyless and self.catalogue_path() is None:  # (a catalogue's models are checked there)
            where = self.openai_base_url or "OpenAI (OPENAI_BASE_URL is not set)"
            raise ValueError(f"openai_api_key: is not set and the model endpoint {where} is remote")
        budget = self.context_token_budget
        fold_at = self.context_fold_at or budget * 3 // 4
        keep = self.context_keep_recent or budget * 2 // 5
        if not keep < fold_at <= budget:
            raise ValueError(
                "context_fold_at: needs CONTEXT_KEEP_RECENT < CONTEXT_FOLD_AT <= "
                "CONTEXT_TOKEN_BUDGET"
            )
        self._check_local_server()
        if self.webhook_url and self.webhook_secret is None:
            raise ValueError(
                "webhook_secret: is not set and WEBHOOK_URL is; set it to 1 to 256 characters "
                "A-Z, a-z, 0-9, _ and - so that only Telegram can post updates"
            )
        return self

    def _check_local_server(self) -> None:
        """What only a self-hosted Bot API server allows (telegram-bot-api --local)."""
        if not is_official_api(self.telegram_api_url):
            return
        if self.webhook_url:
            parts = urlsplit(self.webhook_url)
            if parts.scheme != "https" or (parts.port or 443) not in OFFICIAL_WEBHOOK_PORTS:
                raise ValueError(f"webhook_url: {webhook_rule(self.telegram_api_url)}")
        if self.telegram_local_files:
            raise ValueError(
                "telegram_local_files: true needs TELEGRAM_API_URL to name a local Bot API "
                "server (telegram-bot-api --local); Telegram's own server gives no disk paths"
            )

    @property
    def redis_url_is_set(self) -> bool:
        """Whether REDIS_URL was given (else `make run` starts a local redis-server)."""
        return "redis_url" in self.model_fields_set

    def resolved_system_prompt(self) -> str:
        """SYSTEM_PROMPT, else SYSTEM_PROMPT_FILE, else config/system_prompt.txt."""
        if self.system_prompt:
            return self.system_prompt.strip()
        path = self.system_prompt_file or DEFAULT_SYSTEM_PROMPT_FILE
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            if self.system_prompt_file is None:
                return FALLBACK_SYSTEM_PROMPT
            raise SettingsError(
                f"SYSTEM_PROMPT_FILE: cannot read {path} ({exc.strerror}); "
                "point it to a readable text file or unset it"
            ) from None
        return text or FALLBACK_SYSTEM_PROMPT

    def catalogue_path(self) -> Path | None:
        """MODELS_FILE, else config/models.toml when it exists, else ``None``."""
        if self.models_file is not None:
            return self.models_file
        return DEFAULT_MODELS_FILE if DEFAULT_MODELS_FILE.is_file() else None

    def catalogue(self) -> catalogue.Catalogue:
        """The models and personas (:mod:`bot.model.catalogue`); a bad MODELS_FILE or
        SUMMARY_MODEL raises :class:`SettingsError` with one line."""
        defaults = catalogue.Defaults(
            base_url=self.openai_base_url,
            api_key=self.openai_api_key.get_secret_value() if self.openai_api_key else None,
            model=self.openai_model,
            context_tokens=self.context_token_budget,
            keyless=is_local_endpoint,
            prices=catalogue.Prices(
                self.price_input_per_mtok,
                self.price_cached_input_per_mtok,
                self.price_output_per_mtok,
            ),
        )
        path = self.catalogue_path()
        try:
            found = catalogue.single(defaults) if path is None else catalogue.load(path, defaults)
            found = catalogue.choose_media(
                found, defaults, tts=self.tts_model, image=self.image_model
            )
        except catalogue.CatalogueError as exc:
            raise SettingsError(f"{exc}; see docs/settings.md, MODELS_FILE") from None
        if self.summary_model is not None and self.summary_model not in found.models:
            names = ", ".join(found.models)
            raise SettingsError(
                f"SUMMARY_MODEL is invalid: {self.summary_model} is no catalogue model ({names})"
            )
        return found

    def api_key(self) -> str:
        """The model key, or a placeholder for endpoints that need none."""
        return self.openai_api_key.get_secret_value() if self.openai_api_key else "not-needed"


def _address(listen: str) -> tuple[str, int]:
    """(host, port) of a host:port setting (an IPv6 host may be in brackets; no host:
    every address)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)
