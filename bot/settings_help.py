"""The documentation table of settings: one line per setting, for ``python -m bot --help``.

Only text; it imports nothing, so ``--help`` stays fast. The settings themselves are
:mod:`bot.settings_fields`; docs/settings.md says more about each.
"""

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
    "COLD_AFTER_DAYS": "days a conversation tree rests before it is compacted in place, a "
    "decimal (14; 0: never)",
    "COLD_SWEEP_SECONDS": "seconds between sweeps for trees to compact (300)",
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
    "PAY_SUPPORT": "with STARS_USD, where users get help with a payment (/paysupport)",
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
    "DOCUMENT_MAX_TOKENS": "most tokens of a document or page given to the model; the rest "
    "is not read (30000)",
    "MAX_DOCUMENT_BYTES": "largest document (PDF, .docx, HTML, text file) read, bytes (20971520)",
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
