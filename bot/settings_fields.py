"""The declaration of every setting: its name, type, default and bounds, with a comment.

:class:`SettingsFields` only declares; :class:`bot.settings.Settings` adds the checks
of each value and across values, and what is derived from them. Light like
:mod:`bot.settings`: pydantic only.
"""

from __future__ import annotations

import socket
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: Where `make run` starts its local redis-server (config/redis.conf).
LOCAL_REDIS_URL = "redis://127.0.0.1:6390/0"


class SettingsFields(BaseSettings):
    """Every setting of the bot and its default; see docs/settings.md."""

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
    #: Days a conversation tree nothing wrote to rests before the cold sweep compacts it
    #: into one value (a decimal: tests use seconds' worth); 0 = never.
    cold_after_days: float = Field(14.0, ge=0, le=36500)
    #: Seconds between the cold sweeps (one process sweeps: the holder of its lease).
    cold_sweep_seconds: float = Field(300.0, gt=0)
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
    #: With STARS_USD: where users get help with a payment (a @username, a link, an
    #: e-mail address), shown by /paysupport; unset: "ask the person who runs this bot".
    pay_support: str | None = None
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
    #: Most tokens of one document or page given to the model (its first part).
    document_max_tokens: int = Field(30000, ge=100)
    #: Largest document read (bytes; text files are documents); checked before it is parsed.
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
