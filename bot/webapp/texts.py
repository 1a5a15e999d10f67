"""Every text the viewer shows, and the button that opens it, in one table.

The page has no words of its own: it gets this table with the tree (and an
error's text with the error), so translating the viewer is translating this
table. ``{name}`` marks a value filled in where the text is used.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The button under /tree and /export answers.
OPEN_TREE = "Open the tree"
#: What the bot answers to the viewer's "continue here" link (a reply to that message).
CONTINUE_HERE = (
    "To continue the conversation from here, reply to the message this one quotes "
    "(tap the quote to jump to it)."
)

#: The page's texts (the JSON API sends them with the tree).
PAGE: Mapping[str, str] = {
    "title": "Conversation tree",
    "summary": "{nodes} messages, {branches} branches",
    "role_system": "System prompt",
    "role_user": "User",
    "role_assistant": "Bot",
    "role_tool": "Tool round",
    "role_persona": "Persona",
    "depth": "depth {depth}",
    "tokens": "{tokens} tokens",
    "cost": "${cost}",
    "shared": "{calls} calls for {answers} answers",
    "branches": "{count} branches",
    "below": "{count} below",
    "show_branch": "Show this branch",
    "hide_branch": "Hide this branch",
    "folded": "{count} messages summarised",
    "show_originals": "Show the originals",
    "hide_originals": "Hide the originals",
    "fold_title": "Summary the model saw instead of the messages above",
    "calls": "Calls",
    "result": "Result",
    "image": "Image {width}×{height}",
    "images": "{count} image(s)",
    "copy": "Copy",
    "copied": "Copied",
    "copy_failed": "Could not copy: select the text and copy it by hand",
    "export": "Export branch",
    "export_title": "This branch as Markdown",
    "download": "Download",
    "continue": "Continue here",
    "continue_private": "Opens the chat; the bot quotes this message: reply to it.",
    "continue_group": "Opens the message in the group: reply to it.",
    "continue_none": "Reply to message {message} in the group to continue from it.",
    "no_message": "This step has no message of its own to reply to.",
    "close": "Close",
    "loading": "Loading…",
    "selected": "the message you opened the tree from",
}

#: What an API error says (sent as its JSON body's ``error``).
ERRORS: Mapping[str, str] = {
    "missing": "Open this page with the bot's “Open the tree” button in Telegram.",
    "forged": "This page was not opened by Telegram for this bot: open it again from the chat.",
    "expired": "This view has expired: press “Open the tree” in the chat again.",
    "forbidden": "You are not a member of the chat this conversation belongs to.",
    "bad_request": "This link is damaged: open the tree again from the chat.",
    "not_found": "That message belongs to no conversation stored for this chat.",
    "unavailable": "The conversation cannot be read right now; try again in a moment.",
}


def page_texts(language: str | None = None) -> Mapping[str, str]:
    """The page's texts for a user's ``language_code`` (English until catalogues exist)."""
    del language
    return PAGE


def error_text(key: str, language: str | None = None) -> str:
    """The text of the API error ``key`` for a user's ``language_code``."""
    del language
    return ERRORS[key]
