"""Every text the bot writes about models, personas and money (/model, /persona,
/retry <model>, the budget and the spend alert), as plain constants, in one place
for translation: each is a message id (:func:`bot.i18n.N_`), translated where it is
sent."""

from .i18n import N_

MODEL_MENU = N_("Model for the conversation below this message (now: {current}):")
MODEL_MENU_DEFAULT = N_("Model for your new conversations (now: {current}):")
MODEL_CHOSEN = N_("From here on this branch uses {name}.")
MODEL_DEFAULT_CHOSEN = N_("Your new conversations use {name}.")
PERSONA_MENU = N_("Persona for the conversation below this message (now: {current}):")
PERSONA_MENU_DEFAULT = N_("Persona for your new conversations (now: {current}):")
PERSONA_CHOSEN = N_("From here on this branch talks as {name}.")
PERSONA_DEFAULT_CHOSEN = N_("Your new conversations start as {name}.")
PERSONA_NONE = N_("none")
PERSONA_NONE_BUTTON = N_("No persona")
NO_PERSONAS = N_("No personas are configured on this bot (MODELS_FILE: [personas.NAME] tables).")
ONE_MODEL = N_("This bot offers one model: {name}.")
NOT_YOURS = N_("Only the person who opened this menu can choose here.")
MENU_EXPIRED = N_("This menu has expired; send the command again.")
GONE = N_("That choice is no longer offered; send the command again.")
CHOICE_FAILED = N_("Redis is unreachable: nothing was chosen. Press again in a moment.")
UNKNOWN_MODEL = N_("There is no model called {name}. Models: {names}.")
MODEL_GONE_NOTE = N_(
    "ℹ️ The model {name} picked for this branch is no longer offered; {used} answered.\n"
)
BUDGET_REACHED = N_(
    "You have spent your {budget} for today (UTC). The budget resets at {reset} UTC."
)
SPEND_ALERT = N_("Today's model spend has passed {limit}: {spent} so far (UTC day {day}).")
NO_PRICES = N_("no prices set")
