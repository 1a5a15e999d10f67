"""Everything a turn may say instead of an answer: one short, clear line each.

Each notice is a reply the user can reply to: the turn aliases it to the node
the conversation continues from (see :class:`bot.turn.engine.Reply`). The texts are
message ids (:func:`bot.i18n.N_`): the engine translates them with :func:`bot.i18n._`
inside the turn's language.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..i18n import N_, _, clock_time, number
from ..usage.calls import next_reset

MODEL_ERRORS = {
    "rate_limited": N_("The model is busy right now (rate limited)."),
    "unavailable": N_("The model is not reachable right now."),
    "timeout": N_("The model took too long to answer."),
    "too_long": N_(
        "This conversation is too long for the model. Start a new one by sending a "
        "message that replies to nothing."
    ),
    "rejected": N_("The model rejected this request."),
    "no_images": N_(
        "This model cannot see pictures, so I could not read your image. From now "
        'on I tell it only that an image is there; reply to go on in text (e.g. "ok, just '
        'text then").'
    ),
    "bad_image": N_("The model could not read an image of this conversation."),
    "config": N_(
        "The bot cannot use its model (check OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL)."
    ),
}
#: Above an answer given without an image the model could not read (said once: later
#: requests send a placeholder instead of that image).
IMAGE_SET_ASIDE = N_(
    "⚠️ The model could not read an image here (its format, size or content), so I "
    "answered without it; the conversation goes on without that image.\n"
)
LOST_TRACK = N_(
    "⚠️ I no longer know the conversation of the message you replied to (it may have "
    "been erased), so I did not answer. Your message is kept: reply to this notice to "
    "ask it in a new conversation, or send it again as a reply to another of my answers."
)
RETRY_HINT = N_("Your message is kept: reply to it again to retry.")
#: Under an answer the user stopped (what it had said by then is kept).
STOPPED = N_("⏹ Stopped.")
STOPPED_EARLY = N_("⏹ Stopped before any answer. Your message is kept: reply to it to ask again.")
EMPTY_ANSWER = N_("(the model returned an empty answer)")
DAILY_LIMIT = N_(
    "You have used your {limit} tokens for today. The limit resets at {reset} UTC "
    "(in {wait}); your message is kept: reply to it then to get an answer."
)
TOO_LONG = N_(
    "Your message is too long ({length} characters; the limit is {limit}). Please send a "
    "shorter one, or reply to this message to continue the conversation without it."
)
TOO_LARGE = N_(
    "Your message is too large for me to answer: it does not fit in the {budget} tokens one "
    "request may use (CONTEXT_TOKEN_BUDGET). Please send a shorter one, or reply to this "
    "message to continue the conversation without it."
)
TURN_GUARD = N_(
    "⚠️ I stopped trying to answer this message: it already used the most model calls "
    "or tokens one message may use. Your message is kept: reply to this to go on from it."
)
DAMAGED_HISTORY = N_(
    "⚠️ This conversation's stored history is damaged ({ref}), so I will not answer "
    "from a partial transcript. Start a new conversation by sending a message that "
    "replies to nothing."
)
TOOL_ROUNDS = N_(
    "⚠️ I used tools {rounds} times in a row without reaching an answer, so I stopped "
    "(TOOL_MAX_ROUNDS). Reply to this message to let me continue from there."
)
GAVE_UP = N_(
    "⚠️ Something went wrong while I was answering this message, and retrying did not "
    "help. Your message is kept: reply to it again to retry."
)


def _duration(delta: timedelta) -> str:
    minutes = max(1, int(delta.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    if hours:
        return _("{hours}h {minutes}m").format(hours=hours, minutes=f"{minutes:02d}")
    return _("{minutes}m").format(minutes=minutes)


def daily_limit(limit: int, now: datetime) -> str:
    """The daily-limit notice, in the current language: when the limit resets, and how
    long until then."""
    reset = next_reset(now)
    return _(DAILY_LIMIT).format(
        limit=number(limit), reset=clock_time(reset), wait=_duration(reset - now)
    )


def model_error(kind: str) -> str:
    """The notice for a failed model call of ``kind``, in the current language."""
    return f"⚠️ {_(MODEL_ERRORS[kind])} {_(RETRY_HINT)}"


RETRY_NOT_AN_ANSWER = N_(
    "That message is not one of my answers in a conversation I have stored: send /retry "
    "as a reply to one of my answers."
)
