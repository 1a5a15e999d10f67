"""Logging set-up for ``python -m bot``: one format, secrets redacted, HTTP chatter quiet."""

from __future__ import annotations

import logging

from .settings import Settings

#: Libraries that log a line per HTTP request or connection at INFO. An operator
#: does not want one per model call or Telegram call: they speak at WARNING and
#: above unless LOG_LEVEL=DEBUG.
CHATTY_LOGGERS = (
    "httpx",
    "httpx2",  # what openai 3.x sends its requests with
    "httpcore",
    "openai",
    "aiohttp.access",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiogram.event",
)


class RedactSecrets(logging.Filter):
    """Defence in depth: no log line ever shows the bot token or the model key."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if len(s) >= 8]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = message
        for secret in self.secrets:
            redacted = redacted.replace(secret, "<redacted>")
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def configure_logging(settings: Settings) -> None:
    """Root logging at LOG_LEVEL on stderr, with the secrets filtered out of every line."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    secrets = [settings.telegram_bot_token.get_secret_value()]
    if settings.openai_api_key is not None:
        secrets.append(settings.openai_api_key.get_secret_value())
    handler.addFilter(RedactSecrets(secrets))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    level = logging.getLevelName(settings.log_level)
    quiet = level if level == logging.DEBUG else max(level, logging.WARNING)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
