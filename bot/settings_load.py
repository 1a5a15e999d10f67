"""Loading the settings at start-up, and showing them.

:func:`load_settings` turns every problem into one :class:`SettingsError` line
that names the variable and says how to fix it; it never shows a secret.
:func:`describe_value` is how ``check-config`` shows one value. Light like
:mod:`bot.settings`: ``python -m bot`` calls it before anything heavy is imported.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError

from .settings import Settings, SettingsError
from .tools.config import ToolConfigError, load_config

_HINTS = {
    "telegram_bot_token": "create a bot with @BotFather (https://t.me/BotFather) and put "
    "TELEGRAM_BOT_TOKEN=<token> in .env",
    "openai_api_key": "put OPENAI_API_KEY=<key> in .env (keys: https://platform.openai.com/api-keys)"
    ", or set OPENAI_BASE_URL to a local endpoint that needs no key (Ollama, vLLM, llama.cpp)",
    "allowed_user_ids": "use comma-separated numeric Telegram user ids, "
    "e.g. ALLOWED_USER_IDS=1234,5678",
    "owner_user_ids": "use comma-separated numeric Telegram user ids, e.g. OWNER_USER_IDS=1234",
}


def load_settings(env_file: str | None = ".env") -> Settings:
    """Read settings; raises :class:`SettingsError` with one clear line on a problem."""
    try:
        settings = Settings(_env_file=env_file)  # type: ignore[call-arg]
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    settings.resolved_system_prompt()  # fail at start-up, not at the first message
    models = settings.catalogue().models.values()
    if settings.stars_usd is not None and not any(m.prices.configured for m in models):
        raise SettingsError(
            "STARS_USD is invalid: no model has prices, so no answer would ever draw on the "
            "credit Stars buy; set PRICE_INPUT_PER_MTOK and PRICE_OUTPUT_PER_MTOK (or prices "
            "in MODELS_FILE)"
        )
    if settings.mcp_config is not None:
        try:
            load_config(settings.mcp_config)
        except ToolConfigError as exc:
            raise SettingsError(
                f"MCP_CONFIG {exc}; see docs/operating.md, Tools, for the format"
            ) from None
    return settings


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        if not field and ":" in message:
            # a model-level check names its field before the colon
            prefix, _, rest = message.partition(":")
            if prefix in Settings.model_fields:
                field, message = prefix, rest.strip()
        name = field.upper()
        if error["type"] == "missing":
            text = f"{name} is not set"
        elif message.startswith("is not set"):
            text = f"{name} {message}"
        else:
            text = f"{name} is invalid: {message}"
        hint = _HINTS.get(field)
        lines.append(f"{text}; {hint}" if hint else text)
    return " | ".join(lines)


def describe_value(value: Any) -> str:
    """How ``check-config`` shows a setting: secrets are never shown."""
    if isinstance(value, SecretStr):
        return "<set>"
    if isinstance(value, frozenset):
        return ",".join(str(v) for v in sorted(value)) or "(empty)"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if value is None:
        return "(unset)"
    text = str(value)
    if "://" in text and "@" in text:  # a URL with credentials, e.g. redis://:pw@host
        parts = urlsplit(text)
        if parts.password:
            host = parts.netloc.rsplit("@", 1)[1]
            user = parts.username or ""
            text = parts._replace(netloc=f"{user}:<redacted>@{host}").geturl()
    return text
