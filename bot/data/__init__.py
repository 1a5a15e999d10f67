"""The bot's own Redis layer: its key layout and its client (the store has its own keys)."""
