"""Settings from the environment and ``.env`` (names as in DESIGN.md).

:func:`load_settings` turns every problem into one :class:`SettingsError` line
that names the variable and says how to fix it; it never shows a secret.

This module must stay light: ``python -m bot`` validates settings before aiogram,
openai or redis are imported, so a bad ``.env`` gets its one line at once.
An empty value (``TELEGRAM_BOT_TOKEN=`` as ``config/example.env`` ships it)
counts as not set, for every setting.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from . import catalogue
from .paths import LOCALES, PROJECT_ROOT
from .tools.config import ToolConfigError, load_config

DEFAULT_SYSTEM_PROMPT_FILE = PROJECT_ROOT / "config" / "system_prompt.txt"
#: MODELS_FILE when it is not set, if it exists.
DEFAULT_MODELS_FILE = PROJECT_ROOT / "config" / "models.toml"
FALLBACK_SYSTEM_PROMPT = "You are a helpful assistant chatting in Telegram."
#: The most packs STAR_PACKS may name (/buy sends one invoice each), and the most
#: Stars one pack may be.
MAX_STAR_PACKS = 6
MAX_PACK_STARS = 100_000
#: Where `make run` starts its local redis-server (config/redis.conf).
LOCAL_REDIS_URL = "redis://127.0.0.1:6390/0"

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

_HINTS = {
    "telegram_bot_token": "create a bot with @BotFather (https://t.me/BotFather) and put "
    "TELEGRAM_BOT_TOKEN=<token> in .env",
    "openai_api_key": "put OPENAI_API_KEY=<key> in .env (keys: https://platform.openai.com/api-keys)"
    ", or set OPENAI_BASE_URL to a local endpoint that needs no key (Ollama, vLLM, llama.cpp)",
    "allowed_user_ids": "use comma-separated numeric Telegram user ids, "
    "e.g. ALLOWED_USER_IDS=1234,5678",
    "owner_user_ids": "use comma-separated numeric Telegram user ids, e.g. OWNER_USER_IDS=1234",
}

#: One line per setting, for ``python -m bot --help`` (docs/settings.md says more).
#: tests/test_first_run.py and tests/test_docs.py check that this, :class:`Settings` and
#: docs/settings.md agree.
SETTINGS_HELP: dict[str, str] = {
    "TELEGRAM_BOT_TOKEN": "bot token from @BotFather (required)",
    "TELEGRAM_API_URL": "Bot API server base URL (default https://api.telegram.org)",
    "TELEGRAM_LOCAL_FILES": "read a local Bot API server's files from disk: true/false "
    "(unset: if readable)",
    "OPENAI_API_KEY": "key for the model endpoint (required unless OPENAI_BASE_URL is local)",
    "OPENAI_BASE_URL": "any OpenAI-compatible endpoint (default: OpenAI)",
    "OPENAI_MODEL": "model name (default gpt-4o-mini)",
    "OPENAI_TIMEOUT": "seconds without progress before a model call is abandoned (60)",
    "OPENAI_MAX_RETRIES": "retries of a model call on 429, 5xx, timeouts (2)",
    "REDIS_URL": "Redis to use (unset: `make run` starts a local redis-server)",
    "SYSTEM_PROMPT": "the root system prompt of new conversations",
    "SYSTEM_PROMPT_FILE": "file holding it (default config/system_prompt.txt)",
    "ALLOWED_USER_IDS": "comma-separated user ids allowed to talk to the bot (empty: everyone)",
    "OWNER_USER_IDS": "comma-separated user ids allowed to use /stats (and /forget in groups)",
    "CONTEXT_TOKEN_BUDGET": "most prompt tokens one model call may use (32000)",
    "CONTEXT_FOLD_AT": "summarise the older part past this many tokens (0: 75 % of budget)",
    "CONTEXT_KEEP_RECENT": "tokens kept verbatim after a fold (0: 40 % of budget)",
    "SUMMARY_MAX_TOKENS": "longest summary (0: 10 % of budget, at most 2000)",
    "USER_DAILY_TOKEN_LIMIT": "tokens one user may spend per UTC day (0: unlimited)",
    "TRANSCRIPT_CACHE_BYTES": "bytes of transcript records cached in memory (64 MiB)",
    "TURN_MAX_MODEL_CALLS": "most answer calls one message may cause (3)",
    "TURN_MAX_TOKENS": "most tokens one message may cause (0: no limit beyond the budget)",
    "TURN_MAX_ATTEMPTS": "tries of a turn that fails unexpectedly before it is parked (3)",
    "MAX_CONCURRENT_TURNS": "most turns answered at once by this process (256)",
    "USER_MAX_CONCURRENT_TURNS": "most turns of one user answered at once (2)",
    "FLOOD_WAIT_MAX": "longest Telegram flood-control wait, seconds, before an outage (600)",
    "MODEL_AUDIT_DAYS": "days a per-call audit record is kept (7; 0: off)",
    "USAGE_DETAIL_DAYS": "days per-turn and per-branch usage detail is kept (90)",
    "PRICE_INPUT_PER_MTOK": "USD per million input tokens, for estimated costs (0: none)",
    "PRICE_CACHED_INPUT_PER_MTOK": "USD per million cached input tokens (0: none)",
    "PRICE_OUTPUT_PER_MTOK": "USD per million output tokens (0: none)",
    "MODELS_FILE": "TOML catalogue of models and personas (default config/models.toml if "
    "present, else one model from OPENAI_*)",
    "SUMMARY_MODEL": "catalogue name of the model for folds and topic titles (default: the "
    "branch's model)",
    "USER_DAILY_BUDGET_USD": "dollars one user may spend per UTC day (0: unlimited)",
    "DAILY_SPEND_ALERT_USD": "tell the owners once when a day's spend passes this (0: off)",
    "STARS_USD": "dollars of model spend one Telegram Star buys, e.g. 0.01 (unset: no payments)",
    "STAR_PACKS": "comma-separated packs of Stars that /buy offers (50,250,1000)",
    "FREE_DAILY_USD": "with STARS_USD, dollars a user spends per UTC day before their credit "
    "(default USER_DAILY_BUDGET_USD if set, else 0)",
    "MAX_INPUT_CHARS": "longest user message sent to the model (16000)",
    "TOPIC_TITLES": "title private-chat topics whose name Telegram made up, or the bot "
    "opened (true)",
    "TOPIC_THREADS": "private chats with topics: a topic is one conversation, a new one "
    "opens a topic of its own (true)",
    "GUEST_MODE": "answer mentions in chats the bot is not in (Bot API 10.0 guest mode) (true)",
    "IMAGE_MAX_PIXELS": "longest side of a photo sent to the model (2048)",
    "TRANSCRIBE_MODEL": "speech-to-text model for voice notes and audio (whisper-1)",
    "TRANSCRIBE_BASE_URL": "endpoint for transcription (default: OPENAI_BASE_URL)",
    "AUDIO_MAX_SECONDS": "longest voice note or audio transcribed, seconds (600)",
    "TTS_MODEL": 'text-to-speech model for voice answers; with MODELS_FILE a kind = "tts" '
    "entry (unset: off)",
    "TTS_VOICE": "the voice answers are read in (alloy)",
    "IMAGE_MODEL": 'image model for pictures made and edited; with MODELS_FILE a kind = "image" '
    "entry (unset: off)",
    "IMAGE_TOOL": "offer the model the built-in generate_image tool (IMAGE_MODEL set; "
    "false for models that cannot call tools) (true)",
    "TEXT_FILE_MAX_BYTES": "largest text file read into the conversation (262144)",
    "DOCUMENT_MAX_TOKENS": "most tokens of a document or page given to the model; the rest "
    "is not read (30000)",
    "MAX_DOCUMENT_BYTES": "largest document (PDF, .docx, text) read, bytes (20971520)",
    "READ_LINKS": "read the http(s) links in a user's message (true)",
    "LINKS_PER_MESSAGE": "most links of one message read (3)",
    "URL_FETCH_ALLOW": "comma-separated CIDRs a fetch may reach although private or loopback "
    "(empty: none)",
    "URL_FETCH_MAX_BYTES": "most bytes read of one fetched page (2097152)",
    "SEARCH_URL": "a SearXNG base URL: the built-in web_search and read_url tools (unset: off)",
    "SEARCH_RESULTS": "results of one web search given to the model (5)",
    "ALBUM_WAIT": "seconds an album's photos are collected into one turn (1.0)",
    "SHUTDOWN_TIMEOUT": "seconds in-flight answers get to finish on SIGTERM (25)",
    "SHOW_REASONING": "show a reasoning model's thoughts collapsed under the answer (false)",
    "RICH_MESSAGES": "auto: a Bot API 10.1 rich message only for an answer HTML cannot show "
    "(a table, math, over 4,096 characters); always; off: HTML only; /format overrides (auto)",
    "BOT_INSTANCE": "this process's name on the message bus (default: the host name)",
    "REDIS_CLUSTER": "true: REDIS_URL names a node of a Redis Cluster (false)",
    "INTAKE_SHARDS": "intake streams; a chat's messages always go to the same one (1)",
    "WEBHOOK_URL": "public HTTPS URL Telegram posts updates to; http:// with a local server "
    "(unset: polling)",
    "WEBHOOK_SECRET": "secret token Telegram sends with each update (required with WEBHOOK_URL)",
    "WEBHOOK_LISTEN": "host:port the webhook is served on (127.0.0.1:8080)",
    "TAKEOVER_SECONDS": "seconds after which another process finishes a dead one's turns (30)",
    "LOG_LEVEL": "DEBUG, INFO, WARNING or ERROR (INFO)",
    "METRICS_LISTEN": "host:port serving Prometheus /metrics and /healthz (unset: off)",
    "MCP_CONFIG": "JSON file of MCP servers whose tools the model may use (unset: no tools)",
    "ALLOWED_TOOLS": "comma-separated servers or server/tool names offered (empty: all)",
    "TOOLS_IN_GROUPS": "offer tools in groups too (false: private chats only)",
    "TOOL_MAX_ROUNDS": "most rounds of tool calls one answer may use (8)",
    "TOOL_TIMEOUT": "seconds one tool call may take (60)",
    "WEBAPP_URL": "public HTTPS URL Telegram opens for the thread viewer Mini App (unset: off)",
    "WEBAPP_LISTEN": "host:port the thread viewer is served on (127.0.0.1:8081)",
    "WEBAPP_AUTH_MAX_AGE": "seconds a viewer's Telegram sign-in (initData) is accepted (3600)",
    "BOT_LANGUAGE": "one interface language for everyone, e.g. de (unset: each user's own)",
}

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


class Settings(BaseSettings):
    """Every setting of the bot; see docs/settings.md."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        # `NAME=` (as config/example.env ships it) is "not set", never an empty value.
        env_ignore_empty=True,
    )

    telegram_bot_token: SecretStr
    telegram_api_url: str = "https://api.telegram.org"
    #: Read the local paths a Bot API server in ``--local`` mode answers to getFile from
    #: disk: None (unset, "detected") = when such a path is readable here, else download.
    telegram_local_files: bool | None = None
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
    #: Times a turn that fails unexpectedly is tried before it is parked in the
    #: dead-letter stream (logged, counted, replayable) instead of being retried again.
    turn_max_attempts: int = Field(3, ge=1, le=100)
    #: Most turns this process answers at once (all chats together).
    max_concurrent_turns: int = Field(256, ge=1)
    #: Most turns of one user answered at once; further messages wait their turn.
    user_max_concurrent_turns: int = Field(2, ge=1)
    #: Longest total time (seconds) a Telegram flood-control wait may last before it
    #: counts as a Telegram outage.
    flood_wait_max: float = Field(600.0, gt=0)
    #: Days a model-call audit record (node ids and usage, no message text) is kept; 0 = off.
    model_audit_days: int = Field(7, ge=0, le=3650)
    #: Days the per-turn and per-branch usage detail is kept after its last write.
    usage_detail_days: int = Field(90, ge=1, le=3650)
    #: Prices in USD per million tokens, for estimated costs in /usage and /stats.
    price_input_per_mtok: float = Field(0.0, ge=0)
    price_cached_input_per_mtok: float = Field(0.0, ge=0)
    price_output_per_mtok: float = Field(0.0, ge=0)
    #: The model catalogue (TOML); unset: config/models.toml if present, else OPENAI_*.
    models_file: Path | None = None
    #: Catalogue name of the model folds and topic titles use; unset: the branch's model.
    summary_model: str | None = None
    #: Dollars one user may spend per UTC day (0 = unlimited).
    user_daily_budget_usd: float = Field(0.0, ge=0)
    #: The owners are told once a day when the day's total spend passes this (0 = off).
    daily_spend_alert_usd: float = Field(0.0, ge=0)
    #: Dollars of model spend one Telegram Star buys (bot/payments/); unset = no payments.
    stars_usd: Decimal | None = Field(None, gt=0)
    #: The packs of Stars /buy offers, one invoice each.
    star_packs: Annotated[tuple[int, ...], NoDecode] = (50, 250, 1000)
    #: With STARS_USD: dollars a user may spend per UTC day before their paid credit is
    #: drawn on; unset = USER_DAILY_BUDGET_USD when set, else 0. Without STARS_USD
    #: nothing is drawn on, so it is not used.
    free_daily_usd: Decimal | None = Field(None, ge=0)
    #: Longest user message (characters) sent to the model.
    max_input_chars: int = Field(16000, ge=100)
    #: Rename a private-chat topic whose name Telegram made up after its first answer.
    topic_titles: bool = True
    #: In a private chat with topics, a topic is one conversation: a message replying to
    #: nothing continues it, and a new conversation outside topics opens a topic.
    topic_threads: bool = True
    #: Answer ``guest_message`` updates (Bot API 10.0: summoned in chats the bot is not in).
    guest_mode: bool = True
    #: Longest side (pixels) of the photo size sent to the model.
    image_max_pixels: int = Field(2048, ge=64)
    #: Speech-to-text model (voice notes, audio) and its endpoint (unset: OPENAI_BASE_URL).
    transcribe_model: str = Field("whisper-1", min_length=1)
    transcribe_base_url: str | None = None
    #: Longest voice note or audio file transcribed (seconds).
    audio_max_seconds: int = Field(600, ge=1)
    #: Text-to-speech model for voice answers (``/audio/speech``): with a catalogue the
    #: name of a ``kind = "tts"`` model, else a model id on the OPENAI_* endpoint; unset = off.
    tts_model: str | None = None
    #: The voice answers are read in (a voice the speech endpoint knows).
    tts_voice: str = Field("alloy", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    #: Image model for pictures (``/images/generations``, ``/images/edits``): a catalogue's
    #: ``kind = "image"`` model, else a model id on the OPENAI_* endpoint; unset = off.
    image_model: str | None = None
    #: Offer the models the built-in ``generate_image`` tool (with IMAGE_MODEL): off for
    #: models that cannot call tools (the tool loop runs whenever a tool is offered).
    image_tool: bool = True
    #: Largest text file (bytes) read into the conversation.
    text_file_max_bytes: int = Field(262144, ge=1024)
    #: Most tokens of one document or page given to the model (its first part).
    document_max_tokens: int = Field(30000, ge=100)
    #: Largest document read (bytes); checked before it is parsed.
    max_document_bytes: int = Field(20 * 1024 * 1024, ge=1024)
    #: Read the http(s) links in a user's message, at most LINKS_PER_MESSAGE of them.
    read_links: bool = True
    links_per_message: int = Field(3, ge=0, le=20)
    #: Networks (CIDRs, normalised) a fetch may reach although not public; empty = none.
    url_fetch_allow: Annotated[frozenset[str], NoDecode] = frozenset()
    #: Most bytes read of one fetched page.
    url_fetch_max_bytes: int = Field(2 * 1024 * 1024, ge=1024)
    #: A SearXNG instance's base URL: offers the built-in web_search and read_url tools.
    search_url: str | None = None
    search_results: int = Field(5, ge=1, le=20)
    #: Seconds an album's photos (one media_group_id) are collected into one turn.
    album_wait: float = Field(1.0, gt=0, le=30)
    #: Seconds in-flight answers get to finish on SIGTERM.
    shutdown_timeout: float = Field(25.0, ge=0)
    #: Show a reasoning model's thoughts, collapsed, in the final answer message.
    show_reasoning: bool = False
    #: ``auto``: answers as rich messages (tables, math, one message up to 32,768
    #: characters) where the Bot API server has them; ``off``: HTML messages.
    rich_messages: Literal["auto", "always", "off"] = "auto"
    log_level: str = "INFO"
    #: host:port serving Prometheus ``/metrics`` and ``/healthz``; unset = off.
    metrics_listen: str | None = None
    #: This process's name in the intake consumer group; unique per running bot process.
    bot_instance: str = Field(default_factory=socket.gethostname, min_length=1)
    #: The owner's MCP servers (``mcpServers`` JSON); unset: the model gets no tools.
    mcp_config: Path | None = None
    #: Servers (``name``) or tools (``name/tool``) offered; empty: every tool.
    allowed_tools: Annotated[frozenset[str], NoDecode] = frozenset()
    tools_in_groups: bool = False
    tool_max_rounds: int = Field(8, ge=1, le=50)
    tool_timeout: float = Field(60.0, gt=0)
    #: REDIS_URL names a node of a Redis Cluster.
    redis_cluster: bool = False
    #: Intake streams (a chat's messages in the one of its hash); grow, never shrink.
    intake_shards: int = Field(1, ge=1, le=1024)
    #: Webhook mode: the URL the Bot API server posts updates to; unset = polling.
    webhook_url: str | None = None
    #: The secret Telegram sends in X-Telegram-Bot-Api-Secret-Token (required with a URL).
    webhook_secret: SecretStr | None = None
    #: host:port the webhook's HTTP server listens on (a reverse proxy forwards to it).
    webhook_listen: str = "127.0.0.1:8080"
    #: Seconds without a process's heartbeat after which another process takes
    #: over its turns (and, polling, its place as the poller).
    takeover_seconds: float = Field(30.0, ge=2, le=600)
    #: The thread viewer Mini App (bot/webapp/): the public HTTPS URL Telegram opens; unset = off.
    webapp_url: str | None = None
    #: host:port the viewer is served on; the webhook's or the metrics' address shares that server.
    webapp_listen: str = "127.0.0.1:8081"
    #: Seconds after its ``auth_date`` a viewer's ``initData`` is still accepted.
    webapp_auth_max_age: int = Field(3600, ge=10, le=7 * 24 * 3600)
    #: The one language of every text the bot writes itself; unset = each user's
    #: Telegram ``language_code``.
    bot_language: str | None = None

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
