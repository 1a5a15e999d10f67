"""Settings from the environment and ``.env`` (names as in DESIGN.md).

:func:`load_settings` turns every problem into one :class:`SettingsError` line
that names the variable and says how to fix it; it never shows a secret.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

from aiogram.utils.token import TokenValidationError, validate_token
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SYSTEM_PROMPT_FILE = PROJECT_ROOT / "config" / "system_prompt.txt"
FALLBACK_SYSTEM_PROMPT = "You are a helpful assistant chatting in Telegram."
#: Where `make run` starts its local redis-server (config/redis.conf).
LOCAL_REDIS_URL = "redis://127.0.0.1:6390/0"

_HINTS = {
    "telegram_bot_token": "create a bot with @BotFather (https://t.me/BotFather) and put "
    "TELEGRAM_BOT_TOKEN=<token> in .env",
    "openai_api_key": "put OPENAI_API_KEY=<key> in .env (keys: https://platform.openai.com/api-keys)"
    ", or set OPENAI_BASE_URL to an endpoint that needs no key (Ollama, vLLM, llama.cpp)",
    "allowed_user_ids": "use comma-separated numeric Telegram user ids, "
    "e.g. ALLOWED_USER_IDS=1234,5678",
    "owner_user_ids": "use comma-separated numeric Telegram user ids, e.g. OWNER_USER_IDS=1234",
}


class SettingsError(Exception):
    """A setting is missing or invalid; the message is one line for the operator."""


def _parse_ids(value: object) -> object:
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace(";", ",").split(",")]
        return [p for p in parts if p]
    if isinstance(value, int):
        return [value]
    return value


class Settings(BaseSettings):
    """Every setting of the bot; see the README's settings table."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    telegram_bot_token: SecretStr
    telegram_api_url: str = "https://api.telegram.org"
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"
    #: Seconds without progress from the model before a call is abandoned.
    openai_timeout: float = Field(60.0, gt=0)
    #: Retries of a model call on 429, 5xx and connection errors (with backoff).
    openai_max_retries: int = Field(2, ge=0, le=10)
    redis_url: str = LOCAL_REDIS_URL
    system_prompt: str | None = None
    system_prompt_file: Path | None = None
    allowed_user_ids: Annotated[frozenset[int], NoDecode] = frozenset()
    owner_user_ids: Annotated[frozenset[int], NoDecode] = frozenset()
    context_token_budget: int = Field(32000, ge=256)
    #: Fold (summarise the older part) when a request would pass this many tokens;
    #: 0 = 75 % of the budget.
    context_fold_at: int = Field(0, ge=0)
    #: Tokens of recent messages kept verbatim after a fold; 0 = 40 % of the budget.
    context_keep_recent: int = Field(0, ge=0)
    #: Longest summary, in tokens; 0 = 10 % of the budget (at most 2000).
    summary_max_tokens: int = Field(0, ge=0)
    user_daily_token_limit: int = Field(0, ge=0)
    #: Bytes of transcript records kept in the in-process LRU.
    transcript_cache_bytes: int = Field(64 * 1024 * 1024, ge=1024 * 1024)
    #: Most model calls one message may cause (retries after crashes included).
    turn_max_model_calls: int = Field(3, ge=1, le=100)
    #: Most tokens one message may cause (0 = no limit besides the context budget).
    turn_max_tokens: int = Field(0, ge=0)
    #: Days a model-call audit record (node ids and usage, no message text) is kept; 0 = off.
    model_audit_days: int = Field(7, ge=0, le=3650)
    #: Prices in USD per million tokens, for estimated costs in /usage and /stats.
    price_input_per_mtok: float = Field(0.0, ge=0)
    price_cached_input_per_mtok: float = Field(0.0, ge=0)
    price_output_per_mtok: float = Field(0.0, ge=0)
    #: Longest user message (characters) sent to the model.
    max_input_chars: int = Field(16000, ge=100)
    #: Seconds in-flight answers get to finish on SIGTERM.
    shutdown_timeout: float = Field(25.0, ge=0)
    log_level: str = "INFO"
    #: This process's name in the intake consumer group; unique per running bot process.
    bot_instance: str = Field(default_factory=socket.gethostname, min_length=1)

    @field_validator("allowed_user_ids", "owner_user_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        return _parse_ids(value)

    @field_validator("telegram_bot_token")
    @classmethod
    def _check_token(cls, value: SecretStr) -> SecretStr:
        try:
            validate_token(value.get_secret_value())
        except TokenValidationError:
            raise ValueError("does not look like a bot token (digits:letters)") from None
        return value

    @field_validator("telegram_api_url", "openai_base_url", "redis_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value:
            raise ValueError("must be a URL with a scheme, e.g. http://127.0.0.1:8081")
        return value.rstrip("/") if value and not value.startswith("redis") else value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return level

    @model_validator(mode="after")
    def _check_key(self) -> Settings:
        if self.openai_api_key is None and self.openai_base_url is None:
            raise ValueError("openai_api_key: is required when OPENAI_BASE_URL is not set")
        budget = self.context_token_budget
        fold_at = self.context_fold_at or budget * 3 // 4
        keep = self.context_keep_recent or budget * 2 // 5
        if not keep < fold_at <= budget:
            raise ValueError(
                "context_fold_at: needs CONTEXT_KEEP_RECENT < CONTEXT_FOLD_AT <= "
                "CONTEXT_TOKEN_BUDGET"
            )
        return self

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

    def api_key(self) -> str:
        """The model key, or a placeholder for endpoints that need none."""
        return self.openai_api_key.get_secret_value() if self.openai_api_key else "not-needed"


def load_settings(env_file: str | None = ".env") -> Settings:
    """Read settings; raises :class:`SettingsError` with one clear line on a problem."""
    try:
        settings = Settings(_env_file=env_file)  # type: ignore[call-arg]
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    settings.resolved_system_prompt()  # fail at start-up, not at the first message
    return settings


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"]
        if not field and message.startswith("Value error, openai_api_key"):
            field, message = "openai_api_key", "is required when OPENAI_BASE_URL is not set"
        name = field.upper()
        if error["type"] == "missing":
            text = f"{name} is not set"
        else:
            text = f"{name} is invalid: {message.removeprefix('Value error, ')}"
        hint = _HINTS.get(field)
        lines.append(f"{text}; {hint}" if hint else text)
    return " | ".join(lines)
