"""``python -m bot``: start replychain with settings from the environment and .env."""

from __future__ import annotations

import asyncio
import logging
import sys

from .app import StartupError, run
from .settings import Settings, SettingsError, load_settings


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
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    secrets = [settings.telegram_bot_token.get_secret_value()]
    if settings.openai_api_key is not None:
        secrets.append(settings.openai_api_key.get_secret_value())
    handler.addFilter(RedactSecrets(secrets))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    # aiohttp's access-level chatter is not useful to an operator
    logging.getLogger("aiogram.event").setLevel(logging.WARNING)


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"replychain: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    try:
        return asyncio.run(run(settings))
    except StartupError as exc:
        print(f"replychain: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
