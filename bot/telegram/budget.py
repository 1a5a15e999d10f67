"""What a bot may still send to a chat now: the group's budget of messages."""

from __future__ import annotations

import time


class ChatBudget:
    """What a bot may still send to a chat now: Telegram allows about 20 messages a
    minute in a group, edits included. A token bucket per chat, refilled one message
    per ``60 / per_minute`` seconds and holding at most ``burst``: streaming edits
    take from it at their pace, so the final text, which waits for a token, goes out
    at once unless the chat is busy (one bucket per process, shared by its answers)."""

    def __init__(self, per_minute: int = 20, burst: int = 3) -> None:
        self.every = 60.0 / per_minute
        self.burst = float(burst)
        self._chats: dict[int, tuple[float, float]] = {}  # chat -> (tokens, when)

    def _tokens(self, chat_id: int, now: float) -> float:
        tokens, at = self._chats.get(chat_id, (self.burst, now))
        return min(self.burst, tokens + (now - at) / self.every)

    def wait(self, chat_id: int) -> float:
        """Seconds until a message may go to the chat (0: now)."""
        tokens = self._tokens(chat_id, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) * self.every

    def take(self, chat_id: int) -> None:
        """One message went to the chat."""
        now = time.monotonic()
        self._chats[chat_id] = (self._tokens(chat_id, now) - 1, now)
        if len(self._chats) > 10_000:  # chats whose bucket is full again need no entry
            self._chats = {c: v for c, v in self._chats.items() if self._tokens(c, now) < 1}
