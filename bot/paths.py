"""Where the bot's own files are: what it ships beside its code.

Imported by the settings (the default system prompt and model catalogue) and by
bot/i18n.py (the catalogues of its texts); imports nothing of the bot's.
"""

from __future__ import annotations

from pathlib import Path

#: The checkout (or installed tree) holding config/ and bot/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The catalogues of the bot's own texts (gettext .po and .mo files; `make i18n`).
LOCALES = Path(__file__).resolve().parent / "locales"
