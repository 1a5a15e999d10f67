"""/model and /persona: a menu of buttons, and the choice recorded on the asker's press.

Sent as a reply to a message of a conversation, the choice is recorded at that
message's node (:meth:`bot.turn.branch.Branches.choose`): every turn continuing from
there or below uses it. Sent without a reply, it sets the asker's default for new
conversations in the chat. The menu and its confirmation are answered locally (never
sent to the model, counted in no depth); a reply to them starts a new conversation.
A button carries the asker, the message replied to (0: none) and the name, so a
press is checked against the catalogue and resolved again when it comes.
/retry <model> is checked here too (:func:`retry_model`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import (
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
)

from transcript import StoreUnavailableError, TranscriptError

from .. import choice_texts as texts
from ..catalogue import MODEL, PERSONA, Catalogue
from ..i18n import N_, _
from ..telegram.format import Chunk, escape_html
from ..telegram.notifier import Notifier
from .messages import NOT_A_THREAD, Checked, notice, replied_id, thread_of

if TYPE_CHECKING:  # (the turn's, passed in by the dispatcher: this edge sits below it)
    from ..turn.branch import Branches

log = logging.getLogger("replychain.handlers")

#: The menu's entries for these commands: each command and its description (a message id).
COMMANDS = (
    ("model", N_("Pick the model (reply: for this branch)")),
    ("persona", N_("Pick a persona (reply: for this branch)")),
)
#: Callback data prefix of a menu's buttons: "<prefix>:<kind>:<asker>:<target>:<time>:<name>".
_PREFIX = "pick"
#: How long a menu's buttons work.
MENU_SECONDS = 3600
#: The button standing for "no persona" (a name the catalogue cannot hold).
_NONE = "-"
_PER_ROW = 2


def choices_router() -> Router:
    router = Router(name="choices")
    router.message.register(on_model, Command("model"))
    router.message.register(on_persona, Command("persona"))
    router.callback_query.register(on_pick, Checked(F.data.startswith(f"{_PREFIX}:")))
    return router


def retry_model(command: CommandObject | None, catalogue: Catalogue) -> tuple[str, str]:
    """The model ``/retry <model>`` names (``""``: none named), and the one-line answer
    when the catalogue has no such model (else ``""``)."""
    name = (command.args or "").strip() if command is not None else ""
    if not name or name in catalogue.models:
        return name, ""
    return "", _(texts.UNKNOWN_MODEL).format(name=name, names=", ".join(catalogue.models))


async def on_model(
    message: Message, *, notifier: Notifier, branches: Branches | None, catalogue: Catalogue
) -> None:
    if branches is None or len(catalogue.models) == 1:
        notice(notifier, message, _(texts.ONE_MODEL).format(name=catalogue.default))
        return
    await _menu(message, MODEL, notifier, branches)


async def on_persona(message: Message, *, notifier: Notifier, branches: Branches | None) -> None:
    if branches is None or not branches.catalogue.personas:
        notice(notifier, message, _(texts.NO_PERSONAS))
        return
    await _menu(message, PERSONA, notifier, branches)


async def _menu(message: Message, kind: str, notifier: Notifier, branches: Branches) -> None:
    """The buttons, the current choice marked."""
    chat, user = message.chat.id, message.from_user.id if message.from_user else 0
    target = replied_id(message)

    async def show() -> int | None:
        try:
            current = await _current(branches, kind, str(chat), user=user, target=target)
        except (TranscriptError, StoreUnavailableError) as exc:
            log.warning("chat %s: the choices could not be read: %s", chat, type(exc).__name__)
            current = None
        if current is None:
            notice(notifier, message, _(NOT_A_THREAD))
            return None
        catalogue = branches.catalogue
        names = list(catalogue.models if kind == MODEL else catalogue.personas)
        if kind == PERSONA and target is None:
            names.append(_NONE)
        stamp = int(time.time())
        buttons = [
            InlineKeyboardButton(
                text=("✓ " if name == current else "")
                + (_(texts.PERSONA_NONE_BUTTON) if name == _NONE else name),
                callback_data=f"{_PREFIX}:{kind}:{user}:{target or 0}:{stamp}:{name}",
            )
            for name in names
        ]
        rows = [buttons[i : i + _PER_ROW] for i in range(0, len(buttons), _PER_ROW)]
        menus = {
            (MODEL, True): texts.MODEL_MENU, (MODEL, False): texts.MODEL_MENU_DEFAULT,
            (PERSONA, True): texts.PERSONA_MENU, (PERSONA, False): texts.PERSONA_MENU_DEFAULT,
        }  # fmt: skip
        text = _(menus[(kind, target is not None)]).format(current=_label(current))
        return await notifier.out.send_buttons(
            chat,
            text,
            InlineKeyboardMarkup(inline_keyboard=rows),
            reply_to=message.message_id,
            thread_id=thread_of(message),
        )

    notifier.run(show, name=f"menu-{chat}", chat_id=chat)


async def _current(
    branches: Branches, kind: str, scope: str, *, user: int, target: int | None
) -> str | None:
    """The model or persona in force at ``target`` (the user's default without one);
    ``None`` when ``target`` is in no conversation."""
    prefs = await branches.prefs(scope, user)
    if target is None:
        if kind == MODEL:
            model = prefs.model
            return model if model in branches.catalogue.models else branches.catalogue.default
        return prefs.persona or _NONE
    node = await branches.store.resolve(scope, target)
    if node is None:
        return None
    if kind == MODEL:
        branch = await branches.resolve(node, prefs)
        return branch.spec.name if branch.spec is not None else branches.catalogue.default
    found = [c for c in await branches.store.choices_on_path(node) if c.kind == PERSONA]
    return found[-1].name if found else _NONE


def _label(name: str) -> str:
    return _(texts.PERSONA_NONE) if name == _NONE else name


async def on_pick(query: CallbackQuery, *, notifier: Notifier, branches: Branches | None) -> None:
    """A button pressed: record the choice (once the presser is the asker)."""
    message = query.message
    if not isinstance(message, Message) or branches is None:
        await query.answer(_(texts.MENU_EXPIRED))
        return
    try:
        _prefix, kind, asker, target, stamp, name = (query.data or "").split(":", 5)
    except ValueError:
        await query.answer(_(texts.MENU_EXPIRED))
        return
    if not asker.isdigit() or query.from_user.id != int(asker):
        await query.answer(_(texts.NOT_YOURS), show_alert=True)
        return
    if not stamp.isdigit() or time.time() - int(stamp) > MENU_SECONDS:
        await query.answer(_(texts.MENU_EXPIRED))
        return
    catalogue, chat = branches.catalogue, message.chat.id
    offered = catalogue.models if kind == MODEL else catalogue.personas
    if name not in offered and not (kind == PERSONA and name == _NONE and target == "0"):
        await query.answer(_(texts.GONE), show_alert=True)
        return
    scope = str(chat)
    try:
        if target == "0":
            await branches.set_default(scope, int(asker), kind, None if name == _NONE else name)
        else:
            node = await branches.store.resolve(scope, int(target))
            if node is None:
                await query.answer(_(NOT_A_THREAD), show_alert=True)
                return
            await branches.choose(node, kind, name)
    except StoreUnavailableError:
        await query.answer(_(texts.CHOICE_FAILED), show_alert=True)
        return
    done = {
        (MODEL, False): texts.MODEL_CHOSEN, (MODEL, True): texts.MODEL_DEFAULT_CHOSEN,
        (PERSONA, False): texts.PERSONA_CHOSEN, (PERSONA, True): texts.PERSONA_DEFAULT_CHOSEN,
    }  # fmt: skip
    text = _(done[(kind, target == "0")]).format(name=_label(name))
    log.info("chat %s: %s %s chosen (%s)", chat, "model" if kind == MODEL else "persona", name,
             "default" if target == "0" else "branch")  # fmt: skip
    await query.answer(text)
    await notifier.out.edit(chat, message.message_id, Chunk(escape_html(text), text))
