"""Every text the viewer shows, and the button that opens it, in one table.

The page has no words of its own: it gets this table with the tree (and an
error's text with the error), so translating the viewer is translating this
table: its texts are message ids of the bot's catalogues (:mod:`bot.i18n`), given in
the language of the user who opened the page (``initData``'s ``user.language_code``).
``{name}`` marks a value filled in where the text is used.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..i18n import I18N, N_, _, locale_of

#: The button under /tree and /export answers.
OPEN_TREE = N_("Open the tree")
#: What the bot answers to the viewer's "continue here" link (a reply to that message).
CONTINUE_HERE = N_(
    "To continue the conversation from here, reply to the message this one quotes "
    "(tap the quote to jump to it)."
)

#: The page's texts (the JSON API sends them with the tree).
PAGE: Mapping[str, str] = {
    "title": N_("Conversation tree"),
    "summary": N_("{nodes} messages, {branches} branches"),
    "role_system": N_("System prompt"),
    "role_user": N_("User"),
    "role_assistant": N_("Bot"),
    "role_tool": N_("Tool round"),
    "role_persona": N_("Persona"),
    "depth": N_("depth {depth}"),
    "tokens": N_("{tokens} tokens"),
    "cost": N_("${cost}"),
    "shared": N_("{calls} calls for {answers} answers"),
    "branches": N_("{count} branches"),
    "below": N_("{count} below"),
    "show_branch": N_("Show this branch"),
    "hide_branch": N_("Hide this branch"),
    "folded": N_("{count} messages summarised"),
    "show_originals": N_("Show the originals"),
    "hide_originals": N_("Hide the originals"),
    "fold_title": N_("Summary the model saw instead of the messages above"),
    "calls": N_("Calls"),
    "result": N_("Result"),
    "image": N_("Image {width}×{height}"),
    "images": N_("{count} image(s)"),
    "copy": N_("Copy"),
    "copied": N_("Copied"),
    "copy_failed": N_("Could not copy: select the text and copy it by hand"),
    "export": N_("Export branch"),
    "export_title": N_("This branch as Markdown"),
    "download": N_("Download"),
    "continue": N_("Continue here"),
    "continue_private": N_("Opens the chat; the bot quotes this message: reply to it."),
    "continue_group": N_("Opens the message in the group: reply to it."),
    "continue_none": N_("Reply to message {message} in the group to continue from it."),
    "no_message": N_("This step has no message of its own to reply to."),
    "close": N_("Close"),
    "loading": N_("Loading…"),
    "selected": N_("the message you opened the tree from"),
}

#: What an API error says (sent as its JSON body's ``error``).
ERRORS: Mapping[str, str] = {
    "missing": N_("Open this page with the bot's “Open the tree” button in Telegram."),
    "forged": N_("This page was not opened by Telegram for this bot: open it again from the chat."),
    "expired": N_("This view has expired: press “Open the tree” in the chat again."),
    "forbidden": N_("You are not a member of the chat this conversation belongs to."),
    "bad_request": N_("This link is damaged: open the tree again from the chat."),
    "not_found": N_("That message belongs to no conversation stored for this chat."),
    "unavailable": N_("The conversation cannot be read right now; try again in a moment."),
}


def page_texts(language: str | None = None) -> Mapping[str, str]:
    """The page's texts for a user's ``language_code``."""
    with I18N.use_locale(locale_of(language)):
        return {key: _(text) for key, text in PAGE.items()}


def error_text(key: str, language: str | None = None) -> str:
    """The text of the API error ``key`` for a user's ``language_code``."""
    with I18N.use_locale(locale_of(language)):
        return _(ERRORS[key])
