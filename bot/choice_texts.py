"""Every text the bot writes about models, personas and money (/model, /persona,
/retry <model>, the budget and the spend alert), as plain constants, in one place
for translation."""

MODEL_MENU = "Model for the conversation below this message (now: {current}):"
MODEL_MENU_DEFAULT = "Model for your new conversations (now: {current}):"
MODEL_CHOSEN = "From here on this branch uses {name}."
MODEL_DEFAULT_CHOSEN = "Your new conversations use {name}."
PERSONA_MENU = "Persona for the conversation below this message (now: {current}):"
PERSONA_MENU_DEFAULT = "Persona for your new conversations (now: {current}):"
PERSONA_CHOSEN = "From here on this branch talks as {name}."
PERSONA_DEFAULT_CHOSEN = "Your new conversations start as {name}."
PERSONA_NONE = "none"
PERSONA_NONE_BUTTON = "No persona"
NO_PERSONAS = "No personas are configured on this bot (MODELS_FILE: [personas.NAME] tables)."
ONE_MODEL = "This bot offers one model: {name}."
NOT_A_THREAD = (
    "That message belongs to no conversation I have stored: reply to one of my "
    "answers or to a message I answered."
)
NOT_YOURS = "Only the person who opened this menu can choose here."
MENU_EXPIRED = "This menu has expired; send the command again."
GONE = "That choice is no longer offered; send the command again."
CHOICE_FAILED = "Redis is unreachable: nothing was chosen. Press again in a moment."
UNKNOWN_MODEL = "There is no model called {name}. Models: {names}."
MODEL_GONE_NOTE = (
    "ℹ️ The model {name} picked for this branch is no longer offered; {used} answered.\n"
)
BUDGET_REACHED = (
    "You have spent your ${budget:.2f} for today (UTC). The budget resets at {reset} UTC."
)
SPEND_ALERT = "Today's model spend has passed ${limit:.2f}: ${spent:.2f} so far (UTC day {day})."
NO_PRICES = "no prices set"
