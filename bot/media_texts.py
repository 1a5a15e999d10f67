"""Every text the bot writes or says about the voice notes and pictures it makes, as
plain constants, in one place for translation: each is a message id
(:func:`bot.i18n.N_`), translated where it is sent (or read aloud)."""

from .i18n import N_

#: Read aloud instead of what is not read (bot/model/speech.py, ``Unread``).
SPOKEN_CODE = N_("See the code in the written answer.")
SPOKEN_TABLE = N_("See the table in the written answer.")
SPOKEN_FORMULA = N_("See the formula in the written answer.")
#: One line under the text answer when no voice note follows it.
VOICE_BUDGET = N_("🔇 No voice note this time: your budget for today is spent.")
SPEECH_FAILED = N_("🔇 I could not read this answer aloud; the written answer is above.")
#: One line instead of a picture.
IMAGE_BUDGET = N_("No picture: your budget for today is spent. It resets at {reset} UTC.")
IMAGE_REFUSED = N_("The image service refused to make this picture (its content rules).")
IMAGE_SIZE = N_("The image service refused the size of this picture.")
IMAGE_FAILED = N_("The image service is not reachable right now. Please try again later.")
#: The line for an image call's failure, by the model error's kind; any other:
#: :data:`IMAGE_FAILED`.
IMAGE_FAILURES = {"refused": IMAGE_REFUSED, "size": IMAGE_SIZE}
