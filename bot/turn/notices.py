"""Everything a turn may say instead of an answer: one short, clear line each.

Each notice is a reply the user can reply to: the turn aliases it to the node
the conversation continues from (see :class:`bot.turn.engine.Reply`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..usage.accounting import next_reset

MODEL_ERRORS = {
    "rate_limited": "The model is busy right now (rate limited).",
    "unavailable": "The model is not reachable right now.",
    "timeout": "The model took too long to answer.",
    "too_long": "This conversation is too long for the model. Start a new one by sending a "
    "message that replies to nothing.",
    "rejected": "The model rejected this request.",
    "no_images": "This model cannot see pictures, so I could not read your image. From now "
    'on I tell it only that an image is there; reply to go on in text (e.g. "ok, just text '
    'then").',
    "bad_image": "The model could not read an image of this conversation.",
    "config": "The bot cannot use its model (check OPENAI_API_KEY, OPENAI_BASE_URL and "
    "OPENAI_MODEL).",
}
#: Above an answer given without an image the model could not read (said once: later
#: requests send a placeholder instead of that image).
IMAGE_SET_ASIDE = (
    "⚠️ The model could not read an image here (its format, size or content), so I "
    "answered without it; the conversation goes on without that image.\n"
)
LOST_TRACK = (
    "⚠️ I no longer know the conversation of the message you replied to (it may have "
    "been erased), so I did not answer. Your message is kept: reply to this notice to "
    "ask it in a new conversation, or send it again as a reply to another of my answers."
)
RETRY_HINT = "Your message is kept: reply to it again to retry."
#: Under an answer the user stopped (what it had said by then is kept).
STOPPED = "⏹ Stopped."
STOPPED_EARLY = "⏹ Stopped before any answer. Your message is kept: reply to it to ask again."
EMPTY_ANSWER = "(the model returned an empty answer)"
DAILY_LIMIT = (
    "You have used your {limit} tokens for today. The limit resets at {reset} "
    "(in {wait}); your message is kept: reply to it then to get an answer."
)
TOO_LONG = (
    "Your message is too long ({length} characters; the limit is {limit}). Please send a "
    "shorter one, or reply to this message to continue the conversation without it."
)
TOO_LARGE = (
    "Your message is too large for me to answer: it does not fit in the {budget} tokens one "
    "request may use (CONTEXT_TOKEN_BUDGET). Please send a shorter one, or reply to this "
    "message to continue the conversation without it."
)
TURN_GUARD = (
    "⚠️ I stopped trying to answer this message: it already used the most model calls "
    "or tokens one message may use. Your message is kept: reply to this to go on from it."
)
DAMAGED_HISTORY = (
    "⚠️ This conversation's stored history is damaged ({ref}), so I will not answer "
    "from a partial transcript. Start a new conversation by sending a message that "
    "replies to nothing."
)
TOOL_ROUNDS = (
    "⚠️ I used tools {rounds} times in a row without reaching an answer, so I stopped "
    "(TOOL_MAX_ROUNDS). Reply to this message to let me continue from there."
)
GAVE_UP = (
    "⚠️ Something went wrong while I was answering this message, and retrying did not "
    "help. Your message is kept: reply to it again to retry."
)


def _duration(delta: timedelta) -> str:
    minutes = max(1, int(delta.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"


def daily_limit(limit: int, now: datetime) -> str:
    """The daily-limit notice: when the limit resets, and how long until then."""
    reset = next_reset(now)
    return DAILY_LIMIT.format(
        limit=limit, reset=reset.strftime("%H:%M UTC"), wait=_duration(reset - now)
    )


RETRY_NOT_AN_ANSWER = (
    "That message is not one of my answers in a conversation I have stored: send /retry "
    "as a reply to one of my answers."
)
